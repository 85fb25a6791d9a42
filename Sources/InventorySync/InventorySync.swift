import FoundationEssentials
import Inventory
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Pushes a bench's SQLite inventory to a shared PostgreSQL server.
///
/// Every row is keyed on the server by the bench's id (generated once per
/// inventory) and its local key, and written with an upsert, so a sync that
/// is repeated or was cut short sends rows again harmlessly: nothing is
/// duplicated, nothing lost. Rows go in chunks of `chunkSize`, one
/// statement (one transaction) each, in local id order; a sync that fails
/// part-way keeps what it committed and the next one goes on from the
/// server's highest local id per table, after sending again the runs and
/// steps the server still has as `running` (they may have finished since).
/// Devices and pulled records, which change in place or have no local id,
/// are sent whole each time.
///
/// Simulated runs (`runs.simulated`) are held back unless the caller asks
/// (`includeSimulated`): their runs, step outcomes and identity
/// reservations, and the devices only simulated runs know
/// (`simulated_only_devices`) with those devices' readings and records.
/// What was held back is sent by a later sync that includes it: the runs,
/// outcomes and readings below the server's cursors that it lacks go first
/// (readings, then outcomes, then runs, so that one cut short finds them
/// missing again and resends them).
public enum InventorySync {
    public struct Report: Sendable, Equatable {
        public var benchID: String
        /// Rows sent per table.
        public var sent: [String: Int] = [:]
        /// Simulated runs not sent (0 with `includeSimulated`).
        public var heldBackRuns = 0
        /// Devices only simulated runs know, not sent (0 with `includeSimulated`).
        public var heldBackDevices = 0
        /// Server rows this sync would not trust (a cursor beyond this
        /// bench's own rows): left on the server, named here.
        public var refused: [RefusedRow] = []
        /// The bench's ledger entries and checkpoints sent (also in `sent`
        /// as `ledger` and `checkpoints`), and the server's tree of this
        /// bench's ledger after the sync: its size and root (hex).
        public var ledgerSize = 0
        public var ledgerRoot = ""
        /// Local checkpoints the server lacks but would not take: older
        /// than the tree it already held (docs/ledger.md, "Several benches").
        public var checkpointsNotSent = 0
        /// Whether only the changes since the last sync were sent (read
        /// from the ledger: `changesRead` entries), not every row.
        public var changesOnly = false
        public var changesRead = 0
        /// The bench's rows on the server that are not what its ledger
        /// says (the server's doing: named, `table key: column is X on the
        /// server, the bench's ledger says Y`): found after a plain sync,
        /// which leaves them, or before a `full` one, which sends every row
        /// and so puts them back (`restored`: said, never silent); and what
        /// a `full` sync still finds after (docs/office.md, "What the
        /// server holds of a bench, checked").
        public var serverDifferences: [String] = []
        public var serverDifferencesAfter: [String] = []
        public var restored = false
    }

    /// Rows sent per table over the whole sync, every attempt counted as
    /// each chunk's statement returns (committed): what a sync that is
    /// stopped says it sent.
    public final class SentRows: Sendable {
        private let counts = Mutex<[String: Int]>([:])
        public init() {}
        public var snapshot: [String: Int] { counts.withLock { $0 } }
        func add(_ table: String, _ rows: Int) { counts.withLock { $0[table, default: 0] += rows } }
    }

    /// Tables in the order they are sent (devices first: outcomes name them).
    public static var tableNames: [String] { ServerSchema.tables.map(\.name) }

    /// What is counted in `sent` besides the tables: the ledger's entries
    /// and checkpoints (sent before the tables, docs/ledger.md).
    public static var ledgerNames: [String] { ["ledger", "checkpoints"] }

