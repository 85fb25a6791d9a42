import Console
import Foundation
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
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("json-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let inventory = directory + "/inventory.sqlite"
        let batch = """
            scan 2s
            devices
            select all
            info
            apply car --dry-run
            apply car
            verify car
            trips
            watch 1s
            audit
            audit --live
            audit --passive
            inventory list
            inventory export --json
            log
            profiles list
            profiles show car
            profiles check
            help
            help scan

            """
        try batch.write(toFile: directory + "/all.batch", atomically: true, encoding: .utf8)
        let environment = [
            "PATH": "/usr/bin:/bin", "HOME": directory, "XDG_DATA_HOME": directory, "XDG_STATE_HOME": directory,
            "XDG_CONFIG_HOME": directory,
        ]
        let binary = builtProduct("beaconbench")
        let run = try await runTool(
            binary,
            [
                "--sim", "4", "--inventory", inventory, "--profiles", Self.root.appendingPathComponent("profiles").path,
                "run", directory + "/all.batch", "--json",
            ], environment: environment, timeout: 240)
        // Audits find things on a simulated fleet (exit 2); nothing else may fail.
        #expect(run.status == 0 || run.status == 2, "\(run.stderr)")
        var lines = run.stdout.split(separator: "\n").map(String.init)
        let address = try #require(Self.firstAddress(lines), "no device line in \(run.stdout)")
        let show = try await runTool(
            binary, ["--inventory", inventory, "inventory", "show", address, "--json"], environment: environment)
        #expect(show.status == 0, "\(show.stderr)")
        lines += show.stdout.split(separator: "\n").map(String.init)
        // Every step as it happens (-v), from a batch on standard input.
        let verbose = try await runTool(
            binary, ["--sim", "2", "--inventory", inventory, "-v", "--json"], environment: environment,
            stdin: "scan 1s\nselect all\ninfo\n", timeout: 120)
        #expect(verbose.status == 0, "\(verbose.stderr)")
        lines += verbose.stdout.split(separator: "\n").map(String.init)

        var seen = Set<String>()
        for line in lines {
            for problem in Self.problems(line, kinds) { Issue.record(Comment(rawValue: problem)) }
            if let data = line.data(using: .utf8),
                let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                let kind = object["kind"] as? String
            {
                seen.insert(kind)
            }
        }
        let expected: Set<String> = [
            "scan", "beacon", "selection", "step", "recap", "summary", "watch_event", "watch_summary", "audit",
            "device",
            "device_row", "outcome", "profile", "profile_check", "command",
        ]
        #expect(seen.isSuperset(of: expected), "kinds not produced: \(expected.subtracting(seen))")
        // jq reads every line, and every line has a kind.
        let jq = try await runTool("/usr/bin/jq", ["-e", ".kind"], stdin: lines.joined(separator: "\n") + "\n")
        #expect(jq.status == 0, "jq: \(jq.stderr)")
        #expect(jq.stdout.split(separator: "\n").count == lines.count)
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
