import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

/// `beaconbench report`, written by the built tool and opened in headless
/// Chromium (Tests/Peers/report_browser.py over the DevTools protocol):
/// no console error, nothing fetched, every chart present with the counts
/// the inventory holds, the device table's filter working, hostile device
/// strings shown as text.
@Suite("the fleet report in a browser", .serialized)
struct ReportTests {
    static let peer = ConsoleFixture.repository + "/Tests/Peers/report_browser.py"
    static let charts: Set<String> = [
        "battery", "trend", "projection", "firmware", "calibration-age", "calibration-vector", "drift", "findings",
        "duplicates", "activity", "failures",
    ]
    /// What a device calls itself, as a hostile one would.
    static let hostileModel =
        "<img src=x onerror=\"window.__pwned=1\"></script><script>window.__pwned=2</script>\u{1B}]0;owned\u{07}\u{202E}gnp.exe"
    static let hostileQuery = "<img src=x onerror=\"window.__pwned=1\">"

    // MARK: Inventories

    /// A synthetic fleet of `count` devices written in one transaction:
    /// cars, vans and trucks (major 100, 200, 300); five battery readings
    /// each over 120 days, draining at 0–0.6 % a day; calibrations of all
    /// ages, vectors from 800 to 1200 mG; every 50th with its cornering
    /// threshold off the profile's; every 997th sharing an identity; three
    /// step outcomes each over 60 days, every 25th connect failed.
    static let fleetStatements = [
        """
        INSERT INTO runs(id, started_at, ended_at, command, operator, host, pid, status)
        VALUES (1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-120 days'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                'synthetic fleet', 'test', 'test', 1, 'finished')
        """,
        """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1),
        d(i, profile, start, rate) AS (
            SELECT i, CASE i % 3 WHEN 0 THEN 'car' WHEN 1 THEN 'van' ELSE 'truck' END, 95 - (i % 5) * 5, (i % 7) * 0.1
            FROM n)
        INSERT INTO devices(address, mac_ending, major, minor, model, serial, hardware_revision, firmware, first_seen,
            last_seen, battery, battery_at, calibrated, calibrated_at, calibration_x, calibration_y, calibration_z,
            time_offset_ms, profile, config_cornering, config_braking, config_acceleration, config_duration,
            config_enable, config_read_at)
        SELECT printf('C0:%02X:%02X:%02X:%02X:%02X', (i >> 32) & 255, (i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255,
                      i & 255),
            printf('%02x%02x%02x%02x', (i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255, i & 255),
            CASE profile WHEN 'car' THEN 100 WHEN 'van' THEN 200 ELSE 300 END, i / 3 + (i % 997 = 0),
            'SB-1', printf('SB1-%06d', i), 'B',
            CASE WHEN i % 10 = 0 THEN '1.0.6' WHEN i % 4 = 0 THEN '1.0.8' ELSE '1.1.0' END,
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-200 days'),
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%d days', i % 30)),
            CAST(start - rate * 119 AS INTEGER), strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 days'),
            i % 20 <> 0, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%d days', i % 500)),
            0, 0, 800 + (i % 41) * 10, 0, profile,
            CASE profile WHEN 'car' THEN 350 WHEN 'van' THEN 320 ELSE 250 END + CASE WHEN i % 50 = 0 THEN 50 ELSE 0 END,
            CASE profile WHEN 'car' THEN 350 WHEN 'van' THEN 330 ELSE 280 END,
            CASE profile WHEN 'car' THEN 450 WHEN 'van' THEN 380 ELSE 250 END,
            CASE profile WHEN 'car' THEN 300 WHEN 'van' THEN 350 ELSE 500 END,
            CASE profile WHEN 'truck' THEN 7 ELSE 5 END, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 days')
        FROM d
        """,
        """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1),
        k(day) AS (VALUES (120), (90), (60), (30), (1))
        INSERT INTO readings(device, at, battery, rssi, firmware)
        SELECT printf('C0:%02X:%02X:%02X:%02X:%02X', (i >> 32) & 255, (i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255,
                      i & 255),
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%d days', day)),
            CAST(95 - (i % 5) * 5 - (i % 7) * 0.1 * (120 - day) AS INTEGER), -60, '1.1.0'
        FROM n, k
        """,
        """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1),
        s(step, offset) AS (VALUES ('connect', 0), ('apply', 1), ('verify', 2))
        INSERT INTO outcomes(run_id, device, step, status, detail, error, started_at, ended_at, duration_ms)
        SELECT 1, printf('C0:%02X:%02X:%02X:%02X:%02X', (i >> 32) & 255, (i >> 24) & 255, (i >> 16) & 255,
                         (i >> 8) & 255, i & 255),
            step, CASE WHEN step = 'connect' AND i % 25 = 0 THEN 'failed' ELSE 'ok' END, NULL,
            CASE WHEN step = 'connect' AND i % 25 = 0
                 THEN printf('C0:%02X:%02X:%02X:%02X:%02X did not answer within 10 s', (i >> 32) & 255,
                             (i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255, i & 255) END,
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%d days', i % 60), printf('+%d seconds', offset)),
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%d days', i % 60), printf('+%d seconds', offset + 1)),
            800 + i % 400
        FROM n, s
        """,
    ]

