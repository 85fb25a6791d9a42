import Foundation
import Testing

@testable import Inventory

/// The office's desired state pulled from the server is not the bench's
/// history (docs/ledger.md, "What is covered"): taking pulled assignments
/// makes no ledger entry; an assignment made here, a pulled one converged
/// here, and one of those a pull replaced are entries; verify agrees,
/// also on a ledger written when pulled rows were entries.
@Suite("The ledger and pulled assignments", .timeLimit(.minutes(5)))
struct PulledAssignmentLedgerTests {
    static func address(_ number: Int) -> String { String(format: "C3:00:00:00:%02X:%02X", number / 256, number % 256) }

    static func pulled(
        _ number: Int, _ profile: String = "van", at: String = "2026-12-01T08:00:00.000Z"
    )
        -> Assignment
    {
        Assignment(
            address: address(number), profile: profile, assignedAt: at, assignedBy: "office", source: .server)
    }

    /// The entries from `from` on, as JSON text.
    static func entries(_ inventory: Inventory, from: Int) async throws -> [String] {
        let size = try await inventory.ledgerTreeHead().size
        return try await inventory.ledgerEntries(from..<size).map { String(decoding: $0, as: UTF8.self) }
    }

    static func verified(_ inventory: Inventory, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let verification = try await inventory.verifyLedger()
        #expect(verification.ok, "\(verification.findings)", sourceLocation: sourceLocation)
    }

