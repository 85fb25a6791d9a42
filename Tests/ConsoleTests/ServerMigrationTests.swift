import Foundation
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// Migrations on a live server (docs/office.md, "Migrations on a live
/// server"): a migration whose DDL meets a sync's open transaction gives
/// up its locks after `lock_timeout` and tries again, so writers are not
/// queued behind it; its slow part (index builds, backfills) runs after
/// the version is recorded, without blocking writes, and is finished by a
/// later writer when the migrator died.
@Suite("server migrations on a live server", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(5)))
struct ServerMigrationTests {
    /// The shipped migrations, then a test's own: a column on `devices`,
    /// an index on it and a backfill of it.
    static let extra: [ServerMigration] =
        ServerSchema.migrations + [
            ("test: a new column", "ALTER TABLE devices ADD COLUMN IF NOT EXISTS test_note TEXT", true)
        ]
    static let afterwork: [ServerAfterwork] = [
        ServerAfterwork(
            version: extra.count, name: "devices_test_note_filled",
            kind: .backfill(
                """
                WITH batch AS (
                    SELECT bench_id, address FROM devices
                    WHERE (bench_id || ' ' || address) > $1 ORDER BY (bench_id || ' ' || address) LIMIT 7),
                filled AS (
                    UPDATE devices d SET test_note = 'noted ' || d.address FROM batch b
                    WHERE d.bench_id = b.bench_id AND d.address = b.address AND d.test_note IS NULL)
                SELECT max(bench_id || ' ' || address) FROM batch
                """)),
        ServerAfterwork(
            version: extra.count, name: "devices_by_test_note",
            kind: .index("CREATE INDEX CONCURRENTLY IF NOT EXISTS devices_by_test_note ON devices (test_note)")),
    ]

    static func connect(_ url: String) throws -> PostgresConnection {
        let connection = try PostgresConnection(url)
        try connection.exec("SET client_min_messages TO warning")
        return connection
    }

    /// A server at the shipped version holding `count` devices of one bench.
    static func serverWithDevices(_ url: String, count: Int) throws -> PostgresConnection {
        let connection = try Self.connect(url)
        try ServerMigrations.migrate(connection, afterwork: [])
        try connection.exec(
            "INSERT INTO benches (bench_id, host) VALUES ('bench-m', 'm') ON CONFLICT DO NOTHING")
        try connection.exec(
            """
            INSERT INTO devices (bench_id, address, mac_ending, first_seen)
            SELECT 'bench-m', 'C0:00:00:00:' || lpad(to_hex(n / 256), 2, '0') || ':' || lpad(to_hex(n % 256), 2, '0'),
                   lpad(to_hex(n), 4, '0'), '2026-01-01T00:00:00.000Z'
            FROM generate_series(1, $1::int) n
            """, [String(count)])
        return connection
    }

