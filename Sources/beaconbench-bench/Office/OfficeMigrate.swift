// `beaconbench-bench office migrate`: a server schema migration applied to a
// large server while benches sync (issue 31; docs/office.md, "Migrations on
// a live server").
//
//   office migrate --benches FILE… [--devices N] [--outcomes-per-device O]
//                  [--readings-per-device R] [--from-version V]
//
// A server of its own is brought to version V (default: the one before this
// program's newest) and filled in SQL with N devices of 100 synthetic
// benches and their history (devices, claims, assignments, runs, outcomes,
// readings, trips, events, incidents: the shapes sync writes). Then every
// bench FILE starts `beaconbench sync --to` at once, as child processes:
// the first to connect migrates (its transaction under lock_timeout, then
// the afterwork without blocking writes), the others wait for the
// migration's transaction and sync during the afterwork. A sampler polls
// `pg_stat_activity` every 100 ms for sessions waiting on a lock. Printed:
// the migration's tries and afterwork times (from the server's
// `beaconbench_afterwork`), the longest lock wait seen by any session, by
// kind, and the syncs' outcome; then each bench's rows are counted on the
// server against the bench.
import Foundation
import Inventory
import InventorySync
import LocalBus

func officeMigrate(_ arguments: [String]) async throws -> Never {
    var options = OfficeMigrateOptions()
    var rest = arguments[...]
    func number(_ option: String) -> Int {
        guard let text = rest.popFirst(), let value = Int(text), value >= 0 else {
            officeUsage("\(option) wants a whole number")
        }
        return value
    }
    while let option = rest.popFirst() {
        switch option {
        case "--devices": options.devices = number(option)
        case "--outcomes-per-device": options.outcomesPerDevice = number(option)
        case "--readings-per-device": options.readingsPerDevice = number(option)
        case "--from-version": options.fromVersion = number(option)
        case "--benches":
            while let file = rest.first, !file.hasPrefix("--") {
                options.benches.append(file)
                rest.removeFirst()
            }
        default: officeUsage("office migrate: unknown option '\(option)'")
        }
    }
    guard !options.benches.isEmpty else { officeUsage("office migrate: --benches FILE… is needed") }
    guard options.fromVersion < ServerAdministration.version else {
        officeUsage("office migrate: --from-version must be older than \(ServerAdministration.version)")
    }
    let result = try await officeMigrateRun(options)
    exit(result.lost == 0 && result.failedSyncs == 0 ? 0 : 1)
}

struct OfficeMigrateOptions {
    var devices = 100_000
    var outcomesPerDevice = 2
    var readingsPerDevice = 5
    var fromVersion = ServerAdministration.version - 1
    var benches: [String] = []
}

struct OfficeMigrateResult {
    var lost = 0
    var failedSyncs = 0
}

func officeMigrateRun(_ options: OfficeMigrateOptions) async throws -> OfficeMigrateResult {
    var result = OfficeMigrateResult()
    // Each line as it comes (a run takes minutes).
    let say: (String) -> Void = { line in print("office migrate: \(line)") }
    let beaconbench = try sibling("beaconbench")
    let server = try await LocalPostgres.create(port: 54_334)
    do {
        try await server.start()
        try await officeMigrateMeasure(options, server: server, beaconbench: beaconbench, say: say, into: &result)
    } catch {
        await server.remove()
        throw error
    }
    await server.remove()
    return result
}

