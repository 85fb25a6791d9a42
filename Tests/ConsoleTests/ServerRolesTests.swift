import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// Per-bench authority on the office's server (docs/office.md, "Roles: who
/// may write what"): after `office init`, each bench syncs under its own
/// role, and no role but the owner can change another bench's rows or
/// ledger, or (the office's) anything at all.
@Suite(
    "roles on the server: no bench writes another's rows", .serialized, .exclusive(.postgreSQL),
    .timeLimit(.minutes(10)))
struct ServerRolesTests {
    /// The URL of `server` as login role `role` (the test cluster trusts
    /// its private socket: the role, not a password, is what is tested).
    static func url(_ server: LocalPostgres, as role: String) -> String {
        server.url.replacingOccurrences(of: "user=bench", with: "user=\(role)")
    }

    /// Runs `sql` as `connection`'s role: nil when it was done, else the
    /// server's SQLSTATE (a refusal).
    static func refusal(_ connection: PostgresConnection, _ sql: String) -> String? {
        do {
            try connection.exec(sql)
            return nil
        } catch {
            return error.sqlState ?? "no SQLSTATE: \(error.message)"
        }
    }

    /// Rows changed by `sql` (an UPDATE … RETURNING 1), or the refusal's SQLSTATE.
    static func changed(_ connection: PostgresConnection, _ sql: String) -> Result<Int, SyncError> {
        do {
            let cell = try connection.exec("WITH changed AS (\(sql) RETURNING 1) SELECT count(*) FROM changed")
            return .success(Int((cell.first?.first ?? nil) ?? "") ?? -1)
        } catch {
            return .failure(error)
        }
    }

    /// Every server table with a bench's rows, and the column naming the bench.
    static let owned: [(table: String, column: String)] =
        ServerRoles.benchTables.map { ($0, "bench_id") } + [
            ("fleet_assignments", "origin"), ("assignment_conflicts", "noticed_by"),
        ]

