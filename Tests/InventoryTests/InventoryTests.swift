import Foundation
import Profiles
import SBeaconProtocol
import TestSupport
import Testing

@testable import Inventory

@Suite("The SQLite inventory: schema, durability, bound parameters", .timeLimit(.minutes(5)))
struct InventoryTests {
    static func temporaryPath() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inventory-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory + "/inventory.db"
    }

    @Test func migratesFromEmptyAndReopensIdempotently() async throws {
        let path = try Self.temporaryPath()
        let first = try Inventory(path: path)
        #expect(try await first.schemaVersion() == Schema.migrations.count)
        let bench = try await first.benchID()
        #expect(bench.count == 36)
        let second = try Inventory(path: path)
        #expect(try await second.schemaVersion() == Schema.migrations.count)
        #expect(try await second.benchID() == bench)
        let tables = try await second.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .compactMap { $0.first?.text }
        #expect(
            tables == [
                "assignments", "claims", "devices", "events", "identities", "incidents", "ledger", "ledger_checkpoints",
                "ledger_head", "ledger_nodes", "meta", "outcomes", "readings", "runs", "trips",
            ])
        #expect(try await second.query("PRAGMA journal_mode").first?.first?.text == "wal")
        #expect(try await second.query("PRAGMA foreign_keys").first?.first?.integer == 1)
    }

    /// `forEachRow` hands over each row of a read in order, with its
    /// parameters bound, and refuses a statement that writes (which `rows`
    /// would give its ledger transaction).
    @Test func forEachRowReadsRowByRowAndRefusesWrites() throws {
        let path = try Self.temporaryPath()
        let database = try Database(path: path)
        try database.execute("CREATE TABLE t (n INTEGER, s TEXT)")
        for n in 1...5 { _ = try database.run("INSERT INTO t VALUES (?, ?)", [.integer(Int64(n)), .text("row \(n)")]) }
        var seen: [[SQLiteValue]] = []
        try database.forEachRow("SELECT n, s FROM t WHERE n >= ? ORDER BY n", [.integer(3)]) { seen.append($0) }
        #expect(
            seen == [[.integer(3), .text("row 3")], [.integer(4), .text("row 4")], [.integer(5), .text("row 5")]])
        #expect(throws: SQLiteError.self) { try database.forEachRow("DELETE FROM t", []) { _ in } }
        #expect(try database.rows("SELECT count(*) FROM t") == [[.integer(5)]])
    }

    /// A file of schema version 1 (before observation times) opens as the
    /// current version with its rows kept and the times filled from
    /// `last_seen`; from then on each fact records when it was observed.
    @Test func migratesAVersion1File() async throws {
        let path = try Self.temporaryPath()
        do {
            let database = try Database(path: path)
            try database.execute(Schema.migrations[0].sql)
            try database.execute("PRAGMA user_version = 1")
            try database.run(
                """
                INSERT INTO devices (address, mac_ending, first_seen, last_seen, major, minor, firmware, battery,
                    battery_at)
                VALUES ('C1:00:00:00:00:01', '00000001', '2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z',
                    100, 7, '1.0.8', 80, '2026-02-01T00:00:00.000Z')
                """)
        }
        let inventory = try Inventory(path: path)
        #expect(try await inventory.schemaVersion() == Schema.migrations.count)
        let row = try #require(
            try await inventory.query(
                "SELECT identity_at, firmware_at, description_at, calibration_read_at, minor FROM devices"
            ).first)
        #expect(row[0].text == "2026-02-01T00:00:00.000Z" && row[1].text == "2026-02-01T00:00:00.000Z")
        #expect(row[2] == .null && row[3] == .null && row[4].integer == 7)

        var seen = DeviceRecord(address: "C1:00:00:00:00:01")
        seen.battery = 70
        try await inventory.recordDevice(seen)
        var read = DeviceRecord(address: "C1:00:00:00:00:01")
        read.identity = BeaconIdentity(major: 100, minor: 8)
        read.timeOffset = 1234
        try await inventory.recordDevice(read)
        let after = try #require(
            try await inventory.query(
                "SELECT identity_at, firmware_at, time_offset_at, battery_at, last_seen FROM devices"
            ).first)
        #expect(after[0] == after[4], "identity observed now")
        #expect(after[1].text == "2026-02-01T00:00:00.000Z", "firmware not read again")
        #expect(after[2] == after[4])
        #expect(after[3] != .null && after[3].text! <= after[4].text!)
    }

    @Test func theFileAndItsWALAreOwnerOnly() async throws {
        let path = try Self.temporaryPath()
        let inventory = try Inventory(path: path)
        let run = try await inventory.beginRun(.init(command: "test"))
        _ = try await inventory.beginStep(run: run, device: nil, step: "write something")
        for file in [path, path + "-wal", path + "-shm"] {
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(file)")
        }
    }

    @Test func valuesAreBoundNeverSpliced() async throws {
        let inventory = try Inventory(path: try Self.temporaryPath())
        let hostile = [
            "O'Brien's \"beacon\"", "x'); DROP TABLE devices; --", "semi;colon;", "nul\u{0}inside",
            String(repeating: "é€😀", count: 3_500), "",
        ]
        var device = DeviceRecord(address: "C1:00:00:00:00:01")
        device.serial = hostile[1]
        device.model = hostile[3]
        try await inventory.recordDevice(device)
        let run = try await inventory.beginRun(.init(command: hostile[0], operatorName: hostile[2]))
        for (index, text) in hostile.enumerated() {
            let step = try await inventory.beginStep(run: run, device: "C1:00:00:00:00:01", step: "step \(index)")
            try await inventory.finishStep(step, .changed, detail: text, error: text, before: text, after: text)
        }
        let details = try await inventory.query("SELECT detail, error, before, after FROM outcomes ORDER BY id")
        #expect(details.count == hostile.count)
        for (row, text) in zip(details, hostile) {
            #expect(row.allSatisfy { $0.text == text })
        }
        let stored = try await inventory.query(
            "SELECT serial, model FROM devices WHERE address = ?", [.text("C1:00:00:00:00:01")])
        #expect(stored.first?[0].text == hostile[1])
        #expect(stored.first?[1].text == hostile[3])
        let runRow = try await inventory.query("SELECT command, operator FROM runs")
        #expect(runRow.first?[0].text == hostile[0])
        #expect(runRow.first?[1].text == hostile[2])
        #expect(hostile[4].utf8.count > 10_000)
    }

    @Test func devicesKeepWhatIsNotUpdatedAndRecordsAreStoredOnce() async throws {
        let inventory = try Inventory(path: try Self.temporaryPath())
        var seen = DeviceRecord(address: "c1:00:00:00:00:02")
        seen.battery = 80
        seen.firmware = FirmwareVersion(major: 1, minor: 0, patch: 7)
        try await inventory.recordDevice(seen)
        var read = DeviceRecord(address: "C1:00:00:00:00:02")
        read.config = DrivingBehaviourConfig(
            cornering: 350, braking: 350, acceleration: 450, duration: 400, enable: .all)
        try await inventory.recordDevice(read)
        let row = try await inventory.query(
            "SELECT mac_ending, battery, firmware, config_acceleration, config_enable FROM devices")
        #expect(row.first == [.text("00000002"), .integer(80), .text("1.0.7"), .integer(450), .integer(7)])

        let trips = [TripRecord(index: 0, start: 100, end: 2800), TripRecord(index: 1, start: 3000, end: 3600)]
        let offset: Int64 = 1_769_767_200_000
        #expect(
            try await inventory.storeTrips(trips, device: "C1:00:00:00:00:02", timeOffset: offset, pulledAt: Date())
                == 2)
        #expect(
            try await inventory.storeTrips(trips, device: "C1:00:00:00:00:02", timeOffset: offset, pulledAt: Date())
                == 0)
        let first = try await inventory.query("SELECT start_ms, end_ms FROM trips ORDER BY start_ms").first
        #expect(first == [.integer(offset + 100_000), .integer(offset + 2_800_000)])

        let events = [
            DrivingEvent(
                index: 3, type: .braking, timestamp: 1500, duration: 450, averageMagnitude: 380,
                maximumMagnitude: 420, average: Vector(x: -150, y: 380, z: 50))
        ]
        #expect(
            try await inventory.storeEvents(events, device: "C1:00:00:00:00:02", timeOffset: offset, pulledAt: Date())
                == 1)
        #expect(
            try await inventory.storeEvents(events, device: "C1:00:00:00:00:02", timeOffset: offset, pulledAt: Date())
                == 0)
        #expect(
            try await inventory.query("SELECT type, maximum_mg, x_mg, at_ms FROM events").first
                == [.text("braking"), .integer(420), .integer(-150), .integer(offset + 1_500_000)])
        let incidents = [
            Incident(
                id: 7, timestamp: 99, maximumResultant: 3100, averageResultant: 1200, average: Vector(x: 1, y: 2, z: 3),
                samples: [Vector(x: 1, y: -1, z: 900), Vector(x: 2, y: 2, z: 2)])
        ]
        #expect(
            try await inventory.storeIncidents(
                incidents, device: "C1:00:00:00:00:02", timeOffset: offset, pulledAt: Date()) == 1)
        #expect(
            try await inventory.storeIncidents(
                incidents, device: "C1:00:00:00:00:02", timeOffset: offset, pulledAt: Date()) == 0)
        #expect(try await inventory.query("SELECT samples FROM incidents").first == [.text("[[1,-1,900],[2,2,2]]")])
    }

    /// A step's end, what was observed and what follows it commit together:
    /// the next step's `running` row (no ledger entry until it ends), or the
    /// remaining steps `skipped`; or nothing at all when any of it fails.
    @Test func endStepCommitsTheOutcomeWithWhatFollowsOrNothing() async throws {
        let path = try Self.temporaryPath()
        let inventory = try Inventory(path: path)
        let run = try await inventory.beginRun(.init(command: "steps", operatorName: "ana"))
        try await inventory.recordDevice(DeviceRecord(address: "C1:00:00:00:00:01"))
        func entries() async throws -> Int { try await inventory.ledgerTreeHead().size }
        func rows() async throws -> [[SQLiteValue]] {
            try await inventory.query(
                "SELECT id, step, status, detail, started_at IS NOT NULL, ended_at IS NULL, ledger_seq IS NULL FROM outcomes ORDER BY id"
            )
        }
        let first = try await inventory.beginStep(run: run, device: "C1:00:00:00:00:01", step: "a")
        var commits = await inventory.commits
        var size = try await entries()

        // .begin: the outcome, the device's facts, a reading and the next row, in one commit.
        var seen = DeviceRecord(address: "C1:00:00:00:00:01")
        seen.battery = 77
        let second = try await inventory.endStep(
            first, .init(.changed, detail: "done", durationMilliseconds: 3), observed: seen,
            reading: .init(battery: 77, rssi: -60, firmware: nil), next: .begin("b"))
        #expect(await inventory.commits == commits + 1)
        #expect(second == first + 1)
        // Entries: the device's update, the reading, the outcome; none for the running row.
        #expect(try await entries() == size + 3)
        #expect(
            try await rows() == [
                [.integer(first), .text("a"), .text("changed"), .text("done"), .integer(1), .integer(0), .integer(0)],
                [.integer(first + 1), .text("b"), .text("running"), .null, .integer(1), .integer(1), .integer(1)],
            ])
        #expect(
            try await inventory.query("SELECT run_id, device FROM outcomes WHERE id = ?", [.integer(first + 1)])
                == [[.integer(run), .text("C1:00:00:00:00:01")]])
        #expect(try await inventory.query("SELECT battery FROM devices") == [[.integer(77)]])
        #expect(try await inventory.query("SELECT battery, rssi FROM readings") == [[.integer(77), .integer(-60)]])

        // .skip: the remaining steps finished `skipped` with the reason, in the same commit.
        commits = await inventory.commits
        size = try await entries()
        let none = try await inventory.endStep(
            try #require(second), .init(.skipped, detail: "battery 10 %"),
            next: .skip(["c", "d"], reason: "battery 10 %"))
        #expect(none == nil)
        #expect(await inventory.commits == commits + 1)
        #expect(try await entries() == size + 3)
        let skipped = try await inventory.query(
            "SELECT step, status, detail, started_at = ended_at, duration_ms FROM outcomes WHERE id > ? ORDER BY id",
            [.integer(first + 1)])
        #expect(
            skipped == [
                [.text("c"), .text("skipped"), .text("battery 10 %"), .integer(1), .null],
                [.text("d"), .text("skipped"), .text("battery 10 %"), .integer(1), .null],
            ])

        // .none: the outcome alone.
        let last = try await inventory.beginStep(run: run, device: "C1:00:00:00:00:01", step: "e")
        #expect(try await inventory.endStep(last, .init(.failed, error: "gone", retries: 2)) == nil)
        #expect(
            try await inventory.query("SELECT status, error, retries FROM outcomes WHERE id = ?", [.integer(last)])
                == [[.text("failed"), .text("gone"), .integer(2)]])

        // A failure inside it stores nothing: ending a sealed row again is
        // refused by its trigger, and the device's facts and the next row
        // written before in that transaction go with it.
        commits = await inventory.commits
        size = try await entries()
        let count = try await inventory.query("SELECT count(*) FROM outcomes")
        var other = DeviceRecord(address: "C1:00:00:00:00:02")
        other.battery = 12
        await #expect(throws: SQLiteError.self) {
            try await inventory.endStep(first, .init(.ok), observed: other, next: .begin("again"))
        }
        await #expect(throws: InventoryStepError.self) {
            try await inventory.endStep(9999, .init(.ok), observed: other, next: .begin("again"))
        }
        #expect(await inventory.commits == commits)
        #expect(try await entries() == size)
        #expect(try await inventory.query("SELECT count(*) FROM outcomes") == count)
        #expect(
            try await inventory.query("SELECT count(*) FROM devices WHERE address = 'C1:00:00:00:00:02'") == [
                [.integer(0)]
            ])

        // recordStep: one finished row, one commit.
        commits = await inventory.commits
        let found = try await inventory.recordStep(
            run: run, device: nil, step: "find", .init(.failed, detail: "not seen", error: "not seen"))
        #expect(await inventory.commits == commits + 1)
        #expect(
            try await inventory.query(
                "SELECT step, status, error, started_at = ended_at, ledger_seq IS NOT NULL FROM outcomes WHERE id = ?",
                [.integer(found)]) == [[.text("find"), .text("failed"), .text("not seen"), .integer(1), .integer(1)]])
        #expect(try await inventory.verifyLedger().ok)
    }

    /// A claim may begin the device's first step in its own commit; a
    /// device another live process holds gets no row.
    @Test func aClaimBeginsTheFirstStepInItsCommit() async throws {
        let path = try Self.temporaryPath()
        let inventory = try Inventory(path: path)
        let run = try await inventory.beginRun(.init(command: "claims", operatorName: "ana"))
        let commits = await inventory.commits
        let (claim, row) = try await inventory.claimDevice("c1:00:00:00:00:09", run: run, beginning: "connect")
        #expect(claim == .claimed(from: nil))
        #expect(await inventory.commits == commits + 1)
        let id = try #require(row)
        #expect(
            try await inventory.query("SELECT run_id, device, step, status FROM outcomes WHERE id = ?", [.integer(id)])
                == [[.integer(run), .text("C1:00:00:00:00:09"), .text("connect"), .text("running")]])
        // Another run of a live process (this one) holds it: no claim, no row.
        let other = try await inventory.beginRun(.init(command: "other", operatorName: "bo"))
        let (held, none) = try await inventory.claimDevice("C1:00:00:00:00:09", run: other, beginning: "connect")
        guard case .heldBy(let holder) = held else {
            Issue.record("claimed twice: \(held)")
            return
        }
        #expect(holder.run == run && none == nil)
        #expect(try await inventory.query("SELECT count(*) FROM outcomes") == [[.integer(1)]])
        try await inventory.endRun(run, .interrupted)
        #expect(
            try await inventory.query("SELECT status FROM outcomes WHERE id = ?", [.integer(id)])
                == [[.text("interrupted")]])
        #expect(try await inventory.verifyLedger().ok)
    }

    @Test func aKilledWriterLosesNothingCommittedAndIsMarkedInterrupted() async throws {
        let writer = builtProduct("beaconbench-bench")
        var random = SystemRandomNumberGenerator()
        // The writer's own lines mark the moment: it is killed as soon as it
        // has said it committed a randomly chosen number of steps (0: as
        // soon as its run began), so every kill lands while it writes —
        // in the next step's transaction or between two.
        func committedSoFar(_ output: String) -> (began: Bool, committed: Int) {
            let lines = (try? String(contentsOfFile: output, encoding: .utf8))?.split(separator: "\n") ?? []
            let committed = lines.compactMap { $0.hasPrefix("committed ") ? Int($0.dropFirst(10)) : nil }.last ?? 0
            return (lines.contains { $0.hasPrefix("run ") }, committed)
        }
        for round in 0..<20 {
            let path = try Self.temporaryPath()
            let output = path + ".out"
            let target = Int.random(in: 0...60, using: &random)
            let process = try ChildProcess(writer, ["inventory-writer", path], standardOutput: output)
            let deadline = ContinuousClock.now + .seconds(300)
            while true {
                let (began, committed) = committedSoFar(output)
                if began && committed >= target { break }
                guard process.isRunning else {
                    Issue.record("round \(round): the writer ended by itself after \(committed) steps")
                    break
                }
                guard ContinuousClock.now < deadline else {
                    Issue.record("round \(round): waited 300 s for the writer to commit \(target) steps")
                    break
                }
                try await Task.sleep(for: .milliseconds(2))
            }
            process.send(SIGKILL)
            _ = await process.terminateReportingStatus(grace: .seconds(1))
            let committed = committedSoFar(output).committed

            let inventory = try Inventory(path: path)
            #expect(try await inventory.query("PRAGMA integrity_check").first?.first?.text == "ok", "round \(round)")
            let finished =
                try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'ok'")
                .first?.first?.integer ?? -1
            #expect(finished >= Int64(committed), "round \(round): \(committed) reported committed, \(finished) stored")
            #expect(
                try await inventory.query("SELECT count(*) FROM runs WHERE status = 'running'").first?.first?.integer
                    == 0)
            #expect(
                try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'running'").first?.first?
                    .integer == 0)
            let runs = try await inventory.query("SELECT status FROM runs").compactMap { $0.first?.text }
            #expect(runs.allSatisfy { $0 == "interrupted" }, "round \(round): \(runs)")
            // The writer's next step is begun with the last one's end: once
            // a step has ended there is always exactly one step in flight,
            // found `interrupted`; `ok` rows are those reported, or one more
            // (killed after a commit, before its line).
            let interrupted =
                try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'interrupted'")
                .first?.first?.integer ?? -1
            if committed >= 1 {
                #expect(interrupted == 1, "round \(round): \(committed) committed, \(interrupted) interrupted")
            } else {
                #expect(interrupted <= 1, "round \(round): \(interrupted) interrupted before the first end")
            }
            #expect(
                finished == Int64(committed) || finished == Int64(committed) + 1,
                "round \(round): \(committed) reported committed, \(finished) stored")
            // In order, none lost: ids 1…n, step k named `step k-1`.
            let ids =
                try await inventory.query(
                    "SELECT count(*), coalesce(min(id), 1), coalesce(max(id), 0), sum(step <> 'step ' || (id - 1)) FROM outcomes"
                ).first ?? []
            #expect(ids.count == 4 && ids[1] == .integer(1) && ids[2] == ids[0], "round \(round): \(ids)")
            #expect(ids.count == 4 && (ids[3] == .integer(0) || ids[3] == .null), "round \(round): \(ids)")
            // The ledger holds every change committed, and only those: a kill
            // never leaves a change without its entry or an entry without it.
            let ledger = try await inventory.verifyLedger()
            #expect(ledger.ok, "round \(round): \(ledger.findings.prefix(3))")
        }
    }

    /// `commits` counts the transactions that wrote (with the ledger on or
    /// off), not reads; `BEACONBENCH_STATS` lines say it.
    @Test func commitsAreCountedOncePerTransactionThatWrote() async throws {
        for ledger in [true, false] {
            let path = try Self.temporaryPath()
            let inventory = try Inventory(path: path, readOnly: false, recordsLedger: ledger)
            let opened = await inventory.commits
            #expect(opened > 0, "the migration commits")
            let run = try await inventory.beginRun(.init(command: "count", operatorName: "ana"))
            #expect(await inventory.commits == opened + 1, "ledger \(ledger)")
            try await inventory.recordOutcomes(
                run: run, [(nil, "a", .ok, nil), (nil, "b", .ok, nil), (nil, "c", .skipped, "why")])
            #expect(await inventory.commits == opened + 2, "ledger \(ledger): three rows, one transaction")
            _ = try await inventory.query("SELECT count(*) FROM outcomes")
            #expect(await inventory.commits == opened + 2, "ledger \(ledger): a read commits nothing")
            let step = try await inventory.beginStep(run: run, device: nil, step: "d")
            try await inventory.finishStep(step, .ok)
            #expect(await inventory.commits == opened + 4, "ledger \(ledger): begin, then finish")
            try await inventory.endRun(run, .finished)
            #expect(await inventory.commits == opened + 5, "ledger \(ledger)")
        }
        let stats = try Self.temporaryPath() + ".stats"
        Inventory.appendStats(run: 3, commits: 41, to: stats)
        Inventory.appendStats(run: 4, commits: 52, to: stats)
        #expect(
            try String(contentsOfFile: stats, encoding: .utf8)
                == "{\"run\":3,\"commits\":41}\n{\"run\":4,\"commits\":52}\n")
    }

    /// `BEACONBENCH_LEDGER=off` (benchmarks only): the rows are written, no
    /// entry is, and `verifyLedger` names them as not in the ledger.
    @Test func withTheLedgerOffRowsAreWrittenWithoutEntriesAndVerifyNamesThem() async throws {
        #expect(Inventory.recordsLedger(environment: ["BEACONBENCH_LEDGER": "off"]) == false)
        #expect(Inventory.recordsLedger(environment: [:]))
        #expect(Inventory.recordsLedger(environment: ["BEACONBENCH_LEDGER": "on"]))
        let path = try Self.temporaryPath()
        let inventory = try Inventory(path: path, readOnly: false, recordsLedger: false)
        let run = try await inventory.beginRun(.init(command: "run provision.batch", operatorName: "ana"))
        var device = DeviceRecord(address: "C1:00:00:00:00:01")
        device.battery = 90
        try await inventory.recordDevice(device)
        try await inventory.recordOutcomes(
            run: run, [("C1:00:00:00:00:01", "info", .ok, nil), ("C1:00:00:00:00:01", "sync-time", .changed, "t")])
        try await inventory.endRun(run, .finished)
        #expect(try await inventory.query("SELECT count(*) FROM outcomes").first?.first?.integer == 2)
        #expect(try await inventory.query("SELECT count(*) FROM ledger").first?.first?.integer == 0)
        #expect(try await inventory.query("SELECT count(*) FROM ledger_head").first?.first?.integer == 0)
        #expect(
            try await inventory.query("SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL").first?.first?
                .integer == 0)
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        #expect(!verification.ok)
        #expect(verification.size == 0)
        let messages = verification.findings.map(\.message)
        for row in ["runs 1 ", "devices \"C1:00:00:00:00:01\"", "outcomes 1 ", "outcomes 2 "] {
            #expect(messages.contains { $0.hasPrefix(row) && $0.contains("not in the ledger") }, "\(row): \(messages)")
        }
    }
}