    /// Pushes, trying again what PostgreSQL asks to retry (`RetryPolicy`:
    /// a connection that failed or broke, a serialization failure, a
    /// deadlock…), with a doubling wait and jitter, within `retry.budget`
    /// of the first failure: each attempt resumes where the last one
    /// stopped. Other errors (a schema newer than this program, a refused
    /// statement) end it at once, and so does `stop` (the statement in
    /// flight cancelled; `SyncError.stoppedBy` set). `sent` counts what
    /// every attempt committed, and so does the report's `sent`. `full`
    /// sends every row, as a first sync does, instead of the changes since
    /// the last sync (docs/office.md, "Sync at scale").
    public static func push(
        _ inventory: Inventory, to url: String, chunkSize: Int = 5_000, retry: RetryPolicy = .standard,
        includeSimulated: Bool = false, full: Bool = false, stop: SyncStop? = nil, sent: SentRows = SentRows(),
        progress: (_ table: String, _ sent: Int) -> Void = { _, _ in },
        retrying: (_ error: SyncError, _ wait: Duration, _ attempt: Int) -> Void = { _, _, _ in }
    ) async throws(SyncError) -> Report {
        // Before anything is sent, even a connection made: the bench's own
        // ledger must verify, its bench id included, so that a bench that
        // is not the one its ledger began as (an inventory whose bench id
        // was set to another's) is refused here, and nothing is recorded
        // against the bench it names (docs/ledger.md, "Several benches").
        try await verifyOwnLedger(inventory)
        var report = try await retry.run(stop: stop, retrying: retrying) { (_: Int) async throws(SyncError) in
            try await pushOnce(
                inventory, to: url, chunkSize: chunkSize, includeSimulated: includeSimulated, full: full, stop: stop,
                sent: sent, progress: progress)
        }
        // What every attempt committed, not only the last one's.
        let total = sent.snapshot
        for name in Set(report.sent.keys).union(total.keys) { report.sent[name] = total[name] ?? 0 }
        return report
    }

    /// The bench's own `ledger verify`, as `sync` runs it before sending:
    /// a ledger that does not verify is refused (exit 2), its first
    /// finding named; an inventory without a ledger is not checked.
    static func verifyOwnLedger(_ inventory: Inventory) async throws(SyncError) {
        let verification: LedgerVerification
        do {
            guard try await inventory.hasLedger() else { return }
            verification = try await inventory.verifyLedger(limit: 3)
        } catch {
            throw SyncError("the local inventory's ledger: \(error)")
        }
        guard let first = verification.findings.first else { return }
        let more = verification.findings.count - 1 + verification.truncated
        throw SyncError(
            refusal: ServerLedger.Refusal(
                rewrittenAt: nil, serverSize: 0,
                message:
                    "this bench's own ledger does not verify: \(first.message)"
                    + (more > 0 ? " (and \(more) more)" : "")
                    + "; nothing was sent, nothing recorded on the server (beaconbench ledger verify says all)"))
    }

