import Foundation
import Inventory
import LocalBus
import SBeaconProtocol
import TestSupport
import Testing

@testable import InventorySync

/// Issue 16 against a real PostgreSQL: simulated runs held back from a
/// sync unless asked (and sent whole by a later sync that asks, though the
/// server's cursors have passed them), forgotten devices leaving the fleet
/// view, and the server answering the log and records queries.
@Suite(
    "issue 16: simulated runs, forgotten devices, records on the server", .serialized, .exclusive(.postgreSQL),
    .timeLimit(.minutes(10)))
struct Inventory16SyncTests {
    static let real = "C4:00:00:00:00:01"
    static let simulatedOnly = "C4:00:00:00:00:02"
    static let both = "C4:00:00:00:00:03"
    static let forgotten = "C4:00:00:00:00:04"
    static let offset: Int64 = 1_764_000_000_000

    @Test func simulatedRunsAreHeldBackUntilAskedThenSentWhole() async throws {
        try await withPostgres { server in try await Self.simulatedRunsAreHeldBackUntilAskedThenSentWhole(server) }
    }

    static func simulatedRunsAreHeldBackUntilAskedThenSentWhole(_ server: LocalPostgres) async throws {
        let directory = try scratchDirectory("inventory16-sync")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let inventory = try Inventory(path: directory + "/inventory.sqlite")
        let bench = try await inventory.benchID()

        for address in [Self.real, Self.simulatedOnly, Self.both, Self.forgotten] {
            try await inventory.recordDevice(DeviceRecord(address: address))
        }
        let realRun = try await inventory.beginRun(.init(command: "run provision.batch"))
        try await inventory.recordOutcomes(
            run: realRun,
            [
                (Self.real, "read-info", .ok, nil), (Self.both, "read-info", .ok, nil),
                (Self.forgotten, "scan", .ok, nil),
            ])
        try await inventory.endRun(realRun, .finished)
        let simulatedRun = try await inventory.beginRun(.init(command: "run pull-records.batch", simulated: true))
        try await inventory.recordOutcomes(
            run: simulatedRun, [(Self.simulatedOnly, "pull-trips", .ok, "2 trips"), (Self.both, "read-info", .ok, nil)])
        _ = try await inventory.reserveIdentity(
            device: Self.simulatedOnly, plan: IdentityPlan(major: 300, minor: .next, source: .explicit),
            holds: BeaconIdentity(major: 1, minor: 2), run: simulatedRun)
        try await inventory.recordReading(
            address: Self.simulatedOnly, at: Date(), battery: 50, rssi: -70, firmware: "1.0.8")
        try await inventory.recordReading(address: Self.real, at: Date(), battery: 90, rssi: -50, firmware: "1.0.8")
        _ = try await inventory.storeTrips(
            [TripRecord(index: 0, start: 10, end: 70), TripRecord(index: 1, start: 100, end: 160)],
            device: Self.simulatedOnly, timeOffset: Self.offset, pulledAt: Date())
        _ = try await inventory.storeTrips(
            [TripRecord(index: 0, start: 20, end: 30)], device: Self.real, timeOffset: Self.offset, pulledAt: Date())
        try await inventory.endRun(simulatedRun, .finished)
        #expect(try await inventory.forget([Self.forgotten]).forgotten == [Self.forgotten])

        // Held back: the simulated run, its outcomes and reservation, the
        // device only it knows with that device's reading and trips.
        let first = try await InventorySync.push(inventory, to: server.url)
        #expect(first.heldBackRuns == 1 && first.heldBackDevices == 1)
        func count(_ table: String, _ condition: String = "true") async throws -> Int {
            try await server.count("SELECT count(*) FROM \(table) WHERE bench_id = '\(bench)' AND \(condition)")
        }
        await #expect(try count("runs") == 1)
        await #expect(try count("runs", "simulated <> 0") == 0)
        await #expect(try count("outcomes") == 3)
        await #expect(try count("devices") == 3)
        await #expect(try count("devices", "address = '\(Self.simulatedOnly)'") == 0)
        await #expect(try count("readings") == 1)
        await #expect(try count("trips") == 1)
        await #expect(try count("identities") == 0)
        await #expect(try server.count("SELECT count(*) FROM identity_claims") == 0)
        // The forgotten device is on the server, marked, and out of the fleet view.
        await #expect(try count("devices", "address = '\(Self.forgotten)' AND forgotten_at IS NOT NULL") == 1)
        await #expect(try server.count("SELECT count(*) FROM fleet_devices") == 2)
        #expect(!(try await RowByRow.differences(inventory, server, bench: bench).isEmpty))

        // Again, and after a later real run: the same held back, the cursors past it.
        let again = try await InventorySync.push(inventory, to: server.url)
        #expect(again.heldBackRuns == 1 && again.sent["runs"] == 0 && again.sent["outcomes"] == 0)
        let laterRun = try await inventory.beginRun(.init(command: "audit"))
        try await inventory.recordOutcomes(run: laterRun, [(Self.real, "audit", .ok, "clean")])
        try await inventory.endRun(laterRun, .finished)
        try await inventory.recordReading(address: Self.real, at: Date(), battery: 89, rssi: -51, firmware: "1.0.8")
        _ = try await InventorySync.push(inventory, to: server.url)
        await #expect(try count("runs") == 2)
        await #expect(try count("outcomes") == 4)
        await #expect(try count("readings") == 2)

        // Asked: everything, though the server's cursors are past the
        // simulated run's rows: the server then holds exactly the bench's rows.
        let included = try await InventorySync.push(inventory, to: server.url, includeSimulated: true)
        #expect(included.heldBackRuns == 0 && included.heldBackDevices == 0)
        #expect(included.sent["runs"] == 1 && included.sent["outcomes"] == 2 && included.sent["readings"] == 1)
        #expect(try await RowByRow.differences(inventory, server, bench: bench) == [])
        await #expect(try count("runs", "simulated = 1") == 1)
        await #expect(try count("identities") == 1)
        await #expect(try server.count("SELECT count(*) FROM identity_claims WHERE major = 300") == 1)
        await #expect(try server.count("SELECT count(*) FROM fleet_devices") == 3)
        // Repeated: nothing changes.
        _ = try await InventorySync.push(inventory, to: server.url, includeSimulated: true)
        #expect(try await RowByRow.differences(inventory, server, bench: bench) == [])
        await #expect(try count("runs") == 3)
        await #expect(try count("outcomes") == 6)
        // Records synced get their sort key from the server's trigger
        // (OfficeReads.migration), whatever the sync sent.
        await #expect(try server.count("SELECT count(*) FROM trips WHERE listed_ms IS NOT NULL") == 3)
        await #expect(
            try server.count(
                "SELECT count(*) FROM trips WHERE listed_ms IS DISTINCT FROM beaconbench_listed_ms(start_ms, pulled_at)"
            )
                == 0)

