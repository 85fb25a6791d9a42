import Foundation
import Inventory
import LocalBus
import Profiles
import TestSupport
import Testing

@testable import Console
@testable import InventorySync

#if canImport(Glibc)
    import Glibc
#endif

/// A synthetic fleet written straight into a server's tables (SQL, no
/// bench): `n` devices over `b` benches, one in ten also on a second bench;
/// per device `outcomes` outcomes (3 % failed, 2 % skipped), `readings`
/// battery readings, 2 trips, 3 events, an incident per five devices, an
/// identity claim; an assignment per two devices, whose config (cornering
/// 999 against the profile's) drifts on one device in `driftEvery`.
enum OfficeFleet {
    static func sql(n: Int, b: Int, outcomes: Int = 5, readings: Int = 10, driftEvery: Int = 1) -> String {
        """
        CREATE OR REPLACE FUNCTION pg_temp.ts(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
         $$ SELECT to_char(to_timestamp($1/1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;
        CREATE OR REPLACE FUNCTION pg_temp.mac(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
         $$ SELECT 'C0:FE:' || upper(substr(lpad(to_hex($1),8,'0'),1,2)||':'||substr(lpad(to_hex($1),8,'0'),3,2)||':'
            ||substr(lpad(to_hex($1),8,'0'),5,2)||':'||substr(lpad(to_hex($1),8,'0'),7,2)) $$;
        CREATE OR REPLACE FUNCTION pg_temp.bench(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
         $$ SELECT lpad(to_hex($1), 8, '0') || '-0000-4000-8000-000000000000' $$;
        INSERT INTO benches SELECT pg_temp.bench(b), 'host' || b, NULL FROM generate_series(0, \(b) - 1) b
            ON CONFLICT DO NOTHING;
        INSERT INTO devices (bench_id, address, mac_ending, major, minor, model, serial, hardware_revision, firmware,
          first_seen, last_seen, battery, battery_at, calibrated, calibrated_at, calibration_x, calibration_y,
          calibration_z, time_offset_ms, profile, config_cornering, config_braking, config_acceleration,
          config_duration, config_enable, config_read_at, identity_at, description_at, firmware_at,
          calibration_read_at, time_offset_at)
        SELECT pg_temp.bench((d + k) % \(b)), pg_temp.mac(d), lower(right(replace(pg_temp.mac(d), ':', ''), 8)),
          100 + d / 65536, d % 65536, 'SB-1', 'SN' || d, 'B', '2.' || (d % 3) || '.0',
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000),
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000 + 86400000 * (1 + k)),
          20 + d % 80, pg_temp.ts(1733011200000 + d * 600000 % 63072000000 + 86400000 * (1 + k)), 1,
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000), 1, -2, 1000, 5,
          (ARRAY['van','car','truck','bus','motorcycle'])[1 + d % 5],
          CASE WHEN d % \(driftEvery) = 0 THEN 999 ELSE 300 END, 300, 300, 400, 7,
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000 + 3600000),
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000 + 3600000),
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000), pg_temp.ts(1733011200000 + d * 600000 % 63072000000),
          pg_temp.ts(1733011200000 + d * 600000 % 63072000000), pg_temp.ts(1733011200000 + d * 600000 % 63072000000)
        FROM generate_series(0::bigint, \(n) - 1) d, generate_series(0, 1) k WHERE k = 0 OR d % 10 = 0;
        INSERT INTO identity_claims SELECT 100 + d / 65536, d % 65536, pg_temp.mac(d), pg_temp.bench(d % \(b)),
            pg_temp.ts(1733011200000 + d * 600000 % 63072000000) FROM generate_series(0::bigint, \(n) - 1) d;
        INSERT INTO fleet_assignments (address, profile, major, minor_policy, minor, overrides, assigned_at,
            assigned_by, origin)
        SELECT pg_temp.mac(d), (ARRAY['van','car','truck','bus','motorcycle'])[1 + d % 5], NULL, 'keep', NULL, '{}',
            pg_temp.ts(1733011200000 + d * 600000 % 63072000000), 'office@hq', 'office'
        FROM generate_series(0::bigint, \(n) - 1) d WHERE d % 2 = 0;
        INSERT INTO outcomes (bench_id, local_id, run_id, device, step, status, detail, error, started_at, ended_at,
            duration_ms)
        SELECT pg_temp.bench(d % \(b)), (d / \(b)) * \(outcomes) + s + 1, 1, pg_temp.mac(d),
          (ARRAY['battery','firmware','sync-time','calibrate','identity'])[1 + s % 5],
          CASE WHEN (d * 7 + s) % 100 < 3 THEN 'failed' WHEN (d * 7 + s) % 100 < 5 THEN 'skipped' ELSE 'ok' END,
          'detail', CASE WHEN (d * 7 + s) % 100 < 3 THEN 'timeout' END,
          pg_temp.ts(1733011200000 + ((d * \(outcomes) + s) * 63072000000 / (\(n) * \(outcomes)))),
          pg_temp.ts(1733011200000 + ((d * \(outcomes) + s) * 63072000000 / (\(n) * \(outcomes))) + 1500),
          200 + (d + s) % 3000
        FROM generate_series(0::bigint, \(n) - 1) d, generate_series(0, \(outcomes) - 1) s;
        INSERT INTO readings SELECT pg_temp.bench(d % \(b)), (d / \(b)) * \(readings) + s + 1, pg_temp.mac(d),
          pg_temp.ts(1733011200000 + s * 63072000000 / \(readings) + d % 86400000), 100 - s % 80 - d % 20,
          -40 - (d + s) % 50, '2.0.0'
        FROM generate_series(0::bigint, \(n) - 1) d, generate_series(0, \(readings) - 1) s;
        INSERT INTO trips (bench_id, device, start_ms, end_ms, beacon_index, pulled_at)
        SELECT pg_temp.bench(d % \(b)), pg_temp.mac(d), 1733011200000 + s * 31536000000 + d * 1000,
          1733011200000 + s * 31536000000 + d * 1000 + 1800000, s,
          pg_temp.ts(1733011200000 + s * 31536000000 + d * 1000 + 86400000)
        FROM generate_series(0::bigint, \(n) - 1) d, generate_series(0, 1) s;
        INSERT INTO events (bench_id, device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg,
            beacon_index, pulled_at)
        SELECT pg_temp.bench(d % \(b)), pg_temp.mac(d), 1733011200000 + s * 21024000000 + d * 1000,
          (ARRAY['cornering','braking','acceleration'])[1+s], 400, 500, 900, 100, 200, 300, s,
          pg_temp.ts(1733011200000 + s * 21024000000 + d * 1000 + 86400000)
        FROM generate_series(0::bigint, \(n) - 1) d, generate_series(0, 2) s;
        INSERT INTO incidents (bench_id, device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg,
            samples, pulled_at)
        SELECT pg_temp.bench(d % \(b)), pg_temp.mac(d), 1, 1733011200000 + d * 1000, 3000, 2000, 100, 200, 300, '[]',
          pg_temp.ts(1733011200000 + d * 1000 + 86400000)
        FROM generate_series(0::bigint, \(n) - 1) d WHERE d % 5 = 0;
        ANALYZE;
        """
    }