    static func pushOnce(
        _ inventory: Inventory, to url: String, chunkSize: Int, includeSimulated: Bool = false, full: Bool = false,
        stop: SyncStop? = nil,
        sent total: SentRows = SentRows(), progress: (_ table: String, _ sent: Int) -> Void
    ) async throws(SyncError) -> Report {
        let benchID: String
        do {
            benchID = try await inventory.benchID()
        } catch {
            throw SyncError("the local inventory: \(error)")
        }
        let server = try PostgresConnection(url, stop: stop)
        try prepareSchema(server, creating: true)
        // Before anything is sent: the bench's ledger must extend the one
        // the server holds, or nothing of this sync is applied.
        let ledgerChunk = max(chunkSize, 1)
        let plan = try await ServerLedger.check(inventory, server, bench: benchID, chunkSize: ledgerChunk)
        try server.exec(
            """
            INSERT INTO benches (bench_id, host, last_sync) VALUES ($1, $2, NULL)
            ON CONFLICT (bench_id) DO UPDATE SET host = excluded.host WHERE benches.host IS DISTINCT FROM excluded.host
            """, [benchID, ProcessInfo.processInfo.hostName])
        var report = Report(benchID: benchID)
        let simulatedRuns = try await count(inventory, "SELECT count(*) FROM runs WHERE simulated <> 0")
        // Nothing to hold back: the selects need not look for it.
        let include: SQLiteValue = .integer(includeSimulated || simulatedRuns == 0 ? 1 : 0)
        if !includeSimulated, simulatedRuns > 0 {
            report.heldBackRuns = simulatedRuns
            report.heldBackDevices = try await count(inventory, "SELECT count(*) FROM simulated_only_devices")
        }
        let ledger = try await ServerLedger.push(
            inventory, server, bench: benchID, plan: plan, chunkSize: ledgerChunk, total: total, progress: progress)
        report.sent["ledger"] = ledger.entries
        report.sent["checkpoints"] = ledger.checkpoints
        report.ledgerSize = ledger.size
        report.ledgerRoot = ledger.root
        report.checkpointsNotSent = ledger.checkpointsNotSent
        // The server's copy of the bench's rows, before anything of the
        // tables is sent, when this sync sends every row (`full`, which
        // would put them back): every row the bench did not change since
        // its last complete sync must be on the server as the bench holds
        // it. A plain sync rewrites no unchanged row: the check after it
        // finds the same.
        let includeRows = includeSimulated || simulatedRuns == 0
        if full, (try? await inventory.hasLedger()) == true, let from = try tablesSeq(server, bench: benchID),
            from <= plan.benchSize
        {
            let since = try await SyncChanges.collect(
                inventory, from..<plan.benchSize, tables: Set(ServerTableCheck.tables.map(\.name)))
            var skip: [String: Set<[UInt8]>] = [:]
            for (table, keys) in since.keys { skip[table] = Set(keys.map { Array($0.utf8) }) }
            report.serverDifferences = try await ServerRowCheck.differences(
                inventory, server, bench: benchID, include: includeRows, skip: skip,
                skipTables: since.keys["identities"]?.isEmpty == false ? ["identities"] : [], missing: false)
            report.restored = !report.serverDifferences.isEmpty
        }
        let caughtUp = try await catchUp(
            inventory, server, bench: benchID, includeSimulated: includeSimulated, chunkSize: chunkSize,
            total: total)
        // What changed since the last sync (docs/office.md, "Sync at
        // scale"): the ledger's entries from `benches.tables_seq`, the
        // size whose changes the tables here already hold, set at the end
        // of each sync that held nothing back. Without it (a first sync,
        // one after a sync that held rows back, `full`, no ledger): every row.
        let hasLedger = (try? await inventory.hasLedger()) == true
        let tracked = (includeSimulated || simulatedRuns == 0) && hasLedger
        var changes: SyncChanges?
        if !full, tracked, let from = try tablesSeq(server, bench: benchID), from <= plan.benchSize {
            changes = try await SyncChanges.collect(inventory, from..<plan.benchSize, tables: SyncChanges.keyedTables)
        }
        // The identities sent, by device: registered as claims below.
        var identitiesSent: [String] = []
        for table in ServerSchema.tables {
            var sent = caughtUp[table.name] ?? 0
            if let changes, let select = SyncChanges.keyedSelect(table) {
                let keys = changes.keys[table.name] ?? []
                var start = 0
                while start < keys.count {
                    let end = min(keys.count, start + max(chunkSize, 1))
                    let rows = try await local(
                        inventory, select, [.text("[" + keys[start..<end].joined(separator: ",") + "]")])
                    if !rows.isEmpty {
                        try send(rows, of: table, bench: benchID, to: server, total: total)
                        if table.name == "identities" { identitiesSent += rows.compactMap { $0[1].text } }
                    }
                    sent += rows.count
                    progress(table.name, sent)
                    start = end
                }
                report.sent[table.name] = sent
                continue
            }
            var cursor: Int64 = 0
            // This bench's highest id here: what a local id the server
            // holds for this bench can be (rows are never deleted here).
            var here: Int64 = 0
            if let localNewest = table.localNewest {
                here = try await local(inventory, localNewest, []).first?.first?.integer ?? 0
            }
            if let newest = table.newest {
                let cell = try server.exec(newest, [benchID]).first?.first ?? nil
                let (checked, refused) = trustedCursor(cell, table: table.name, bench: benchID, here: here)
                cursor = checked
                if let refused { report.refused.append(refused) }
            }
            if let running = table.running {
                // Local ids as the server holds them, checked: one this
                // bench never had is named, not looked for.
                var ids: [Int64] = []
                for cell in try server.exec(running.onServer + " ORDER BY local_id", [benchID]) {
                    do throws(PulledRows.Problem) {
                        guard let id = try PulledRows.integer(cell.first ?? nil, "local_id", in: 1...max(1, here))
                        else { continue }
                        ids.append(id)
                    } catch {
                        report.refused.append(
                            PulledRows.refusal(
                                table.name, key: "bench \(benchID) running local_id",
                                PulledRows.Problem(
                                    error.field, "is not one of this bench's \(table.name) (1–\(here)): left as it is",
                                    error.value)))
                    }
                }
                if !ids.isEmpty {
                    let rows = try await local(
                        inventory, running.local, [.text("[" + ids.map(String.init).joined(separator: ",") + "]")])
                    try send(rows, of: table, bench: benchID, to: server, total: total)
                    sent += rows.count
                }
            }
            while true {
                let rows = try await local(
                    inventory, table.select, [.integer(cursor), .integer(Int64(chunkSize)), include])
                guard let last = rows.last?.first?.integer else { break }
                try send(rows, of: table, bench: benchID, to: server, total: total)
                sent += rows.count
                cursor = last
                progress(table.name, sent)
                if rows.count < chunkSize { break }
            }
            report.sent[table.name] = sent
        }
        report.changesOnly = changes != nil
        report.changesRead = changes?.entries ?? 0
        try registerClaims(server, bench: benchID, devices: changes == nil ? nil : identitiesSent)
        // Blocks of minors this bench leased and left idle for a day go back (ServerIdentities).
        try ServerIdentities.returnBlocks(on: server, bench: benchID, idleFor: ServerIdentities.idleBlockSeconds)
        // The tables now hold every change up to the bench's ledger size
        // checked above (later ones are found by the next sync); a sync
        // that held rows back leaves the next one to send every row.
        // And after: what the server holds of the bench is what it holds.
        let after = try await ServerRowCheck.differences(
            inventory, server, bench: benchID, include: includeRows, missing: true
        ).filter { !report.serverDifferences.contains($0) }
        if full { report.serverDifferencesAfter = after } else { report.serverDifferences = after }
        try server.exec(
            "UPDATE benches SET last_sync = $2, tables_seq = $3::bigint WHERE bench_id = $1",
            [benchID, Date().ISO8601Format(), tracked ? String(plan.benchSize) : nil])
        return report
    }