    /// Writes the synthetic fleet of `count` devices into a new inventory.
    static func synthesize(_ path: String, devices count: Int) async throws {
        let inventory = try Inventory(path: path)
        _ = try await inventory.query("BEGIN IMMEDIATE")
        for statement in fleetStatements {
            _ = try await inventory.query(statement, statement.contains("?1") ? [.integer(Int64(count))] : [])
        }
        _ = try await inventory.query("COMMIT")
    }

    /// A device whose model, serial and profile are hostile, and a failure
    /// whose reason is, in the inventory at `path`.
    static func addHostileDevice(_ path: String) async throws {
        let inventory = try Inventory(path: path)
        var device = DeviceRecord(address: "C0:FE:66:66:66:66")
        device.model = hostileModel
        device.serial = "<b>bold</b>\u{0}\u{9B}31m"
        device.battery = 12
        try await inventory.recordDevice(device)
        try await inventory.assignProfile("<script>alert(3)</script>", to: device.address)
        let run = try await inventory.beginRun(.init(command: "hostile", operatorName: "test"))
        let step = try await inventory.beginStep(run: run, device: device.address, step: "connect")
        try await inventory.finishStep(step, .failed, error: "<img src=y onerror=\"window.__pwned=3\">")
        try await inventory.endRun(run, .failed)
    }

    // MARK: Running

    /// `beaconbench --inventory SOURCE report ARGUMENTS --out PAGE --json`: its `report` line.
    /// `status`: the exit status expected (2 when a stored value fails its check).
    static func report(
        _ fixture: ConsoleFixture, _ arguments: [String] = [], source: String? = nil, page: String,
        status: Int32 = 0
    ) async throws -> [String: Any] {
        let run = try await runTool(
            builtProduct("beaconbench"),
            ["--inventory", source ?? fixture.inventoryPath, "--json", "report", "--out", page] + arguments,
            environment: fixture.environment, timeout: 300)
        #expect(run.status == status, "\(run.stderr)")
        return try #require(ConsoleFixture.jsonLines(run.stdout, kind: "report").first)
    }

