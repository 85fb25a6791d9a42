import Console
import Foundation
import Testing

/// The command tables in docs/ are the command table's: a page that
/// differs fails here with the table it should hold. `scripts/doc-tables`
/// (BEACONBENCH_WRITE_DOCS=1) writes them, and then this fails once more
/// so that a run that rewrote docs is never green.
@Suite("The docs' command tables are the command table's", .timeLimit(.minutes(1)))
struct DocTablesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func check(_ page: String, _ name: String, _ table: String) throws {
        let url = root.appendingPathComponent("docs").appendingPathComponent(page)
        let text = try String(contentsOf: url, encoding: .utf8)
        let expected = try #require(
            DocTables.replacing(name, in: text, with: table), "docs/\(page) has no markers for the table '\(name)'")
        guard expected != text else { return }
        if ProcessInfo.processInfo.environment["BEACONBENCH_WRITE_DOCS"] == "1" {
            try expected.write(to: url, atomically: true, encoding: .utf8)
            Issue.record("docs/\(page): the table '\(name)' was rewritten; run again")
        } else {
            Issue.record(
                "docs/\(page): the table '\(name)' differs from the command table (scripts/doc-tables writes it):\n\(table)"
            )
        }
    }

    @Test func theBatchLanguagesCommandListIsTheCommandTable() throws {
        try Self.check("batch-language.md", "commands", DocTables.commands())
    }

    @Test func theJSONPagesKindsPerCommandAreTheSpecs() throws {
        try Self.check("json.md", "kinds", DocTables.kinds())
    }

    @Test func everyCommandIsInTheGeneratedList() {
        let table = DocTables.commands()
        for spec in CommandTable.specs {
            #expect(table.contains("| `\(spec.synopsis.replacingOccurrences(of: "|", with: "\\|"))` |"), "\(spec.name)")
        }
        // Each command's kinds appear with it.
        let kinds = DocTables.kinds()
        for spec in CommandTable.specs where !spec.emits.isEmpty {
            let row = kinds.split(separator: "\n").first { $0.contains("`\(spec.name)`") }
            for kind in spec.emits { #expect(row?.contains("`\(kind.rawValue)`") == true, "\(spec.name): \(kind)") }
        }
    }
}