    /// The ledger size up to which this bench's changes are in the
    /// server's tables (`benches.tables_seq`), nil when unknown.
    static func tablesSeq(_ server: PostgresConnection, bench: String) throws(SyncError) -> Int? {
        let cell = try server.exec("SELECT tables_seq::text FROM benches WHERE bench_id = $1", [bench]).first?.first
        guard let text = cell ?? nil, let value = Int(text), value >= 0 else { return nil }
        return value
    }

    /// Claims fleet-wide what this bench reserved while it could not ask
    /// the server, where no other device has it (a collision stays for the
    /// fleet audit to report as duplicate-identity): the identities of
    /// `devices` (those sent by this sync), or all of the bench's (nil).
    static func registerClaims(_ server: PostgresConnection, bench: String, devices: [String]?) throws(SyncError) {
        if let devices, devices.isEmpty { return }
        let only = devices.map { PostgresArray.literal($0.map { Optional($0) }) }
        // On the server, with the owner's rights, for this bench only
        // (ServerRoles): moving a claim touches another bench's row.
        try server.exec("SELECT beaconbench_register_claims($1, $2::text[])", [bench, only])
    }

    /// The server's highest local id of this bench in `table` (`cell`), the
    /// cursor a sync resumes after, if it can be: not beyond this bench's
    /// own highest id `here` and not negative (rows are never deleted
    /// here, so such a row is not one this bench sent). Else 0 — every row
    /// sent again, which upserts make harmless — and the row named as
    /// refused.
    static func trustedCursor(
        _ cell: String?, table: String, bench: String, here: Int64
    ) -> (cursor: Int64, refused: RefusedRow?) {
        let key = "bench \(bench) highest local_id"
        let read: Int64?
        do throws(PulledRows.Problem) {
            read = try PulledRows.integer(cell, "local_id", in: Int64.min...Int64.max)
        } catch {
            return (0, PulledRows.refusal(table, key: key, error))
        }
        // No row of this bench there yet: from the start.
        guard let value = read else { return (0, nil) }
        guard value < 0 || value > here else { return (value, nil) }
        let problem = PulledRows.Problem(
            "local_id",
            value < 0
                ? "is negative: not a row this bench sent; every row is sent again"
                : "is beyond this bench's highest \(table) id (\(here)): not a row this bench sent; every row is sent again",
            String(value))
        return (0, PulledRows.refusal(table, key: key, problem))
    }

