import Foundation
import SBeaconProtocol
import Synchronization
import Testing

@testable import Inventory

/// The fleet generator's writers (InventoryImport.swift): history with
/// explicit times, written through the inventory's own connection, so the
/// ledger records every row and `verifyLedger` proves the whole of it.
@Suite("Importing history: explicit times, every row in the ledger, deterministic", .timeLimit(.minutes(5)))
struct InventoryImportTests {
    /// A clock the test sets (whole seconds).
    final class TestClock: Sendable {
        let seconds = Mutex<Int64>(0)
        func set(_ milliseconds: Int64) { seconds.withLock { $0 = milliseconds / 1000 } }
        var date: Date { Date(timeIntervalSince1970: Double(seconds.withLock { $0 })) }
    }

    static let base: Int64 = 1_733_011_200_000  // 2024-12-01T00:00:00Z
    static let bench = "0f1e2d3c-4b5a-4697-8877-665544332211"

    static func address(_ number: Int) -> String {
        "D0:00:00:00:" + String(format: "%02X:%02X", number >> 8 & 0xFF, number & 0xFF)
    }

    /// Two days of a small bench: runs, devices, outcomes (one failed after
    /// retries, one interrupted), readings, then an identity, an
    /// assignment converged, and trips, through the inventory's own calls
    /// with the clock set. `variant` changes one reading.
    static func write(_ path: String, variant: Bool = false) async throws -> (Inventory, TestClock) {
        let clock = TestClock()
        clock.set(base)
        let inventory = try Inventory(path: path, clock: { clock.date }, benchID: bench)
        for day in 0..<2 {
            let dayStart = base + Int64(day) * 86_400_000
            var batch = Inventory.ImportBatch()
            batch.runs.append(
                Inventory.ImportedRun(
                    id: Int64(day + 1), startedAt: dayStart + 28_800_000, endedAt: dayStart + 30_000_000,
                    command: "run depot-provision.bb", operatorName: "li", host: "bench-000", pid: 4_242,
                    adapter: "hci0", status: day == 0 ? .failed : .interrupted))
            for number in 0..<40 {
                var device = DeviceRecord(
                    address: address(number), seenAt: Date(timeIntervalSince1970: Double(dayStart / 1000 + 28_900)))
                device.battery = UInt8(90 - day)
                device.firmware = FirmwareVersion(major: 1, minor: 0, patch: 8 + UInt8(day))
                batch.devices.append(device)
                for step in 0..<3 {
                    let start = dayStart + 29_000_000 + Int64(number * 10 + step) * 1_000
                    var end = Inventory.StepEnd(.changed, detail: "step \(step) of \(number)")
                    if number == 7 && step == 1 {
                        end = Inventory.StepEnd(.failed, error: "no reply", retries: 2)
                    } else if day == 1 && number == 39 && step == 2 {
                        end = Inventory.StepEnd(.interrupted, error: "the run was interrupted")
                    }
                    batch.outcomes.append(
                        Inventory.ImportedOutcome(
                            run: Int64(day + 1), device: address(number), step: "step \(step)", end,
                            startedAt: start, endedAt: start + 750))
                }
                batch.readings.append(
                    Inventory.ImportedReading(
                        device: address(number), at: dayStart + 40_000_000 + Int64(number) * 1_001,
                        battery: UInt8(80 + number % 7), rssi: Int16(-60 - number % 20),
                        firmware: variant && day == 1 && number == 3 ? "1.0.7" : "1.0.8"))
            }
            clock.set(dayStart + 86_399_000)
            try await inventory.importHistory(batch)
        }
        clock.set(base + 3_600_000)
        _ = try await inventory.reserveIdentity(
            device: address(0), plan: IdentityPlan(major: 1_000, minor: .next, source: .explicit),
            holds: BeaconIdentity(major: 0, minor: 0), run: 1)
        try await inventory.assign([
            Assignment(
                address: address(0), profile: "car", major: 1_000, assignedAt: Inventory.ledgerTime(clock.date),
                assignedBy: "li@bench-000")
        ])
        clock.set(base + 7_200_000)
        try await inventory.markConverged(address(0), run: 1)
        _ = try await inventory.storeTrips(
            [TripRecord(index: 0, start: 100, end: 900)], device: address(1), timeOffset: base - 86_400_000,
            pulledAt: clock.date)
        try await inventory.checkpoint()
        return (inventory, clock)
    }

    static let tables = [
        "devices", "runs", "outcomes", "readings", "trips", "identities", "assignments", "ledger", "ledger_nodes",
        "ledger_head", "meta",
    ]

    @Test func importedHistoryIsProvenEntryByEntry() async throws {
        let (inventory, _) = try await Self.write(try InventoryTests.temporaryPath())
        let verification = try await inventory.verifyLedger()
        #expect(verification.ok, "\(verification.findings.map(\.message))")
        // Every row is an entry: the genesis note, 40 device inserts and 40
        // updates, 2 runs, 240 outcomes, 80 readings, then the identity,
        // the assignment, its convergence, the trip.
        #expect(verification.size == 1 + 40 + 40 + 2 + 240 + 80 + 1 + 1 + 1 + 1)
        #expect(verification.inFlight == 0)
        #expect(try await inventory.benchID() == Self.bench)
        // The note says the ledger began with the inventory: no unproven history.
        let note = try await inventory.query("SELECT entry FROM ledger WHERE seq = 0").first?.first
        guard case .blob(let bytes) = note else {
            Issue.record("no entry 0")
            return
        }
        #expect(String(decoding: bytes, as: UTF8.self).contains("held nothing before"))
    }

