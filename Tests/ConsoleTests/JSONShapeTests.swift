import BeaconSimulator
import Console
import DBusBinding
import Foundation
import Inventory
import TestSupport
import Testing

/// Every command's `--json` against docs/json.md: the built binary, on a
/// simulated bench, its lines checked kind by kind and field by field.
@Suite("JSON output is what docs/json.md says")
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

    @Test func everyCommandsJSONFitsTheDocumentation() async throws {
        let kinds = try Self.documentedKinds()
        try await withNewFleet(count: 4) { bench in
            // A beacon that drove: the pulls bring trips, events and incidents.
            let connection = try await BusConnection.connect(.address(bench.busAddress))
            _ = try await connection.call(
                SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Drive",
                [.string("C0:FE:00:00:00:02"), .uint32(30), .uint32(6)])
            await connection.close()
            let batch = """
                \(bench.scanAll)
                devices
                select all
                info
                apply car --dry-run
                apply car
                verify car
                assign van major=250 minor=keep cornering=400 C0:FE:00:00:00:01
                drift
                station --rssi-min -127 --count 1 --for 20s
                trips
                events
                incidents
                watch 1s
                audit
                audit --live
                audit --passive
                inventory list
                inventory export --json
                report --out \(bench.directory)/report.html
                log --limit 5
                records list
                records export --json --kind event
                profiles list
                profiles show car
                profiles check
                doctor
                help
                help scan

                """
            let file = bench.directory + "/all.batch"
            try batch.write(toFile: file, atomically: true, encoding: .utf8)
            let run = try await bench.beaconbench(["run", file, "--json"], timeout: 240)
            // Audits find things on a new fleet (exit 2); nothing else may fail.
            #expect(run.status == 0 || run.status == 2, "\(run.stderr)")
            var lines = run.stdout.split(separator: "\n").map(String.init)
            let address = try #require(Self.firstAddress(lines), "no device line in \(run.stdout)")
            for arguments in [
                ["inventory", "show", address, "--json"], ["inventory", "forget", address, "--yes", "--json"],
            ] {
                let one = try await bench.beaconbench(arguments)
                #expect(one.status == 0, "\(arguments): \(one.stderr)")
                lines += one.stdout.split(separator: "\n").map(String.init)
            }
            // Every step as it happens (-v), from a batch on standard input.
            let verbose = try await bench.beaconbench(["-v", "--json"], stdin: "\(bench.scanAll)\nselect all\ninfo\n")
            #expect(verbose.status == 0, "\(verbose.stderr)")
            lines += verbose.stdout.split(separator: "\n").map(String.init)
            // A stored value that fails its check (docs/inventory.md): a `stored_value` line.
            do {
                let database = try Database(path: bench.inventoryPath)
                _ = try database.run("UPDATE devices SET battery = 1000 WHERE rowid = (SELECT min(rowid) FROM devices)")
            }
            let spoiled = try await bench.beaconbench(["inventory", "list", "--json"])
            #expect(spoiled.status == 2, "\(spoiled.stderr)")
            lines += spoiled.stdout.split(separator: "\n").map(String.init)

            var seen = Set<String>()
            for line in lines {
                for problem in Self.problems(line, kinds) { Issue.record(Comment(rawValue: problem)) }
                if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let kind = object["kind"] as? String
                {
                    seen.insert(kind)
                }
            }
            // All but `sync` (SyncTests, against PostgreSQL), `note` (a
            // warning: a retry, a device gone) and `recovery` (RecoveryTests,
            // under a fault plan) are produced here.
            let expected = Set(kinds.keys).subtracting(["sync", "note", "recovery"])
            #expect(seen.isSuperset(of: expected), "kinds not produced: \(expected.subtracting(seen))")
            // jq reads every line, and every line has a kind.
            let jq = try await runTool("/usr/bin/jq", ["-e", ".kind"], stdin: lines.joined(separator: "\n") + "\n")
            #expect(jq.status == 0, "jq: \(jq.stderr)")
            #expect(jq.stdout.split(separator: "\n").count == lines.count)
        }
    }

    static func firstAddress(_ lines: [String]) -> String? {
        for line in lines {
            if let data = line.data(using: .utf8),
                let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                object["kind"] as? String == "device", let address = object["address"] as? String
            {
                return address
            }
        }
        return nil
    }
}
