import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

/// `report --inventory postgresql://…` streams (docs/report.md, "At fleet
/// scale"): its peak memory does not grow with the fleet. The same report
/// of a server with 2,500 devices and 100,000 readings, then of one four
/// times as large, each in a child process whose peak RSS `wait4` reports
/// (through a small python3 parent, `measure`);
/// both well under the 256 MB bound, the larger no more than a few MB above
/// the smaller (the arrays it replaced grew about 600 B per reading: +180 MB
/// here). And a connection lost in the middle of the streams: read again
/// once from the beginning, then exit 3 with no page.
@Suite(
    "the fleet report's memory at fleet scale", .serialized, .exclusive(.postgreSQL, .heavyLoad),
    .timeLimit(.minutes(10)))
struct ReportMemoryTests {
    /// A fleet written straight into the server's tables: `devices`
    /// devices on 4 benches (a tenth also on a second), one identity claim
    /// each, 20 step outcomes each (3 % failed, 2 % skipped) and `readings`
    /// battery readings each, over two years.
    static func fleetSQL(devices n: Int, readings r: Int) -> String {
        let b = 4
        return """
            \\set ON_ERROR_STOP on
            TRUNCATE devices, runs, outcomes, readings, identity_claims;
            CREATE FUNCTION pg_temp.ts(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
             $$ SELECT to_char(to_timestamp($1/1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;
            CREATE FUNCTION pg_temp.mac(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
             $$ SELECT 'C0:FE:' || upper(substr(lpad(to_hex($1),8,'0'),1,2)||':'||substr(lpad(to_hex($1),8,'0'),3,2)||':'||substr(lpad(to_hex($1),8,'0'),5,2)||':'||substr(lpad(to_hex($1),8,'0'),7,2)) $$;
            CREATE FUNCTION pg_temp.bench(bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
             $$ SELECT lpad(to_hex($1), 8, '0') || '-0000-4000-8000-000000000000' $$;
            INSERT INTO benches SELECT pg_temp.bench(b), 'host' || b, pg_temp.ts(1795000000000)
              FROM generate_series(0, \(b - 1)) b ON CONFLICT DO NOTHING;
            INSERT INTO runs SELECT pg_temp.bench(r % \(b)), r / \(b) + 1, pg_temp.ts(1733011200000 + r * 86400000),
              pg_temp.ts(1733011200000 + r * 86400000 + 600000), 'run batches/provision-new.batch', repeat('a', 64),
              'tech', 'host', 1000, 'hci0', '{}', 'finished'
              FROM generate_series(0::bigint, \(n / 10 + b)) r;
            INSERT INTO devices (bench_id, address, mac_ending, major, minor, model, serial, hardware_revision, firmware,
              first_seen, last_seen, battery, battery_at, calibrated, calibrated_at, calibration_x, calibration_y,
              calibration_z, time_offset_ms, profile, config_cornering, config_braking, config_acceleration,
              config_duration, config_enable, config_read_at, identity_at, description_at, firmware_at,
              calibration_read_at, time_offset_at)
            SELECT pg_temp.bench((d + k) % \(b)), pg_temp.mac(d), lower(right(replace(pg_temp.mac(d), ':', ''), 8)),
              100 + d / 65536, d % 65536, 'SB-1', 'SN' || d, 'B', '2.' || (d % 3) || '.0',
              pg_temp.ts(1733011200000 + d * 600000), pg_temp.ts(1733011200000 + d * 600000 + 86400000 * (1 + k)),
              20 + d % 80, pg_temp.ts(1733011200000 + d * 600000 + 86400000), 1, pg_temp.ts(1733011200000 + d * 600000),
              1, -2, 1000, 5, (ARRAY['van','car','truck','bus','motorcycle'])[1 + d % 5],
              300, 300, 300, 400, 7, pg_temp.ts(1733011200000 + d * 600000 + 3600000),
              pg_temp.ts(1733011200000 + d * 600000), pg_temp.ts(1733011200000 + d * 600000),
              pg_temp.ts(1733011200000 + d * 600000), pg_temp.ts(1733011200000 + d * 600000),
              pg_temp.ts(1733011200000 + d * 600000)
            FROM generate_series(0::bigint, \(n - 1)) d, generate_series(0, 1) k WHERE k = 0 OR d % 10 = 0;
            INSERT INTO identity_claims SELECT 100 + d / 65536, d % 65536, pg_temp.mac(d), pg_temp.bench(d % \(b)),
              pg_temp.ts(1733011200000 + d * 600000) FROM generate_series(0::bigint, \(n - 1)) d;
            INSERT INTO outcomes (bench_id, local_id, run_id, device, step, status, detail, error, before, after,
              started_at, ended_at, duration_ms, retries)
            SELECT pg_temp.bench(d % \(b)), (d / \(b)) * 20 + s + 1, 1 + (d / \(b)) / 10, pg_temp.mac(d),
              (ARRAY['battery','firmware','sync-time','calibrate','identity'])[1 + s % 5],
              CASE WHEN (d * 7 + s) % 100 < 3 THEN 'failed' WHEN (d * 7 + s) % 100 < 5 THEN 'skipped' ELSE 'ok' END,
              'detail ' || d, CASE WHEN (d * 7 + s) % 100 < 3 THEN 'timeout after ' || d || ' ms' END, NULL, NULL,
              pg_temp.ts(1733011200000 + (d * 20 + s) * 63072000 / \(n) * 1000 / 20),
              pg_temp.ts(1733011200000 + (d * 20 + s) * 63072000 / \(n) * 1000 / 20 + 1500),
              200 + (d + s) % 3000, 0
            FROM generate_series(0::bigint, \(n - 1)) d, generate_series(0, 19) s;
            INSERT INTO readings SELECT pg_temp.bench(d % \(b)), (d / \(b)) * \(r) + s + 1, pg_temp.mac(d),
              pg_temp.ts(1733011200000 + s * 63072000000 / \(r) + d % 86400000), 100 - s * 50 / \(r) - d % 20,
              -40 - (d + s) % 50, '2.' || (d % 3) || '.0'
            FROM generate_series(0::bigint, \(n - 1)) d, generate_series(0, \(r - 1)) s;
            VACUUM ANALYZE;
            """
    }