    @Test("a migration meeting a sync's open transaction steps back, tries again, and loses no write")
    func stepsBackFromHeldLocks() async throws {
        try await withPostgres { server in
            let url = server.url
            let setup = try await onThreadOfItsOwn { OneThreadAtATime(try Self.serverWithDevices(url, count: 50)) }
            // A "sync" holding a write lock on devices, as a chunk's
            // transaction does.
            let holder = try await onThreadOfItsOwn { () throws -> OneThreadAtATime in
                let connection = try Self.connect(url)
                try connection.exec("BEGIN")
                try connection.exec(
                    "UPDATE devices SET model = 'held' WHERE address = 'C0:00:00:00:00:01'")
                return OneThreadAtATime(connection)
            }
            let timeouts = Counter()
            let migration = Task {
                try await onThreadOfItsOwn { () throws -> ServerMigrations.Report in
                    let connection = try Self.connect(url)
                    return try ServerMigrations.migrate(
                        connection, migrations: Self.extra, afterwork: Self.afterwork,
                        onLockTimeout: { timeouts.add() })
                }
            }
            // The migration has met the held lock and stepped back once.
            try await waitUntil("the migration's first lock timeout", cap: .seconds(120)) { timeouts.value >= 1 }
            // Between its tries another writer gets through: a write made
            // while the migration is pending.
            try await onThreadOfItsOwn {
                try setup.connection.exec(
                    "UPDATE devices SET model = 'written meanwhile' WHERE address = 'C0:00:00:00:00:02'")
            }
            try await onThreadOfItsOwn {
                try holder.connection.exec("COMMIT")
            }
            let report = try await migration.value
            #expect(report.lockTimeouts >= 1)
            #expect(report.afterwork.map(\.name) == ["devices_test_note_filled", "devices_by_test_note"])
            let facts = try await onThreadOfItsOwn { () throws -> [[String?]] in
                try setup.connection.exec(
                    """
                    SELECT (SELECT max(version) || ' from ' || max(compatible_from) FROM beaconbench_schema)::text,
                           (SELECT count(*) FROM devices WHERE test_note = 'noted ' || address)::text,
                           (SELECT count(*) FROM devices)::text,
                           (SELECT indisvalid::text FROM pg_index WHERE indexrelid = 'devices_by_test_note'::regclass),
                           (SELECT string_agg(model, ',' ORDER BY model) FROM devices WHERE model IS NOT NULL)
                    """)
            }
            // The test's migration only adds: benches of the shipped version may still sync (compatible_from).
            #expect(
                facts.first == [
                    "\(Self.extra.count) from \(ServerSchema.version)", "50", "50", "true", "held,written meanwhile",
                ])
        }
    }

    @Test("afterwork a migrator left unfinished is finished by the next writer; an invalid index is rebuilt")
    func unfinishedAfterworkIsFinished() async throws {
        try await withPostgres { server in
            let url = server.url
            try await onThreadOfItsOwn {
                let connection = try Self.serverWithDevices(url, count: 30)
                // The migrator died after its transaction: the version is
                // recorded, the afterwork is not done; and a build that
                // died left an invalid index of the afterwork's name (a
                // unique build over duplicates fails and leaves one).
                try ServerMigrations.migrateOnce(connection, migrations: Self.extra)
                try connection.exec("UPDATE devices SET test_note = 'same'")
                #expect(throws: SyncError.self) {
                    try connection.exec("CREATE UNIQUE INDEX CONCURRENTLY devices_by_test_note ON devices (test_note)")
                }
                try connection.exec("UPDATE devices SET test_note = NULL")
                let before = try connection.exec(
                    "SELECT indisvalid::text FROM pg_index WHERE indexrelid = 'devices_by_test_note'::regclass")
                #expect(before.first == ["false"])
                #expect(try ServerMigrations.afterworkPending(connection, Self.afterwork))
                // The next writer.
                let done = try ServerMigrations.finishAfterwork(connection, Self.afterwork)
                #expect(done.map(\.name) == ["devices_test_note_filled", "devices_by_test_note"])
                #expect(try !ServerMigrations.afterworkPending(connection, Self.afterwork))
                let after = try connection.exec(
                    """
                    SELECT i.indisvalid::text, i.indisunique::text,
                           (SELECT count(*) FROM devices WHERE test_note = 'noted ' || address)::text
                    FROM pg_index i WHERE i.indexrelid = 'devices_by_test_note'::regclass
                    """)
                #expect(after.first == ["true", "false", "30"])
                // Done is done: nothing is built again.
                #expect(try ServerMigrations.finishAfterwork(connection, Self.afterwork).isEmpty)
            }
        }
    }
}

/// A connection handed from one thread of its own to the next, used by
/// one at a time (the test awaits each before the next).
final class OneThreadAtATime: @unchecked Sendable {
    let connection: PostgresConnection
    init(_ connection: PostgresConnection) { self.connection = connection }
}

/// A count shared with a thread of its own.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
