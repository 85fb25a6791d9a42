import Foundation
import Inventory
import LocalBus
import Profiles
import SBeaconProtocol
import TestSupport
import Testing

@testable import InventorySync

/// The retry rules alone (no server): what PostgreSQL asks to retry, and
/// the waits (docs/office.md, "Sync at scale").
@Suite("sync: what is tried again, and when", .timeLimit(.minutes(1)))
struct SyncRetryRuleTests {
    @Test func theSQLStatesPostgreSQLAsksToRetryAreRetried() {
        for state in ["40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "08006", "08001"] {
            #expect(SyncError.retryable(sqlState: state), "\(state)")
            #expect(SyncError("refused", sqlState: state).isRetryable, "\(state)")
        }
        // A unique violation, a missing table, a syntax error, a cancel, none.
        for state in ["23505", "42P01", "42601", "57014", "22P02", nil] {
            #expect(!SyncError.retryable(sqlState: state), "\(state ?? "nil")")
            #expect(!SyncError("refused", sqlState: state).isRetryable, "\(state ?? "nil")")
        }
        #expect(SyncError("cannot connect", isConnectionFailure: true).isRetryable)
    }

    @Test func waitsDoubleUpToALimitWithHalfUpOrDownOfJitter() {
        let policy = RetryPolicy(budget: .seconds(120))
        #expect(policy.wait(before: 2, factor: 1) == .seconds(1))
        #expect(policy.wait(before: 3, factor: 1) == .seconds(2))
        #expect(policy.wait(before: 4, factor: 1) == .seconds(4))
        #expect(policy.wait(before: 7, factor: 1) == .seconds(16))
        #expect(policy.wait(before: 40, factor: 1) == .seconds(16))
        #expect(policy.wait(before: 2, factor: 0.5) == .milliseconds(500))
        #expect(policy.wait(before: 3, factor: 1.5) == .seconds(3))
        // Out-of-range factors are held to 0.5…1.5.
        #expect(policy.wait(before: 2, factor: 9) == .milliseconds(1_500))
        #expect(policy.wait(before: 2, factor: 0) == .milliseconds(500))
        for _ in 0..<100 { #expect((0.5...1.5).contains(RetryPolicy.jitter())) }
    }

    @Test func aRetryRunsOnlyWithinItsBudgetAndNotForARefusal() async throws {
        // Refused (not retryable): one attempt.
        var attempts = 0
        await #expect(throws: SyncError.self) {
            _ = try await RetryPolicy(budget: .seconds(60)).run(stop: nil, retrying: { _, _, _ in }) {
                (_: Int) async throws(SyncError) -> Int in
                attempts += 1
                throw SyncError("duplicate key", sqlState: "23505")
            }
        }
        #expect(attempts == 1)
        // A deadlock, then success: two attempts, one wait told.
        var waits: [Int] = []
        let value = try await RetryPolicy(budget: .seconds(60)).run(
            stop: nil, retrying: { _, _, attempt in waits.append(attempt) }
        ) { (attempt: Int) async throws(SyncError) -> Int in
            if attempt == 1 { throw SyncError("deadlock detected", sqlState: "40P01") }
            return attempt
        }
        #expect(value == 2 && waits == [2])
        // A budget shorter than the first wait: no retry, the error as it was.
        attempts = 0
        do {
            _ = try await RetryPolicy(budget: .milliseconds(100)).run(stop: nil, retrying: { _, _, _ in }) {
                (_: Int) async throws(SyncError) -> Int in
                attempts += 1
                throw SyncError("could not serialize access", sqlState: "40001")
            }
            Issue.record("a failure beyond the budget was not thrown")
        } catch {
            #expect(attempts == 1 && error.sqlState == "40001")
        }
    }

