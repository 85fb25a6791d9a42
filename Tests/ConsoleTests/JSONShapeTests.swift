import BeaconSimulator
import Console
import DBusBinding
import Foundation
import Inventory
import TestSupport
import Testing

/// Every command's `--json` against docs/json.md: the built binary, on a
/// simulated bench, its lines checked kind by kind and field by field.
@Suite("JSON output is what docs/json.md says", .timeLimit(.minutes(10)))
struct JSONShapeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// A documented field: its JSON types (`null` among them when it may be null).
    struct Field {
        var types: Set<String>
    }

    /// The kinds of docs/json.md: `### \`kind\`` then a table of fields.
    static func documentedKinds() throws -> [String: [String: Field]] {
        let text = try String(contentsOf: root.appendingPathComponent("docs/json.md"), encoding: .utf8)
        var kinds: [String: [String: Field]] = [:]
        var current: String?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("### `") {
                current = String(line.dropFirst(5).prefix { $0 != "`" })
                kinds[current!] = [:]
            } else if line.hasPrefix("## ") {
                current = nil
            } else if let kind = current, line.hasPrefix("| `") {
                // `string\|null`: an escaped bar inside a cell.
                let cells = line.replacingOccurrences(of: "\\|", with: "\u{1}").split(separator: "|")
                    .map { $0.trimmingCharacters(in: .whitespaces) }
                let name = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
                let types = Set(cells[1].split(separator: "\u{1}").map(String.init))
                kinds[kind]?[name] = Field(types: types)
            }
        }
        return kinds
    }

    /// A JSON value as decoded, to tell its type (booleans from numbers).
    enum Value: Decodable {
        case null, boolean, integer, number, string, array, object([String: Value])

        init(from decoder: any Decoder) throws {
            let single = try? decoder.singleValueContainer()
            if let single, single.decodeNil() {
                self = .null
            } else if let single, (try? single.decode(Bool.self)) != nil {
                self = .boolean
            } else if let single, (try? single.decode(Int.self)) != nil {
                self = .integer
            } else if let single, (try? single.decode(Double.self)) != nil {
                self = .number
            } else if let single, (try? single.decode(String.self)) != nil {
                self = .string
            } else if (try? decoder.unkeyedContainer()) != nil {
                self = .array
            } else {
                self = .object(try [String: Value](from: decoder))
            }
        }

        var type: String {
            switch self {
            case .null: "null"
            case .boolean: "boolean"
            case .integer: "integer"
            case .number: "number"
            case .string: "string"
            case .array: "array"
            case .object: "object"
            }
        }
    }

    /// The problems of one line against the documentation (none: it fits).
    static func problems(_ line: String, _ kinds: [String: [String: Field]]) -> [String] {
        guard case .object(let object)? = try? JSONDecoder().decode(Value.self, from: Data(line.utf8)) else {
            return ["not a JSON object: \(line)"]
        }
        guard let kindValue = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let kind = kindValue["kind"] as? String, let fields = kinds[kind]
        else { return ["no documented kind: \(line)"] }
        let version = kindValue["v"] as? Int
        var found: [String] = []
        if version != 1 { found.append("\(kind): v is not 1") }
        for (name, field) in fields {
            guard let value = object[name] else {
                found.append("\(kind): \(name) is missing")
                continue
            }
            let type = value.type
            // An integer where a number is documented is a number.
            if !field.types.contains(type), !(type == "integer" && field.types.contains("number")) {
                found.append("\(kind).\(name) is \(type), documented \(field.types.sorted())")
            }
        }
        // `device_row` has a column per field; the others nothing undocumented.
        if kind != "device_row" {
            for name in object.keys where name != "kind" && name != "v" && fields[name] == nil {
                found.append("\(kind).\(name) is not documented")
            }
        }
        return found
    }

    @Test func everyKindIsAResultKindAndEveryResultKindIsDocumented() throws {
        let kinds = try Self.documentedKinds()
        let produced = Set(ResultKind.allCases.map(\.rawValue))
        #expect(Set(kinds.keys) == produced, "documented \(kinds.keys.sorted()), written \(produced.sorted())")
        for (kind, fields) in kinds { #expect(!fields.isEmpty, "\(kind) has no field documented") }
    }

    /// What a device step's run writes besides the command's own kinds.
    static let deviceStepKinds: Set<String> = ["step", "note", "recap", "recovery", "summary"]

    /// Kinds declared but not produced on this bench, and where they are checked.
    static let producedElsewhere: [String: String] = [
        "sync": "SyncTests, against PostgreSQL",
        "ledger_bench": "SyncLedgerTests, against PostgreSQL",
        "ledger_server": "ServerBlameTests and SyncLedgerTests, against PostgreSQL",
        "ledger_rewrite": "SyncLedgerTests, against PostgreSQL",
        "minor_block": "ReturnBlocksTests, against PostgreSQL",
        "blocks_returned": "ReturnBlocksTests, against PostgreSQL",
        "note": "a warning (a retry, a device gone): RecoveryTests",
        "recovery": "RecoveryTests and StationTests, under fault plans",
        "checkpoint": "LedgerCommandTests, with an SSH key made for it",
        "proof": "LedgerCommandTests, with an SSH key made for it",
        "proof_check": "LedgerCommandTests, on a proof file it made",
    ]

    /// Every command's spec example (`jsonExample` where `example` cannot
    /// run as written), each its own process on one bench after a scan and
    /// `select all`: every line it writes is checked against docs/json.md,
    /// and must be of a kind its spec declares (`emits`, a device step's
    /// kinds, `stored_value`); every declared kind is produced by some
    /// command. No batch is kept by hand: a new command is checked by its spec.
    @Test func everyCommandsJSONFitsTheDocumentation() async throws {
        let kinds = try Self.documentedKinds()
        try await withNewFleet(count: 4) { bench in
            // A beacon that drove: the pulls bring trips, events and incidents.
            try await bench.withControl { try await $0.drive("C0:FE:00:00:00:02", minutes: 30, harshEvents: 6) }
            let substitutions = [
                "${device}": "C0:FE:00:00:00:01", "${spare}": "C0:FE:00:00:00:04", "${dir}": bench.directory,
                "${count}": "\(bench.beacons)",
            ]
            var lines: [String] = []
            var produced: [String: Set<String>] = [:]
            for type in CommandTable.all {
                let spec = type.spec
                if spec.jsonExampleSkipped != nil { continue }
                var line = spec.jsonExample ?? spec.example
                for (name, value) in substitutions { line = line.replacingOccurrences(of: name, with: value) }
                let file = bench.directory + "/\(spec.name.replacingOccurrences(of: " ", with: "-")).batch"
                try "\(bench.scanAll)\nselect all\n\(line)\n".write(toFile: file, atomically: true, encoding: .utf8)
                let run = try await bench.beaconbench(["run", file, "--json"], timeout: 240)
                // Audits find things on a new fleet (exit 2); nothing else may fail.
                let allowed: Set<Int32> = [0, 2]
                #expect(allowed.contains(run.status), "\(line): exit \(run.status): \(run.stderr)")
                var own = run.stdout.split(separator: "\n").map(String.init)
                // The preamble's lines: the first `scan` and `selection`.
                for preamble in ["scan", "selection"] {
                    if let index = own.firstIndex(where: { Self.kind(of: $0) == preamble }) { own.remove(at: index) }
                }
                let isDeviceStep = type is any DeviceStepCommand.Type || spec.runsDeviceSteps
                let declared = Set(spec.emits.map(\.rawValue)).union(isDeviceStep ? Self.deviceStepKinds : [])
                    .union(["stored_value"])
                for written in own {
                    guard let kind = Self.kind(of: written) else { continue }
                    #expect(declared.contains(kind), "\(line) wrote a `\(kind)` its spec does not declare: \(written)")
                    produced[kind, default: []].insert(spec.name)
                }
                lines += own
            }
            // Every step as it happens (-v), from a batch on standard input.
            let verbose = try await bench.beaconbench(["-v", "--json"], stdin: "\(bench.scanAll)\nselect all\ninfo\n")
            #expect(verbose.status == 0, "\(verbose.stderr)")
            let steps = verbose.stdout.split(separator: "\n").map(String.init)
            #expect(steps.contains { Self.kind(of: $0) == "step" }, "-v writes a step line per step")
            lines += steps
            // A stored value that fails its check (docs/inventory.md): a `stored_value` line.
            do {
                let database = try Database(path: bench.inventoryPath)
                _ = try database.run("UPDATE devices SET battery = 1000 WHERE rowid = (SELECT min(rowid) FROM devices)")
            }
            let spoiled = try await bench.beaconbench(["inventory", "list", "--json"])
            #expect(spoiled.status == 2, "\(spoiled.stderr)")
            let spoiledLines = spoiled.stdout.split(separator: "\n").map(String.init)
            #expect(spoiledLines.contains { Self.kind(of: $0) == "stored_value" }, "\(spoiled.stdout)")
            lines += spoiledLines

            for line in lines {
                for problem in Self.problems(line, kinds) { Issue.record(Comment(rawValue: problem)) }
            }
            // Every kind a spec declares is produced, but those checked elsewhere.
            let declared = Set(CommandTable.specs.flatMap { $0.emits.map(\.rawValue) }).union(Self.deviceStepKinds)
            let missing = declared.subtracting(produced.keys).subtracting(["step", "stored_value"])
                .subtracting(Self.producedElsewhere.keys)
            #expect(missing.isEmpty, "declared, not produced: \(missing.sorted())")
            // And every documented kind is declared by some spec (or is a session kind).
            let undeclared = Set(kinds.keys).subtracting(declared).subtracting(["stored_value"])
            #expect(undeclared.isEmpty, "documented, declared by no command: \(undeclared.sorted())")
            // jq reads every line, and every line has a kind.
            let jq = try await runTool("/usr/bin/jq", ["-e", ".kind"], stdin: lines.joined(separator: "\n") + "\n")
            #expect(jq.status == 0, "jq: \(jq.stderr)")
            #expect(jq.stdout.split(separator: "\n").count == lines.count)
            print(
                "JSONShapeTests: \(lines.count) lines from \(CommandTable.all.count) commands; kinds by command: \(produced.mapValues { $0.sorted() })"
            )
        }
    }

    /// A line's `kind`, if it is a JSON object with one.
    static func kind(of line: String) -> String? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["kind"] as? String
    }
}
