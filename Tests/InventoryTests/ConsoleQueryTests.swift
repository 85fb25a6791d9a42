import Foundation
import Profiles
import SBeaconProtocol
import TestSupport
import Testing

@testable import Inventory

/// What the console (issue 16) asks of the inventory: pulled records, the
/// log with its limit said, forgetting a device, simulated runs. Each test
/// on a real SQLite file.
@Suite("Inventory queries for the console: records, log, forget, simulated runs", .timeLimit(.minutes(3)))
struct ConsoleQueryTests {
    static let a = "C1:02:11:22:33:44"
    static let b = "C1:02:55:66:77:88"
    /// Epoch milliseconds of power-on (2025-11-24T16:00:00Z).
    static let offset: Int64 = 1_764_000_000_000
    static func wall(_ beaconSeconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(offset + beaconSeconds * 1000) / 1000)
    }
    /// When the two batches were pulled: both after every real time above.
    static let firstPull = Date(timeIntervalSince1970: 1_764_100_000)
    static let secondPull = Date(timeIntervalSince1970: 1_764_103_600)

    /// Two devices. First pull: A's trips at 100 s and 200 s, A's braking
    /// event at 150 s, B's incident at 250 s, and B's cornering event at
    /// 50 s from a beacon whose clock was never set (offset 0). Second pull:
    /// A's trip at 300 s.
    static func pulled() async throws -> (Inventory, String) {
        let path = try InventoryTests.temporaryPath()
        let inventory = try Inventory(path: path)
        for address in [a, b] { try await inventory.recordDevice(DeviceRecord(address: address)) }
        _ = try await inventory.storeTrips(
            [TripRecord(index: 0, start: 100, end: 140), TripRecord(index: 1, start: 200, end: 260)], device: a,
            timeOffset: offset, pulledAt: firstPull)
        _ = try await inventory.storeEvents(
            [
                DrivingEvent(
                    index: 3, type: .braking, timestamp: 150, duration: 400, averageMagnitude: 350,
                    maximumMagnitude: 520, average: Vector(x: 1, y: -340, z: 20))
            ], device: a, timeOffset: offset, pulledAt: firstPull)
        _ = try await inventory.storeEvents(
            [
                DrivingEvent(
                    index: 0, type: .cornering, timestamp: 50, duration: 300, averageMagnitude: 310,
                    maximumMagnitude: 400, average: Vector(x: 300, y: 5, z: 0))
            ], device: b, timeOffset: 0, pulledAt: firstPull)
        _ = try await inventory.storeIncidents(
            [
                Incident(
                    id: 9, timestamp: 250, maximumResultant: 2900, averageResultant: 1800,
                    average: Vector(x: 10, y: 20, z: 30),
                    samples: [Vector(x: 1, y: 2, z: 3), Vector(x: -4, y: 5, z: -6)])
            ], device: b, timeOffset: offset, pulledAt: firstPull)
        _ = try await inventory.storeTrips(
            [TripRecord(index: 2, start: 300, end: 330)], device: a, timeOffset: offset, pulledAt: secondPull)
        return (inventory, path)
    }

    // MARK: Records

    @Test func recordsAreTypedNewestFirstWithRealTimesWhereKnown() async throws {
        let (inventory, _) = try await Self.pulled()
        let page = try await inventory.records(RecordQuery())
        #expect(!page.truncated)
        #expect(page.trips.count == 3 && page.events.count == 2 && page.incidents.count == 1)
        #expect(page.trips.map(\.startMilliseconds) == [300, 200, 100].map { Self.offset + $0 * 1000 })
        let trip = page.trips[2]
        #expect(trip.device == Self.a && trip.endMilliseconds == Self.offset + 140_000 && trip.beaconIndex == 0)
        #expect(trip.at == Self.wall(100) && trip.endAt == Self.wall(140) && trip.pulledAt == Self.firstPull)
        #expect(trip.durationMilliseconds == 40_000)

        let braking = try #require(page.events.first { $0.type == "braking" })
        #expect(braking.at == Self.wall(150) && braking.durationMilliseconds == 400)
        #expect(braking.averageMilliG == 350 && braking.maximumMilliG == 520 && braking.beaconIndex == 3)
        #expect(braking.x == 1 && braking.y == -340 && braking.z == 20)
        // The beacon's clock was never set: milliseconds since power-on, no real time.
        let cornering = try #require(page.events.first { $0.type == "cornering" })
        #expect(cornering.atMilliseconds == 50_000 && cornering.at == nil && cornering.device == Self.b)

        let incident = try #require(page.incidents.first)
        #expect(incident.incidentID == 9 && incident.at == Self.wall(250))
        #expect(incident.maximumResultant == 2900 && incident.averageResultant == 1800)
        #expect(incident.x == 10 && incident.y == 20 && incident.z == 30)
        #expect(incident.samples == "[[1,2,3],[-4,5,-6]]" && incident.sampleVectors == [[1, 2, 3], [-4, 5, -6]])

        // Over all kinds: the one without a real time sorts by when it was
        // pulled (after every real time here), then the real times.
        let all = page.all
        #expect(all.count == 6)
        #expect(all.first == .event(cornering))
        #expect(all.dropFirst().map(\.sortDate) == [300, 250, 200, 150, 100].map(Self.wall))
        #expect(all.dropFirst().map(\.kind) == [.trip, .incident, .trip, .event, .trip])
    }

    @Test func recordsFilterByKindDeviceAndTime() async throws {
        let (inventory, path) = try await Self.pulled()
        #expect(try await inventory.records(RecordQuery(kinds: [.trip])).count == 3)
        let eventsAndIncidents = try await inventory.records(RecordQuery(kinds: [.event, .incident]))
        #expect(eventsAndIncidents.trips.isEmpty && eventsAndIncidents.count == 3)

        // A device by its MAC ending or its address in any case.
        let ofB = try await inventory.records(RecordQuery(device: "55667788"))
        #expect(ofB.count == 2 && ofB.all.allSatisfy { $0.device == Self.b })
        #expect(try await inventory.records(RecordQuery(device: Self.a.lowercased())).count == 4)
        #expect(try await inventory.records(RecordQuery(device: "C1:02:00:00:00:00")).count == 0)

        // since <= real time < until; the record without a real time is
        // judged by when it was pulled, which is after `until`.
        let window = try await inventory.records(RecordQuery(since: Self.wall(150), until: Self.wall(300)))
        #expect(window.trips.map(\.at) == [Self.wall(200)])
        #expect(window.events.map(\.type) == ["braking"])
        #expect(window.incidents.count == 1)
        let afterPulls = try await inventory.records(RecordQuery(since: Self.firstPull.addingTimeInterval(-1)))
        #expect(afterPulls.count == 1 && afterPulls.events.first?.at == nil)

        // What a pull brought: stored at or after the run's start.
        let brought = try await inventory.records(RecordQuery(pulledSince: Self.secondPull))
        #expect(brought.count == 1 && brought.trips.first?.startMilliseconds == Self.offset + 300_000)
        let storedAgain = try await inventory.storeTrips(
            [TripRecord(index: 2, start: 300, end: 330)], device: Self.a, timeOffset: Self.offset,
            pulledAt: Self.secondPull.addingTimeInterval(60))
        #expect(storedAgain == 0)
        #expect(try await inventory.records(RecordQuery(pulledSince: Self.secondPull.addingTimeInterval(1))).count == 0)

        // Filters together, and on a read-only handle.
        let reader = try Inventory(path: path, readOnly: true)
        let combined = try await reader.records(
            RecordQuery(kinds: [.trip], device: "11223344", since: Self.wall(150), pulledSince: Self.firstPull))
        #expect(combined.trips.map(\.beaconIndex) == [2, 1])
    }

    @Test func recordsSayWhenTheLimitCut() async throws {
        let (inventory, _) = try await Self.pulled()
        let two = try await inventory.records(RecordQuery(limit: 2))
        #expect(two.truncated && two.count == 2)
        // The two newest over all kinds: the unset-clock event (by its pull), the 300 s trip.
        #expect(two.events.map(\.type) == ["cornering"] && two.trips.map(\.beaconIndex) == [2])
        let exact = try await inventory.records(RecordQuery(limit: 6))
        #expect(!exact.truncated && exact.count == 6)
        let trips = try await inventory.records(RecordQuery(kinds: [.trip], limit: 3))
        #expect(!trips.truncated && trips.count == 3)
        let none = try await inventory.records(RecordQuery(kinds: [.incident], limit: 0))
        #expect(none.truncated && none.count == 0)
    }

    // MARK: Log

    /// Seven outcomes: A's on the 1st–5th of January, B's on the 6th–7th.
    static func logged() async throws -> (Inventory, String) {
        let path = try InventoryTests.temporaryPath()
        let inventory = try Inventory(path: path)
        for address in [a, b] { try await inventory.recordDevice(DeviceRecord(address: address)) }
        let run = try await inventory.beginRun(.init(command: "log test"))
        for day in 1...7 {
            let step = try await inventory.beginStep(run: run, device: day <= 5 ? a : b, step: "read-info")
            // Backdated while it runs: once finished, it is in the ledger and cannot change.
            _ = try await inventory.query(
                "UPDATE outcomes SET started_at = ? WHERE id = ?",
                [.text("2026-01-0\(day)T10:00:00.000Z"), .integer(step)])
            try await inventory.finishStep(step, .ok, detail: "day \(day)")
        }
        return (inventory, path)
    }

    @Test func theLogFiltersByDeviceAndTimeAndSaysWhenItCut() async throws {
        let (inventory, path) = try await Self.logged()
        let ofA = try await inventory.outcomes(device: "11223344", since: nil, limit: 10)
        #expect(!ofA.truncated && ofA.rows.map(\.detail) == (1...5).reversed().map { "day \($0)" })
        let cut = try await inventory.outcomes(device: Self.a, since: nil, limit: 3)
        #expect(cut.truncated && cut.rows.map(\.detail) == ["day 5", "day 4", "day 3"])
        let exact = try await inventory.outcomes(device: Self.a, since: nil, limit: 5)
        #expect(!exact.truncated && exact.rows.count == 5)

        let since = try #require(Inventory.parseTimestamp("2026-01-04T00:00:00.000Z"))
        let recent = try await inventory.outcomes(device: nil, since: since, limit: 10)
        #expect(!recent.truncated && recent.rows.map(\.detail) == ["day 7", "day 6", "day 5", "day 4"])
        let recentOfA = try await inventory.outcomes(device: Self.a, since: since, limit: 1)
        #expect(recentOfA.truncated && recentOfA.rows.map(\.detail) == ["day 5"])
        #expect(recentOfA.rows.first?.startedDate == Inventory.parseTimestamp("2026-01-05T10:00:00.000Z"))
        #expect(try await inventory.outcomes(device: "C1:02:00:00:00:00", since: nil, limit: 10).rows.isEmpty)

        // The old form still answers, as does a read-only handle through the protocol.
        #expect(try await inventory.outcomes(device: Self.b, limit: 50).map(\.detail) == ["day 7", "day 6"])
        let reader: any InventoryReader = try Inventory(path: path, readOnly: true)
        let read = try await reader.outcomes(device: nil, since: since, limit: 2)
        #expect(read.truncated && read.rows.count == 2)
        #expect(try await reader.outcomes(device: nil, limit: 3).count == 3)
    }

    // MARK: Forget

    @Test func forgottenDevicesLeaveListsAuditsAndExportsAndKeepTheirHistory() async throws {
        let (inventory, path) = try await Self.pulled()
        let c = "C1:02:99:AA:BB:CC"
        var held = DeviceRecord(address: Self.a)
        held.identity = BeaconIdentity(major: 100, minor: 7)
        held.profile = "car"
        try await inventory.recordDevice(held)
        try await inventory.recordDevice(DeviceRecord(address: c))
        let run = try await inventory.beginRun(.init(command: "provision"))
        _ = try await inventory.reserveIdentity(
            device: Self.a, plan: IdentityPlan(major: 100, minor: .fixed(7), source: .profile("car")),
            holds: BeaconIdentity(major: 100, minor: 7), run: run)
        #expect(try await inventory.claimDevice(Self.a, run: run) == .claimed(from: nil))
        for step in ["identity", "apply car", "verify car"] {
            let id = try await inventory.beginStep(run: run, device: Self.a, step: step)
            try await inventory.finishStep(id, .changed)
        }
        try await inventory.recordReading(address: Self.a, at: Date(), battery: 90, rssi: -50, firmware: "1.0.8")
        try await inventory.recordReading(address: Self.a, at: Date(), battery: 89, rssi: -51, firmware: "1.0.8")
        // B may not have 100.7 while A is meant to.
        await #expect(throws: IdentityConflict.self) {
            _ = try await inventory.reserveIdentity(
                device: Self.b, plan: IdentityPlan(major: 100, minor: .fixed(7), source: .explicit),
                holds: BeaconIdentity(major: 1, minor: 1), run: run, commit: false)
        }

        let report = try await inventory.forget(["11223344", "C1:02:00:00:00:01"])
        #expect(report.forgotten == [Self.a] && report.unknown == ["C1:02:00:00:00:01"])
        #expect(report.alreadyForgotten.isEmpty && report.ambiguous.isEmpty)
        #expect(report.keptOutcomes == 3 && report.keptReadings == 2)
        #expect(report.keptTrips == 3 && report.keptEvents == 1 && report.keptIncidents == 0)
        #expect(report.releasedIdentities == 1)

        // Gone from what lists, audits and exports see.
        #expect(try await inventory.devices().map(\.address) == [Self.b, c])
        #expect(try await inventory.device(Self.a) == nil)
        #expect(try await inventory.device("11223344") == nil)
        #expect(try await inventory.auditSubjects().map(\.address) == [Self.b, c])
        let table = try await inventory.deviceTable()
        let addressColumn = try #require(table.columns.firstIndex(of: "address"))
        #expect(table.rows.map { $0[addressColumn].text } == [Self.b, c])
        #expect(!table.columns.contains("forgotten_at") && table.rows.allSatisfy { $0.count == table.columns.count })
        #expect(try await inventory.devicesByAddress()[Self.a] == nil)
        #expect(try await inventory.forgottenDevices().map(\.address) == [Self.a])
        // Its reservation and claim are released: B may have 100.7 now.
        #expect(try await inventory.meantIdentity(Self.a) == nil)
        #expect(
            try await inventory.query("SELECT count(*) FROM claims WHERE device = ?", [.text(Self.a)])
                .first?.first?.integer == 0)
        let given = try await inventory.reserveIdentity(
            device: Self.b, plan: IdentityPlan(major: 100, minor: .fixed(7), source: .explicit),
            holds: BeaconIdentity(major: 1, minor: 1), run: run)
        #expect(given.identity == BeaconIdentity(major: 100, minor: 7))
        #expect(try await inventory.highestMinor(major: 100) == 7)
        // Its history stays: the log, the records, the rows themselves.
        #expect(try await inventory.outcomes(device: Self.a, since: nil, limit: 10).rows.count == 3)
        #expect(try await inventory.records(RecordQuery(device: Self.a)).count == 4)
        #expect(
            try await inventory.query("SELECT count(*) FROM readings WHERE device = ?", [.text(Self.a)])
                .first?.first?.integer == 2)
        // A read-only handle sees the same.
        let reader = try Inventory(path: path, readOnly: true)
        #expect(try await reader.devices().map(\.address) == [Self.b, c])
        #expect(try await reader.auditSubjects().count == 2)

        // Again: already forgotten, nothing changes.
        let again = try await inventory.forget([Self.a])
        #expect(again.forgotten.isEmpty && again.alreadyForgotten == [Self.a] && again.keptOutcomes == 3)

        // Seen again: back, with what was known of it.
        var seen = DeviceRecord(address: Self.a)
        seen.battery = 88
        try await inventory.recordDevice(seen)
        let back = try #require(try await inventory.device(Self.a))
        #expect(back.profile == "car" && back.battery == 88)
        #expect(try await inventory.auditSubjects().map(\.address) == [Self.a, Self.b, c])
        #expect(try await inventory.forgottenDevices().isEmpty)

        // Worked on again (a claim): back too.
        #expect(try await inventory.forget([c]).forgotten == [c])
        #expect(try await inventory.device(c) == nil)
        _ = try await inventory.claimDevice(c, run: run)
        #expect(try await inventory.device(c) != nil)
    }

    @Test func anEndingSeveralDevicesShareForgetsNone() async throws {
        let inventory = try Inventory(path: try InventoryTests.temporaryPath())
        for address in ["C1:02:11:22:33:44", "C2:02:11:22:33:44"] {
            try await inventory.recordDevice(DeviceRecord(address: address))
        }
        let report = try await inventory.forget(["11223344", "C2:02:11:22:33:44", "C2:02:11:22:33:44"])
        #expect(report.ambiguous == ["11223344": ["C1:02:11:22:33:44", "C2:02:11:22:33:44"]])
        #expect(report.forgotten == ["C2:02:11:22:33:44"])
        #expect(try await inventory.devices().map(\.address) == ["C1:02:11:22:33:44"])
    }

    @Test func aForgottenDeviceIsNotUnfinishedProvisioning() async throws {
        let inventory = try Inventory(path: try InventoryTests.temporaryPath())
        try await inventory.recordDevice(DeviceRecord(address: Self.a))
        let run = try await inventory.beginRun(.init(command: "provision"))
        let step = try await inventory.beginStep(run: run, device: Self.a, step: "calibrate")
        try await inventory.finishStep(step, .failed, error: "motion detected")
        #expect(try await inventory.unfinishedProvisioning() == [Self.a])
        _ = try await inventory.forget([Self.a])
        #expect(try await inventory.unfinishedProvisioning().isEmpty)
    }

    // MARK: Simulated runs

    @Test func simulatedRunsAreFlaggedAndTheirOnlyDevicesNamed() async throws {
        let path = try InventoryTests.temporaryPath()
        let inventory = try Inventory(path: path)
        #expect(try await inventory.simulatedRunCount() == 0)
        let real = try await inventory.beginRun(.init(command: "run real.batch"))
        let simulated = try await inventory.beginRun(.init(command: "run sim.batch", simulated: true))
        let flags = try await inventory.query("SELECT id, simulated FROM runs ORDER BY id")
        #expect(flags.map { $0[1].integer } == [0, 1] && flags.map { $0[0].integer } == [real, simulated])
        #expect(try await inventory.simulatedRunCount() == 1)

        // A: real only; B: simulated only; C: both.
        let c = "C1:02:99:AA:BB:CC"
        for (device, runs) in [(Self.a, [real]), (Self.b, [simulated]), (c, [real, simulated])] {
            try await inventory.recordDevice(DeviceRecord(address: device))
            for run in runs {
                try await inventory.recordOutcomes(run: run, [(device, "read-info", .ok, nil)])
            }
        }
        let only = try await inventory.query("SELECT address FROM simulated_only_devices ORDER BY address")
        #expect(only.map { $0.first?.text } == [Self.b])
        let reader = try Inventory(path: path, readOnly: true)
        #expect(try await reader.simulatedRunCount() == 1)
    }

    /// A file of schema 3, opened read-only (not migrated): nothing is
    /// forgotten or simulated there, and every read still answers.
    @Test func aSchema3FileReadOnlyStillAnswers() async throws {
        let path = try InventoryTests.temporaryPath()
        do {
            let database = try Database(path: path)
            for migration in Schema.migrations.prefix(3) { try database.execute(migration.sql) }
            try database.execute("PRAGMA user_version = 3")
            try database.run(
                """
                INSERT INTO devices (address, mac_ending, first_seen, last_seen)
                VALUES ('C1:02:11:22:33:44', '11223344', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')
                """)
        }
        let reader = try Inventory(path: path, readOnly: true)
        #expect(try await reader.schemaVersion() == 3)
        #expect(try await reader.devices().map(\.address) == [Self.a])
        #expect(try await reader.auditSubjects().count == 1)
        #expect(try await reader.deviceTable().rows.count == 1)
        #expect(try await reader.simulatedRunCount() == 0)
        #expect(try await reader.records(RecordQuery()).count == 0)
        #expect(try await reader.outcomes(device: nil, since: nil, limit: 5).rows.isEmpty)
        // Opened for writing, it is migrated and the new columns are there.
        let writer = try Inventory(path: path)
        #expect(try await writer.schemaVersion() == Schema.migrations.count)
        #expect(try await writer.forget([Self.a]).forgotten == [Self.a])
    }
}