    /// Records the benches pulled twice, at different times (the first
    /// pull is the one listed), and records whose own time is no wall
    /// clock (listed by `pulled_at`; one whose `pulled_at` is no time).
    static let awkwardRecords = """
        INSERT INTO trips (bench_id, device, start_ms, end_ms, beacon_index, pulled_at)
        SELECT '00000001-0000-4000-8000-000000000000', device, start_ms, end_ms, beacon_index,
            '2024-01-01T00:00:00.000Z'
        FROM trips WHERE bench_id = '00000000-0000-4000-8000-000000000000' AND device LIKE '%0'
        ON CONFLICT DO NOTHING;
        INSERT INTO trips (bench_id, device, start_ms, end_ms, beacon_index, pulled_at) VALUES
            ('00000000-0000-4000-8000-000000000000', 'C0:FE:00:00:00:01', 5000, 9000, 7, '2029-03-04T05:06:07.5Z'),
            ('00000001-0000-4000-8000-000000000000', 'C0:FE:00:00:00:01', 5000, 9000, 7, '2029-03-04T05:06:07.5Z'),
            ('00000000-0000-4000-8000-000000000000', 'C0:FE:00:00:00:02', 6000, 9000, 8, 'not a time'),
            ('00000001-0000-4000-8000-000000000000', 'C0:FE:00:00:00:02', 6000, 9000, 8, NULL),
            ('00000002-0000-4000-8000-000000000000', 'C0:FE:00:00:00:03', 7000, 9000, 9, NULL);
        INSERT INTO events (bench_id, device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg,
            beacon_index, pulled_at)
        SELECT '00000003-0000-4000-8000-000000000000', device, at_ms, type, duration_ms, average_mg, maximum_mg,
            x_mg, y_mg, z_mg, beacon_index, '2023-06-01T00:00:00Z'
        FROM events WHERE device LIKE '%5' AND bench_id <> '00000003-0000-4000-8000-000000000000'
        ON CONFLICT DO NOTHING;
        INSERT INTO incidents (bench_id, device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg,
            samples, pulled_at) VALUES
            ('00000000-0000-4000-8000-000000000000', 'C0:FE:00:00:00:04', 2, 12, 1, 1, 1, 1, 1, '[]',
             '2030-12-31T23:59:59Z');
        ANALYZE;
        """
}

