import Foundation
import Ledger
import Testing

@testable import Inventory

/// docs/ledger.md, "The stored form, byte by byte", and its appendix are
/// what the code does: the example's 39 bytes are what `LedgerStorage`
/// writes for it and give its JSON back, and the triggers listed are
/// exactly the texts `ledger verify` requires.
@Suite("The ledger's stored form as docs/ledger.md gives it", .timeLimit(.minutes(2)))
struct LedgerStoredFormDocTests {
    static let document: String = {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/ledger.md").path
        return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }()

    @Test func theExampleIsWhatTheInventoryKeeps() throws {
        // The annotated bytes: the first field of each line after the heading.
        let section = try #require(
            Self.document.components(separatedBy: "and `ledger.entry` holds these 39 bytes:").last)
        let block = try #require(section.components(separatedBy: "```").dropFirst().first)
        var bytes: [UInt8] = []
        for line in block.split(separator: "\n") {
            for field in line.split(separator: " ") {
                guard field.count == 2, let byte = UInt8(field, radix: 16) else { break }
                bytes.append(byte)
            }
        }
        #expect(bytes.count == 39)
        let at = "2026-12-03T11:44:24.598Z"
        let address = "C0:1E:6D:EA:89:86"
        let values: [String: SQLiteValue] = [
            "address": .text(address), "mac_ending": .text("6dea8986"), "first_seen": .text(at),
            "last_seen": .text(at), "battery": .integer(80),
        ]
        let entry = LedgerStorage.Stored(
            table: .devices, op: .insert, event: "device", at: .text(at), key: [.text(address)],
            row: LedgerTable.devices.columns.map { ($0, values[$0] ?? .null) })
        #expect(LedgerStorage.encode(entry) == bytes)
        let json = try LedgerStorage.json(seq: 4, bytes)
        #expect(json.count == 797)
        #expect(json == LedgerEntry.encode(seq: 4, entry))
        #expect(LedgerHead.check(try MerkleTree.leafHash(json)) == -1_602_887_642)
    }

    @Test func theAppendixListsExactlyTheTriggersVerifyRequires() throws {
        let appendix = try #require(
            Self.document.components(separatedBy: "<!-- triggers: begin -->").last?.components(
                separatedBy: "<!-- triggers: end -->"
            ).first)
        var listed: [String: String] = [:]
        for block in appendix.components(separatedBy: "```sql\n").dropFirst() {
            let text = try #require(block.components(separatedBy: "\n```").first)
            listed[String(text.split(separator: " ")[2])] = text
        }
        #expect(listed == LedgerVerifier.triggerText)
    }
}
