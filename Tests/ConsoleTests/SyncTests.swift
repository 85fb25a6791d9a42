import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// A bench's inventory against the server, row by row: every table, every
/// column, the bench's rows only (`id` locally is `local_id` there).
enum RowByRow {
    static let tables = ["devices", "runs", "outcomes", "readings", "trips", "events", "incidents"]

    /// The differences (empty when the server holds exactly the bench's rows).
    static func differences(
        _ inventory: Inventory, _ server: LocalPostgres, bench: String
    ) async throws -> [String] {
        var differences: [String] = []
        for table in tables {
            let columns = try await inventory.query(
                "SELECT name FROM pragma_table_info(?1) ORDER BY cid", [.text(table)]
            )
            .compactMap { $0.first?.text }
            // The ledger's own columns stay on the bench (its ledger is synced whole, docs/ledger.md).
            .filter { !$0.hasPrefix("ledger_") }
            let local = try await inventory.query("SELECT \(columns.joined(separator: ", ")) FROM \(table)").map {
                $0.map { $0.textForm ?? "\\N" }
            }
            let serverColumns = columns.map { $0 == "id" ? "local_id" : $0 }
            let remote = try await server.rows(
                "SELECT \(serverColumns.joined(separator: ", ")) FROM \(table) WHERE bench_id = '\(bench)'")
            // Rows by their bytes, never as `String`s (docs/development.md,
            // "Stored values are compared as bytes"): text the server holds
            // in another Unicode form is a difference.
            func bytes(_ row: [String]) -> [[UInt8]] { row.map { Array($0.utf8) } }
            func shown(_ row: [[UInt8]]) -> [String] { row.prefix(4).map { String(decoding: $0, as: UTF8.self) } }
            let localCounts = Dictionary(local.map { (bytes($0), 1) }, uniquingKeysWith: +)
            let remoteCounts = Dictionary(remote.map { (bytes($0), 1) }, uniquingKeysWith: +)
            if local.count != remote.count {
                differences.append("\(table): \(local.count) rows here, \(remote.count) on the server")
            }
            for (row, count) in localCounts where remoteCounts[row] != count {
                differences.append("\(table): missing or changed on the server: \(shown(row))")
            }
            for (row, count) in remoteCounts where localCounts[row] != count {
                differences.append("\(table): on the server only (or twice): \(shown(row))")
            }
        }
        return differences
    }
}

/// A bench inventory of many rows, written directly (for syncs that take
/// long enough to be cut short): devices, a finished run with `outcomes`
/// step outcomes whose text is made to trip up quoting, readings, and a
/// run still going with steps still running.
struct LargeInventory {
    let inventory: Inventory
    let path: String
    let openRun: Int64
    var running: [Int64] = []

    static let awkward = [
        "plain", "with \"quotes\"", "back\\slash", "{braces},commas", "NULL", "", "new\nline", "tab\there",
        "unicode: ‡ é 🚗", "'single' quotes", "\\N",
    ]

    init(path: String, devices: Int, outcomes: Int) async throws {
        self.path = path
        inventory = try Inventory(path: path)
        for number in 0..<devices {
            var device = DeviceRecord(address: Self.address(number))
            device.battery = UInt8(30 + number % 70)
            device.profile = number % 3 == 0 ? nil : "car"
            device.serial = Self.awkward[number % Self.awkward.count]
            try await inventory.recordDevice(device)
            try await inventory.recordReading(
                address: device.address, at: Date(), battery: device.battery, rssi: -60, firmware: "1.0.8")
        }
        let run = try await inventory.beginRun(.init(command: "large inventory"))
        var written = 0
        while written < outcomes {
            let count = min(1_000, outcomes - written)
            try await inventory.recordOutcomes(
                run: run,
                (written..<(written + count)).map { index in
                    (
                        device: index % 5 == 0 ? nil : Self.address(index % max(1, devices)),
                        step: "apply car", status: .changed,
                        detail: index % 7 == 0 ? nil : "\(index) " + Self.awkward[index % Self.awkward.count]
                    )
                })
            written += count
        }
        try await inventory.endRun(run, .finished)
        openRun = try await inventory.beginRun(.init(command: "still going"))
        for _ in 0..<3 { try await beginStep() }
    }

