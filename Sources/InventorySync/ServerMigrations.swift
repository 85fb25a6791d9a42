import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Applies the server schema's migrations on a live server (docs/office.md,
/// "Migrations on a live server"): benches keep syncing and the office
/// keeps reading while it happens, so nothing may hold a lock that stops
/// them for long.
///
/// A migration has two parts:
/// - **its transaction** (`ServerSchema.migrations`): the DDL, which is
///   quick (new columns without a default rewrite nothing, new tables are
///   empty) but needs ACCESS EXCLUSIVE locks. It runs with a short
///   `lock_timeout`, so that a migration waiting for a sync's open
///   transaction does not queue every later statement behind it; when the
///   timeout strikes, the transaction is rolled back whole and tried again
///   after a pause with jitter, within a budget.
/// - **its afterwork** (`ServerSchema.afterwork`): what takes time in
///   proportion to the data — index builds (`CREATE INDEX CONCURRENTLY`,
///   which does not block writes) and backfills (batches of rows, one
///   short transaction each). Done by the bench that migrated, after the
///   version is recorded, and finished by any later writer that finds it
///   unfinished (a crash, a kill). Each piece is recorded in
///   `beaconbench_afterwork` when done; each is idempotent.
///
/// Readers never do either: a read-only office account only checks the
/// version.
enum ServerMigrations {
    /// How long the migration's transaction waits for one lock before it
    /// gives up, rolls back and tries again.
    static let lockTimeout = "2s"
    /// How long all the tries together may take: a server where syncs hold
    /// locks for longer than this without pause is reported, not waited on.
    static let budget: Duration = .seconds(600)

    /// Advisory lock keys: the migration's (a transaction lock, held by one
    /// migrator at a time, as before) and the afterwork's (a session lock,
    /// tried: whoever does not get it leaves the afterwork to its holder).
    static let migrationLock = "7205190011"
    static let afterworkLock = "7205190012"

    /// What a run did: for the measurements of docs/office.md.
    struct Report: Sendable {
        var tries = 0
        var lockTimeouts = 0
        var transactionSeconds = 0.0
        var afterwork: [(name: String, seconds: Double)] = []
    }

    /// Brings the server to this program's schema: the transactions of
    /// every pending migration, then their afterwork.
    @discardableResult
    static func migrate(
        _ server: PostgresConnection, migrations: [ServerMigration] = ServerSchema.migrations,
        afterwork: [ServerAfterwork] = ServerSchema.afterwork, budget: Duration = budget,
        onLockTimeout: () -> Void = {}
    ) throws(SyncError) -> Report {
        var report = Report()
        let clock = ContinuousClock()
        let started = clock.now
        var pause = 0.05
        while true {
            report.tries += 1
            let tried = clock.now
            do {
                try migrateOnce(server, migrations: migrations)
                report.transactionSeconds = seconds(clock.now - tried)
                break
            } catch  where isLockTimeout(error) && clock.now - started < budget {
                report.lockTimeouts += 1
                onLockTimeout()
                // 50 ms, doubling to 2 s, ±50 %: benches that all found
                // the server behind do not retry in step.
                let jittered = pause * Double.random(in: 0.5...1.5)
                usleep(UInt32(jittered * 1_000_000))
                pause = min(pause * 2, 2)
            } catch  where isLockTimeout(error) {
                throw SyncError(
                    "the schema migration waited \(Int(seconds(clock.now - started))) s for locks held by other"
                        + " sessions and gave up (\(report.lockTimeouts) tries); nothing was changed: run it again"
                        + " when the server is quieter")
            }
        }
        report.afterwork = try finishAfterwork(server, afterwork)
        return report
    }

    /// The pending migrations' transactions, one transaction for all (as a
    /// version is either wholly there or not), under the migration lock.
    static func migrateOnce(_ server: PostgresConnection, migrations: [ServerMigration]) throws(SyncError) {
        try server.transaction { () throws(SyncError) in
            // One bench at a time creates or migrates the schema; the wait
            // for another migrator is not a lock timeout (set after).
            try server.exec("SELECT pg_advisory_xact_lock(\(migrationLock))")
            try server.exec("SET LOCAL lock_timeout = '\(lockTimeout)'")
            try server.exec("CREATE TABLE IF NOT EXISTS beaconbench_schema (version INTEGER NOT NULL)")
            try server.exec(afterworkTable)
            // Read again under the lock: another bench may have migrated meanwhile.
            let current = try InventorySync.schemaVersion(server)
            if current > migrations.count {
                // Newer than this program: synced to unchanged if it still takes benches of this version.
                return try InventorySync.checkNewerSchema(server, current, known: migrations.count)
            }
            for (index, migration) in migrations.enumerated().dropFirst(current) {
                let version = index + 1
                try server.exec(migration.sql)
                if version >= ServerSchema.compatibleFromSince {
                    try server.exec(
                        "INSERT INTO beaconbench_schema (version, compatible_from) VALUES ($1, $2)",
                        [String(version), String(ServerSchema.compatibleFrom(version, in: migrations))])
                } else {
                    try server.exec("INSERT INTO beaconbench_schema (version) VALUES ($1)", [String(version)])
                }
            }
        }
    }

    static let afterworkTable = """
        CREATE TABLE IF NOT EXISTS beaconbench_afterwork (
            name TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            done_at TEXT NOT NULL,
            seconds DOUBLE PRECISION
        )
        """