    /// What the browser shows of `page` (see report_browser.py).
    static func browse(
        _ page: String, filter: String? = nil, hostile: String? = nil, sort: Bool = false
    ) async throws -> [String: Any] {
        var arguments = [peer, page] + (sort ? ["--sort"] : [])
        if let filter { arguments += ["--filter", filter] }
        if let hostile { arguments += ["--hostile", hostile] }
        let run = try await runTool("python3", arguments, timeout: 180)
        #expect(run.status == 0, "\(run.stderr)")
        let seen = try #require(
            try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)")
        #expect(seen["console_errors"] as? [String] == [], "console errors: \(seen["console_errors"] ?? "")")
        #expect(seen["requests"] as? [String] == [], "the page fetched: \(seen["requests"] ?? "")")
        let charts = try #require(seen["charts"] as? [String: [String: Any]])
        #expect(Set(charts.keys) == Self.charts)
        for (name, chart) in charts {
            #expect(chart["has_svg"] as? Bool == true, "\(name): an SVG with a title")
            #expect(chart["has_caption"] as? Bool == true, "\(name): a caption")
        }
        return seen
    }

    static func chart(_ seen: [String: Any], _ name: String) -> [String: Any] {
        (seen["charts"] as? [String: [String: Any]])?[name] ?? [:]
    }

    static func int(_ value: Any?) -> Int? {
        if let value = value as? Int { return value }
        if let value = value as? Double { return Int(value) }
        if let value = value as? String { return Int(value) }
        return nil
    }

    /// A chart's `data-total` and the sum of its bars' values.
    static func counts(_ seen: [String: Any], _ name: String) -> (total: Int?, sum: Int?) {
        let chart = chart(seen, name)
        return (int(chart["total"]), int(chart["sum"]))
    }

    // MARK: Tests

    @Test func anEmptyInventoryIsAPageOfEmptyCharts() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        let page = fixture.directory + "/empty.html"
        let line = try await Self.report(fixture, page: page)
        #expect(Self.int(line["devices"]) == 0)
        var info = stat()
        #expect(stat(page, &info) == 0 && info.st_mode & 0o777 == 0o600, "the page is 0600")
        let seen = try await Self.browse(page, filter: "anything")
        for name in Self.charts { #expect(Self.counts(seen, name).total == 0, "\(name)") }
        let table = try #require(seen["table"] as? [String: Any])
        #expect(Self.int(table["rows"]) == 0 && Self.int(table["shown"]) == 0)
        // A symbolic link to a regular file where the page goes: the file
        // is replaced (0600), the link stays (OutputFileTests has the rest).
        let elsewhere = fixture.directory + "/elsewhere.txt"
        try "replace me".write(toFile: elsewhere, atomically: true, encoding: .utf8)
        let linked = fixture.directory + "/linked.html"
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: elsewhere)
        _ = try await Self.report(fixture, page: linked)
        #expect(try String(contentsOfFile: elsewhere, encoding: .utf8).hasPrefix("<!DOCTYPE html>"))
        #expect(lstat(linked, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK)
        #expect(stat(elsewhere, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o777 == 0o600)
        let filter = try #require(seen["filter"] as? [String: Any])
        #expect(Self.int(filter["matching"]) == 0)
    }

    @Test func oneDevice() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        try await Self.synthesize(fixture.inventoryPath, devices: 1)
        let page = fixture.directory + "/one.html"
        let line = try await Self.report(fixture, page: page)
        #expect(Self.int(line["devices"]) == 1)
        let seen = try await Self.browse(page, filter: "c0:00:00:00:00:01")
        #expect(Self.counts(seen, "battery") == (1, 1))
        #expect(Self.counts(seen, "firmware") == (1, 1))
        #expect(Self.int(Self.chart(seen, "trend")["data"].flatMap { ($0 as? [String: Any])?["readings"] }) == 5)
        #expect(Self.counts(seen, "activity").total == 1)
        let filter = try #require(seen["filter"] as? [String: Any])
        #expect(Self.int(filter["matching"]) == 1 && Self.int(filter["shown"]) == 1)
        #expect(filter["every_row_holds_it"] as? Bool == true)
        // --since keeps the readings of the last 45 days: those of 30 days and 1 day ago.
        let recent = fixture.directory + "/recent.html"
        _ = try await Self.report(fixture, ["--since", "45d"], page: recent)
        let html = try String(contentsOfFile: recent, encoding: .utf8)
        #expect(html.contains("data-chart=\"trend\" data-total=\"2\" data-readings=\"2\""))
    }

    /// The demo's bench: 8 new beacons provisioned as cars by the shipped
    /// batch on the simulator (two skipped: low battery, old firmware).
    @Test func theDemosFleet() async throws {
        try await withNewFleet(count: 8) { bench in
            let run = try await bench.beaconbench([
                "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                "expect=\(bench.beacons)",
            ])
            #expect(run.status == 0, "\(run.stderr)")
            let page = bench.directory + "/demo.html"
            let line = try await Self.report(bench, page: page)
            #expect(Self.int(line["devices"]) == 8)
            let seen = try await Self.browse(page, filter: "car", sort: true)
            let sort = try #require(seen["sort"] as? [String: Any])
            #expect(sort["ascending"] as? Bool == true && sort["descending"] as? Bool == true, "\(sort)")
            #expect(Self.counts(seen, "battery") == (8, 8))
            #expect(Self.counts(seen, "firmware") == (8, 8))
            // The two skipped beacons: one reason each (battery, firmware).
            let failures = Self.counts(seen, "failures")
            #expect(failures.total == failures.sum && (failures.total ?? 0) >= 2)
            #expect(Self.counts(seen, "activity").total == 8)
            let cards = try #require(seen["cards"] as? [String: Int])
            #expect(cards["devices"] == 8)
            let filter = try #require(seen["filter"] as? [String: Any])
            #expect(Self.int(filter["matching"]) == 6, "six beacons provisioned as cars")
            #expect(filter["every_row_holds_it"] as? Bool == true)
            // In a session, `report` alone reports the selection.
            let selected = bench.directory + "/selected.html"
            let session = try await bench.beaconbench(
                ["--json"], stdin: "\(bench.scanAll)\nselect profile=car\nreport --out \(selected)\n")
            #expect(session.status == 0, "\(session.stderr)")
            let chosen = try #require(ConsoleFixture.jsonLines(session.stdout, kind: "report").first)
            #expect(Self.int(chosen["devices"]) == 6 && Self.int(chosen["fleet"]) == 8)
        }
    }

    @Test func hostileStringsShowAsText() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        try await Self.synthesize(fixture.inventoryPath, devices: 30)
        try await Self.addHostileDevice(fixture.inventoryPath)
        let page = fixture.directory + "/hostile.html"
        // Its profile `<script>…` is no profile name: read as unknown, a
        // finding (exit 2), the page written all the same.
        _ = try await Self.report(fixture, page: page, status: 2)
        let html = try String(contentsOfFile: page, encoding: .utf8)
        #expect(!html.contains("<img") && !html.contains("\u{1B}") && !html.contains("\u{202E}"))
        let seen = try await Self.browse(page, hostile: Self.hostileQuery)
        let hostile = try #require(seen["hostile"] as? [String: Any])
        #expect(hostile["shown_as_text"] as? Bool == true, "\(hostile)")
        #expect(Self.int(hostile["matching"]) == 1)
        #expect(Self.int(hostile["injected_elements"]) == 0)
        #expect(hostile["pwned"] as? String == "undefined")
        #expect(Self.int(hostile["scripts"]) == 2, "the page's own data block and script")
        #expect(Self.counts(seen, "battery") == (31, 31))
    }

    @Test func aHundredThousandDevices() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        let count = 100_000
        let clock = ContinuousClock()
        let made = clock.now
        try await Self.synthesize(fixture.inventoryPath, devices: count)
        let madeIn = made.duration(to: clock.now)
        let page = fixture.directory + "/fleet.html"
        let written = clock.now
        let line = try await Self.report(fixture, page: page)
        let writtenIn = written.duration(to: clock.now)
        let bytes = try #require(Self.int(line["bytes"]))
        #expect(bytes < 8 << 20, "the page is \(bytes) bytes")
        let seen = try await Self.browse(page, filter: "1.0.6", sort: true)
        let sort = try #require(seen["sort"] as? [String: Any])
        #expect(sort["ascending"] as? Bool == true && sort["descending"] as? Bool == true, "\(sort)")
        let timing = try #require(seen["timing"] as? [String: Any])
        let rendered = try #require(
            timing["script_done_ms"] as? Double ?? (timing["script_done_ms"] as? Int).map(Double.init))
        print(
            "report of \(count) devices: inventory made in \(madeIn), page written in \(writtenIn), \(bytes) bytes,"
                + " load event at \(timing["load_ms"] ?? "?") ms, table rendered at \(rendered) ms,"
                + " navigate to load \(timing["wall_ms"] ?? "?") ms,"
                + " filtering all rows took \((seen["filter"] as? [String: Any])?["filter_ms"] ?? "?") ms")
        #expect(rendered < 10_000, "a generous bound; the measured figure is printed above")
        #expect(Self.counts(seen, "battery") == (count, count))
        #expect(Self.counts(seen, "firmware") == (count, count))
        #expect(Self.counts(seen, "calibration-age").total == count)
        // Every 50th drifts in cornering; every 997th shares an identity with the device 3 on.
        #expect(
            Self.int(Self.chart(seen, "drift")["data"].flatMap { ($0 as? [String: Any])?["devices"] }) == count / 50)
        #expect(Self.counts(seen, "duplicates").total == count / 997)
        // Every 25th connect failed: one reason once the address is set aside.
        #expect(Self.counts(seen, "failures") == (count / 25, count / 25))
        let table = try #require(seen["table"] as? [String: Any])
        #expect(Self.int(table["rows"]) == count && Self.int(table["shown"]) == 50)
        let filter = try #require(seen["filter"] as? [String: Any])
        #expect(Self.int(filter["matching"]) == count / 10, "every 10th runs firmware 1.0.6")
        #expect(filter["every_row_holds_it"] as? Bool == true)
    }

    /// The whole fleet from the server: two benches' synthetic inventories
    /// synced to a local PostgreSQL, reported with --inventory postgresql://…
    @Test func theWholeFleetFromTheServer() async throws {
        let server = try await LocalPostgres.create()
        defer { server.remove() }
        try await server.start()
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        let second = fixture.directory + "/second.sqlite"
        try await Self.synthesize(fixture.inventoryPath, devices: 40)
        try await Self.synthesize(second, devices: 20)
        for inventory in [fixture.inventoryPath, second] {
            let sync = try await runTool(
                builtProduct("beaconbench"), ["--inventory", inventory, "sync", "--to", server.url],
                environment: fixture.environment, timeout: 120)
            #expect(sync.status == 0, "\(sync.stderr)")
        }
        let page = fixture.directory + "/fleet.html"
        let line = try await Self.report(fixture, ["profile=car"], source: server.url, page: page)
        // Devices 1–20 are on both benches: 40 devices, 13 of them cars (every third).
        #expect(Self.int(line["fleet"]) == 40)
        #expect(Self.int(line["devices"]) == 13)
        // The second bench knows devices 1–20: cars 3, 6, … 18, shown with its id's first 8 characters.
        let secondBench = String(try await Inventory(path: second, readOnly: true).benchID().prefix(8))
        let seen = try await Self.browse(page, filter: secondBench)
        #expect(Self.counts(seen, "battery") == (13, 13))
        let filter = try #require(seen["filter"] as? [String: Any])
        #expect(Self.int(filter["matching"]) == 6, "\(filter)")
        #expect(Self.int(Self.chart(seen, "activity")["data"].flatMap { ($0 as? [String: Any])?["benches"] }) == 2)
        let table = try #require(seen["table"] as? [String: Any])
        #expect(Self.int(table["columns"]) == 13, "a benches column")
    }
}
