import Foundation
import Testing

/// SQL only with bound parameters: no string literal in the sources that
/// holds SQL may also hold an interpolation.
@Suite("SQL in the sources", .timeLimit(.minutes(2)))
struct SQLSourceTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources")

    /// The string literals of a Swift file: multi-line ones, then the rest.
    static func literals(_ text: String) -> [String] {
        var found: [String] = []
        var rest = text
        while let open = rest.range(of: "\"\"\"") {
            guard let close = rest[open.upperBound...].range(of: "\"\"\"") else { break }
            found.append(String(rest[open.upperBound..<close.lowerBound]))
            rest.removeSubrange(open.lowerBound..<close.upperBound)
        }
        for line in rest.split(separator: "\n") where !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
            let pieces = line.split(separator: "\"", omittingEmptySubsequences: false)
            for index in stride(from: 1, to: pieces.count, by: 2) { found.append(String(pieces[index])) }
        }
        return found
    }

    static let sql = try! NSRegularExpression(
        pattern: #"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+TABLE|PRAGMA\s)"#,
        options: [.dotMatchesLineSeparators])

    static let allowed: Set<String> = ["PRAGMA user_version = \\(index + 1)"]
    /// The ledger's statements per covered table, made from each table's
    /// constant name and column list (LedgerTable), never from a value.
    /// Also (issue 31), where only constants are interpolated: the office
    /// reads' statements (table names, key lists and an integer constant),
    /// the report's device stream (a constant clause by schema version), the
    /// union check (constant table names and column names that are plain
    /// lower-case identifiers, checked, quoted), and `office migrate`'s
    /// server fill (numbers and constant table names). And (issue 46) the
    /// server's roles and policies: DDL takes no parameters, and what is
    /// interpolated is the constant role and table names and the schema,
    /// quoted as an identifier (`ServerRoles.quoted`); the sync's row check
    /// (the covered tables' constant names and columns and a constant block
    /// size; the bench id and block bound as parameters).
    static let allowedFiles: Set<String> = [
        "InventorySync/ServerRoles.swift", "InventorySync/ServerRowCheck.swift",
        "Inventory/Ledger/LedgerTables.swift", "InventorySync/ServerOfficeReads.swift",
        "Inventory/InventoryReportStreams.swift", "beaconbench-bench/Office/UnionCheck.swift",
        "beaconbench-bench/Office/OfficeMigrate.swift",
    ]

    @Test func noSQLIsBuiltFromStrings() throws {
        var files = 0
        var statements = 0
        var violations: [String] = []
        let enumerator = try #require(FileManager.default.enumerator(atPath: Self.sources.path))
        for case let file as String in enumerator where file.hasSuffix(".swift") {
            files += 1
            let text = try String(contentsOf: Self.sources.appendingPathComponent(file), encoding: .utf8)
            for literal in Self.literals(text)
            where Self.sql.firstMatch(in: literal, range: NSRange(literal.startIndex..., in: literal)) != nil {
                statements += 1
                // PRAGMA takes no parameters; the schema version is an Int.
                if literal.contains("\\("), !Self.allowed.contains(literal), !Self.allowedFiles.contains(file) {
                    violations.append("\(file): \(literal.prefix(80))")
                }
            }
        }
        #expect(files > 50)
        #expect(statements > 20, "the scan found too few SQL statements to be looking in the right place")
        #expect(violations.isEmpty, "SQL built from strings:\n\(violations.joined(separator: "\n"))")
    }

    @Test func theScanSeesAnInterpolation() {
        let sample = "let x = \"SELECT a FROM t WHERE b = \\(value)\""
        let found = Self.literals(sample).filter {
            Self.sql.firstMatch(in: $0, range: NSRange($0.startIndex..., in: $0)) != nil && $0.contains("\\(")
        }
        #expect(found.count == 1)
    }
}