    static func count(_ inventory: Inventory, _ sql: String) async throws(SyncError) -> Int {
        Int(try await local(inventory, sql, []).first?.first?.integer ?? 0)
    }

    /// Sends what earlier syncs held back and the server's cursors have
    /// passed: the readings of devices touched by simulated runs that are
    /// sent now and the server lacks, then (with `includeSimulated`) the
    /// outcomes of the simulated runs it lacks, then those runs.
    static func catchUp(
        _ inventory: Inventory, _ server: PostgresConnection, bench: String, includeSimulated: Bool, chunkSize: Int,
        total: SentRows
    ) async throws(SyncError) -> [String: Int] {
        var sent: [String: Int] = [:]
        guard try await count(inventory, "SELECT count(*) FROM runs WHERE simulated <> 0") > 0 else { return sent }
        let include: SQLiteValue = .integer(includeSimulated ? 1 : 0)
        let devices = try await local(
            inventory,
            """
            SELECT DISTINCT o.device FROM outcomes o JOIN runs r ON r.id = o.run_id
            WHERE r.simulated <> 0 AND o.device IS NOT NULL
              AND (?1 OR o.device NOT IN (SELECT address FROM simulated_only_devices))
            ORDER BY o.device
            """, [include]
        ).compactMap { $0.first?.text }
        let runs =
            includeSimulated
            ? try await local(inventory, "SELECT id FROM runs WHERE simulated <> 0 ORDER BY id", []).compactMap {
                $0.first?.integer
            } : []
        let presentDevices = Set(
            try server.exec(
                "SELECT address FROM devices WHERE bench_id = $1 AND address = ANY($2::text[])",
                [bench, PostgresArray.literal(devices.map { Optional($0) })]
            ).compactMap { $0.first ?? nil })
        let presentRuns = Set(
            try server.exec(
                "SELECT local_id FROM runs WHERE bench_id = $1 AND local_id = ANY($2::bigint[])",
                [bench, PostgresArray.literal(runs.map { Optional(String($0)) })]
            ).compactMap { $0.first ?? nil }.compactMap { Int64($0) })
        let missingDevices = devices.filter { !presentDevices.contains($0) }
        let missingRuns = runs.filter { !presentRuns.contains($0) }
        func json(_ values: [String]) -> SQLiteValue {
            .text((try? JSONEncoder().encode(values)).map { String(decoding: $0, as: UTF8.self) } ?? "[]")
        }
        let steps: [(table: String, sql: String, keys: SQLiteValue, empty: Bool)] = [
            (
                "readings",
                """
                SELECT id, device, at, battery, rssi, firmware FROM readings
                WHERE device IN (SELECT value FROM json_each(?1)) AND id > ?2 ORDER BY id LIMIT ?3
                """, json(missingDevices), missingDevices.isEmpty
            ),
            (
                "outcomes",
                """
                SELECT id, run_id, device, step, status, detail, error, before, after, started_at, ended_at,
                    duration_ms, retries
                FROM outcomes WHERE run_id IN (SELECT value FROM json_each(?1)) AND id > ?2 ORDER BY id LIMIT ?3
                """, .text("[" + missingRuns.map(String.init).joined(separator: ",") + "]"), missingRuns.isEmpty
            ),
            (
                "runs",
                """
                SELECT id, started_at, ended_at, command, sha256, operator, host, pid, adapter, options, status,
                    simulated
                FROM runs WHERE id IN (SELECT value FROM json_each(?1)) AND id > ?2 ORDER BY id LIMIT ?3
                """, .text("[" + missingRuns.map(String.init).joined(separator: ",") + "]"), missingRuns.isEmpty
            ),
        ]
        for step in steps where !step.empty {
            guard let table = ServerSchema.tables.first(where: { $0.name == step.table }) else { continue }
            var cursor: Int64 = 0
            while true {
                let rows = try await local(
                    inventory, step.sql, [step.keys, .integer(cursor), .integer(Int64(chunkSize))])
                guard let last = rows.last?.first?.integer else { break }
                try send(rows, of: table, bench: bench, to: server, total: total)
                sent[step.table, default: 0] += rows.count
                cursor = last
                if rows.count < chunkSize { break }
            }
        }
        return sent
    }