/// Today's (before schema 8) records query, as an older beaconbench runs
/// it: the reference the stored sort key must list exactly as, and proof
/// that an older binary's `records list` still runs on a migrated server.
private func distinctOnQuery(_ table: String) -> String {
    let (columns, key, order, own): (String, String, String, String) =
        switch table {
        case "trips":
            (
                "device, start_ms, end_ms, beacon_index", "device, start_ms, end_ms",
                "sort_ms DESC, device, start_ms DESC", "start_ms"
            )
        case "events":
            (
                "device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg, beacon_index",
                "device, at_ms, type, beacon_index",
                "sort_ms DESC, device, at_ms DESC, beacon_index DESC", "at_ms"
            )
        default:
            (
                "device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg, samples",
                "device, incident_id, at_ms",
                "sort_ms DESC, device, at_ms DESC, incident_id DESC", "at_ms"
            )
        }
    return """
        SELECT \(columns), pulled_at, bench_id FROM (
            SELECT DISTINCT ON (\(key)) *,
                CASE WHEN \(own) >= $6::bigint THEN \(own)
                    ELSE (extract(epoch FROM (m[1] || '-01-01T00:00:00Z')::timestamptz
                    + make_interval(months => m[2]::int - 1, days => m[3]::int - 1, hours => m[4]::int,
                        mins => m[5]::int, secs => (m[6] || '.' || coalesce(m[7], '0'))::float8))
                    * 1000)::bigint END AS sort_ms
            FROM \(table) LEFT JOIN LATERAL regexp_match(pulled_at,
                '^([1-9][0-9]{3})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.]([0-9]{1,9}))?Z$')
                AS m ON true
            WHERE $1::text IS NULL OR device = upper($1)
               OR device IN (SELECT address FROM devices WHERE mac_ending = lower($1))
            ORDER BY \(key), pulled_at, bench_id
        ) AS t
        WHERE ($2::bigint IS NULL OR sort_ms >= $2::bigint) AND ($3::bigint IS NULL OR sort_ms < $3::bigint)
          AND ($4::text IS NULL OR pulled_at >= $4)
        ORDER BY \(order) LIMIT $5::bigint
        """
}