        // Syncs that asked and were cut short, as the server was left:
        // after the outcomes but before the run; after the readings but
        // before the device. The next one finds them missing and sends them.
        // (A sync cut short never records how far its tables went,
        // `benches.tables_seq`: after the syncs that held rows back, there
        // was none, and the next sends every row.)
        _ = try await server.psql("UPDATE benches SET tables_seq = NULL WHERE bench_id = '\(bench)'")
        _ = try await server.psql("DELETE FROM runs WHERE bench_id = '\(bench)' AND simulated = 1")
        _ = try await server.psql(
            "DELETE FROM devices WHERE bench_id = '\(bench)' AND address = '\(Self.simulatedOnly)'")
        #expect(!(try await RowByRow.differences(inventory, server, bench: bench).isEmpty))
        let resumed = try await InventorySync.push(inventory, to: server.url, includeSimulated: true)
        #expect(resumed.sent["runs"] == 1 && resumed.sent["outcomes"] == 2 && resumed.sent["readings"] == 1)
        #expect(try await RowByRow.differences(inventory, server, bench: bench) == [])

        // The server answers the console's queries as the bench does.
        let fleet = try ServerInventory(url: server.url)
        #expect(try await fleet.devices().map(\.address) == [Self.real, Self.simulatedOnly, Self.both])
        #expect(try await fleet.auditSubjects().count == 3)
        let local = try await inventory.records(RecordQuery())
        var remote = try await fleet.records(RecordQuery())
        #expect(remote.trips.allSatisfy { $0.bench == bench })
        for index in remote.trips.indices { remote.trips[index].bench = nil }
        #expect(remote == local && remote.trips.count == 3)
        let cut = try await fleet.records(RecordQuery(kinds: [.trip], device: "00000002", limit: 1))
        #expect(cut.truncated && cut.trips.map(\.startMilliseconds) == [Self.offset + 100_000])
        let windowed = try await fleet.records(
            RecordQuery(
                since: Date(timeIntervalSince1970: Double(Self.offset) / 1000 + 15),
                until: Date(timeIntervalSince1970: Double(Self.offset) / 1000 + 100)))
        #expect(windowed.trips.map(\.startMilliseconds) == [Self.offset + 20_000])
        let log = try await fleet.outcomes(device: Self.real, since: nil, limit: 1)
        #expect(log.truncated && log.rows.map(\.step) == ["audit"])
        let all = try await fleet.outcomes(device: nil, since: nil, limit: 10)
        #expect(!all.truncated && all.rows.count == 6)
        let future = try await fleet.outcomes(device: nil, since: Date().addingTimeInterval(3600), limit: 10)
        #expect(future.rows.isEmpty && !future.truncated)
        // A forgotten device's history stays on the server too.
        #expect(try await fleet.outcomes(device: Self.forgotten, since: nil, limit: 10).rows.count == 1)
    }
}