    static func local(
        _ inventory: Inventory, _ sql: String, _ parameters: [SQLiteValue]
    ) async throws(SyncError) -> [[SQLiteValue]] {
        do {
            return try await inventory.query(sql, parameters)
        } catch {
            throw SyncError("the local inventory: \(error)")
        }
    }

    /// One upsert: the bench id, then each column's values as one array.
    /// One statement, so one transaction: `total` counts the rows once it
    /// has returned (committed).
    static func send(
        _ rows: [[SQLiteValue]], of table: ServerSchema.Table, bench: String, to server: PostgresConnection,
        total: SentRows? = nil
    ) throws(SyncError) {
        let offset = table.cursorIsLocalID ? 0 : 1
        var arrays: [String?] = [bench]
        for column in table.types.indices {
            arrays.append(PostgresArray.literal(rows.lazy.map { $0[column + offset].textForm }))
        }
        try server.exec(table.upsert, arrays)
        total?.add(table.name, rows.count)
    }

    /// Checks the server's schema, reading only: nothing to do when it is
    /// this program's version (so a bench needs no right to create tables
    /// on a server already set up); migrated when older; refused when newer.
    /// Without `creating`, a server with no schema at all is an error (the
    /// read commands: nobody has synced there yet).
    static func prepareSchema(_ server: PostgresConnection, creating: Bool) throws(SyncError) {
        try server.exec("SET client_min_messages TO warning")
        let exists = try server.exec("SELECT to_regclass('beaconbench_schema') IS NOT NULL").first?.first ?? nil
        if exists == "t" {
            let version = try schemaVersion(server)
            if version == ServerSchema.version {
                // A migration's slow part (docs/office.md), left unfinished
                // by a migrator that died: finished by the next writer.
                if creating, try ServerMigrations.afterworkPending(server) {
                    _ = try ServerMigrations.finishAfterwork(server)
                }
                return
            }
            if version > ServerSchema.version {
                // A newer beaconbench migrated it. Its afterwork is its own.
                return try checkNewerSchema(server, version, known: ServerSchema.version)
            }
        } else if !creating {
            throw SyncError("\(server.location) holds no beaconbench inventory: sync a bench to it first")
        }
        try ServerMigrations.migrate(server)
    }