    @Test func aPullIsNoEntryAndWhatHappensHereIs() async throws {
        let inventory = try Inventory(path: try InventoryTests.temporaryPath())
        let start = try await inventory.ledgerTreeHead().size
        // 200 pulled: no entry, and they are the desired state here.
        try await inventory.takeAssignments((0..<200).map { Self.pulled($0) })
        #expect(try await inventory.ledgerTreeHead().size == start, "a pull wrote entries")
        #expect(try await inventory.assignments().count == 200)
        let one = try #require(try await inventory.assignment(for: Self.address(5)))
        #expect(one.profile == "van" && one.source == .server && one.convergedAt == nil)
        try await Self.verified(inventory)

        // Made here: one entry, an insert (also over a pulled row).
        _ = try await inventory.assign([
            Assignment(
                address: Self.address(300), profile: "car", assignedAt: "2026-12-02T08:00:00.000Z",
                assignedBy: "tech@here"),
            Assignment(
                address: Self.address(7), profile: "car", assignedAt: "2026-12-02T08:00:00.000Z",
                assignedBy: "tech@here"),
        ])
        var made = try await Self.entries(inventory, from: start)
        #expect(made.count == 2, "\(made)")
        #expect(
            made.allSatisfy { $0.contains(#""event":"assignment","table":"assignments","op":"insert""#) }, "\(made)")
        #expect(try await inventory.assignment(for: Self.address(7))?.source == .local)
        try await Self.verified(inventory)

        // A pulled one converged here: one insert, the whole row, `converged`.
        var size = try await inventory.ledgerTreeHead().size
        let run = try await inventory.beginRun(.init(command: "station"))
        size = try await inventory.ledgerTreeHead().size
        try await inventory.markConverged(Self.address(5), run: run)
        made = try await Self.entries(inventory, from: size)
        #expect(made.count == 1, "\(made)")
        #expect(
            made.first?.contains(#""event":"converged","table":"assignments","op":"insert""#) == true
                && made.first?.contains(#""source":"server""#) == true, "\(made)")
        try await Self.verified(inventory)
        // Converged again: an update.
        size = try await inventory.ledgerTreeHead().size
        try await inventory.markConverged(Self.address(5), run: run)
        made = try await Self.entries(inventory, from: size)
        #expect(made.count <= 1 && made.allSatisfy { $0.contains(#""op":"update""#) }, "\(made)")

        // A pull replacing an own row and a converged one: a delete each
        // (`sync`); replacing a pulled one, and new ones: nothing.
        size = try await inventory.ledgerTreeHead().size
        try await inventory.takeAssignments([
            Self.pulled(5, "truck", at: "2026-12-03T08:00:00.000Z"),
            Self.pulled(6, "truck", at: "2026-12-03T08:00:00.000Z"),
            Self.pulled(7, "truck", at: "2026-12-03T08:00:00.000Z"),
            Self.pulled(400, "truck", at: "2026-12-03T08:00:00.000Z"),
        ])
        made = try await Self.entries(inventory, from: size)
        #expect(made.count == 2, "\(made)")
        #expect(made.allSatisfy { $0.contains(#""event":"sync","table":"assignments","op":"delete""#) }, "\(made)")
        #expect(made.contains { $0.contains(Self.address(5)) } && made.contains { $0.contains(Self.address(7)) })
        #expect(try await inventory.assignment(for: Self.address(7))?.profile == "truck")
        try await Self.verified(inventory)
        try await inventory.endRun(run, .finished)
        try await Self.verified(inventory)
    }

    /// A row made here that someone turns into a pulled one with `sqlite3`
    /// (to take it out of the ledger's sight) is found; a pulled row
    /// edited is not (the server holds the desired state: docs/ledger.md).
    @Test func anOwnRowMadeToLookPulledIsFound() async throws {
        let path = try InventoryTests.temporaryPath()
        let inventory = try Inventory(path: path)
        try await inventory.takeAssignments([Self.pulled(1)])
        _ = try await inventory.assign([
            Assignment(
                address: Self.address(2), profile: "car", assignedAt: "2026-12-02T08:00:00.000Z",
                assignedBy: "tech@here")
        ])
        try await Self.verified(inventory)
        let result = try LedgerInventoryTests.sqlite(
            path, "UPDATE assignments SET source = 'server' WHERE address = '\(Self.address(2))'")
        #expect(result.status == 0, "\(result.output)")
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        #expect(
            verification.findings.contains {
                $0.message.contains(Self.address(2)) && $0.message.contains("source is \"server\"")
            }, "\(verification.findings)")
        // A row inserted as local is found too.
        let other = try InventoryTests.temporaryPath()
        let fresh = try Inventory(path: other)
        try await fresh.takeAssignments([Self.pulled(1)])
        _ = try LedgerInventoryTests.sqlite(other, "UPDATE assignments SET source = 'local'")
        let found = try await Inventory(path: other, readOnly: true).verifyLedger()
        #expect(
            found.findings.contains { $0.message.contains("is in the table but not in the ledger") },
            "\(found.findings)")
    }

    /// A ledger written when a pull was entries (an insert, then updates,
    /// of `source` 'server' rows) still verifies, and so do the entries made
    /// on it since: a pulled row converged (inserted over the one the old
    /// entries hold), one replaced by a pull (no entry), one made here.
    @Test func aLedgerThatRecordedPullsStillVerifies() async throws {
        let inventory = try Inventory(path: try InventoryTests.temporaryPath())
        for number in 0..<4 { try await inventory.legacyPull(Self.pulled(number)) }
        try await inventory.legacyPull(Self.pulled(1, "truck", at: "2026-12-02T08:00:00.000Z"))
        let texts = try await Self.entries(inventory, from: 0)
        #expect(texts.filter { $0.contains(#""event":"sync""#) }.count == 5, "\(texts)")
        try await Self.verified(inventory)
        let run = try await inventory.beginRun(.init(command: "station"))
        try await inventory.markConverged(Self.address(0), run: run)
        try await inventory.takeAssignments([Self.pulled(2, "car", at: "2026-12-03T08:00:00.000Z")])
        _ = try await inventory.assign([
            Assignment(
                address: Self.address(3), profile: "car", assignedAt: "2026-12-03T09:00:00.000Z",
                assignedBy: "tech@here")
        ])
        try await inventory.endRun(run, .finished)
        try await Self.verified(inventory)
        // And the converged one replaced by a pull leaves the cover.
        try await inventory.takeAssignments([Self.pulled(0, "car", at: "2026-12-04T08:00:00.000Z")])
        try await Self.verified(inventory)
    }
}

extension Inventory {
    /// What a pull wrote before pulled assignments were left out of the
    /// ledger: the row, and its entry (event `sync`).
    func legacyPull(_ assignment: Assignment) throws {
        let select = LedgerTable.assignments.selectAll + " WHERE address = ?"
        try database.inTransaction {
            database.ledger?.suspended = true
            defer { database.ledger?.suspended = false }
            let old = try database.rows(select, [.text(assignment.address)]).first
            try database.run(
                """
                INSERT OR REPLACE INTO assignments(address, profile, minor_policy, overrides, assigned_at,
                                                   assigned_by, source)
                VALUES (?, ?, 'auto', '{}', ?, ?, 'server')
                """,
                [
                    .text(assignment.address), .text(assignment.profile), .text(assignment.assignedAt),
                    .text(assignment.assignedBy),
                ])
            let new = try database.rows(select, [.text(assignment.address)]).first
            var head = try LedgerHead.read(database)
            for (op, key, row) in LedgerRecorder.entries(.assignments, old: old, new: new) {
                try LedgerRecorder.append(
                    LedgerStorage.Stored(
                        table: .assignments, op: op, event: "sync", at: .text(Inventory.now()), key: key, row: row),
                    to: &head, database)
            }
            try head.write(database)
        }
    }
}
