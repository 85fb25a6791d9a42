import Foundation
import Ledger
import Testing

@testable import Inventory

/// A kept checkpoint is a ledger entry (docs/ledger.md, "Checkpoints are
/// entries"): keeping one appends it in the fixed format, after the
/// entries it signs; one slipped in, taken out or back-dated outside
/// beaconbench is found; one kept by an older beaconbench is recorded on
/// the first open for writing, once; a table that lost a column is a
/// finding naming it, not an error of the tool.
@Suite("Checkpoints are ledger entries", .timeLimit(.minutes(3)))
struct CheckpointEntryTests {
    /// An inventory with history and one checkpoint kept through the API.
    static func kept() async throws -> (Inventory, String, LedgerTreeHead, String) {
        let (inventory, path) = try await LedgerInventoryTests.filled()
        let head = try await inventory.ledgerTreeHead()
        let note = try await LedgerInventoryTests.signed(inventory, head)
        try await inventory.recordCheckpoint(size: head.size, root: head.root, note: note)
        return (inventory, path, head, note)
    }

    static func messages(_ path: String) async throws -> [String] {
        try await Inventory(path: path, readOnly: true).verifyLedger().findings.map(\.message)
    }

    @Test func keepingACheckpointAppendsItsEntryInTheFixedFormat() async throws {
        let (inventory, _, head, note) = try await Self.kept()
        let after = try await inventory.ledgerTreeHead()
        #expect(after.size == head.size + 1, "the checkpoint's entry follows the entries it signs")
        let kept = try #require(try await inventory.checkpoints().last)
        let entry = String(decoding: try await inventory.ledgerEntries(head.size..<after.size)[0], as: UTF8.self)
        // Written here from docs/ledger.md's format, byte for byte.
        var noteJSON: [UInt8] = []
        CanonicalJSON.writeString(note, to: &noteJSON)
        let expected =
            #"{"v":1,"seq":\#(head.size),"at":"\#(kept.madeAt)","event":"checkpoint","table":"ledger_checkpoints","op":"insert","key":[\#(head.size)],"row":{"size":\#(head.size),"root":"\#(head.root.hex)","note":"#
            + String(decoding: noteJSON, as: UTF8.self) + #","made_at":"\#(kept.madeAt)"}}"#
        #expect(entry == expected)
        #expect(head.root.hex == head.root.hex.lowercased() && head.root.hex.count == 64)
        let verification = try await inventory.verifyLedger()
        #expect(verification.ok, "\(verification.findings)")
        #expect(verification.checkpoints == 1)
        // The stored form gives it back after a reopen, too (LedgerStorage).
        let reopened = try Inventory(path: inventory.path, readOnly: true)
        #expect(String(decoding: try await reopened.ledgerEntries(head.size..<after.size)[0], as: UTF8.self) == entry)
    }