    static func address(_ number: Int) -> String {
        String(format: "C2:00:%02X:%02X:%02X:00", number >> 16 & 0xFF, number >> 8 & 0xFF, number & 0xFF)
    }

    /// More happens on the bench between syncs: a running step finishes, another begins, rows are added.
    mutating func moreWork(_ round: Int) async throws {
        if !running.isEmpty {
            try await inventory.finishStep(running.removeFirst(), .ok, detail: "finished in round \(round)")
        }
        try await beginStep()
        try await inventory.recordOutcomes(
            run: openRun, (0..<500).map { (device: nil, step: "round \(round)", status: .ok, detail: "r\($0)") })
    }

    private mutating func beginStep() async throws {
        running.append(try await inventory.beginStep(run: openRun, device: Self.address(0), step: "verify car"))
    }

    func count(_ table: String) async throws -> Int {
        let sql = table == "outcomes" ? "SELECT count(*) FROM outcomes" : "SELECT count(*) FROM devices"
        return Int(try await inventory.query(sql).first?.first?.integer ?? -1)
    }
}

func scratchDirectory(_ name: String) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// A test's own PostgreSQL server and scratch directory, where the built
/// beaconbench runs as a child process that can be killed.
struct SyncScene {
    let server: LocalPostgres
    let directory: String