/// The office's reads on a server of fleet shape (issue 31): audit's merge
/// by address, the stored record sort key, `inventory list --limit`, and
/// every office query's plan on its index.
@Suite("the office's reads at fleet scale", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(20)))
struct OfficeReadsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static var profiles: String { root.appendingPathComponent("profiles").path }

    /// A scene with the schema made by a bench's sync and `fleet` seeded.
    static func withFleet(_ name: String, _ fleet: String, _ body: (SyncScene) async throws -> Void) async throws {
        try await withSyncScene(name) { scene in
            try await scene.makeSchema()
            _ = try await scene.server.psql(fleet)
            try await body(scene)
        }
    }

    static func office(_ scene: SyncScene, _ arguments: [String]) async throws -> ToolOutput {
        try await runTool(
            builtProduct("beaconbench"),
            ["--profiles", profiles, "--inventory", scene.server.url] + arguments,
            environment: [
                "NO_COLOR": "1", "HOME": scene.directory, "XDG_DATA_HOME": scene.directory + "/data",
                "XDG_CONFIG_HOME": scene.directory + "/config",
            ],
            timeout: 600)
    }

    /// 20,000 devices, 10,000 assigned and every one drifting: the audit's
    /// drift findings join their reports by address (it was a scan of every
    /// report per finding: minutes at this size, hours at a million).
    @Test func anAuditWhereEveryAssignedDeviceDriftsIsLinear() async throws {
        try await Self.withFleet("office-audit", OfficeFleet.sql(n: 20_000, b: 10, outcomes: 1, readings: 1)) {
            scene in
            let started = ContinuousClock.now
            let audit = try await Self.office(scene, ["--json", "audit"])
            let took = ContinuousClock.now - started
            #expect(audit.status == 2, "findings: exit 2 (\(audit.stderr.suffix(500)))")
            let lines = audit.stdout.split(separator: "\n")
            let drifting = lines.filter { $0.contains("its assignment says") }
            #expect(drifting.count >= 10_000, "every assigned device's drift is reported: \(drifting.count)")
            // Linear: seconds (debug build). The quadratic merge took minutes here.
            #expect(took < .seconds(90), "audit of 20,000 devices took \(took)")
            print("audit of 20,000 devices (10,000 drifting): \(took), \(audit.stdout.utf8.count) bytes")
        }
    }

    /// The stored sort key lists exactly what the DISTINCT ON query did —
    /// the first pull of a record pulled twice, a record whose own time is
    /// no wall clock by its `pulled_at`, filters by time and device — and
    /// that older query still runs on the migrated server. The trigger
    /// keeps the key on insert and update; the migration backfills it and
    /// runs again harmlessly.
    @Test func recordsListByTheStoredKeyAsBefore() async throws {
        try await Self.withFleet("office-records", OfficeFleet.sql(n: 3_000, b: 4, outcomes: 1, readings: 1)) {
            scene in
            let server = scene.server
            _ = try await server.psql(OfficeFleet.awkwardRecords)
            // Backfill: the key emptied (trigger off) and its afterwork
            // forgotten, as on a server just migrated: until the batched
            // backfill is done, the reads compute the key where it is
            // missing (below, `backfilled: false`); the backfill then
            // fills it and the reads use it as stored.
            _ = try await server.psql(
                """
                ALTER TABLE trips DISABLE TRIGGER trips_listed; UPDATE trips SET listed_ms = NULL;
                ALTER TABLE trips ENABLE TRIGGER trips_listed;
                DELETE FROM beaconbench_afterwork WHERE name = 'trips_listed_ms';
                """)
            let url = server.url
            let whileEmpty = try await onThreadOfItsOwn {
                () throws -> (done: Bool, now: [[String?]], before: [[String?]]) in
                let connection = try PostgresConnection(url)
                let window: [String?] = [nil, nil, nil, nil, "100000"]
                return (
                    try ServerMigrations.afterworkDone(connection, OfficeReads.backfills),
                    try connection.exec(OfficeReads.trips(backfilled: false), window),
                    try connection.exec(
                        distinctOnQuery("trips"), window + [String(RecordTime.wallClockFloor)])
                )
            }
            #expect(!whileEmpty.done, "the forgotten backfill is seen as not done")
            #expect(whileEmpty.now.count > 100 && whileEmpty.now == whileEmpty.before, "trips while the key is empty")
            try await onThreadOfItsOwn {
                let connection = try PostgresConnection(url)
                try connection.exec("SET client_min_messages TO warning")
                #expect(try ServerMigrations.finishAfterwork(connection).map(\.name) == ["trips_listed_ms"])
                #expect(try ServerMigrations.afterworkDone(connection, OfficeReads.backfills))
            }
            for (table, own) in [("trips", "start_ms"), ("events", "at_ms"), ("incidents", "at_ms")] {
                await #expect(
                    try server.count(
                        "SELECT count(*) FROM \(table) WHERE listed_ms IS DISTINCT FROM beaconbench_listed_ms(\(own), pulled_at)"
                    ) == 0, "\(table): every listed_ms as computed")
            }
            await #expect(try server.count("SELECT count(*) FROM trips WHERE listed_ms IS NULL") == 3)
            _ = try await server.psql(
                "UPDATE trips SET pulled_at = '2031-01-01T00:00:00Z' WHERE device = 'C0:FE:00:00:00:01' AND start_ms = 5000"
            )
            await #expect(
                try server.count(
                    "SELECT count(*) FROM trips WHERE device = 'C0:FE:00:00:00:01' AND start_ms = 5000 AND listed_ms = 1924992000000"
                ) == 2, "an update keeps the key")

            let connection = try PostgresConnection(server.url)
            let floor = String(RecordTime.wallClockFloor)
            let windows: [[String?]] = [
                [nil, nil, nil, nil, "101"],
                [nil, nil, nil, nil, "100000"],
                [nil, "1740000000000", "1790000000000", nil, "57"],
                [nil, nil, nil, "2025-06-01T00:00:00Z", "300"],
                ["C0:FE:00:00:00:0A", nil, nil, nil, "10"],
                ["0000000a", nil, nil, nil, "10"],
                ["C0:FE:00:00:00:02", nil, nil, nil, "10"],
            ]
            for (table, query) in [
                ("trips", OfficeReads.trips()), ("events", OfficeReads.events()),
                ("incidents", OfficeReads.incidents()),
                ("trips", OfficeReads.trips(backfilled: false)), ("events", OfficeReads.events(backfilled: false)),
                ("incidents", OfficeReads.incidents(backfilled: false)),
            ] {
                for window in windows {
                    let before = try connection.exec(distinctOnQuery(table), window + [floor])
                    let now = try connection.exec(query, window)
                    if window[4] == "100000" { #expect(before.count > 100, "\(table): rows to compare") }
                    #expect(now == before, "\(table) \(window): \(now.count) rows, \(before.count) before")
                }
            }
        }
    }

    /// `inventory list --limit N --after ADDRESS` pages through the fleet:
    /// the pages joined are the whole list; each says where the next
    /// starts; bad values are refused naming the option.
    @Test func inventoryListPagesByAddress() async throws {
        try await Self.withFleet("office-list", OfficeFleet.sql(n: 250, b: 3, outcomes: 1, readings: 1)) { scene in
            let whole = try await Self.office(scene, ["--json", "inventory", "list"])
            #expect(whole.status == 0, "\(whole.stderr)")
            let all = whole.stdout.split(separator: "\n").filter { $0.contains("\"kind\":\"device\"") }
            #expect(all.count == 250)
            var paged: [Substring] = []
            var after: String?
            var pages = 0
            while pages < 10 {
                let page = try await Self.office(
                    scene, ["--json", "inventory", "list", "--limit", "100"] + (after.map { ["--after", $0] } ?? []))
                #expect(page.status == 0, "\(page.stderr)")
                let lines = page.stdout.split(separator: "\n").filter { $0.contains("\"kind\":\"device\"") }
                paged += lines
                pages += 1
                guard let range = page.stderr.range(of: "--after ") else { break }
                after = String(page.stderr[range.upperBound...].prefix(17))
                #expect(lines.last?.contains(after ?? "-") == true, "the next page starts after the last shown")
            }
            #expect(pages == 3, "250 devices in pages of 100")
            #expect(paged == all, "the pages joined are the whole list, in order")

            for (arguments, option) in [
                (["--limit", "0"], "--limit"), (["--limit", "many"], "--limit"), (["--after", "C0:FE"], "--after"),
                (["--after", "zz:zz:zz:zz:zz:zz"], "--after"),
            ] {
                let refused = try await Self.office(scene, ["inventory", "list"] + arguments)
                #expect(refused.status != 0, "\(arguments) refused")
                #expect(refused.stderr.contains(option), "\(arguments): \(refused.stderr)")
            }
        }
    }

    /// Every office query (`OfficeReads.queries`, the list docs/office.md
    /// shows) on a server of 20,000 devices: its plan uses the index named,
    /// and where rows are promised as a stream or an early-stopping top-N,
    /// no Sort. The planner chooses freely (no `enable_seqscan = off`).
    @Test func everyOfficeQueryUsesItsIndex() async throws {
        try await Self.withFleet("office-explain", OfficeFleet.sql(n: 20_000, b: 10)) { scene in
            _ = try await scene.server.psql(OfficeFleet.awkwardRecords)
            _ = try await scene.server.psql("VACUUM ANALYZE")
            let connection = try PostgresConnection(scene.server.url)
            let queries = OfficeReads.queries(
                since: "2026-06-01T00:00:00.000Z", address: "C0:FE:00:00:27:10", sinceMs: 1_780_000_000_000)
            for query in queries {
                let rows = try connection.exec("EXPLAIN (FORMAT JSON) " + query.sql, query.parameters)
                let text = try #require(rows.first?.first ?? nil, "\(query.read): a plan")
                let plan = try JSONSerialization.jsonObject(with: Data(text.utf8))
                var indexes: [String] = []
                var sorts: [String] = []
                func walk(_ node: Any) {
                    if let list = node as? [Any] { list.forEach(walk) }
                    guard let node = node as? [String: Any] else { return }
                    if let index = node["Index Name"] as? String { indexes.append(index) }
                    if let type = node["Node Type"] as? String, type.contains("Sort") { sorts.append(type) }
                    if let inner = node["Plan"] { walk(inner) }
                    if let inner = node["Plans"] { walk(inner) }
                }
                walk(plan)
                #expect(
                    !Set(indexes).isDisjoint(with: [query.index] + query.or),
                    "\(query.read): uses \(([query.index] + query.or).joined(separator: " or ")); plan: \(text.prefix(3000))"
                )
                if query.noSort {
                    #expect(sorts.isEmpty, "\(query.read): no sort; plan: \(text.prefix(3000))")
                }
            }
        }
    }

    /// Anomalies for the streamed reads to meet as the array reads did: two
    /// devices in service holding one identity (three holders of another),
    /// vans converged to their assignment (the rest drift),
    /// a device without profile and one whose stored battery fails its
    /// check, assignments of devices the fleet does not hold (before the
    /// first, in the middle — its device deleted — and after the last),
    /// assignment rows the checks refuse (an unknown profile; one device
    /// named twice in other letter cases; no address at all).
    static let anomalies = """
        UPDATE devices SET config_cornering = 320, config_braking = 330, config_acceleration = 380,
            config_duration = 350, config_enable = 5, major = 200
            WHERE profile = 'van' AND address < 'C0:FE:00:00:01:00';
        UPDATE identity_claims SET major = 200 WHERE address IN (SELECT address FROM devices
            WHERE profile = 'van' AND address < 'C0:FE:00:00:01:00');
        UPDATE devices SET major = 100, minor = 7 WHERE address IN ('C0:FE:00:00:00:0C', 'C0:FE:00:00:00:40');
        UPDATE devices SET major = 101, minor = 9
            WHERE address IN ('C0:FE:00:00:00:11', 'C0:FE:00:00:01:00', 'C0:FE:00:00:02:02');
        UPDATE devices SET profile = NULL WHERE address = 'C0:FE:00:00:00:21';
        UPDATE devices SET battery = 300 WHERE address = 'C0:FE:00:00:00:22';
        DELETE FROM devices WHERE address = 'C0:FE:00:00:00:0A';
        INSERT INTO fleet_assignments (address, profile, major, minor_policy, minor, overrides, assigned_at,
            assigned_by, origin) VALUES
            ('C0:FD:00:00:00:01', 'van', NULL, 'keep', NULL, '{}', '2026-01-01T00:00:00.000Z', 'office@hq', 'office'),
            ('C0:FF:00:00:00:01', 'car', NULL, 'keep', NULL, '{}', '2026-01-01T00:00:00.000Z', 'office@hq', 'office'),
            ('c0:fe:00:00:00:1e', 'car', NULL, 'keep', NULL, '{}', '2026-01-01T00:00:00.000Z', 'office@hq', 'office'),
            ('not an address', 'car', NULL, 'keep', NULL, '{}', '2026-01-01T00:00:00.000Z', 'office@hq', 'office');
        UPDATE fleet_assignments SET profile = 'no-such-profile' WHERE address = 'C0:FE:00:00:00:14';
        ANALYZE;
        """

    /// The array reads' output, rendered in process as the commands
    /// rendered it before they streamed: stdout lines (people or JSON).
    static func arrayOutput(_ url: String, _ command: String, json: Bool) async throws -> [String] {
        let profiles = try ProfileLoader.loadAll(from: [Self.profiles])
        let caught = RendererTests.Caught()
        let renderer = Renderer(terminal: caught.terminal(), json: json)
        switch command {
        case "drift":
            renderer.render(DriftRow.table(try ServerAssignments.drift(url: url, profiles: profiles).findings))
        case "audit":
            let subjects = try await ServerInventory(url: url).auditSubjects()
            let drift = try ServerAssignments.drift(url: url, profiles: profiles).findings
            let reports = Session.merging(
                drift, into: Auditor.auditFleet(subjects, profiles: profiles), chosen: nil)
            renderer.render(
                AuditDocument(reports: reports, source: .inventory, rewrites: try ServerLedger.rewrites(url: url)))
        default:
            renderer.render(DeviceLine.list(try await ServerInventory(url: url).devices(), in: url))
        }
        return caught.lines.filter { $0.stream == 1 }.map(\.text)
    }

    /// `inventory list`, `drift` and `audit` stream (cursors of one
    /// snapshot, each row written as it is folded), and what they write is
    /// what the array reads wrote — text and JSON, byte for byte — on a
    /// fleet of drifting, converged, unassigned and problem devices.
    @Test func theStreamedReadsWriteWhatTheArrayReadsWrote() async throws {
        try await Self.withFleet(
            "office-streamed", OfficeFleet.sql(n: 600, b: 3, outcomes: 1, readings: 1, driftEvery: 3)
        ) { scene in
            _ = try await scene.server.psql(Self.anomalies)
            for command in [["inventory", "list"], ["drift"], ["audit"]] {
                for json in [false, true] {
                    let run = try await Self.office(scene, (json ? ["--json"] : []) + command)
                    // Exit 2: findings, drift, or the stored battery that fails its check.
                    #expect(run.status == 2, "\(command): \(run.stderr.suffix(500))")
                    if command == ["inventory", "list"] {
                        #expect(run.stderr.contains("stored value: devices row C0:FE:00:00:00:22, battery: 300"))
                    }
                    // The stored value's JSON line comes after the command's output
                    // (Session.reportStoredFindings, for either read).
                    let streamed = run.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                        .filter { !$0.contains("\"kind\":\"stored_value\"") }
                    let before = try await Self.arrayOutput(scene.server.url, command[0], json: json) + [""]
                    #expect(before.count > 300, "\(command) json \(json): \(before.count) lines to compare")
                    #expect(streamed.count == before.count, "\(command) json \(json): \(streamed.count) lines")
                    for (index, (now, then)) in zip(streamed, before).enumerated() where now != then {
                        Issue.record("\(command) json \(json), line \(index): \(now) ≠ \(then)")
                        break
                    }
                    // The fleet's anomalies are in it.
                    if command == ["audit"], !json {
                        for expected in [
                            "duplicate-identity", "C0:FD:00:00:00:01", "C0:FF:00:00:00:01", "C0:FE:00:00:00:0A",
                            "not an address", "c0:fe:00:00:00:1e", "no-such-profile",
                        ] {
                            #expect(run.stdout.contains(expected), "audit names \(expected)")
                        }
                    }
                }
            }
            // drift's count on standard error, as before.
            let profiles = try ProfileLoader.loadAll(from: [Self.profiles])
            let (findings, assigned, _) = try ServerAssignments.drift(url: scene.server.url, profiles: profiles)
            let drifting = Set(findings.map(\.device)).count
            let run = try await Self.office(scene, ["drift"])
            #expect(run.stderr.contains("\(drifting) of \(assigned) assigned devices drift"), "\(run.stderr)")
            #expect(drifting < assigned - 10, "some assigned devices have converged: \(drifting) of \(assigned)")
        }
    }

    /// Peak memory of `inventory list`, `drift` and `audit` (people's
    /// tables, two passes) does not grow with the fleet: each in a child
    /// process whose peak RSS `wait4` reports (`ReportMemoryTests.measure`),
    /// at 5,000 and at 20,000 devices (half assigned, every one of those
    /// drifting); the larger no more than 8 MB above the smaller. The
    /// arrays they replaced grew by 1.8–8 KB per device (+27–120 MB here).
    @Test func peakMemoryOfTheStreamedReadsDoesNotGrowWithTheFleet() async throws {
        try await withSyncScene("office-memory") { scene in
            try await scene.makeSchema()
            var peaks: [String: [Double]] = [:]
            for devices in [5_000, 20_000] {
                _ = try await scene.server.psql(
                    """
                    TRUNCATE devices, identity_claims, fleet_assignments, outcomes, readings, trips, events, incidents;
                    """ + OfficeFleet.sql(n: devices, b: 4, outcomes: 1, readings: 1))
                for command in [["inventory", "list"], ["drift"], ["audit"]] {
                    let run = try await runTool(
                        "/usr/bin/python3",
                        [
                            "-c", ReportMemoryTests.measure, builtProduct("beaconbench"), "--profiles", Self.profiles,
                            "--inventory", scene.server.url,
                        ] + command,
                        environment: [
                            "NO_COLOR": "1", "HOME": scene.directory, "XDG_DATA_HOME": scene.directory + "/data",
                            "XDG_CONFIG_HOME": scene.directory + "/config",
                        ], timeout: 600)
                    #expect([0, 2].contains(run.status), "\(command): \(run.stderr.suffix(500))")
                    let rows = run.stdout.split(separator: "\n").count
                    #expect(rows > devices / 2, "\(command): \(rows) lines for \(devices) devices")
                    let peak = run.stderr.split(separator: "\n").last { $0.hasPrefix("peak ") }
                        .flatMap { Double($0.dropFirst(5)) }
                    let mib = (peak ?? .infinity) / 1024
                    print("\(command.joined(separator: " ")) of \(devices) devices: peak RSS \(mib) MiB")
                    peaks[command.joined(separator: " "), default: []].append(mib)
                }
            }
            for (command, mib) in peaks {
                #expect(mib.allSatisfy { $0 < 128 }, "\(command): peak RSS \(mib) MiB, the bound is 256")
                #expect(mib[1] < mib[0] + 8, "\(command): peak RSS grew from \(mib[0]) to \(mib[1]) MiB, 4 × the fleet")
            }
        }
    }

    /// A beaconbench connection waiting for a lock in the middle of
    /// declaring a cursor, other than `not`: its pid (waits at most two
    /// minutes, then fails naming what it waited for).
    static func declaring(_ scene: SyncScene, not: String? = nil) async throws -> String {
        var pid = ""
        try await waitUntil("a beaconbench connection declaring a cursor, waiting for a lock") {
            pid = try await scene.server.psql(
                """
                SELECT pid FROM pg_stat_activity WHERE application_name = 'beaconbench' AND wait_event_type = 'Lock'
                  AND query LIKE 'DECLARE%' AND pid::text <> '\(not ?? "")' LIMIT 1
                """
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            return !pid.isEmpty
        }
        return pid
    }

    /// A connection lost before the streamed `inventory list` wrote
    /// anything (its first pass's cursor waiting for a lock the test holds
    /// on `devices`): read again once from the beginning, the whole list
    /// written once; lost twice: exit 3, nothing written.
    @Test func aStreamedReadLostBeforeItWroteStartsAgainOnceThenFails() async throws {
        try await Self.withFleet("office-lost", OfficeFleet.sql(n: 300, b: 3, outcomes: 1, readings: 1)) { scene in
            let whole = try await Self.office(scene, ["inventory", "list"])
            #expect(whole.status == 0, "\(whole.stderr)")
            #expect(whole.stdout.split(separator: "\n").count == 301)
            for lostTwice in [false, true] {
                let url = scene.server.url
                let lock = try await onThreadOfItsOwn { try TableLock(url: url, "devices", mode: "ACCESS EXCLUSIVE") }
                async let run = Self.office(scene, ["inventory", "list"])
                let first = try await Self.declaring(scene)
                _ = try await scene.server.psql("SELECT pg_terminate_backend(\(first))")
                let second = try await Self.declaring(scene, not: first)
                if lostTwice { _ = try await scene.server.psql("SELECT pg_terminate_backend(\(second))") }
                await onThreadOfItsOwn { lock.release() }
                let ended = try await run
                if lostTwice {
                    #expect(ended.status == 3, "\(ended.stderr)")
                    #expect(ended.stdout.isEmpty, "nothing written: \(ended.stdout.prefix(300))")
                    #expect(ended.stderr.contains("connection"), "\(ended.stderr)")
                } else {
                    #expect(ended.status == 0, "\(ended.stderr)")
                    #expect(ended.stdout == whole.stdout, "the whole list, once")
                    #expect(ended.stderr == whole.stderr)
                }
            }
        }
    }
}