@Suite("Audits from the inventory, and exports", .timeLimit(.minutes(2)))
struct InventoryAuditTests {
    @Test func theInventoryFeedsTheAuditAndExportsDevices() async throws {
        let inventory = try Inventory(path: try InventoryTests.temporaryPath())
        var good = DeviceRecord(address: "C1:00:00:00:00:01")
        good.battery = 90
        good.firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)
        good.calibration = CalibrationState(calibrated: true, calibratedAt: 60, vector: Vector(x: 0, y: 0, z: 1000))
        good.calibratedAt = Date()
        good.config = DrivingBehaviourConfig(
            cornering: 350, braking: 350, acceleration: 450, duration: 300, enable: [.detection, .lowPassFilter])
        good.profile = "car"
        try await inventory.recordDevice(good)
        var stale = DeviceRecord(address: "C1:00:00:00:00:02")
        stale.battery = 10
        stale.profile = "car"
        try await inventory.recordDevice(stale)
        let profiles = try ProfileLoader.loadAll(from: [ProfileTestsPaths.shipped])
        let reports = try await inventory.auditSubjects().map { Auditor.audit($0, profiles: profiles) }
        #expect(reports.map(\.address) == ["C1:00:00:00:00:01", "C1:00:00:00:00:02"])
        #expect(reports[0].findings == [])
        #expect(reports[1].findings == [.batteryLow(percent: 10, minimum: 30), .neverReadBack])
        let csv = try await inventory.deviceTable().csv()
        #expect(csv.hasPrefix("address,mac_ending,major,minor,"))
        #expect(csv.split(separator: "\r\n").count == 3)
        // The rows `inventory export --json` writes, one `device_row` each.
        let table = try await inventory.deviceTable()
        let decoded = table.rows.map { Dictionary(uniqueKeysWithValues: zip(table.columns, $0)) }
        #expect(decoded.count == 2)
        #expect(decoded.first?["address"]?.text == "C1:00:00:00:00:01")
        #expect(decoded.first?["config_braking"]?.integer == 350)
    }
}

@Suite("Inventory timestamps", .timeLimit(.minutes(2)))
struct TimestampTests {
    @Test func writtenAndParsedBack() {
        for seconds in [0.0, 1_769_767_200.123, 1_800_000_000.999, 951_782_400.5] {  // incl. 2000-02-29
            let date = Date(timeIntervalSince1970: seconds)
            let text = Inventory.timestamp(date)
            let parsed = Inventory.parseTimestamp(text)
            #expect(
                abs((parsed?.timeIntervalSince1970 ?? -1) - (seconds * 1000).rounded(.down) / 1000) < 0.0005, "\(text)")
        }
        #expect(Inventory.timestamp(Date(timeIntervalSince1970: 1_769_767_200.123)) == "2026-01-30T10:00:00.123Z")
        #expect(Inventory.parseTimestamp("garbage") == nil)
    }
}

enum ProfileTestsPaths {
    static let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("profiles").path
}