    @Test func theTimesAreTheOnesGiven() async throws {
        let (inventory, _) = try await Self.write(try InventoryTests.temporaryPath())
        let run = try await inventory.query("SELECT started_at, ended_at, host, pid, status FROM runs WHERE id = 2")
        #expect(
            run == [
                [
                    .text("2024-12-02T08:00:00.000Z"), .text("2024-12-02T08:20:00.000Z"), .text("bench-000"),
                    .integer(4_242), .text("interrupted"),
                ]
            ])
        let outcome = try await inventory.query(
            "SELECT started_at, ended_at, duration_ms, retries, status FROM outcomes WHERE device = ? AND step = 'step 1' ORDER BY id",
            [.text(Self.address(7))])
        #expect(
            outcome.first == [
                .text("2024-12-01T08:04:31.000Z"), .text("2024-12-01T08:04:31.750Z"), .integer(750), .integer(2),
                .text("failed"),
            ])
        let reading = try await inventory.query(
            "SELECT at FROM readings WHERE device = ? ORDER BY id", [.text(Self.address(39))])
        #expect(reading == [[.text("2024-12-01T11:07:19.039Z")], [.text("2024-12-02T11:07:19.039Z")]])
        let device = try await inventory.query(
            "SELECT first_seen, last_seen, battery_at FROM devices WHERE address = ?", [.text(Self.address(5))])
        #expect(
            device == [
                [
                    .text("2024-12-01T08:01:40.000Z"), .text("2024-12-02T08:01:40.000Z"),
                    .text("2024-12-02T08:01:40.000Z"),
                ]
            ])
        // Rows stamped "now" take the clock: the identity's reservation,
        // the convergence, the ledger's entries of devices and runs.
        let reserved = try await inventory.query("SELECT reserved_at FROM identities")
        #expect(reserved == [[.text("2024-12-01T01:00:00.000Z")]])
        let converged = try await inventory.query("SELECT converged_at, converged_run FROM assignments")
        #expect(converged == [[.text("2024-12-01T02:00:00.000Z"), .integer(1)]])
        var times: Set<String> = []
        for row in try await inventory.query("SELECT entry FROM ledger ORDER BY seq") {
            guard case .blob(let bytes) = row.first, let stored = try? LedgerStorage.decode(bytes),
                let at = stored.at.text
            else { continue }
            times.insert(at)
        }
        #expect(
            times == [
                "2024-12-01T00:00:00.000Z", "2024-12-01T23:59:59.000Z", "2024-12-02T23:59:59.000Z",
                "2024-12-01T01:00:00.000Z", "2024-12-01T02:00:00.000Z",
            ])
    }

    @Test func theSameHistoryGivesTheSameTablesByteForByte() async throws {
        let (first, _) = try await Self.write(try InventoryTests.temporaryPath())
        let (second, _) = try await Self.write(try InventoryTests.temporaryPath())
        let (other, _) = try await Self.write(try InventoryTests.temporaryPath(), variant: true)
        for table in Self.tables {
            let one = try await first.tableDigest(table)
            let two = try await second.tableDigest(table)
            #expect(one.rows > 0, "\(table) is empty")
            #expect(one == two, "\(table) differs between two writes of the same history")
        }
        // One reading's firmware differs: its table, and the ledger that proves it.
        for table in ["readings", "ledger_head", "ledger_nodes"] {
            #expect(try await first.tableDigest(table) != other.tableDigest(table), "\(table)")
        }
        #expect(try await first.tableDigest("outcomes") == other.tableDigest("outcomes"))
        #expect(try await first.ledgerTreeHead() != other.ledgerTreeHead())
    }

    @Test func aBatchTooLargeOrBackwardsIsRefusedWhole() async throws {
        let clock = TestClock()
        clock.set(Self.base)
        let inventory = try Inventory(
            path: try InventoryTests.temporaryPath(), clock: { clock.date }, benchID: Self.bench)
        var batch = Inventory.ImportBatch()
        batch.devices = (0...Inventory.importLimit).map {
            DeviceRecord(address: Self.address($0 % 60_000), seenAt: clock.date)
        }
        await #expect(throws: InventoryImportError.self) { try await inventory.importHistory(batch) }
        batch = Inventory.ImportBatch()
        batch.devices = [DeviceRecord(address: Self.address(1), seenAt: clock.date)]
        batch.runs = [
            Inventory.ImportedRun(
                id: 1, startedAt: Self.base, endedAt: Self.base + 1, command: "x", operatorName: "li", host: "h",
                pid: 1, status: .finished)
        ]
        batch.outcomes = [
            Inventory.ImportedOutcome(
                run: 1, device: Self.address(1), step: "info", .init(.ok), startedAt: Self.base + 10,
                endedAt: Self.base)
        ]
        await #expect(throws: InventoryImportError.self) { try await inventory.importHistory(batch) }
        #expect(try await inventory.query("SELECT count(*) FROM devices") == [[.integer(0)]])
        #expect(try await inventory.ledgerTreeHead().size == 1)
    }
}