    /// Whether every piece of afterwork of the server's version is done: one
    /// query, asked by every writer that finds the version current.
    static func afterworkPending(
        _ server: PostgresConnection, _ afterwork: [ServerAfterwork] = ServerSchema.afterwork
    ) throws(SyncError) -> Bool {
        let expected = afterwork.count
        if expected == 0 { return false }
        let exists = try server.exec("SELECT to_regclass('beaconbench_afterwork') IS NOT NULL").first?.first ?? nil
        guard exists == "t" else { return true }
        let done = try server.exec("SELECT count(*)::text FROM beaconbench_afterwork").first?.first ?? nil
        return Int(done ?? "") ?? 0 < expected
    }

    /// Whether the named pieces of afterwork are all recorded done (false on
    /// a server that has no record of afterwork at all).
    static func afterworkDone(_ server: PostgresConnection, _ names: [String]) throws(SyncError) -> Bool {
        let exists = try server.exec("SELECT to_regclass('beaconbench_afterwork') IS NOT NULL").first?.first ?? nil
        guard exists == "t" else { return false }
        let done =
            try server.exec(
                "SELECT count(*)::text FROM beaconbench_afterwork WHERE name = ANY($1::text[])",
                [PostgresArray.literal(names.map { Optional($0) })]
            ).first?.first ?? nil
        return Int(done ?? "") == names.count
    }

    /// Does the afterwork not yet recorded, unless another session is doing
    /// it (then returns at once: the indexes are for speed, the backfills
    /// are read through `coalesce` until done — nothing waits on them).
    static func finishAfterwork(
        _ server: PostgresConnection, _ afterwork: [ServerAfterwork] = ServerSchema.afterwork
    ) throws(SyncError) -> [(name: String, seconds: Double)] {
        guard !afterwork.isEmpty else { return [] }
        try server.exec(afterworkTable)
        let got = try server.exec("SELECT pg_try_advisory_lock(\(afterworkLock))").first?.first ?? nil
        guard got == "t" else { return [] }
        // An index build over a large table takes minutes with the server
        // busy and answering: not a silent server (`StatementGuard`).
        server.guardsStatements = false
        defer {
            server.guardsStatements = true
            _ = try? server.exec("SELECT pg_advisory_unlock(\(afterworkLock))")
        }
        let done = Set(try server.exec("SELECT name FROM beaconbench_afterwork").compactMap { $0.first ?? nil })
        var timings: [(name: String, seconds: Double)] = []
        let clock = ContinuousClock()
        for piece in afterwork where !done.contains(piece.name) {
            let started = clock.now
            switch piece.kind {
            case .index(let definition):
                // A build that died leaves an invalid index behind, which
                // IF NOT EXISTS would keep: dropped first.
                let invalid =
                    try server.exec(
                        "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", [piece.name]
                    ).first?.first ?? nil
                if invalid == "t" { try server.exec("DROP INDEX CONCURRENTLY IF EXISTS \(piece.name)") }
                try server.exec(definition)
            case .backfill(let statement):
                // Each batch its own transaction (autocommit); the statement
                // takes the cursor it returned last ('' first) and returns
                // the next one, NULL when there is nothing left.
                var cursor: String? = ""
                while let position = cursor {
                    cursor = try server.exec(statement, [position]).first?.first ?? nil
                }
            }
            try server.exec(
                "INSERT INTO beaconbench_afterwork (name, version, done_at, seconds) VALUES ($1, $2, now()::text, $3)"
                    + " ON CONFLICT (name) DO NOTHING",
                [piece.name, String(piece.version), String(seconds(clock.now - started))])
            timings.append((piece.name, seconds(clock.now - started)))
        }
        return timings
    }

    /// The server's "canceling statement due to lock timeout" (SQLSTATE
    /// 55P03, lock_not_available).
    static func isLockTimeout(_ error: SyncError) -> Bool {
        error.sqlState == "55P03"
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// A piece of a migration done after its transaction: see
/// `ServerMigrations`. Named uniquely across all versions (the name is the
/// record that it is done).
struct ServerAfterwork: Sendable {
    enum Kind: Sendable {
        /// `CREATE INDEX CONCURRENTLY IF NOT EXISTS name …`
        case index(String)
        /// A statement taking a text cursor ($1, '' first) and returning
        /// the next one (NULL when done); every batch is idempotent.
        case backfill(String)
    }
    var version: Int
    var name: String
    var kind: Kind
}

/// The migrations as a tool outside this module drives them: the office's
/// benchmarks bring a server to an older version, fill it, and measure the
/// rest being applied under load (`beaconbench-bench office migrate`).
public enum ServerAdministration {
    public struct MigrationResult: Sendable {
        /// Tries of the migration's transaction, and how many of them a
        /// lock timeout rolled back.
        public var tries: Int
        public var lockTimeouts: Int
        /// The last (successful) try of the transaction.
        public var transactionSeconds: Double
        /// Each piece of afterwork done by this call, with its time.
        public var afterwork: [(name: String, seconds: Double)]
    }

    /// The newest version this program knows.
    public static var version: Int { ServerSchema.version }

    /// Brings the server at `url` to `version` (all of this program's when
    /// nil); with an older version, its afterwork is not done.
    @discardableResult
    public static func migrate(_ url: String, through version: Int? = nil) throws(SyncError) -> MigrationResult {
        let server = try PostgresConnection(url)
        try server.exec("SET client_min_messages TO warning")
        let migrations = Array(ServerSchema.migrations.prefix(version ?? ServerSchema.version))
        let afterwork = ServerSchema.afterwork.filter { $0.version <= migrations.count }
        let report = try ServerMigrations.migrate(server, migrations: migrations, afterwork: afterwork)
        return MigrationResult(
            tries: report.tries, lockTimeouts: report.lockTimeouts, transactionSeconds: report.transactionSeconds,
            afterwork: report.afterwork)
    }
}