    /// Starts the command after it in a child of its own and prints that
    /// child's peak RSS in KiB (`wait4`), then exits with its status. A
    /// process forked from the test would count the test's own memory (Linux
    /// keeps a process's peak across `exec`); this small one's is far below
    /// beaconbench's.
    static let measure = """
        import os, sys
        pid = os.fork()
        if pid == 0:
            os.execv(sys.argv[1], sys.argv[1:])
        _, status, usage = os.wait4(pid, 0)
        print("peak", usage.ru_maxrss, file=sys.stderr)
        sys.exit(os.waitstatus_to_exitcode(status))
        """

    /// The report of `server` in a child process: its exit status, peak
    /// RSS in MiB (`wait4`) and what it printed.
    static func measuredReport(
        _ fixture: ConsoleFixture, _ server: LocalPostgres, page: String
    ) async throws -> (status: Int32, peakMiB: Double, output: String) {
        let run = try await runTool(
            "/usr/bin/python3",
            [
                "-c", measure, builtProduct("beaconbench"), "--profiles", ConsoleFixture.repository + "/profiles",
                "--inventory", server.url, "--json", "report", "--out", page,
            ], environment: fixture.environment, timeout: 300)
        let peak = run.stderr.split(separator: "\n").last { $0.hasPrefix("peak ") }
            .flatMap { Double($0.dropFirst(5)) }
        return (run.status, (peak ?? .infinity) / 1024, run.stdout + run.stderr)
    }