    /// Two benches synced under their own roles (made by `office init` and
    /// `office bench-role`); then bench B's role tries, on every table,
    /// to insert a row carrying A's id, to update A's rows (in place and
    /// by moving its own onto A), and to delete A's; and to call every
    /// shared function as A. Each is refused and A's rows are as they
    /// were. The office's role writes nothing anywhere, and reads all. A's
    /// and B's syncs still work after.
    @Test func benchBCannotTouchAsRowsAndTheOfficeCannotWrite() async throws {
        try await withSyncScene("roles") { scene in
            let server = scene.server
            var benchA = try await LargeInventory(path: scene.directory + "/a.sqlite", devices: 6, outcomes: 20)
            var benchB = try await LargeInventory(path: scene.directory + "/b.sqlite", devices: 4, outcomes: 10)
            let idA = try await benchA.inventory.benchID()
            let idB = try await benchB.inventory.benchID()

            let initialized = try await onThreadOfItsOwn { try ServerRoles.initialize(url: server.url) }
            #expect(initialized.schemaVersion == ServerSchema.version)
            let roleA = try await onThreadOfItsOwn { try ServerRoles.makeBenchRole(url: server.url, benchID: idA) }
            let roleB = try await onThreadOfItsOwn { try ServerRoles.makeBenchRole(url: server.url, benchID: idB) }
            _ = try await server.psql("CREATE ROLE office_reader LOGIN IN ROLE \(ServerRoles.office)")
            let urlA = Self.url(server, as: roleA.role)
            let urlB = Self.url(server, as: roleB.role)

            // Each bench syncs under its own role (twice, with more work between).
            for round in 0..<2 {
                if round > 0 {
                    try await benchA.moreWork(round)
                    try await benchB.moreWork(round)
                }
                await #expect(try scene.sync(benchA, to: urlA).waitForExit().status == 0, "\(scene.stderr)")
                await #expect(try scene.sync(benchB, to: urlB).waitForExit().status == 0, "\(scene.stderr)")
            }
            await #expect(try scene.differences(benchA) == [])
            await #expect(try scene.differences(benchB) == [])
            // No bench syncs as the other: A's sync under B's role is refused.
            await #expect(try scene.sync(benchA, to: urlB).waitForExit().status >> 8 == 3, "\(scene.stderr)")

            // A's rows as they are now, table by table.
            func snapshot() async throws -> [String: [[String]]] {
                var rows: [String: [[String]]] = [:]
                for (table, column) in Self.owned {
                    rows[table] = try await server.rows(
                        "SELECT t::text FROM \(table) t WHERE \(column) = '\(idA)' ORDER BY t::text")
                }
                return rows
            }
            let before = try await snapshot()
            #expect((before["devices"]?.count ?? 0) > 0 && (before["bench_ledger_blocks"]?.count ?? 0) > 0)

            let asB = try PostgresConnection(urlB)
            let office = try PostgresConnection(Self.url(server, as: "office_reader"))
            for (table, column) in Self.owned {
                // Another bench's row, inserted: refused (by the policy,
                // or first by the table's own trigger, for the ledger's).
                let insert = "INSERT INTO \(table) (\(column)) VALUES ('\(idA)')"
                let inserted = Self.refusal(asB, insert)
                #expect(inserted != nil, "\(table): B inserted a row of A's")
                #expect(["42501", "23000"].contains(inserted ?? ""), "\(table): \(inserted ?? "done")")
                // A's rows updated in place: none are B's to update.
                switch Self.changed(asB, "UPDATE \(table) SET \(column) = \(column) WHERE \(column) = '\(idA)'") {
                case .success(let count): #expect(count == 0, "\(table): B updated \(count) of A's rows")
                case .failure(let error):
                    #expect(["42501", "23000"].contains(error.sqlState ?? ""), "\(table): \(error)")
                }
                // B's own rows moved onto A: refused.
                switch Self.changed(asB, "UPDATE \(table) SET \(column) = '\(idA)' WHERE \(column) = '\(idB)'") {
                case .success(let count): #expect(count == 0, "\(table): B moved \(count) rows onto A")
                case .failure(let error):
                    #expect(["42501", "23000"].contains(error.sqlState ?? ""), "\(table): \(error)")
                }
                #expect(Self.refusal(asB, "DELETE FROM \(table) WHERE \(column) = '\(idA)'") == "42501", "\(table)")
                #expect(Self.refusal(asB, "TRUNCATE \(table)") == "42501", "\(table)")
                // The office writes nothing, and reads everything.
                #expect(Self.refusal(office, insert) == "42501", "\(table): the office inserted")
                #expect(
                    Self.refusal(office, "UPDATE \(table) SET \(column) = \(column)") == "42501",
                    "\(table): the office updated")
                #expect(Self.refusal(office, "DELETE FROM \(table)") == "42501", "\(table): the office deleted")
                #expect(
                    Self.refusal(office, "SELECT count(*) FROM \(table)") == nil, "\(table): the office cannot read")
            }
            for table in ["beaconbench_schema", "beaconbench_afterwork", "bench_roles"] {
                #expect(Self.refusal(asB, "DELETE FROM \(table)") == "42501", "\(table)")
                #expect(
                    Self.refusal(
                        asB,
                        "UPDATE \(table) SET \(table == "bench_roles" ? "bench_id = bench_id" : "version = version")")
                        == "42501", "\(table)")
                #expect(Self.refusal(office, "DELETE FROM \(table)") == "42501", "\(table)")
            }
            // B maps itself to A: refused (the owner keeps the mapping).
            #expect(
                Self.refusal(asB, "INSERT INTO bench_roles VALUES ('\(roleB.role)x', '\(idA)', 'now')") == "42501")
            // The shared functions act for the caller's own bench only.
            #expect(Self.refusal(asB, "SELECT beaconbench_register_claims('\(idA)', NULL)") == "42501")
            #expect(
                Self.refusal(
                    asB,
                    "SELECT * FROM beaconbench_claim_identity(7, 5, 'C2:00:00:00:09:00', '\(idA)', 'now', 64, false)")
                    == "42501")
            #expect(
                Self.refusal(
                    asB,
                    "SELECT beaconbench_report_converged('\(idA)', ARRAY['x'], ARRAY['x'], ARRAY['x'], ARRAY['x'], ARRAY[1::bigint])"
                ) == "42501")
            // … and the office may call none of them.
            #expect(Self.refusal(office, "SELECT beaconbench_register_claims('\(idA)', NULL)") == "42501")
            // B's own claim, through the function, is taken.
            #expect(
                Self.refusal(
                    asB,
                    "SELECT * FROM beaconbench_claim_identity(7, 5, 'C2:00:00:00:09:00', '\(idB)', 'now', 64, false)")
                    == nil)
            // Nothing of A's changed.
            let after = try await snapshot()
            for (table, _) in Self.owned { #expect(after[table] == before[table], "\(table): A's rows changed") }

            // And both benches still sync under their own roles.
            await #expect(try scene.sync(benchA, to: urlA).waitForExit().status == 0, "\(scene.stderr)")
            await #expect(try scene.sync(benchB, to: urlB).waitForExit().status == 0, "\(scene.stderr)")
            await #expect(try scene.differences(benchA) == [])
            await #expect(try scene.differences(benchB) == [])
        }
    }
}