    @Test func aChangeSetReadsTheTableAndTheKeyOfEachEntry() {
        func entry(_ text: String) -> [UInt8] { Array(text.utf8) }
        let device = SyncChanges.tableAndKey(
            entry(
                #"{"v":1,"seq":4,"at":"2026-12-03T11:44:24.598Z","event":"device","table":"devices","op":"update","key":["C0:1E:6D:EA:89:86"],"row":{"battery":80}}"#
            ))
        #expect(device?.table == "devices" && device?.key == #"["C0:1E:6D:EA:89:86"]"#)
        let event = SyncChanges.tableAndKey(
            entry(
                #"{"v":1,"seq":9,"at":null,"event":"pull","table":"events","op":"insert","key":["C0:00:00:00:00:01",5,"brake]\"x",2],"row":{}}"#
            ))
        #expect(event?.table == "events" && event?.key == #"["C0:00:00:00:00:01",5,"brake]\"x",2]"#)
        let note = SyncChanges.tableAndKey(
            entry(#"{"v":1,"seq":0,"at":null,"event":"genesis","table":"","op":"note","key":[],"row":{}}"#))
        #expect(note == nil || note?.table == "")
        #expect(SyncChanges.tableAndKey(entry("not an entry")) == nil)
        var changes = SyncChanges()
        for _ in 0..<3 {
            changes.add(
                entry(
                    #"{"v":1,"seq":4,"at":null,"event":"device","table":"devices","op":"update","key":["C0:1E:6D:EA:89:86"],"row":{}}"#
                ), tables: ["devices"])
        }
        #expect(changes.keys["devices"] == [#"["C0:1E:6D:EA:89:86"]"#] && changes.entries == 3)
        #expect(SyncChanges.address(#"["C0:1E:6D:EA:89:86"]"#) == "C0:1E:6D:EA:89:86")
    }
}

/// Sync at scale against a server of the test's own: a re-sync with
/// nothing new writes nothing there; what changed after a sync arrives
/// with the next; a sync cut between the ledger and the tables converges;
/// retries ride out a server restart and count every attempt's rows; a
/// server that answers nothing does not hang a sync.
@Suite("sync at scale: O(changes), retried", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct SyncAtScaleTests {
    /// The data tables, each: its rows' count and a checksum of their
    /// physical identity (`ctid`, `xmin`): any row written (even to the
    /// same values) changes it.
    static func fingerprint(_ server: LocalPostgres) async throws -> [String] {
        let tables = [
            "devices", "runs", "outcomes", "readings", "trips", "events", "incidents", "identities", "identity_claims",
            "bench_ledgers", "bench_ledger_blocks", "fleet_assignments",
        ]
        return try await tables.asyncMap { table in
            let line = try await server.psql(
                "SELECT count(*) || ' ' || coalesce(sum(hashtext(ctid::text || ':' || xmin::text)), 0) FROM \(table)")
            return table + " " + line.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    static func trips(_ count: Int, from start: UInt32) -> [TripRecord] {
        (0..<count).map { (number: Int) -> TripRecord in
            let offset = UInt32(number) * 100
            return TripRecord(index: UInt8(number), start: start + offset, end: start + offset + 50)
        }
    }

    @Test func aReSyncWithNothingNewWritesNothingAndChangesArriveWithTheNext() async throws {
        try await withPostgres { server in
            let directory = try scratchDirectory("sync-scale")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            var bench = try await LargeInventory(path: directory + "/a.sqlite", devices: 300, outcomes: 2_000)
            let id = try await bench.inventory.benchID()
            for number in 0..<5 {
                _ = try await bench.inventory.storeTrips(
                    Self.trips(2, from: 10), device: LargeInventory.address(number), timeOffset: 1_000_000,
                    pulledAt: Date())
            }
            let first = try await InventorySync.push(bench.inventory, to: server.url)
            #expect(!first.changesOnly && first.sent["devices"] == 300 && first.sent["trips"] == 10, "\(first.sent)")
            let before = try await Self.fingerprint(server)

            // Nothing new: the changes only (none), the rows still `running`
            // sent again and written as nothing.
            let idle = try await InventorySync.push(bench.inventory, to: server.url)
            #expect(idle.changesOnly && idle.changesRead == 0, "\(idle)")
            for table in ["devices", "trips", "events", "incidents", "identities", "readings", "ledger"] {
                #expect(idle.sent[table] == 0, "\(table): \(idle.sent)")
            }
            #expect(idle.sent["outcomes"] == 3 && idle.sent["runs"] == 1, "the running rows: \(idle.sent)")
            #expect(try await Self.fingerprint(server) == before, "an idle re-sync wrote rows")
            // Every row sent again (--full): still nothing written.
            let full = try await InventorySync.push(bench.inventory, to: server.url, full: true)
            #expect(!full.changesOnly && full.sent["devices"] == 300, "\(full.sent)")
            #expect(try await Self.fingerprint(server) == before, "unchanged rows sent again were written")

            // Changes: a device updated, trips pulled, a step finished and more outcomes.
            var device = DeviceRecord(address: LargeInventory.address(7))
            device.battery = 3
            device.serial = "changed"
            try await bench.inventory.recordDevice(device)
            _ = try await bench.inventory.storeTrips(
                Self.trips(3, from: 5_000), device: LargeInventory.address(8), timeOffset: 1_000_000, pulledAt: Date())
            try await bench.moreWork(1)
            let next = try await InventorySync.push(bench.inventory, to: server.url)
            #expect(next.changesOnly && next.changesRead > 0, "\(next)")
            #expect((1...3).contains(next.sent["devices"] ?? 0), "only the devices changed: \(next.sent)")
            #expect(next.sent["trips"] == 3 && next.sent["outcomes"] ?? 0 >= 501, "\(next.sent)")
            #expect(try await RowByRow.differences(bench.inventory, server, bench: id) == [])
            await #expect(
                try server.count(
                    "SELECT count(*) FROM devices WHERE bench_id = '\(id)' AND serial = 'changed' AND battery = 3") == 1
            )
            let again = try await InventorySync.push(bench.inventory, to: server.url)
            #expect(again.sent["devices"] == 0 && again.sent["trips"] == 0, "\(again.sent)")

            // An assignment made on another bench arrives with the next
            // exchange, once; an idle exchange moves nothing.
            let other = try Inventory(path: directory + "/b.sqlite")
            _ = try await InventorySync.push(other, to: server.url)
            _ = try await ServerAssignments.exchange(bench.inventory, url: server.url, profiles: ["car", "van"])
            let idleExchange = try await ServerAssignments.exchange(
                bench.inventory, url: server.url, profiles: ["car", "van"])
            #expect(idleExchange.pushed == 0 && idleExchange.pulled == 0, "\(idleExchange)")
            _ = try await other.assign([
                Assignment(
                    address: LargeInventory.address(9), profile: "van", assignedAt: Inventory.now(),
                    assignedBy: "tech@b")
            ])
            let pushed = try await ServerAssignments.exchange(other, url: server.url, profiles: ["car", "van"])
            #expect(pushed.pushed == 1, "\(pushed)")
            let pulled = try await ServerAssignments.exchange(
                bench.inventory, url: server.url, profiles: ["car", "van"])
            #expect(pulled.pulled == 1 && pulled.pushed == 0, "\(pulled)")
            #expect(try await bench.inventory.assignment(for: LargeInventory.address(9))?.profile == "van")
            let quiet = try await ServerAssignments.exchange(
                bench.inventory, url: server.url, profiles: ["car", "van"])
            #expect(quiet.pulled == 0 && quiet.pushed == 0, "\(quiet)")
            // A later assignment here wins on the server, and the other bench takes it.
            _ = try await bench.inventory.assign([
                Assignment(
                    address: LargeInventory.address(9), profile: "car", assignedAt: Inventory.now(),
                    assignedBy: "tech@a")
            ])
            let won = try await ServerAssignments.exchange(bench.inventory, url: server.url, profiles: ["car", "van"])
            #expect(won.pushed == 1 && won.conflicts.count == 1, "\(won)")
            let taken = try await ServerAssignments.exchange(other, url: server.url, profiles: ["car", "van"])
            #expect(taken.pulled == 1, "\(taken)")
            #expect(try await other.assignment(for: LargeInventory.address(9))?.profile == "car")
        }
    }

    /// The office's desired state pulled is not pushed back (docs/ledger.md,
    /// "What is covered"; docs/office.md, "Sync at scale"): bench A pushes
    /// N assignments; bench B's sync pulls them without writing a ledger
    /// entry, and its re-sync pushes no entry; B still holds A's desired
    /// state (its assignments, its drift); a pulled one converged at B is
    /// one entry, reported; one B assigns again is pushed, and A, whose own
    /// row a pull replaces, pushes that one entry back.
    @Test func pulledAssignmentsAreNotPushedBackAsLedgerEntries() async throws {
        try await withPostgres { server in
            let directory = try scratchDirectory("sync-pulled")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let profiles: Set<String> = ["car", "van", "truck"]
            func sync(_ inventory: Inventory) async throws -> BenchSync.Outcome {
                try await BenchSync.run(
                    inventory, to: server.url, includeSimulated: true, profiles: profiles, stop: SyncStop())
            }
            func size(_ inventory: Inventory) async throws -> Int { try await inventory.ledgerTreeHead().size }
            let count = 1_000
            let a = try Inventory(path: directory + "/a.sqlite")
            _ = try await a.assign(
                (0..<count).map { number in
                    Assignment(
                        address: LargeInventory.address(number), profile: number % 2 == 0 ? "van" : "car",
                        major: 250, assignedAt: "2026-12-01T08:00:00.000Z", assignedBy: "tech@a")
                })
            let first = try await sync(a)
            #expect(first.exchange.pushed == count, "\(first.exchange)")
            #expect(first.report.sent["ledger"] ?? 0 >= count, "\(first.report.sent)")

            let b = try Inventory(path: directory + "/b.sqlite")
            var device = DeviceRecord(address: LargeInventory.address(4))
            device.profile = "car"
            device.config = DrivingBehaviourConfig(
                cornering: 300, braking: 300, acceleration: 300, duration: 500, enable: .init(rawValue: 7))
            try await b.recordDevice(device)
            let beforePull = try await size(b)
            let pulled = try await sync(b)
            #expect(pulled.exchange.pulled == count, "\(pulled.exchange)")
            #expect(try await size(b) == beforePull, "the pull wrote ledger entries")
            let again = try await sync(b)
            #expect(again.report.sent["ledger"] == 0, "\(again.report.sent)")
            #expect(again.exchange.pushed == 0 && again.exchange.pulled == 0, "\(again.exchange)")
            let quiet = try await sync(b)
            #expect(quiet.report.sent["ledger"] == 0 && quiet.exchange.pulled == 0, "\(quiet)")
            // B's desired state is A's, as before.
            let held = try #require(try await b.assignment(for: LargeInventory.address(4)))
            #expect(held.profile == "van" && held.major == 250 && held.source == .server, "\(held)")
            #expect(try await b.assignments().count == count)
            func profile(_ name: String) throws -> Profile {
                Profile(
                    name: name, description: name,
                    config: DrivingBehaviourConfig(
                        cornering: 500, braking: 550, acceleration: 450, duration: 150, enable: [.detection]),
                    requirements: .init(
                        minimumBatteryPercent: 40, minimumFirmware: try FirmwareVersion("1.1.0"),
                        calibrationRequired: true, maximumCalibrationAgeDays: 180),
                    identity: .init(major: 200, minor: .sequential))
            }
            let drift = try await b.drift(profiles: ["car": try profile("car"), "van": try profile("van")])
            #expect(drift.assigned == count && drift.unseen == count - 1, "\(drift)")
            #expect(
                drift.findings.contains { $0.device == LargeInventory.address(4) && $0.field == "profile" },
                "\(drift.findings)")
            #expect(try await b.verifyLedger().ok)

            // Converged at B: one entry, pushed, and the convergence reported.
            let run = try await b.beginRun(.init(command: "station"))
            try await b.markConverged(LargeInventory.address(4), run: run)
            try await b.endRun(run, .finished)
            let converged = try await sync(b)
            #expect(converged.exchange.converged == 1, "\(converged.exchange)")
            #expect((1...3).contains(converged.report.sent["ledger"] ?? 0), "\(converged.report.sent)")
            // Assigned again at B: pushed; A takes it, and its own row replaced is one entry.
            _ = try await b.assign([
                Assignment(
                    address: LargeInventory.address(9), profile: "truck", assignedAt: "2026-12-02T08:00:00.000Z",
                    assignedBy: "tech@b")
            ])
            let reassigned = try await sync(b)
            #expect(reassigned.exchange.pushed == 1 && reassigned.report.sent["ledger"] == 1, "\(reassigned)")
            let aSize = try await size(a)
            let taken = try await sync(a)
            #expect(taken.exchange.pulled == 1 && taken.exchange.pushed == 0, "\(taken.exchange)")
            #expect(try await size(a) == aSize + 1, "A's own row replaced by the pull: one entry")
            #expect(try await a.assignment(for: LargeInventory.address(9))?.profile == "truck")
            let back = try await sync(a)
            #expect(back.report.sent["ledger"] == 1 && back.exchange.pushed == 0, "\(back)")
            #expect(try await a.verifyLedger().ok)
            #expect(try await b.verifyLedger().ok)
            let verified = try ServerLedger.verify(url: server.url)
            #expect(verified.count == 2 && verified.allSatisfy(\.ok), "\(verified)")
        }
    }

    /// A sync killed after the ledger went up but before the trips did: the
    /// server's ledger is whole, its tables are not; the next sync finds
    /// the trips among the changes since the last complete sync, not
    /// since the ledger the server holds, and completes.
    @Test func aSyncCutBetweenTheLedgerAndTheTablesConverges() async throws {
        try await withSyncScene("sync-cut-tables") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 200, outcomes: 1_000)
            let id = try await bench.inventory.benchID()
            await #expect(try scene.sync(bench).waitForExit().status == 0, "\(scene.stderr)")
            _ = try await bench.inventory.storeTrips(
                Self.trips(4, from: 10), device: LargeInventory.address(3), timeOffset: 1_000_000, pulledAt: Date())
            try await bench.inventory.recordReading(
                address: LargeInventory.address(3), at: Date(), battery: 40, rssi: -70, firmware: "1.0.9")
            let lock = try await scene.lockReadings()
            let sync = try await scene.syncHeldAtReadings(bench, lock)
            sync.send(SIGKILL)
            _ = await sync.waitForExit()
            await lock.release()
            let size = try await bench.inventory.ledgerTreeHead().size
            await #expect(
                try scene.server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'") == size,
                "the ledger went up whole before the tables")
            await #expect(try scene.server.count("SELECT count(*) FROM trips WHERE bench_id = '\(id)'") == 0)
            await #expect(try scene.sync(bench).waitForExit().status == 0, "\(scene.stderr)")
            #expect(try await scene.differences(bench) == [])
        }
    }