    @Test func peakMemoryDoesNotGrowWithTheFleet() async throws {
        try await withPostgres { server in
            let fixture = try await ConsoleFixture.start(nil)
            defer { fixture.stop() }
            // The server's schema, as a bench's first sync makes it.
            let sync = try await runTool(
                builtProduct("beaconbench"), ["--inventory", fixture.inventoryPath, "sync", "--to", server.url],
                environment: fixture.environment, timeout: 120)
            try #require(sync.status == 0, "\(sync.stderr)")
            var peaks: [Double] = []
            for (devices, readings) in [(2_500, 40), (10_000, 40)] {
                let script = fixture.directory + "/fleet-\(devices).sql"
                try Self.fleetSQL(devices: devices, readings: readings).write(
                    toFile: script, atomically: true, encoding: .utf8)
                _ = try await server.psql("\\i " + script)
                #expect(try await server.count("SELECT count(*) FROM readings") == devices * readings)
                let page = fixture.directory + "/fleet-\(devices).html"
                let run = try await Self.measuredReport(fixture, server, page: page)
                #expect(run.status == 0, "\(run.output)")
                let line = try #require(ConsoleFixture.jsonLines(run.output, kind: "report").first, "\(run.output)")
                #expect((line["fleet"] as? NSNumber)?.intValue == devices, "\(line)")
                #expect((line["devices"] as? NSNumber)?.intValue == devices, "\(line)")
                let html = try String(contentsOfFile: page, encoding: .utf8)
                #expect(html.contains("<strong>\(devices * readings / 1000),000</strong> battery readings"))
                print("report of \(devices) devices, \(devices * readings) readings: peak RSS \(run.peakMiB) MiB")
                peaks.append(run.peakMiB)
            }
            #expect(
                peaks.allSatisfy { $0 < 128 }, "peak RSS \(peaks) MiB: the bound is 256, streaming keeps it far below")
            #expect(
                peaks[1] < peaks[0] + 8, "peak RSS grew from \(peaks[0]) to \(peaks[1]) MiB with a fleet 4 × larger")
        }
    }

    /// The pid of a beaconbench connection in the middle of a stream (its
    /// last statement a `FETCH`), other than `not`; waits for one (at most
    /// two minutes, then fails naming what it waited for).
    static func streaming(_ server: LocalPostgres, not: String? = nil) async throws -> String {
        var pid = ""
        try await waitUntil("a beaconbench connection fetching from a cursor") {
            pid = try await server.psql(
                """
                SELECT pid FROM pg_stat_activity WHERE application_name = 'beaconbench' AND query LIKE 'FETCH%'
                  AND pid::text <> '\(not ?? "")' LIMIT 1
                """
            ).trimmingCharacters(in: .whitespacesAndNewlines)
            return !pid.isEmpty
        }
        return pid
    }

    @Test func aConnectionLostMidStreamStartsAgainOnceThenFails() async throws {
        try await withPostgres { server in
            let fixture = try await ConsoleFixture.start(nil)
            defer { fixture.stop() }
            let sync = try await runTool(
                builtProduct("beaconbench"), ["--inventory", fixture.inventoryPath, "sync", "--to", server.url],
                environment: fixture.environment, timeout: 120)
            try #require(sync.status == 0, "\(sync.stderr)")
            let script = fixture.directory + "/fleet.sql"
            try Self.fleetSQL(devices: 5_000, readings: 40).write(toFile: script, atomically: true, encoding: .utf8)
            _ = try await server.psql("\\i " + script)
            func report(_ page: String) async throws -> ToolOutput {
                try await runTool(
                    builtProduct("beaconbench"),
                    [
                        "--profiles", ConsoleFixture.repository + "/profiles", "--inventory", server.url, "report",
                        "--out", page,
                    ],
                    environment: fixture.environment, timeout: 300)
            }
            // Lost once: read again from the beginning, the whole page written.
            let page = fixture.directory + "/once.html"
            async let once = report(page)
            let first = try await Self.streaming(server)
            _ = try await server.psql("SELECT pg_terminate_backend(\(first))")
            let run = try await once
            #expect(run.status == 0, "\(run.stderr)")
            let html = try String(contentsOfFile: page, encoding: .utf8)
            #expect(html.contains("<strong>200,000</strong> battery readings"))
            #expect(html.contains("<strong>5,000</strong> devices"))
            // Lost twice: exit 3, and no page.
            let never = fixture.directory + "/never.html"
            async let twice = report(never)
            let one = try await Self.streaming(server)
            _ = try await server.psql("SELECT pg_terminate_backend(\(one))")
            let two = try await Self.streaming(server, not: one)
            _ = try await server.psql("SELECT pg_terminate_backend(\(two))")
            let failed = try await twice
            #expect(failed.status == 3, "\(failed.stdout) \(failed.stderr)")
            #expect(failed.stderr.contains("connection"), "\(failed.stderr)")
            #expect(!FileManager.default.fileExists(atPath: never))
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: fixture.directory).filter {
                    $0.hasPrefix(".beaconbench")
                } == [])
        }
    }
}