func officeMigrateMeasure(
    _ options: OfficeMigrateOptions, server: LocalPostgres, beaconbench: String, say: (String) -> Void,
    into result: inout OfficeMigrateResult
) async throws {
    let url = server.url
    try ServerAdministration.migrate(url, through: options.fromVersion)
    let clock = ContinuousClock()
    var started = clock.now
    // The devices and the small tables first, then outcomes and readings in
    // two sessions, half the devices each (the fill is CPU-bound in the
    // server: two cores fill it in about half the time).
    _ = try await server.psql(OfficeServerFill.base(options))
    try await withThrowingTaskGroup(of: Void.self) { group in
        for part in OfficeServerFill.history(options, parts: 2) {
            group.addTask { _ = try await onThreadOfItsOwn { try server.psql(part) } }
        }
        try await group.waitForAll()
    }
    _ = try await server.psql("VACUUM ANALYZE")
    let filled = (clock.now - started).seconds
    // Counted, not computed: the parts together hold every device's rows once.
    let expected = [
        options.devices, options.devices * options.outcomesPerDevice, options.devices * options.readingsPerDevice,
    ]
    let counts =
        try await server.rows(
            "SELECT (SELECT count(*) FROM devices), (SELECT count(*) FROM outcomes), (SELECT count(*) FROM readings)"
        ).first ?? []
    guard counts == expected.map(String.init) else {
        throw LocalBusError(
            "office migrate: the fill holds \(counts) devices, outcomes, readings; expected \(expected)")
    }
    say(
        "filled a version-\(options.fromVersion) server: \(expected[0]) devices of 100 benches, "
            + "\(expected[1]) outcomes, \(expected[2]) readings"
            + " (counted) in \(String(format: "%.1f", filled)) s; "
            + "\(try await server.psql("SELECT pg_size_pretty(pg_database_size(current_database()))").trimmingWhitespace())"
    )

    // The sampler: sessions waiting on a lock, every 100 ms, until stopped.
    let sampler = LockWaitSampler(server: server)
    let samplerTask = Task.detached { sampler.run() }

    started = clock.now
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("office-migrate-\(getpid())").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let children = try options.benches.enumerated().map { index, file in
        try ChildProcess(
            beaconbench,
            ["--profiles", fleetProfileDirectory(options.benches), "--inventory", file, "sync", "--to", url],
            standardOutput: "\(directory)/\(index).out", standardError: "\(directory)/\(index).err")
    }
    var statuses: [Int32] = []
    for child in children {
        let exit = await onThreadOfItsOwn { child.waitForExit() }
        statuses.append(exit.status)
    }
    let syncSeconds = (clock.now - started).seconds
    sampler.stop()
    await samplerTask.value

    for (index, status) in statuses.enumerated() where status != 0 {
        result.failedSyncs += 1
        let error = (try? String(contentsOfFile: "\(directory)/\(index).err", encoding: .utf8)) ?? ""
        say("sync of \(options.benches[index]) exited \(status): \(error.suffix(300))")
    }
    say(
        "\(options.benches.count) benches synced across the migration to version \(ServerAdministration.version):"
            + " \(options.benches.count - result.failedSyncs) completed in \(String(format: "%.1f", syncSeconds)) s")
    for row in try await server.rows(
        "SELECT name, version, coalesce(seconds, 0) FROM beaconbench_afterwork ORDER BY done_at")
    where row.count == 3 {
        say("afterwork \(row[0]) (version \(row[1])): \(String(format: "%.2f", Double(row[2]) ?? 0)) s")
    }
    let waits = sampler.longest()
    say(
        "longest lock wait seen: on the migration's advisory lock \(String(format: "%.2f", waits.advisory)) s"
            + " (≈ the migration's transaction, DDL only); on a table or row "
            + "\(String(format: "%.2f", waits.relation)) s (\(waits.relationQuery)); \(waits.samples) samples")

    // Nothing lost: every bench's rows on the server, table by table.
    for file in options.benches {
        let inventory = try Inventory(path: file)
        let bench = try await inventory.benchID()
        for table in ["devices", "runs", "outcomes", "readings", "trips", "events", "incidents"] {
            let local = try await inventory.query("SELECT count(*) FROM \(table)").first?.first?.integer ?? -1
            // Counted per bench on the server and matched here: no value in the SQL.
            let counted = try await server.rows("SELECT bench_id, count(*) FROM \(table) GROUP BY bench_id")
            let remote = counted.first { $0.first == bench }.flatMap { $0.count == 2 ? Int($0[1]) : nil } ?? 0
            if local != remote {
                result.lost += 1
                say("\(file): \(table) holds \(local) rows, the server \(remote)")
            }
        }
    }
    say(result.lost == 0 ? "no write lost: every bench's rows are on the server" : "\(result.lost) tables differ")
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Polls the server for sessions waiting on a lock (psql, every 100 ms) and
/// keeps the longest wait seen of each kind.
final class LockWaitSampler: @unchecked Sendable {
    private let server: LocalPostgres
    private let lock = NSLock()
    private var stopped = false
    private var advisory = 0.0
    private var relation = 0.0
    private var relationQuery = ""
    private var samples = 0

    init(server: LocalPostgres) { self.server = server }

    func stop() { lock.withLock { stopped = true } }

    func run() {
        while !lock.withLock({ stopped }) {
            let rows =
                (try? server.rows(
                    """
                    SELECT wait_event, extract(epoch FROM clock_timestamp() - query_start)::float8::text,
                           left(regexp_replace(query, '\\s+', ' ', 'g'), 60)
                    FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()
                    """)) ?? []
            lock.withLock {
                samples += 1
                for row in rows where row.count == 3 {
                    let waited = Double(row[1]) ?? 0
                    if row[0] == "advisory" {
                        advisory = max(advisory, waited)
                    } else if waited > relation {
                        relation = waited
                        relationQuery = row[2]
                    }
                }
            }
            usleep(100_000)
        }
    }

    func longest() -> (advisory: Double, relation: Double, relationQuery: String, samples: Int) {
        lock.withLock { (advisory, relation, relationQuery.isEmpty ? "none" : relationQuery, samples) }
    }
}

/// The synthetic server fill: 100 benches' devices and history written in
/// SQL (no ledger: these benches never synced; the benches that sync during
/// the measurement are real inventories). Numbers only are interpolated.
enum OfficeServerFill {
    /// What every session needs first: its own helper functions.
    static let prelude = """
        SET synchronous_commit = off;
        CREATE FUNCTION pg_temp.ts(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
         $$ SELECT to_char(to_timestamp($1/1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;
        CREATE FUNCTION pg_temp.mac(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
         $$ SELECT 'C0:FE:' || upper(substr(lpad(to_hex($1),8,'0'),1,2)||':'||substr(lpad(to_hex($1),8,'0'),3,2)||':'||substr(lpad(to_hex($1),8,'0'),5,2)||':'||substr(lpad(to_hex($1),8,'0'),7,2)) $$;

        """

    /// Device `d`'s bench (d % 100) as its id.
    static let bench = "lpad(to_hex(d % 100), 8, '0') || '-0000-4000-8000-00000000f111'"

    /// Benches, runs, devices, claims, trips and events.
    static func base(_ options: OfficeMigrateOptions) -> String {
        let n = options.devices
        return prelude + """
            INSERT INTO benches SELECT lpad(to_hex(d), 8, '0') || '-0000-4000-8000-00000000f111', 'office-fill', pg_temp.ts(1795000000000)
              FROM generate_series(0, 99) d;
            INSERT INTO runs (bench_id, local_id, started_at, ended_at, command, status)
            SELECT \(bench), d / 100 + 1, pg_temp.ts(1733011200000 + d * 60000), pg_temp.ts(1733011200000 + d * 60000 + 600000),
              'run batches/provision-new.batch', 'finished'
              FROM generate_series(0::bigint, 99) d;
            INSERT INTO devices (bench_id, address, mac_ending, major, minor, model, serial, firmware, first_seen, last_seen,
              battery, battery_at, profile, config_cornering, config_braking, config_acceleration, config_duration, config_enable)
            SELECT \(bench), pg_temp.mac(d), lower(right(replace(pg_temp.mac(d), ':', ''), 8)), 100 + d / 65536, d % 65536,
              'SB-1', 'SN' || d, '2.' || (d % 3) || '.0', pg_temp.ts(1733011200000 + d * 600000 % 63072000000),
              pg_temp.ts(1733011200000 + d * 600000 % 63072000000 + 86400000), 20 + d % 80,
              pg_temp.ts(1733011200000 + d * 600000 % 63072000000 + 86400000), (ARRAY['van','car','truck'])[1 + d % 3],
              300, 300, 300, 400, 7
              FROM generate_series(0::bigint, \(n) - 1) d;
            INSERT INTO identity_claims SELECT 100 + d / 65536, d % 65536, pg_temp.mac(d), \(bench),
              pg_temp.ts(1733011200000 + d * 600000 % 63072000000) FROM generate_series(0::bigint, \(n) - 1) d;
            INSERT INTO trips SELECT \(bench), pg_temp.mac(d), 1733011200000 + d * 1000, 1733011200000 + d * 1000 + 1800000, 0,
              pg_temp.ts(1733011200000 + d * 1000 + 86400000) FROM generate_series(0::bigint, \(n) - 1) d WHERE d % 3 = 0;
            INSERT INTO events SELECT \(bench), pg_temp.mac(d), 1733011200000 + d * 1000, 'braking', 400, 500, 900, 100, 200, 300,
              0, pg_temp.ts(1733011200000 + d * 1000 + 86400000) FROM generate_series(0::bigint, \(n) - 1) d WHERE d % 2 = 0;
            """
    }

    /// Outcomes and readings, as `parts` scripts over consecutive ranges of
    /// devices (together: every device's, each row once), one session each.
    static func history(_ options: OfficeMigrateOptions, parts: Int) -> [String] {
        let n = options.devices
        let outcomes = options.outcomesPerDevice
        let readings = options.readingsPerDevice
        let per = (n + parts - 1) / max(parts, 1)
        return stride(from: 0, to: n, by: max(per, 1)).map { first in
            let last = min(first + per, n) - 1
            return prelude + """
                INSERT INTO outcomes (bench_id, local_id, run_id, device, step, status, detail, error, started_at, ended_at, duration_ms, retries)
                SELECT \(bench), (d / 100) * \(outcomes) + s + 1, 1, pg_temp.mac(d),
                  (ARRAY['battery','firmware','sync-time','calibrate','identity','apply','verify','info'])[1 + s % 8],
                  CASE WHEN (d * 7 + s) % 100 < 3 THEN 'failed' WHEN (d * 7 + s) % 100 < 5 THEN 'skipped' ELSE 'ok' END,
                  'detail', CASE WHEN (d * 7 + s) % 100 < 3 THEN 'timeout: org.bluez.Error.Failed' END,
                  pg_temp.ts(1733011200000 + ((d * \(max(outcomes, 1)) + s) * 63072000000 / (\(n)::bigint * \(max(outcomes, 1))))),
                  pg_temp.ts(1733011200000 + ((d * \(max(outcomes, 1)) + s) * 63072000000 / (\(n)::bigint * \(max(outcomes, 1)))) + 1500),
                  200 + (d + s) % 3000, (d + s) % 7 / 6
                  FROM generate_series(\(first)::bigint, \(last)) d, generate_series(0, \(outcomes) - 1) s;
                INSERT INTO readings (bench_id, local_id, device, at, battery, rssi, firmware)
                SELECT \(bench), (d / 100) * \(readings) + s + 1, pg_temp.mac(d),
                  pg_temp.ts(1733011200000 + s * 63072000000 / \(max(readings, 1)) + d % 86400000), 100 - s % 80 - d % 20,
                  -40 - (d + s) % 50, '2.' || (d % 3) || '.0'
                  FROM generate_series(\(first)::bigint, \(last)) d, generate_series(0, \(readings) - 1) s;
                """
        }
    }
}