    @Test func aCheckpointSlippedInWithoutItsEntryIsFound() async throws {
        let (inventory, path, _, note) = try await Self.kept()
        let head = try await inventory.ledgerTreeHead()
        // Someone with the file: a row of the right size and root, signed by anyone.
        let result = try LedgerInventoryTests.sqlite(
            path,
            "INSERT INTO ledger_checkpoints(size, root, note, made_at) VALUES (\(head.size), X'\(head.root.hex)', '\(note)', '2026-12-03T11:44:24.598Z')"
        )
        #expect(result.status == 0, "\(result.output)")
        let messages = try await Self.messages(path)
        #expect(
            messages.contains { $0.contains("the checkpoint kept at size \(head.size) has no ledger entry") },
            "\(messages)")
    }

    @Test func aCheckpointDeletedOrBackDatedIsFound() async throws {
        let (_, path, head, _) = try await Self.kept()
        let deleted = try LedgerInventoryTests.sqlite(
            path, "DROP TRIGGER ledger_checkpoints_no_delete; DELETE FROM ledger_checkpoints")
        #expect(deleted.status == 0, "\(deleted.output)")
        let gone = try await Self.messages(path)
        #expect(
            gone.contains { $0.contains("ledger_checkpoints \(head.size) is in the ledger (entry \(head.size))") },
            "\(gone)")

        let (_, other, otherHead, _) = try await Self.kept()
        let backDated = try LedgerInventoryTests.sqlite(
            other,
            "DROP TRIGGER ledger_checkpoints_no_update; UPDATE ledger_checkpoints SET made_at = '2020-01-01T00:00:00.000Z'"
        )
        #expect(backDated.status == 0, "\(backDated.output)")
        let moved = try await Self.messages(other)
        #expect(
            moved.contains {
                $0.contains("made_at is \"2020-01-01T00:00:00.000Z\" but the ledger says")
                    && $0.contains("(entry \(otherHead.size))")
            }, "\(moved)")
    }

    /// An inventory whose checkpoint an older beaconbench kept (a row and
    /// no entry, no meta key): verify finds it until the file is opened for
    /// writing, which records it once; a key deleted later does not let a
    /// row slipped in after that be recorded.
    @Test func aCheckpointKeptBeforeTheRuleIsRecordedOnceOnTheFirstWrite() async throws {
        let (inventory, path) = try await LedgerInventoryTests.filled()
        let head = try await inventory.ledgerTreeHead()
        let note = try await LedgerInventoryTests.signed(inventory, head)
        // What an older beaconbench left: the row alone.
        let old = try LedgerInventoryTests.sqlite(
            path,
            "DELETE FROM meta WHERE key = 'checkpoint_entries'; INSERT INTO ledger_checkpoints(size, root, note, made_at) VALUES (\(head.size), X'\(head.root.hex)', '\(note)', '2026-11-30T08:00:00.000Z')"
        )
        #expect(old.status == 0, "\(old.output)")
        let before = try await Self.messages(path)
        #expect(before.contains { $0.contains("has no ledger entry") }, "\(before)")

        let opened = try Inventory(path: path)
        let recorded = try await opened.ledgerTreeHead()
        #expect(recorded.size == head.size + 2, "a note, then the checkpoint's entry")
        let entries = try await opened.ledgerEntries(head.size..<recorded.size).map {
            String(decoding: $0, as: UTF8.self)
        }
        #expect(entries[0].contains(#""event":"checkpoint","table":"","op":"note""#), "\(entries[0])")
        #expect(entries[0].contains("record the 1 kept before (sizes \(head.size))"), "\(entries[0])")
        #expect(
            entries[1].hasPrefix(
                #"{"v":1,"seq":\#(head.size + 1),"at":"2026-11-30T08:00:00.000Z","event":"checkpoint","table":"ledger_checkpoints","op":"insert","key":[\#(head.size)]"#
            ), "\(entries[1])")
        let verification = try await opened.verifyLedger()
        #expect(verification.ok, "\(verification.findings)")
        // Opened again: nothing recorded twice.
        #expect(try await Inventory(path: path).ledgerTreeHead().size == recorded.size)

        // The key deleted and another row slipped in: not recorded, found.
        let slipped = try LedgerInventoryTests.sqlite(
            path,
            "DELETE FROM meta WHERE key = 'checkpoint_entries'; INSERT INTO ledger_checkpoints(size, root, note, made_at) VALUES (\(recorded.size), X'\(head.root.hex)', '\(note)', '2026-11-30T08:00:00.000Z')"
        )
        #expect(slipped.status == 0, "\(slipped.output)")
        #expect(try await Inventory(path: path).ledgerTreeHead().size == recorded.size)
        let after = try await Self.messages(path)
        #expect(after.contains { $0.contains("the checkpoint kept at size \(recorded.size) has no ledger entry") })
    }

    @Test func aCheckpointEntryBeforeTheEntriesItSignsIsFound() async throws {
        let (inventory, path) = try await LedgerInventoryTests.filled()
        let head = try await inventory.ledgerTreeHead()
        // Kept through the inventory's own connection, at a size beyond the
        // ledger: its entry (at the head) comes before what it claims to sign.
        try await inventory.recordCheckpoint(size: head.size + 5, root: head.root, note: "n")
        let messages = try await Self.messages(path)
        #expect(
            messages.contains {
                $0.contains(
                    "entry \(head.size) records a checkpoint of \(head.size + 5) entries before the entries it signs")
            }, "\(messages)")
    }

    @Test func aDroppedColumnIsAFindingNamingIt() async throws {
        let (_, path, _, _) = try await Self.kept()
        let dropped = try LedgerInventoryTests.sqlite(path, "ALTER TABLE devices DROP COLUMN hardware_revision")
        #expect(dropped.status == 0, "\(dropped.output)")
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        #expect(!verification.ok)
        #expect(
            verification.findings.contains { $0.message.contains("table devices has lost column hardware_revision") },
            "\(verification.findings)")
        let gone = try LedgerInventoryTests.sqlite(path, "DROP TABLE ledger_nodes")
        #expect(gone.status == 0, "\(gone.output)")
        let again = try await Self.messages(path)
        #expect(again.contains { $0.contains("table ledger_nodes is gone") }, "\(again)")
    }
}