    /// The server restarted under a sync (held at a moment the test chose):
    /// the sync tries again until it is back, completes, and its summary
    /// counts what every attempt sent (the ledger went up in the first).
    @Test func aSyncRidesOutAServerRestartAndCountsEveryAttempt() async throws {
        try await withSyncScene("sync-restart") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 500, outcomes: 12_000)
            try await scene.makeSchema()
            let lock = try await scene.lockReadings()
            let sync = try await scene.beaconbench([
                "--inventory", bench.path, "--json", "sync", "--to", scene.server.url,
            ])
            let waiting = """
                SELECT count(*) FROM pg_stat_activity
                WHERE application_name = 'beaconbench' AND wait_event_type = 'Lock' AND pid <> \(lock.pid)
                """
            try await SyncScene.waitUntil("the sync to wait on readings", stopEarly: { !sync.isRunning }) {
                try await scene.server.count(waiting) == 1
            }
            await scene.server.stop()
            try await SyncScene.waitUntil("the sync to say it tries again", stopEarly: { !sync.isRunning }) {
                scene.stderr.contains("trying again in")
            }
            try await scene.server.start()
            await #expect(sync.waitForExit().status == 0, "\(scene.stderr)")
            let report = try #require(ConsoleFixture.jsonLines(scene.stdout, kind: "sync").first, "\(scene.stdout)")
            let sent = report["sent"] as? [String: Any] ?? [:]
            let size = try await bench.inventory.ledgerTreeHead().size
            #expect(sent["ledger"] as? Int == size, "every attempt's entries counted: \(sent), ledger \(size)")
            #expect(sent["devices"] as? Int ?? 0 >= 500 && sent["outcomes"] as? Int ?? 0 >= 12_003, "\(sent)")
            #expect(try await scene.differences(bench) == [])
        }
    }

    /// A statement the server does not answer (here: it waits on a lock the
    /// test holds) is given up after the guard's limit (2 s here), the
    /// connection closed, and tried again; once the lock goes, the sync
    /// completes.
    @Test func aServerThatAnswersNothingDoesNotHangASync() async throws {
        try await withSyncScene("sync-guard") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 50, outcomes: 200)
            try await scene.makeSchema()
            let lock = try await scene.lockReadings()
            let sync = try ChildProcess(
                "/usr/bin/env",
                [
                    "BEACONBENCH_SYNC_STATEMENT_TIMEOUT=2", builtProduct("beaconbench"), "--inventory", bench.path,
                    "sync", "--to", scene.server.url,
                ], standardOutput: scene.directory + "/out", standardError: scene.directory + "/err")
            try await SyncScene.waitUntil("the guard to give a statement up", stopEarly: { !sync.isRunning }) {
                scene.stderr.contains("the server answered nothing for 2 s")
            }
            #expect(scene.stderr.contains("trying again in"), "\(scene.stderr)")
            await lock.release()
            await #expect(sync.waitForExit().status == 0, "\(scene.stderr)")
            #expect(try await scene.differences(bench) == [])
        }
    }
    /// Two benches moving claims to one identity at once: the test's own
    /// transaction moves another device's claim to the identity this
    /// bench reserved offline, and holds it; the bench's registration
    /// waits on it (seen on the server, not guessed), then meets the
    /// committed row (unique_violation) — run again, it leaves that
    /// identity to the device that has it, and the sync completes, no
    /// identity claimed twice.
    @Test func aClaimRaceInRegistrationIsRunAgainNotFailed() async throws {
        try await withSyncScene("sync-claim-race") { scene in
            let bench = try await LargeInventory(path: scene.directory + "/inventory.sqlite", devices: 3, outcomes: 10)
            let mine = LargeInventory.address(1)
            let reserved = try await bench.inventory.reserveIdentity(
                device: mine, plan: IdentityPlan(major: 300, minor: .fixed(7), source: .explicit),
                holds: BeaconIdentity(major: 1, minor: 1), run: nil)
            #expect(reserved.identity == BeaconIdentity(major: 300, minor: 7))
            try await scene.makeSchema()
            _ = try await scene.server.psql(
                """
                INSERT INTO benches VALUES ('other-bench', 'h', NULL);
                INSERT INTO identity_claims VALUES (300, 2, 'C9:00:00:00:00:01', 'other-bench', '2000-01-01T00:00:00.000Z');
                INSERT INTO identity_claims VALUES (300, 3, '\(mine)', 'old', '2000-01-01T00:00:00.000Z');
                """)
            let url = scene.server.url
            let hold = try await onThreadOfItsOwn { try ClaimHold(url: url) }
            let sync = try scene.sync(bench)
            let waiting = """
                SELECT count(*) FROM pg_stat_activity
                WHERE application_name = 'beaconbench' AND wait_event_type = 'Lock' AND pid <> \(hold.pid)
                """
            let waited = try await SyncScene.waitUntil(
                "the registration to wait on the held claim", stopEarly: { !sync.isRunning }
            ) { try await scene.server.count(waiting) == 1 }
            #expect(waited, "the sync did not wait on the claim: \(scene.stderr)")
            await hold.commit()
            await #expect(sync.waitForExit().status == 0, "\(scene.stderr)")
            await #expect(
                try scene.server.count(
                    "SELECT count(*) FROM identity_claims WHERE major = 300 AND minor = 7 AND address = 'C9:00:00:00:00:01'"
                )
                    == 1)
            await #expect(
                try scene.server.count("SELECT count(*) FROM identity_claims WHERE address = '\(mine)' AND minor = 3")
                    == 1)
        }
    }
}

/// A transaction of the test's own moving a claim to (300, 7) and holding
/// it until `commit()`.
final class ClaimHold: @unchecked Sendable {
    // Used by one thread at a time: made, then committed, each on a thread of its own.
    private let connection: PostgresConnection
    let pid: String

    init(url: String) throws {
        connection = try PostgresConnection(url)
        try connection.exec("BEGIN")
        try connection.exec("UPDATE identity_claims SET minor = 7 WHERE address = 'C9:00:00:00:00:01'")
        guard let pid = try connection.exec("SELECT pg_backend_pid()").first?.first ?? nil else {
            throw LocalBusError("pg_backend_pid() answered nothing")
        }
        self.pid = pid
    }

    func commit() async {
        await onThreadOfItsOwn { _ = try? self.connection.exec("COMMIT") }
    }
}

extension Sequence {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var values: [T] = []
        for element in self { values.append(try await transform(element)) }
        return values
    }
}