    /// The server's schema version: a whole number from 0 (no migration
    /// yet); anything else is not a schema beaconbench wrote.
    static func schemaVersion(_ server: PostgresConnection) throws(SyncError) -> Int {
        let cell = try server.exec("SELECT coalesce(max(version), 0)::text FROM beaconbench_schema").first?.first ?? nil
        do throws(PulledRows.Problem) {
            // (coalesce: never NULL; were it, no migration has been made.)
            guard let version = try PulledRows.integer(cell, "version", in: 0...Int64(Int32.max)) else { return 0 }
            return Int(version)
        } catch {
            throw SyncError(
                "the server's schema version (beaconbench_schema) is \(PulledRows.shown(error.value ?? "NULL")):"
                    + " not one beaconbench wrote (0–\(ServerSchema.version)); nothing was changed")
        }
    }

    /// A server at a newer version than this program's (`known`) is used
    /// as it is when that version records that benches of `known` may
    /// still sync (`compatible_from`, ServerSchema.compatibleFrom);
    /// otherwise refused, nothing changed. What the server says is
    /// checked: a version's `compatible_from` is a whole number from 11 up
    /// to the version; NULL, or no such column (a version before the rule),
    /// means none older.
    static func checkNewerSchema(_ server: PostgresConnection, _ version: Int, known: Int) throws(SyncError) {
        let oldest: Int
        do throws(SyncError) {
            let cell =
                try server.exec(
                    "SELECT compatible_from::text FROM beaconbench_schema WHERE version = $1 LIMIT 1", [String(version)]
                ).first?.first ?? nil
            do throws(PulledRows.Problem) {
                let range = Int64(ServerSchema.compatibleFromSince)...Int64(version)
                oldest = try PulledRows.integer(cell, "compatible_from", in: range).map { Int($0) } ?? version
            } catch {
                throw SyncError(
                    "the server's schema version \(version) says benches from version"
                        + " \(PulledRows.shown(error.value ?? "NULL")) may sync (beaconbench_schema.compatible_from):"
                        + " not a version from \(ServerSchema.compatibleFromSince) to \(version); nothing was changed")
            }
        } catch  where error.sqlState == "42703" {  // undefined_column
            // The column is not there: a server made before version 11 by hand, or not by beaconbench.
            oldest = version
        }
        if oldest > known { throw newerSchema(version, oldest: oldest, known: known) }
    }

    static func newerSchema(_ version: Int, oldest: Int, known: Int) -> SyncError {
        SyncError(
            "the server's schema is version \(version), newer than this beaconbench knows (\(known)); it takes"
                + " benches of version \(oldest) or later: upgrade beaconbench; nothing was changed, the rows here"
                + " are sent once it is")
    }
}

/// PostgreSQL's text form of a one-dimensional array, the value of one
/// array parameter: every element quoted (so no text is read as NULL or
/// as syntax), `"` and `\` escaped with a backslash, NULL unquoted, NUL
/// bytes (which PostgreSQL text cannot hold) left out.
enum PostgresArray {
    static func literal<S: Sequence>(_ elements: S) -> String where S.Element == String? {
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(4_096)
        var first = true
        for element in elements {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            guard var element else {
                bytes.append(contentsOf: "NULL".utf8)
                continue
            }
            bytes.append(UInt8(ascii: "\""))
            element.withUTF8 { utf8 in
                // PostgreSQL text cannot hold NUL: it is left out.
                for byte in utf8 where byte != 0 {
                    if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { bytes.append(UInt8(ascii: "\\")) }
                    bytes.append(byte)
                }
            }
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}