/// The audit's drift merge at fleet size, in process: linear in findings
/// and reports (it was a scan of every report per finding: with the sizes
/// here, 3·10¹⁰ comparisons, hours; now a dictionary, about a second).
@Suite("audit: drift findings join their reports by address", .timeLimit(.minutes(5)))
struct AuditDriftMergeTests {
    @Test func twoHundredThousandReportsThreeHundredThousandFindings() {
        func address(_ number: Int) -> String {
            let hex = String(number, radix: 16, uppercase: true)
            let digits = String(repeating: "0", count: max(0, 8 - hex.count)) + hex
            let octets = stride(from: 0, to: 8, by: 2).map { offset -> String in
                let start = digits.index(digits.startIndex, offsetBy: offset)
                return String(digits[start..<digits.index(start, offsetBy: 2)])
            }
            return "C0:FE:" + octets.joined(separator: ":")
        }
        var reports = (0..<200_000).map { AuditReport(address: address($0), profile: "van", findings: []) }
        // A second report of one address: the first takes the findings.
        reports.append(AuditReport(address: address(4), profile: "car", findings: []))
        // Two findings per even device (150,000 devices: 1,000 the audit has no report of), in address order.
        let findings = stride(from: 0, to: 300_000, by: 2).flatMap { device in
            ["cornering", "braking"].map {
                DriftFinding(
                    device: address(device < 298_000 ? device : 1_000_000 + device), field: $0, desired: "300",
                    observed: "999", observedAt: "2026-01-01T00:00:00.000Z")
            }
        }
        let started = ContinuousClock.now
        let merged = Session.merging(findings, into: reports, chosen: nil)
        let took = ContinuousClock.now - started
        #expect(took < .seconds(60), "the merge took \(took)")
        #expect(merged.count == 200_001 + 50_000, "a new report per device without one")
        #expect(merged[0].findings.count == 2 && merged[1].findings.isEmpty && merged[199_998].findings.count == 2)
        #expect(merged[4].findings.count == 2 && merged[200_000].findings.isEmpty, "the first report of an address")
        #expect(merged[200_001].address == address(200_000) && merged[200_001].profile == nil)
        #expect(merged.last?.address == address(1_000_000 + 299_998))
        #expect(merged.map(\.findings.count).reduce(0, +) == findings.count)

        let chosen = Session.merging(findings, into: reports, chosen: [address(2), address(3)])
        #expect(chosen.count == reports.count && chosen[2].findings.count == 2)
        #expect(chosen.map(\.findings.count).reduce(0, +) == 2)
    }
}
