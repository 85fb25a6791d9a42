import BeaconSimulator
import BlueZClient
import DBusBinding
import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import TestSupport
import Testing

@testable import Workbench

@Suite("The fleet runner over a simulated fleet", .timeLimit(.minutes(5)))
struct FleetRunnerTests {
    /// A failed step's read of the value it writes is not kept: the write
    /// may have landed before the link dropped (the fault matrix caught an
    /// inventory claiming factory thresholds on a beacon that held car).
    @Test func aFailedWriteStepForgetsWhatItReadBeforeWriting() {
        let car = Self.profiles["car"]!
        let read: [SBeacon.Observation] = [
            .battery(80), .config(.factoryDefault), .identity(BeaconIdentity(major: 1, minor: 1)), .timeOffset(5),
        ]
        #expect(
            FleetRunner.stillTrue(read, after: .apply(car)) == [
                .battery(80), .identity(.init(major: 1, minor: 1)), .timeOffset(5),
            ])
        #expect(
            FleetRunner.stillTrue(read, after: .syncTime) == [
                .battery(80), .config(.factoryDefault), .identity(.init(major: 1, minor: 1)),
            ])
        #expect(FleetRunner.stillTrue(read, after: .verify(car)) == read)
        #expect(FleetRunner.stillTrue(read, after: .calibrate) == read)
    }

    static let profiles = try! ProfileLoader.loadAll(from: [
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("profiles").path
    ])

    static var provision: [DeviceStep] {
        let car = profiles["car"]!
        return [
            .requireBattery(atLeast: 30), .requireFirmware(atLeast: FirmwareVersion(major: 1, minor: 0, patch: 8)),
            .syncTime, .calibrate, .identity(IdentityPlan(major: 100, minor: .next, source: .profile("car"))),
            .apply(car),
            .verify(car),
        ]
    }

    static func inventory() throws -> Inventory {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return try Inventory(path: directory + "/inventory.db")
    }

    @Test func provisionsAFleetThenFindsNothingToDo() async throws {
        try await withBench(count: 12, seed: 3) { bench throws in
            let inventory = try Self.inventory()
            let addresses = bench.fleet.map(\.address)
            let run = try await inventory.beginRun(.init(command: "provision"))
            let recaps = await FleetRunner(client: bench.client, inventory: inventory, run: run, concurrency: 5)
                .run(Self.provision, on: addresses)
            let car = Self.profiles["car"]!
            var provisioned: [String] = []
            for (state, recap) in zip(bench.fleet, recaps) {
                let truth = try await bench.truth(state)
                if state.battery < 30 || state.firmware < FirmwareVersion(major: 1, minor: 0, patch: 8) {
                    #expect(recap.changed == 0 && recap.failed == 0 && recap.skipped >= 5, "\(recap)")
                    #expect(truth.config == state.config, "a skipped device was written")
                } else if state.moving && !state.calibration.calibrated {
                    #expect(recap.failed == 1, "\(recap)")
                    #expect(recap.reason?.contains("motion detected") == true)
                } else {
                    #expect(recap.failed == 0, "\(recap)")
                    #expect(truth.config == car.config)
                    #expect(truth.identity.major == 100)
                    #expect(truth.calibration.calibrated)
                    provisioned.append(state.address)
                    // What the steps remembered (the profile applied, when it
                    // calibrated) is recorded with their outcomes.
                    let stored = try await inventory.query(
                        "SELECT config_braking, major, minor, profile, calibrated_at IS NOT NULL FROM devices WHERE address = ?",
                        [.text(state.address)])
                    #expect(
                        stored.first?.prefix(4) == [
                            .integer(Int64(car.config.braking)), .integer(100), .integer(Int64(truth.identity.minor)),
                            .text("car"),
                        ])
                    if !state.calibration.calibrated { #expect(stored.first?.last == .integer(1), "\(state.address)") }
                }
            }
            #expect(!provisioned.isEmpty, "\(recaps.map { $0.reason ?? "" })")
            // Minors are unique under the major.
            let minors = await bench.daemon.fleet().filter { $0.identity.major == 100 }.map(\.identity.minor)
            #expect(Set(minors).count == minors.count)
            // Every outcome is in the inventory, none left running.
            #expect(
                try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'running'").first?.first?
                    .integer == 0)

            // A second run: nothing changes on the provisioned devices.
            let before = await bench.daemon.fleet()
            let again = try await inventory.beginRun(.init(command: "provision again"))
            let second = await FleetRunner(client: bench.client, inventory: inventory, run: again, concurrency: 5)
                .run(Self.provision, on: provisioned)
            #expect(second.allSatisfy { $0.changed == 0 && $0.failed == 0 }, "\(second)")
            let after = await bench.daemon.fleet()
            #expect(before.map(\.config) == after.map(\.config))
            #expect(before.map(\.identity) == after.map(\.identity))
            #expect(before.map(\.calibration) == after.map(\.calibration))
        }
    }

    /// A real SBeacon's advert carries its iBeacon data and its scan
    /// response the bench summary; with DuplicateData bluetoothd's
    /// ManufacturerData is what the last report carried, so it alternates
    /// (seen through real bluetoothd, docs/realstack.md). The client keeps
    /// what it heard of each company: the low-battery beacon is skipped,
    /// never failed as "no iBeacon advert", and every other one provisioned.
    @Test func aBeaconAnnouncedLikeARealOneIsJudgedOnAllItsAdverts() async throws {
        try await withBench(count: 12, seed: 3, configure: { $0.splitAdverts = true }) { bench throws in
            let changes = try await bench.clientConnection.signals(
                matching: .propertiesChanged(interface: "org.bluez.Device1"))
            // The simulator announces as real bluetoothd does: one company a report.
            let signals = try await take(48, from: changes, "48 PropertiesChanged of Device1")
            let reports = try signals.map { try PropertiesChanged($0) }.filter { $0.changed["ManufacturerData"] != nil }
            #expect(reports.count >= 24, "\(reports.count) of 48 signals carried ManufacturerData")
            let companies = reports.map { Set(($0.changed["ManufacturerData"]?.uint16KeyedDictionary ?? [:]).keys) }
            #expect(companies.allSatisfy { $0.count == 1 }, "\(companies)")
            #expect(Set(companies.flatMap { $0 }) == [SBeaconUUID.appleCompanyID, SBeaconUUID.nordicCompanyID])
            // The client holds both, from the reports it heard.
            for state in bench.fleet {
                let device = try #require(await bench.client.device(address: state.address))
                let iBeacon = try IBeaconAdvert(
                    bytes: try #require(device.manufacturerData[SBeaconUUID.appleCompanyID]))
                #expect(iBeacon.identity == state.identity)
                let summary = try BenchSummary(
                    bytes: try #require(device.manufacturerData[SBeaconUUID.nordicCompanyID]))
                #expect(summary.battery == UInt8(state.battery))
            }
            let inventory = try Self.inventory()
            let run = try await inventory.beginRun(.init(command: "provision"))
            let recaps = await FleetRunner(client: bench.client, inventory: inventory, run: run, concurrency: 5)
                .run(Self.provision, on: bench.fleet.map(\.address))
            let old = FirmwareVersion(major: 1, minor: 0, patch: 8)
            let unfit = bench.fleet.filter { $0.battery < 30 || $0.firmware < old }
            try #require(!unfit.isEmpty, "the fleet has a beacon to skip")
            for (state, recap) in zip(bench.fleet, recaps) {
                if state.battery < 30 || state.firmware < old {
                    #expect(recap.failed == 0 && recap.skipped >= 5, "\(state.address): \(recap)")
                } else if !(state.moving && !state.calibration.calibrated) {
                    #expect(recap.failed == 0, "\(state.address): \(recap)")
                    #expect(try await bench.truth(state).identity.major == 100)
                }
            }
            #expect(recaps.allSatisfy { !($0.reason ?? "").contains("iBeacon") }, "\(recaps.map { $0.reason ?? "" })")
        }
    }

    /// A `require` not met writes the device's remaining steps `skipped`,
    /// with its reason, in its own commit: the run costs the same commits
    /// with five steps after it as with none. Each step's row is begun in
    /// the commit that ends the one before, so nothing is left running.
    @Test func aRequireNotMetSkipsTheRestInItsOwnCommit() async throws {
        try await withBench(count: 1, seed: 3) { bench throws in
            let inventory = try Self.inventory()
            let address = try #require(bench.fleet.first?.address)
            let car = Self.profiles["car"]!
            // No battery holds more than 100 %.
            let alone: [DeviceStep] = [.requireBattery(atLeast: 101)]
            let followed: [DeviceStep] = alone + [.syncTime, .calibrate, .apply(car), .verify(car), .info]
            var costs: [Int] = []
            var runs: [Int64] = []
            for steps in [alone, followed] {
                let run = try await inventory.beginRun(.init(command: "require"))
                runs.append(run)
                let before = await inventory.commits
                let recaps = await FleetRunner(client: bench.client, inventory: inventory, run: run, concurrency: 1)
                    .run(steps, on: [address])
                costs.append(await inventory.commits - before)
                #expect(recaps.first?.skipped == steps.count && recaps.first?.failed == 0, "\(recaps)")
            }
            #expect(costs[0] == costs[1], "commits: \(costs[0]) for the require alone, \(costs[1]) with five after it")
            let rows = try await inventory.query(
                "SELECT step, status, detail FROM outcomes WHERE run_id = ? ORDER BY id", [.integer(runs[1])])
            #expect(rows.map { $0[0].text ?? "" } == ["connect"] + followed.map(\.name))
            #expect(rows.dropFirst().allSatisfy { $0[1] == .text("skipped") }, "\(rows)")
            let reason = try #require(rows.dropFirst().first?[2].text)
            #expect(reason.contains("battery"), "\(reason)")
            #expect(rows.dropFirst().allSatisfy { $0[2] == .text(reason) }, "\(rows)")
            #expect(
                try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'running'").first?.first?
                    .integer == 0)
            #expect(try await inventory.verifyLedger().ok)
        }
    }

    @Test func aDryRunWritesNothingAndSaysWhatWouldChange() async throws {
        try await withBench(count: 6, seed: 3) { bench throws in
            let inventory = try Self.inventory()
            let before = await bench.daemon.fleet()
            let run = try await inventory.beginRun(.init(command: "dry run"))
            let recaps = await FleetRunner(
                client: bench.client, inventory: inventory, run: run, concurrency: 3, dryRun: true
            )
            .run(Self.provision, on: bench.fleet.map(\.address))
            #expect(recaps.allSatisfy { $0.changed == 0 })
            let after = await bench.daemon.fleet()
            #expect(before.map(\.config) == after.map(\.config))
            #expect(before.map(\.identity) == after.map(\.identity))
            #expect(before.map(\.timeOffset) == after.map(\.timeOffset))
            let diffs = try await inventory.query("SELECT detail FROM outcomes WHERE detail LIKE 'dry run:%'")
                .compactMap { $0.first?.text }
            #expect(diffs.contains { $0.hasPrefix("dry run: config: ") })
        }
    }
}