    /// beaconbench with `arguments`; its output goes to `stdout` and `stderr`.
    func beaconbench(_ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            builtProduct("beaconbench"), arguments, standardOutput: directory + "/out",
            standardError: directory + "/err")
    }

    /// `beaconbench --inventory BENCH sync --to URL` (the server's URL unless given).
    func sync(_ bench: LargeInventory, to url: String? = nil, _ options: [String] = []) throws -> ChildProcess {
        try beaconbench(["--inventory", bench.path, "sync", "--to", url ?? server.url] + options)
    }

    /// Polls `condition` every 20 ms until it holds, for at most `cap`
    /// (a stall guard of minutes); fails naming `what` it waited for. The
    /// poll ends early, returning false, when `stopEarly` holds (the
    /// process it watches has ended, say).
    @discardableResult
    static func waitUntil(
        _ what: String, cap: Duration = .seconds(300), stopEarly: () -> Bool = { false },
        _ condition: () async throws -> Bool
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + cap
        while true {
            if try await condition() { return true }
            if stopEarly() { return false }
            guard ContinuousClock.now < deadline else {
                Issue.record("waited \(cap) for \(what)")
                return false
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The server's schema, made by another bench's sync (so that a table
    /// can be locked before the bench's sync begins).
    func makeSchema() async throws {
        let other = try beaconbench(["--inventory", directory + "/other.sqlite", "sync", "--to", server.url])
        let status = await other.waitForExit().status
        try #require(status >> 8 == 0, "the schema's sync: \(stderr)")
    }

    /// A connection of the test's own holding `readings` locked (ACCESS
    /// EXCLUSIVE, in an open transaction), on a thread of its own.
    func lockReadings() async throws -> ReadingsLock {
        let url = server.url
        return try await onThreadOfItsOwn { try ReadingsLock(url: url) }
    }

    /// Starts a sync of `bench` and returns once the server shows it waiting
    /// for `lock` (devices, runs and outcomes sent, readings not): the sync
    /// is then in the middle of its work at a moment the test chose, not
    /// after a guessed time. Fails, naming it, when that is not seen.
    func syncHeldAtReadings(
        _ bench: LargeInventory, _ lock: ReadingsLock, _ options: [String] = []
    ) async throws -> ChildProcess {
        let sync = try sync(bench, options)
        let waiting = """
            SELECT count(*) FROM pg_stat_activity
            WHERE application_name = 'beaconbench' AND wait_event_type = 'Lock' AND pid <> \(lock.pid)
            """
        let held = try await Self.waitUntil(
            "the sync to wait on the lock on readings (pg_stat_activity)", stopEarly: { !sync.isRunning }
        ) { try await server.count(waiting) == 1 }
        try #require(held, "the sync ended before it reached readings: \(stderr)")
        return sync
    }

    var stdout: String { (try? String(contentsOfFile: directory + "/out", encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: directory + "/err", encoding: .utf8)) ?? "" }

    /// The bench's rows that differ from the server's.
    func differences(_ bench: LargeInventory) async throws -> [String] {
        try await RowByRow.differences(bench.inventory, server, bench: try await bench.inventory.benchID())
    }
}

/// A connection holding `readings` locked until `release()`: a sync that
/// reaches readings waits there, and the server shows it waiting.
final class ReadingsLock: @unchecked Sendable {
    // Used by one thread at a time: made, then released, each on a thread of its own.
    private let connection: PostgresConnection
    let pid: String

    init(url: String) throws {
        connection = try PostgresConnection(url)
        try connection.exec("BEGIN")
        try connection.exec("LOCK TABLE readings IN ACCESS EXCLUSIVE MODE")
        guard let pid = try connection.exec("SELECT pg_backend_pid()").first?.first ?? nil else {
            throw LocalBusError("pg_backend_pid() answered nothing")
        }
        self.pid = pid
    }

    /// Ends the transaction (the lock goes with it); nothing when the
    /// connection is already gone (the server stopped).
    func release() async {
        await onThreadOfItsOwn { _ = try? self.connection.exec("ROLLBACK") }
    }
}

/// A PostgreSQL server of the test's own for `body`: started unless
/// `started` is false; stopped and removed after, also when `body` throws
/// (on a thread of its own: LocalBus/OffPool.swift).
func withPostgres(
    port: Int = 54_329, started: Bool = true, _ body: (LocalPostgres) async throws -> Void
) async throws {
    try await withResource(
        { () async throws -> LocalPostgres in
            let server = try await LocalPostgres.create(port: port)
            do {
                if started { try await server.start() }
            } catch {
                await server.remove()
                throw error
            }
            return server
        }, stop: { await $0.remove() }, body)
}

/// A scene for `body` (its server started unless `started` is false), removed after.
func withSyncScene(_ name: String, started: Bool = true, _ body: (SyncScene) async throws -> Void) async throws {
    try await withPostgres(started: started) { server in
        let directory = try scratchDirectory(name)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await body(SyncScene(server: server, directory: directory))
    }
}

@Suite("array parameters", .timeLimit(.minutes(2)))
struct PostgresArrayTests {
    @Test func everyElementQuotedEscapedAndNULFree() {
        #expect(PostgresArray.literal([String?]()) == "{}")
        #expect(PostgresArray.literal(["a", nil, "", "NULL"]) == #"{"a",NULL,"","NULL"}"#)
        #expect(
            PostgresArray.literal([#"say "hi""#, #"back\slash"#, "{x,y}"]) == #"{"say \"hi\"","back\\slash","{x,y}"}"#)
        #expect(PostgresArray.literal(["SB-1\u{0}\u{0}", "é‡🚗"]) == #"{"SB-1","é‡🚗"}"#)
    }
}

@Suite("several benches, one PostgreSQL server", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct SyncTests {
    /// Three benches provision separate fleets; beacon 4 is on the first
    /// bench and, later, on the second (as a van, another major). All sync
    /// (twice). The server then holds each bench's rows exactly, and read
    /// through `--inventory postgresql://…` it is one fleet: each beacon
    /// once, the shared one as the second bench left it, with both
    /// benches' history; the audit agrees with the benches' own.
    @Test func threeBenchesOneFleet() async throws {
        try await withPostgres { server in try await Self.threeBenchesOneFleet(server) }
    }

    /// The simulator's temporary timeout (30 s, as BlueZ) forgets a beacon
    /// not heard for that long while no one discovers; this test does not
    /// test forgetting, and its one-shot `require … ADDRESS` relies on the
    /// first bench's bluetoothd still knowing the shared beacon after the
    /// second bench's provisioning and syncs — which under load took more
    /// than 30 s, so it was forgotten and, not rediscovered within the
    /// run's 10 s seen timeout, failed "not seen".
    static let remembering = ["--temporary-timeout", "3600"]

    static func threeBenchesOneFleet(_ server: LocalPostgres) async throws {
        let shared = "C0:FE:00:00:00:04"

        var exports: [Int: [String: [String: Any]]] = [:]
        var audits: [Int: [String: [String: Any]]] = [:]
        var benchIDs: [Int: String] = [:]
        var sharedOutcomes = 0
        var localDevices = 0
        let fleets: [(numbers: [Int], options: [String])] = [
            ([1, 2, 3, 4, 5, 6], []),
            ([4, 20, 21, 22, 23], ["--set", "profile=van", "--set", "major=200"]),
            ([40, 41, 42, 43], []),
        ]
        func provision(_ bench: ConsoleFixture, _ index: Int) async throws {
            let run = try await bench.beaconbench(
                ["run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)"]
                    + fleets[index].options)
            #expect(run.status == 0, "bench \(index + 1): \(run.stderr)")
        }
        func sync(_ bench: ConsoleFixture, times: Int = 1) async throws {
            for _ in 0..<times {
                let sync = try await bench.beaconbench(["sync", "--to", server.url])
                #expect(sync.status == 0, "\(sync.stderr)")
                #expect(sync.stdout.hasPrefix("synced bench "), "\(sync.stdout)")
                #expect(!sync.stdout.contains(server.url) && !sync.stderr.contains(server.url))
            }
        }
        /// The bench's own view, and its rows compared with the server's.
        func collect(_ bench: ConsoleFixture, _ index: Int) async throws {
            let inventory = try Inventory(path: bench.inventoryPath)
            let id = try await inventory.benchID()
            benchIDs[index] = id
            let differences = try await RowByRow.differences(inventory, server, bench: id)
            #expect(differences.isEmpty, "bench \(index + 1): \(differences.prefix(5))")
            sharedOutcomes += try await inventory.outcomes(device: shared, limit: 10_000).count
            localDevices += try await inventory.devices().count
            let export = try await bench.beaconbench(["inventory", "export", "--json"])
            let objects = ConsoleFixture.jsonLines(export.stdout, kind: "device_row")
            exports[index] = Dictionary(uniqueKeysWithValues: objects.map { ($0["address"] as? String ?? "", $0) })
            let audit = try await bench.beaconbench(["--json", "audit"])
            #expect(audit.status == 2, "two beacons per bench could not be provisioned: \(audit.stderr)")
            audits[index] = Self.byAddress(ConsoleFixture.jsonLines(audit.stdout))
            #expect(audits[index]?.count == fleets[index].numbers.count, "\(audit.stdout)")
        }

        try await withNewFleet(numbers: fleets[0].numbers, simulatorOptions: Self.remembering) { first in
            try await provision(first, 0)
            try await sync(first, times: 2)
            try await withNewFleet(numbers: fleets[1].numbers, simulatorOptions: Self.remembering) { second in
                try await provision(second, 1)
                try await sync(second, times: 2)
                // Later still, the first bench sees the shared beacon again
                // and reads only its battery: that is all it may change.
                let again = try await first.beaconbench(["require", "battery>=20", shared])
                #expect(again.status == 0, "\(again.stderr)")
                try await sync(first)
                try await collect(second, 1)
            }
            try await collect(first, 0)
        }
        try await withNewFleet(numbers: fleets[2].numbers, simulatorOptions: Self.remembering) { third in
            try await provision(third, 2)
            // The third bench also pulls records from a beacon that drove.
            let connection = try await BusConnection.connect(.address(third.busAddress))
            _ = try await connection.call(
                SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Drive",
                [.string("C0:FE:00:00:00:28"), .uint32(40), .uint32(4)])
            await connection.close()
            let pull = try await third.beaconbench([
                "run", third.batch("pull-records.batch"), "--set", "scan=120s", "--set", "expect=\(third.beacons)",
            ])
            #expect(pull.status == 0, "\(pull.stderr)")
            try await sync(third, times: 2)
            try await collect(third, 2)
        }
        await #expect(try server.count("SELECT count(*) FROM benches") == 3)
        await #expect(try server.count("SELECT count(*) FROM trips") > 0, "the third bench's trips reached the server")

        // The office: the same commands against the server.
        let office = try await ConsoleFixture.start(nil)
        defer { office.stop() }
        func officeRun(_ arguments: [String]) async throws -> ToolOutput {
            try await runTool(
                builtProduct("beaconbench"), ["--inventory", server.url] + arguments, environment: office.environment)
        }
        let export = try await officeRun(["inventory", "export", "--json"])
        #expect(export.status == 0, "\(export.stderr)")
        let fleet = ConsoleFixture.jsonLines(export.stdout, kind: "device_row")
        let addresses = fleet.compactMap { $0["address"] as? String }
        #expect(addresses.count == Set(addresses).count, "each beacon once")
        #expect(addresses.count == localDevices - 1, "14 beacons: 6 + 5 + 4, one of them on two benches")
        // What the first bench observed of the shared beacon after the second provisioned it.
        let reread: Set<String> = ["battery", "battery_at", "last_seen"]
        for device in fleet {
            let address = device["address"] as? String ?? ""
            // The bench whose record wins: the second for the shared beacon, else the only one.
            let owner = address == shared ? 1 : try #require(exports.first { $0.value[address] != nil }?.key)
            let local = try #require(exports[owner]?[address])
            for (column, value) in local where column != "first_seen" {
                var expected = value
                if address == shared, reread.contains(column) { expected = exports[0]?[address]?[column] ?? NSNull() }
                #expect(
                    "\(expected)" == "\(device[column] ?? NSNull())",
                    "\(address) \(column): server \(device[column] ?? "nil")")
            }
            let benches = (device["benches"] as? String ?? "").split(separator: " ").map(String.init)
            if address == shared {
                #expect(benches == [benchIDs[0], benchIDs[1]].compactMap { $0 }, "the bench that saw it last first")
                #expect(device["profile"] as? String == "van" && device["major"] as? Int == 200)
                #expect(device["first_seen"] as? String == exports[0]?[address]?["first_seen"] as? String)
            } else {
                #expect(benches == [benchIDs[owner]].compactMap { $0 })
                #expect(device["first_seen"] as? String == local["first_seen"] as? String)
            }
        }

        // The audit from the server is the benches' audits, merged.
        let audit = try await officeRun(["--json", "audit"])
        #expect(audit.status == 2, "\(audit.stderr)")
        let merged = Self.byAddress(ConsoleFixture.jsonLines(audit.stdout))
        #expect(merged.count == addresses.count)
        for (address, report) in merged {
            let owner = address == shared ? 1 : try #require(audits.first { $0.value[address] != nil }?.key)
            let local = try #require(audits[owner]?[address])
            // The server also sees identities that benches which synced only
            // afterwards gave twice (duplicate-identity); the rest is the same.
            var fleetOnly = report
            fleetOnly["findings"] = (report["findings"] as? [[String: Any]])?.filter {
                $0["code"] as? String != "duplicate-identity"
            }
            fleetOnly["clean"] = (fleetOnly["findings"] as? [Any])?.isEmpty ?? true
            #expect(try Self.canonical(fleetOnly) == Self.canonical(local), "\(address)")
        }

        // History kept: the shared beacon's log holds both benches' steps.
        let log = try await officeRun(["--json", "log", shared])
        #expect(log.status == 0, "\(log.stderr)")
        let steps = ConsoleFixture.jsonLines(log.stdout)
        #expect(steps.count == sharedOutcomes)
        #expect(Set(steps.compactMap { $0["bench"] as? String }) == Set([benchIDs[0], benchIDs[1]].compactMap { $0 }))
        let show = try await officeRun(["inventory", "show", shared])
        #expect(
            show.stdout.contains("benches      \(benchIDs[0] ?? "?"), \(benchIDs[1] ?? "?")"), "\(show.stdout)")

        // The server is only read: device commands are refused before anything runs.
        let runsBefore = try await server.count("SELECT count(*) FROM runs")
        let refused = try await officeRun(["apply", "car", shared])
        #expect(refused.status == 1 && refused.stderr.contains("a bench's own inventory"), "\(refused.stderr)")
        let batch = office.directory + "/office.batch"
        try "audit\nselect all\napply car\n".write(toFile: batch, atomically: true, encoding: .utf8)
        let refusedBatch = try await officeRun(["run", batch])
        #expect(refusedBatch.status == 1, "\(refusedBatch.stderr)")
        #expect((refusedBatch.stdout + refusedBatch.stderr).contains("office.batch:2:"), "\(refusedBatch.stderr)")
        await #expect(try server.count("SELECT count(*) FROM runs") == runsBefore)
    }

    /// A JSON object as text with sorted keys, to compare.
    static func canonical(_ object: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
    }

    /// Audit lines by device.
    static func byAddress(_ lines: [[String: Any]]) -> [String: [String: Any]] {
        Dictionary(
            lines.compactMap { line in (line["device"] as? String).map { ($0, line) } },
            uniquingKeysWith: { first, _ in first })
    }

    /// A sync killed (SIGKILL) at random points, again and again, while the
    /// bench goes on working between attempts; then one that completes. The
    /// server holds every row once, as the bench holds it now.
    ///
    /// Each point is a state of the server, not a time: the kill comes as
    /// soon as the server holds a randomly chosen number of this bench's
    /// outcome rows more than before the attempt (the sync sends them in
    /// chunks of 5,000, each committed: the kill lands in a later chunk, a
    /// readings chunk, or the tail of the sync).
    @Test func syncsKilledAtRandomPointsLoseAndDuplicateNothing() async throws {
        try await withSyncScene("sync-kill") { scene in
            var bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 2_000, outcomes: 150_000)
            let id = try await bench.inventory.benchID()
            let outcomesThere = "SELECT count(*) FROM outcomes WHERE bench_id = '\(id)'"
            var killedWhileRunning = 0
            var serverCounts: [Int] = []
            var generator = SystemRandomNumberGenerator()
            for round in 0..<8 {
                let before = (try? await scene.server.count(outcomesThere)) ?? 0
                let missing = try await bench.count("outcomes") - before
                // Short of the last two chunks when there are more: that
                // kill surely finds the sync running (the first round's).
                let room = missing > 10_001 ? missing - 10_000 : max(1, missing - 1)
                let target = before + Int.random(in: 1...room, using: &generator)
                let sync = try scene.sync(bench)
                try await SyncScene.waitUntil(
                    "round \(round): the server to hold \(target) outcome rows", stopEarly: { !sync.isRunning }
                ) { (try? await scene.server.count(outcomesThere)) ?? 0 >= target }
                if sync.isRunning { killedWhileRunning += 1 }
                sync.send(SIGKILL)
                _ = await sync.waitForExit()
                await serverCounts.append((try? scene.server.count(outcomesThere)) ?? 0)
                try await bench.moreWork(round)
            }
            print(
                "syncs killed while running: \(killedWhileRunning) of 8; outcomes on the server after each: \(serverCounts)"
            )
            #expect(killedWhileRunning > 0, "no sync was cut short: the test would prove nothing")
            await #expect(try scene.sync(bench).waitForExit().status == 0)
            let differences = try await scene.differences(bench)
            #expect(differences.isEmpty, "after kills leaving \(serverCounts) outcomes: \(differences.prefix(5))")
            await #expect(
                try scene.server.count("SELECT count(*) FROM outcomes") == (try await bench.count("outcomes")))
        }
    }

    /// The server stops (immediate shutdown) in the middle of a sync — at
    /// a moment the test holds it: devices, runs and outcomes sent, the
    /// sync waiting on a lock the test holds on readings: after trying
    /// again for its budget (`--retry-for 5s`), exit 3 with a clear error, the bench's inventory
    /// unchanged to the byte; once the server is back, the next sync
    /// completes.
    @Test func serverStoppedDuringASyncIsExit3AndTheNextSyncCompletes() async throws {
        try await withSyncScene("sync-stop") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 1_000, outcomes: 30_000)
            try await scene.makeSchema()
            let before = try await runTool("/usr/bin/sqlite3", [bench.path, ".dump"])
            let lock = try await scene.lockReadings()
            let sync = try await scene.syncHeldAtReadings(bench, lock, ["--retry-for", "5s"])
            await scene.server.stop()
            let status = await sync.waitForExit().status
            #expect(status >> 8 == 3, "exit status \(status >> 8)")
            let errors = scene.stderr
            #expect(errors.contains("sync: lost the connection to the server"), "\(errors)")
            #expect(errors.contains("; trying again in ") && errors.contains(" s (attempt 2)"), "\(errors)")
            #expect(errors.contains("more attempts: cannot connect to the server"), "\(errors)")
            #expect(errors.contains("the local inventory is unchanged"))
            #expect(!errors.contains(scene.server.url))
            let after = try await runTool("/usr/bin/sqlite3", [bench.path, ".dump"])
            #expect(before.stdout == after.stdout, "the local inventory changed")

            try await scene.server.start()
            await #expect(try scene.sync(bench).waitForExit().status == 0)
            let differences = try await scene.differences(bench)
            #expect(differences.isEmpty, "\(differences.prefix(5))")
        }
    }

    /// A connection that drops for a moment in the middle of a sync (the
    /// server ends the sync's session, as after a network drop; the
    /// moment: the sync waiting on a lock the test holds on readings): the
    /// sync tries again by itself, resumes, and completes. (The server
    /// itself stays up: how long a restart takes is not this test's
    /// business — a server gone for longer than the retries is the test
    /// above.)
    @Test func aSyncRidesOutAShortOutage() async throws {
        try await withSyncScene("sync-outage") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 500, outcomes: 20_000)
            try await scene.makeSchema()
            let lock = try await scene.lockReadings()
            let sync = try await scene.syncHeldAtReadings(bench, lock)
            let ended = try await scene.server.count(
                """
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = 'beaconbench' AND pid <> \(lock.pid)
                """)
            #expect(ended == 1, "the sync's session")
            // The sync says it will try again; then the lock goes.
            try await SyncScene.waitUntil("the sync to say it tries again", stopEarly: { !sync.isRunning }) {
                scene.stderr.contains("trying again in")
            }
            await lock.release()
            await #expect(sync.waitForExit().status == 0, "\(scene.stderr)")
            #expect(scene.stderr.contains("sync: lost the connection to the server"), "\(scene.stderr)")
            #expect(scene.stderr.contains(" s (attempt 2)"), "\(scene.stderr)")
            let differences = try await scene.differences(bench)
            #expect(differences.isEmpty, "\(differences.prefix(5))")
        }
    }

    /// A server that an older beaconbench created (schema version 1, its
    /// rows) is migrated by the next sync and keeps its rows; a server
    /// that a newer one migrated is refused, for sync and for reading; a
    /// server no bench has synced to reads as an error, not as an empty fleet.
    @Test func theServerSchemaIsMigratedAndANewerOneRefused() async throws {
        try await withSyncScene("sync-migrate") { scene in
            let server = scene.server
            await #expect(
                try scene.beaconbench(["--inventory", server.url, "inventory", "list"]).waitForExit().status >> 8 == 3)
            #expect(scene.stderr.contains("holds no beaconbench inventory"), "\(scene.stderr)")

            _ = try await server.psql(ServerSchema.migrations[0].sql)
            _ = try await server.psql(
                """
                INSERT INTO beaconbench_schema VALUES (1);
                INSERT INTO benches VALUES ('old-bench', 'old-host', NULL);
                INSERT INTO devices (bench_id, address, mac_ending, first_seen, last_seen, profile)
                    VALUES ('old-bench', 'C3:00:00:00:00:01', '0001', '2026-01-01T00:00:00.000Z',
                        '2026-01-01T00:00:00.000Z', 'truck');
                """)
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 20, outcomes: 100)
            await #expect(try scene.sync(bench).waitForExit().status == 0)
            await #expect(try server.count("SELECT max(version) FROM beaconbench_schema") == ServerSchema.version)
            await #expect(try server.count("SELECT count(*) FROM fleet_devices WHERE benches = 'old-bench'") == 1)
            await #expect(try server.count("SELECT count(*) FROM fleet_devices") == 21)

            // A bench role that may write rows but create nothing syncs to a server already set up
            // (mapped to its bench: an unmapped role writes nothing, docs/office.md "Roles").
            _ = try await server.psql(
                "CREATE ROLE writer LOGIN; GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO writer;"
                    + " INSERT INTO bench_roles VALUES ('writer', '\(try await bench.inventory.benchID())', 'now')")
            let writer = server.url.replacingOccurrences(of: "user=bench", with: "user=writer")
            await #expect(try scene.sync(bench, to: writer).waitForExit().status == 0, "\(scene.stderr)")
            // A refusal (here: no such role) is reported at once, not tried again.
            let nobody = server.url.replacingOccurrences(of: "user=bench", with: "user=nobody")
            await #expect(try scene.sync(bench, to: nobody).waitForExit().status >> 8 == 3)
            #expect(
                scene.stderr.contains("does not exist") && !scene.stderr.contains("trying again"), "\(scene.stderr)")

            _ = try await server.psql("INSERT INTO beaconbench_schema VALUES (99)")
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 3)
            #expect(scene.stderr.contains("newer than this beaconbench"), "\(scene.stderr)")
            await #expect(try scene.beaconbench(["--inventory", server.url, "audit"]).waitForExit().status >> 8 == 3)
            #expect(scene.stderr.contains("newer than this beaconbench"), "\(scene.stderr)")
        }
    }

    /// Older benches against a newer server (docs/office.md): a version
    /// that records it still takes benches of this version
    /// (`compatible_from`) is synced to and read from unchanged — not
    /// migrated, its afterwork left alone; one that does not is refused,
    /// nothing changed on either side; a `compatible_from` out of its range
    /// is reported, not believed.
    @Test func aNewerServerThatTakesThisVersionIsSyncedToUnchanged() async throws {
        try await withSyncScene("sync-compatible") { scene in
            let server = scene.server
            var bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 20, outcomes: 100)
            await #expect(try scene.sync(bench).waitForExit().status == 0, "\(scene.stderr)")
            let ours = ServerSchema.version
            await #expect(
                try server.count("SELECT compatible_from FROM beaconbench_schema WHERE version = \(ours)")
                    == ServerSchema.compatibleFrom(ours))

            // A later beaconbench's additive version: a column this one does not know, an afterwork piece it never did.
            let next = ours + 1
            _ = try await server.psql(
                """
                ALTER TABLE devices ADD COLUMN later_column TEXT;
                INSERT INTO beaconbench_schema (version, compatible_from) VALUES (\(next), \(ours));
                """)
            try await bench.moreWork(1)
            await #expect(try scene.sync(bench).waitForExit().status == 0, "\(scene.stderr)")
            let differences = try await scene.differences(bench)
            #expect(differences.isEmpty, "\(differences.prefix(5))")
            await #expect(try server.count("SELECT max(version) FROM beaconbench_schema") == next)
            await #expect(
                try scene.beaconbench(["--inventory", server.url, "inventory", "list"]).waitForExit().status == 0,
                "\(scene.stderr)")

            // The version after takes only its own benches: refused, nothing sent.
            _ = try await server.psql(
                "INSERT INTO beaconbench_schema (version, compatible_from) VALUES (\(next + 1), \(next + 1))")
            let before = try await server.count("SELECT count(*) FROM outcomes")
            try await bench.moreWork(2)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 3)
            #expect(
                scene.stderr.contains(
                    "newer than this beaconbench knows (\(ours)); it takes benches of version \(next + 1) or later"),
                "\(scene.stderr)")
            await #expect(try server.count("SELECT count(*) FROM outcomes") == before)

            // What the server says is checked: a version from before the rule, or after itself.
            for hostile in ["3", String(next + 5)] {
                _ = try await server.psql(
                    "UPDATE beaconbench_schema SET compatible_from = \(hostile) WHERE version = \(next + 1)")
                await #expect(try scene.sync(bench).waitForExit().status >> 8 == 3)
                #expect(
                    scene.stderr.contains("says benches from version \(hostile) may sync")
                        && scene.stderr.contains("nothing was changed"), "\(scene.stderr)")
            }
            await #expect(try server.count("SELECT count(*) FROM outcomes") == before)
        }
    }

    /// The server down before a sync starts: exit 3, nothing changed here,
    /// and a password in the URL never repeated, not even in errors.
    @Test func serverDownIsExit3() async throws {
        try await withSyncScene("sync-down", started: false) { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 10, outcomes: 100)
            let before = try await bench.count("outcomes")
            let url = scene.server.url + "&password=s3cret-never-printed"
            await #expect(try scene.sync(bench, to: url).waitForExit().status >> 8 == 3)
            #expect(scene.stderr.contains("cannot connect to the server"), "\(scene.stderr)")
            #expect(!(scene.stderr + scene.stdout).contains("s3cret"))
            #expect(try await bench.count("outcomes") == before)
            // Reading a server that is down is exit 3 too.
            await #expect(try scene.beaconbench(["--inventory", url, "audit"]).waitForExit().status >> 8 == 3)
            #expect(!scene.stderr.contains("s3cret"))
        }
    }
}
