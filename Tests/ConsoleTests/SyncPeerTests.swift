import BeaconSimulator
import Foundation
import Inventory
import LocalBus
import SBeaconProtocol
import TestSupport
import Testing

@testable import InventorySync

/// The shared server as a peer, not a friend: what `sync` pulls is checked
/// as local input is, and a row that fails is refused, named, and left on
/// the server as it is. A sync stopped by a signal says what it sent.
@Suite("sync: the server is a peer", .serialized)
struct SyncPeerTests {
    static let assignmentColumns =
        "address, profile, major, minor_policy, minor, overrides, assigned_at, assigned_by, origin"
    static let stamp = "'2026-12-02T10:00:00.000Z', 'office@hq', 'office'"

    /// One hostile row per way a pulled assignment can be wrong: its
    /// address (SQL), the rest of its values (SQL), the field refused.
    static let hostile: [(address: String, values: String, field: String)] = [
        ("'C0:FE:00:00:00:01'", "'car', 99999999999, 'fixed', 7, '{}'", "major"),
        ("'C0:FE:00:00:00:02'", "'car', 100, 'fixed', 70000, '{}'", "minor"),
        ("'C1:00:00:00:00:03'", "'car', -1, 'auto', NULL, '{}'", "major"),
        ("'C1:00:00:00:00:04'", "'car', 100, 'fixed', -5, '{}'", "minor"),
        ("'C1:00:00:00:00:05'", #"'car', 100, 'auto', NULL, '{"cornering":9999}'"#, "overrides"),
        ("'C1:00:00:00:00:06'", #"'car', 100, 'auto', NULL, '{"cornering":'"#, "overrides"),
        ("'C1:00:00:00:00:07'", "'car', 100, 'sometimes', NULL, '{}'", "minor_policy"),
        (#"E'C1:00:00:00:00:0\x1b[2J\x07'"#, "'car', 100, 'auto', NULL, '{}'", "address"),
        ("'C1:00:00:00:00:09'", "'../../../etc/passwd', 100, 'auto', NULL, '{}'", "profile"),
        ("'C1:00:00:00:00:0A'", "'nosuchprofile', 100, 'auto', NULL, '{}'", "profile"),
        ("'C1:00:00:00:00:0B'", #"'car', 100, 'auto', NULL, '{"cornering":9999,"cornering":300}'"#, "overrides"),
        ("'C1:00:00:00:00:0C'", "'car', 100, 'auto', NULL, ''", "overrides"),
        ("'C1:00:00:00:00:0D'", "'car', 100, 'auto', 12, '{}'", "minor"),
    ]

    /// Valid rows, pulled as they are: beacon 3 of the fleet, and a device
    /// this bench never saw.
    static let valid: [(address: String, values: String)] = [
        ("C0:FE:00:00:00:03", "'car', 250, 'fixed', 42, '{}'"),
        ("C1:00:00:00:00:10", #"'van', NULL, 'auto', NULL, '{"cornering":300,"duration":400}'"#),
    ]

    static func insert(_ server: LocalPostgres, _ address: String, _ values: String) throws {
        _ = try server.psql(
            "INSERT INTO fleet_assignments (\(assignmentColumns)) VALUES (\(address), \(values), \(stamp))")
    }

    @Test func hostileAssignmentsAreRefusedNamedAndLeftOnTheServer() async throws {
        let server = try await LocalPostgres.create()
        defer { server.remove() }
        try await server.start()
        // Beacons 1–3 good, 4 battery 20 %, 5 firmware 1.0.6.
        try await withNewFleet(count: 5, simulatorOptions: CrashTests.brisk) { bench in
            let first = try await bench.beaconbench(["sync", "--to", server.url])
            #expect(first.status == 0, "\(first.stderr)")
            for row in Self.hostile { try Self.insert(server, row.address, row.values) }
            for row in Self.valid { try Self.insert(server, "'\(row.address)'", row.values) }
            let snapshot = "SELECT * FROM fleet_assignments ORDER BY address"
            let before = try await server.psql(snapshot)

            // JSON: each refused row named, the line as docs/json.md says.
            let json = try await bench.beaconbench(["--json", "sync", "--to", server.url])
            #expect(json.status == 2, "refused rows make a partial sync: \(json.stderr)")
            let lines = json.stdout.split(separator: "\n").map(String.init)
            let kinds = try JSONShapeTests.documentedKinds()
            for line in lines { #expect(JSONShapeTests.problems(line, kinds).isEmpty, "\(line)") }
            let report = try #require(ConsoleFixture.jsonLines(json.stdout, kind: "sync").first)
            #expect(report["refused_count"] as? Int == Self.hostile.count, "\(report)")
            #expect(report["assignments_pulled"] as? Int == Self.valid.count, "\(report)")
            let refused = report["refused"] as? [[String: Any]] ?? []
            #expect(refused.count == Self.hostile.count)
            for row in Self.hostile {
                let address =
                    row.address.hasPrefix("E'") ? "C1:00:00:00:00:0" : String(row.address.dropFirst().prefix(17))
                let entry = refused.first {
                    ($0["key"] as? String ?? "").hasPrefix(address) && $0["field"] as? String == row.field
                }
                #expect(entry != nil, "\(row.address) \(row.field): \(refused)")
                #expect(entry?["table"] as? String == "fleet_assignments")
                let reason = entry?["reason"] as? String ?? ""
                #expect(reason.count > 5, "\(row.address): \(reason)")
            }
            #expect(
                refused.contains {
                    $0["field"] as? String == "address" && ($0["key"] as? String)?.contains("\u{1B}") == false
                })

            // Text: one error line per refused row, with its key and field; nothing raw on the terminal.
            let text = try await bench.beaconbench(["sync", "--to", server.url])
            #expect(text.status == 2, "\(text.stderr)")
            let errors = text.stderr.split(separator: "\n").filter {
                $0.contains("sync: refused fleet_assignments row")
            }
            #expect(errors.count == Self.hostile.count, "\(text.stderr)")
            #expect(text.stderr.contains("C0:FE:00:00:00:01: major '99999999999' is outside 0–65535"), "\(text.stderr)")
            #expect(text.stderr.contains("C0:FE:00:00:00:02: minor '70000' is outside 0–65535"), "\(text.stderr)")
            #expect(text.stderr.contains("profile '../../../etc/passwd' is not a profile name"), "\(text.stderr)")
            #expect(text.stderr.contains("profile 'nosuchprofile' names no profile this bench has"), "\(text.stderr)")
            #expect(text.stderr.contains("minor_policy 'sometimes' is not a minor policy"), "\(text.stderr)")
            #expect(
                text.stderr.contains("duplicate key 'cornering' (first at line 1, column 2): each key once"),
                "\(text.stderr)")
            #expect(text.stderr.contains("13 server rows refused"), "\(text.stderr)")
            #expect(!(text.stdout + text.stderr + json.stdout + json.stderr).contains("\u{1B}"))
            #expect(!(text.stdout + text.stderr).contains("\u{07}"))

            // The server's rows are as they were; the bench holds the valid ones only.
            await #expect(try server.psql(snapshot) == before)
            let inventory = try Inventory(path: bench.inventoryPath, readOnly: true)
            let local = try await inventory.assignments()
            #expect(local.map(\.address) == Self.valid.map(\.address), "\(local.map(\.address))")
            #expect(local.allSatisfy { $0.source == .server })
            #expect(local.first?.major == 250 && local.first?.minor == 42 && local.first?.minorPolicy == .fixed)
            #expect(local.last?.overrides == ConfigOverrides(cornering: 300, duration: 400))

            // converge brings beacon 3 to its pulled assignment; 1 and 2,
            // whose server rows were refused, have none here: untouched.
            let file = bench.directory + "/converge.batch"
            try "\(bench.scanAll)\nselect all\nconverge\n".write(toFile: file, atomically: true, encoding: .utf8)
            let converge = try await bench.beaconbench(["--json", "run", file])
            #expect(converge.status == 0, "\(converge.stderr)")
            let truth = try await bench.truth()
            #expect(truth["C0:FE:00:00:00:03"]?.major == 250 && truth["C0:FE:00:00:00:03"]?.minor == 42)
            for number in [1, 2] {
                let beacon = try #require(truth["C0:FE:00:00:00:0\(number)"])
                #expect(beacon.major == 1 && beacon.minor == 1 && beacon.factoryDefault, "beacon \(number): \(beacon)")
            }
            // Still as they were (beacon 3's convergence goes up at the next sync).
            await #expect(try server.psql(snapshot) == before)
        }
    }

    /// A bench's own assignment for a device whose server row is refused is
    /// not pushed over it; the office's `drift` names the unusable row.
    @Test func aRefusedRowIsNeverWrittenOver() async throws {
        try await withSyncScene("sync-refused-kept") { scene in
            let path = scene.directory + "/inventory.sqlite"
            let bench = try await LargeInventory(path: path, devices: 3, outcomes: 10)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            try Self.insert(scene.server, "'C2:00:00:00:01:00'", "'car', 99999999999, 'auto', NULL, '{}'")
            let before = try await scene.server.psql("SELECT * FROM fleet_assignments ORDER BY address")
            // Assigned here later than the office's row.
            try await bench.inventory.assign([
                Assignment(
                    address: "C2:00:00:00:01:00", profile: "van", assignedAt: Inventory.now(), assignedBy: "tech@bench")
            ])
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 2, "\(scene.stderr)")
            #expect(
                scene.stderr.contains("C2:00:00:00:01:00: this bench's assignment was not pushed"), "\(scene.stderr)")
            await #expect(try scene.server.psql("SELECT * FROM fleet_assignments ORDER BY address") == before)
            #expect(try await bench.inventory.assignments().first?.profile == "van")

            let drift = try await scene.beaconbench(["--inventory", scene.server.url, "--json", "drift"]).waitForExit()
            #expect(drift.status >> 8 == 2, "\(scene.stderr)")
            let findings = ConsoleFixture.jsonLines(scene.stdout, kind: "drift")
            #expect(
                findings.contains {
                    $0["device"] as? String == "C2:00:00:00:01:00" && $0["field"] as? String == "major"
                        && ($0["desired"] as? String ?? "").hasPrefix("unusable server row")
                }, "\(findings)")
        }
    }

    /// An identity claim on the server outside 0–65535 is refused, never
    /// narrowed to an identity and never written over.
    @Test func aHostileIdentityClaimIsRefused() async throws {
        try await withSyncScene("sync-claim") { scene in
            let bench = try await LargeInventory(path: scene.directory + "/inventory.sqlite", devices: 2, outcomes: 5)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let id = try await bench.inventory.benchID()
            _ = try await scene.server.psql(
                "INSERT INTO identity_claims VALUES (100, 70000, 'C2:00:00:00:00:00', '\(id)', '2026-12-02T10:00:00.000Z')"
            )
            let server = try PostgresConnection(scene.server.url)
            let error = #expect(throws: SyncError.self) {
                _ = try ServerIdentities.claim(
                    on: server, address: "C2:00:00:00:00:00", major: 100, preferred: 5, floor: 0, bench: id)
            }
            #expect(error?.message.contains("minor '70000' is outside 0–65535") == true, "\(String(describing: error))")
            await #expect(
                try scene.server.count("SELECT minor FROM identity_claims WHERE address = 'C2:00:00:00:00:00'")
                    == 70000)
            // Another device under major 100: the next minor is not 70001 truncated, nor 65535.
            let other = try ServerIdentities.claim(
                on: server, address: "C2:00:00:00:00:01", major: 100, preferred: 5, floor: 0, bench: id)
            #expect(other == 5)
        }
    }

    /// Every column `sync` reads from the server, filled with extreme and
    /// wrong values PostgreSQL takes: each sync ends with 0, 2 or 3 and a
    /// message, never a signal.
    @Test func extremeValuesInEveryPulledColumnNeverCrashASync() async throws {
        try await withSyncScene("sync-extremes") { scene in
            let server = scene.server
            let bench = try await LargeInventory(path: scene.directory + "/inventory.sqlite", devices: 20, outcomes: 50)
            let id = try await bench.inventory.benchID()
            func synced(_ what: String, expecting statuses: Set<Int32> = [0, 2, 3]) throws {
                let (status, _) = try scene.sync(bench).waitForExit()
                let signalled = status & 0x7F != 0 && status & 0x7F != 0x7F
                #expect(!signalled, "\(what): killed by signal \(status & 0x7F)")
                #expect(statuses.contains(status >> 8), "\(what): exit \(status >> 8): \(scene.stderr)")
                if status >> 8 != 0 { #expect(!scene.stderr.isEmpty, "\(what): no message") }
                #expect(!(scene.stdout + scene.stderr).contains("\u{1B}"), "\(what): an escape reached the terminal")
            }
            try synced("first", expecting: [0])
            let texts = [
                "''", #"E'\x1b]0;pwned\x07\x1b[2J'"#, "repeat('9', 100000)", #"E'\x01\x7f\u202e'"#, "'NaN'", "'-0'",
                "'../../../etc/passwd'", "' C0:FE:00:00:00:01'", "'{\"cornering\":1e999}'", "'[]'",
                "'2026-02-30T10:00:00.000Z'",
            ]
            let integers = [
                "9223372036854775807", "-9223372036854775808", "0", "-1", "65536", "99999999999", "NULL",
            ]
            let textColumns = [
                "address", "profile", "minor_policy", "overrides", "assigned_at", "assigned_by", "origin",
                "converged_at",
                "converged_bench",
            ]
            let integerColumns = ["major", "minor", "converged_run"]
            let valid: [String: String] = [
                "profile": "'car'", "minor_policy": "'auto'", "overrides": "'{}'",
                "assigned_at": "'2026-12-02T10:00:00.000Z'", "assigned_by": "'office@hq'", "origin": "'office'",
                "converged_at": "NULL", "converged_bench": "NULL", "major": "NULL", "minor": "NULL",
                "converged_run": "NULL",
            ]
            var number = 0
            func row(_ column: String, _ value: String) throws {
                number += 1
                var values = valid
                values[column] = value
                let address =
                    column == "address"
                    ? "\(value) || '\(number)'" : String(format: "'C3:00:00:00:%02X:%02X'", number / 256, number % 256)
                if column == "address" && value == "NULL" { return }
                let columns = textColumns + integerColumns
                _ = try server.psql(
                    "INSERT INTO fleet_assignments (\(columns.joined(separator: ", "))) VALUES ("
                        + ([address] + columns.dropFirst().map { values[$0] ?? "NULL" }).joined(separator: ", ")
                        + ") ON CONFLICT DO NOTHING")
            }
            for column in textColumns {
                for value in texts { try row(column, value) }
            }
            for column in integerColumns {
                for value in integers { try row(column, value) }
            }
            // Every column extreme at once, one row per value.
            for (index, text) in texts.enumerated() {
                let integer = integers[index % integers.count]
                _ = try await server.psql(
                    """
                    INSERT INTO fleet_assignments (address, profile, major, minor_policy, minor, overrides, assigned_at,
                        assigned_by, origin, converged_at, converged_bench, converged_run)
                    VALUES (\(text) || 'all\(index)', \(text), \(integer), \(text), \(integer), \(text), \(text), \(text),
                        \(text), \(text), \(text), \(integer))
                    """)
            }
            try synced("fleet_assignments", expecting: [2])
            #expect(scene.stderr.contains("server rows refused"), "\(scene.stderr)")

            // This bench's rows on the server: local ids and statuses no bench wrote.
            for (index, integer) in integers.enumerated() where integer != "NULL" {
                _ = try await server.psql(
                    """
                    INSERT INTO runs (bench_id, local_id, status) VALUES ('\(id)', \(integer), 'running')
                        ON CONFLICT DO NOTHING;
                    INSERT INTO outcomes (bench_id, local_id, status) VALUES ('\(id)', \(integer), \(texts[index]))
                        ON CONFLICT DO NOTHING;
                    INSERT INTO readings (bench_id, local_id, device) VALUES ('\(id)', \(integer), \(texts[index]))
                        ON CONFLICT DO NOTHING;
                    INSERT INTO identity_claims VALUES (\(integer), \(integer), \(texts[index]) || '\(index)', '\(id)',
                        \(texts[index])) ON CONFLICT DO NOTHING;
                    INSERT INTO devices (bench_id, address, major, minor) VALUES ('\(id)', \(texts[index]) || 'd\(index)',
                        \(integer), \(integer)) ON CONFLICT DO NOTHING;
                    """)
            }
            try synced("runs, outcomes, readings, identity_claims, devices", expecting: [2])
            #expect(scene.stderr.contains("sync: refused runs row"), "\(scene.stderr)")
            // Every row of the bench's own is on the server all the same.
            for table in ["runs", "outcomes", "readings"] {
                let here = try await bench.inventory.query("SELECT count(*) FROM \(table)").first?.first?.integer ?? -1
                let there = try await server.count(
                    """
                    SELECT count(*) FROM \(table) WHERE bench_id = '\(id)' AND local_id BETWEEN 1 AND \(here)
                    """)
                #expect(there == here, "\(table): \(there) of \(here) on the server")
            }

            // The schema version: negative, then absurdly new.
            _ = try await server.psql("UPDATE beaconbench_schema SET version = -version")
            try synced("a negative schema version", expecting: [3])
            #expect(scene.stderr.contains("not one beaconbench wrote"), "\(scene.stderr)")
            _ = try await server.psql("UPDATE beaconbench_schema SET version = 2147483647")
            try synced("a schema version from the future", expecting: [3])
            #expect(scene.stderr.contains("newer than this beaconbench"), "\(scene.stderr)")
        }
    }

    /// A sync stopped by SIGTERM or SIGINT at a moment an event marks (the
    /// server shows the sync's statement waiting on a lock the test holds
    /// on `readings`, so devices, runs and outcomes are sent and readings
    /// not): it says what it sent, exits 143 or 130, the server holds
    /// exactly the rows it said, no connection is left; the lock released,
    /// the next sync completes and the server holds the bench's rows exactly.
    @Test(arguments: [(SIGTERM, Int32(143), "SIGTERM"), (SIGINT, Int32(130), "SIGINT")])
    func aSyncStoppedByASignalSaysWhatItSentAndTheNextCompletes(
        signal: Int32, status: Int32, name: String
    ) async throws {
        try await withSyncScene("sync-signal") { scene in
            let server = scene.server
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 600, outcomes: 12_000)
            let id = try await bench.inventory.benchID()
            // The schema, made by another bench's sync.
            let other = try scene.beaconbench([
                "--inventory", scene.directory + "/other.sqlite", "sync", "--to", server.url,
            ])
            await #expect(other.waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let holder = try PostgresConnection(server.url)
            try holder.exec("BEGIN")
            try holder.exec("LOCK TABLE readings IN ACCESS EXCLUSIVE MODE")
            let holderPID = try #require(try holder.exec("SELECT pg_backend_pid()").first?.first ?? nil)

            let sync = try scene.beaconbench(["--inventory", bench.path, "--json", "sync", "--to", server.url])
            let waiting = """
                SELECT count(*) FROM pg_stat_activity
                WHERE application_name = 'beaconbench' AND wait_event_type = 'Lock' AND pid <> \(holderPID)
                """
            let deadline = ContinuousClock.now + .seconds(60)
            while sync.isRunning, ContinuousClock.now < deadline, try await server.count(waiting) == 0 {
                try await Task.sleep(for: .milliseconds(20))
            }
            try await #require(
                try server.count(waiting) == 1,
                "waited 60 s for the sync to wait on the lock on readings (running: \(sync.isRunning)): \(scene.stderr)"
            )
            sync.send(signal)
            let exit = await sync.waitForExit().status
            #expect(exit & 0x7F == 0, "ended by signal \(exit & 0x7F), not by exiting")
            #expect(exit >> 8 == status, "exit \(exit >> 8): \(scene.stderr)")

            let outcomes = try await bench.count("outcomes")
            let errors = scene.stderr
            #expect(
                errors.contains(
                    "sync: stopped by \(name): sent devices 600, runs 2, outcomes \(outcomes), readings 0, trips 0,"),
                "\(errors)")
            #expect(errors.contains("sync again to finish"), "\(errors)")
            let line = try #require(ConsoleFixture.jsonLines(scene.stdout, kind: "sync").first, "\(scene.stdout)")
            #expect(line["stopped_by"] as? String == name)
            #expect((line["sent"] as? [String: Int])?["outcomes"] == outcomes, "\(line)")
            let kinds = try JSONShapeTests.documentedKinds()
            for text in scene.stdout.split(separator: "\n") {
                #expect(JSONShapeTests.problems(String(text), kinds).isEmpty, "\(text)")
            }
            // What it said is what the server holds.
            await #expect(try server.count("SELECT count(*) FROM devices WHERE bench_id = '\(id)'") == 600)
            await #expect(try server.count("SELECT count(*) FROM outcomes WHERE bench_id = '\(id)'") == outcomes)
            // Its connection is gone (the cancelled statement rolled back).
            let connected = """
                SELECT count(*) FROM pg_stat_activity WHERE application_name = 'beaconbench' AND pid <> \(holderPID)
                """
            let gone = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < gone, try await server.count(connected) > 0 {
                try await Task.sleep(for: .milliseconds(20))
            }
            await #expect(try server.count(connected) == 0, "the stopped sync's connection is still open")

            try holder.exec("ROLLBACK")
            await #expect(try server.count("SELECT count(*) FROM readings WHERE bench_id = '\(id)'") == 0)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let differences = try await scene.differences(bench)
            #expect(differences.isEmpty, "\(differences.prefix(5))")
        }
    }
}
