import BeaconSimulator
import BlueZClient
import DBusBinding
import Foundation
import Profiles
import SBeaconProtocol
import TestSupport
import Testing
import Workbench

@Suite("Operations on one beacon, against the simulator", .timeLimit(.minutes(5)))
struct OperationTests {
    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    @Test func readInfoIsWhatTheBeaconHolds() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let state = bench.fleet[0]
            let info = try await bench.withBeacon(state) { try await $0.readInfo() }
            #expect(info.model == "SB-1")
            #expect(info.serial == "SB1-T-1")
            #expect(info.firmware == FirmwareVersion(major: 1, minor: 0, patch: 7))
            #expect(info.battery == 54 || info.battery == 55)
            #expect((7195...7300).contains(info.uptime))
            #expect(info.timeOffset == 0)
            #expect(info.config == .factoryDefault)
            #expect(info.identity == BeaconIdentity(major: 1, minor: 1))
            #expect(info.calibration.calibrated == false)
            #expect(info.tripStatus == .idle)
            #expect(info.tripInformation == TripInformation(trips: 0, incidents: 0, events: 0))
            // A live audit of what was read: factory defaults fail the car profile.
            let profiles = try ProfileLoader.loadAll(from: [
                URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                    .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("profiles").path
            ])
            let report = Auditor.audit(
                AuditSubject(address: state.address, info: info), profiles: profiles, profile: "car")
            #expect(
                report.findings.map(\.code) == [
                    "firmware-old", "not-calibrated", "config-differs", "config-differs", "config-differs",
                    "config-differs", "config-differs", "identity-differs",
                ])
            // Disconnected afterwards: in the simulator, and in the registry,
            // which hears of it by signal (its state has no event of its own
            // to wait for: polled).
            try await bench.control.waitFor(#"{"disconnected": "\#(state.address)"}"#)
            try await waitUntil("the registry to hear \(state.address) disconnected") {
                await bench.client.device(address: state.address)?.connected == false
            }
        }
    }

    @Test func batteryAndFirmwareFromAFreshBenchSummaryCostNoRead() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let state = bench.fleet[0]
            let truth = try await bench.truth(state)
            let (advert, read) = try await bench.withBeacon(state) { beacon in
                let before = await bench.daemon.activity.reads
                let battery = try await beacon.batteryLevel()
                let firmware = try await beacon.firmware()
                let fromAdvert = (battery, firmware, await bench.daemon.activity.reads - before)
                // Too old for the advert to count: both are read.
                let readBattery = try await beacon.batteryLevel(within: .zero)
                let readFirmware = try await beacon.firmware(within: .zero)
                return (fromAdvert, (readBattery, readFirmware, await bench.daemon.activity.reads - before))
            }
            #expect(advert.0.fromAdvert && advert.1.fromAdvert)
            #expect(advert.2 == 0, "no ATT read for what the advert said")
            #expect(read.0.fromAdvert == false && read.1.fromAdvert == false)
            #expect(read.2 == 2)
            // The advert says what the characteristics say.
            #expect(abs(Int(advert.0.0) - Int(read.0.0)) <= 1)
            #expect(advert.1.version == FirmwareVersion(major: 1, minor: 0, patch: 7))
            #expect(read.1.version == advert.1.version)
            #expect(truth.firmware == FirmwareVersion(major: 1, minor: 0, patch: 7))
        }
    }

    @Test func timeSyncWritesOnceAndThenLeavesItAlone() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let state = bench.fleet[0]
            // The time taken right after the uptime is read, as a run does:
            // on a loaded machine a time taken before the reads is off by
            // however long they took (this failed once at load 11, 2.4 s late).
            let first = try await bench.withBeacon(state) { try await $0.syncTime(clock: { Self.now }) }
            #expect(first.written)
            #expect(first.before == 0)
            // The real power-on time, give or take the whole seconds of uptime.
            #expect(abs(first.after - (try await bench.truth(state).poweredOnAt)) <= 2_000)
            #expect(try await bench.truth(state).timeOffset == first.after)
            let second = try await bench.withBeacon(state) { try await $0.syncTime(clock: { Self.now }) }
            #expect(!second.written)
            #expect(second.after == first.after)
        }
    }

    @Test func configAndIdentityAreWrittenOnlyWhenDifferentAndReadBack() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let state = bench.fleet[1]
            let van = DrivingBehaviourConfig(
                cornering: 420, braking: 480, acceleration: 380, duration: 350, enable: .all)
            let (config, identity) = try await bench.withBeacon(state) { beacon in
                (try await beacon.writeConfig(van), try await beacon.setIdentity(BeaconIdentity(major: 200, minor: 17)))
            }
            #expect(config.written && config.before == .factoryDefault && config.after == van)
            #expect(identity.written && identity.after == BeaconIdentity(major: 200, minor: 17))
            let truth = try await bench.truth(state)
            #expect(truth.config == van)
            #expect(truth.identity == BeaconIdentity(major: 200, minor: 17))
            // The advert follows.
            let advert = try #require(await bench.client.device(address: state.address)?.manufacturerData[0x0059])
            #expect(try BenchSummary(bytes: advert).configCRC == van.crc)
            let again = try await bench.withBeacon(state) { try await $0.writeConfig(van) }
            #expect(!again.written)
        }
    }

    @Test func aConfigReadBackOnTheLinkIsKnownUntilTheNextWrite() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let van = DrivingBehaviourConfig(
                cornering: 420, braking: 480, acceleration: 380, duration: 350, enable: .all)
            let seen = try await bench.withBeacon(bench.fleet[1]) { beacon in
                let fresh = beacon.confirmedConfig
                _ = try await beacon.writeConfig(van)
                let afterWrite = beacon.confirmedConfig
                try await beacon.reboot()
                return (fresh, afterWrite, beacon.confirmedConfig)
            }
            #expect(seen.0 == nil, "nothing read on a new link")
            #expect(seen.1 == van, "the read-back")
            #expect(seen.2 == nil, "forgotten once Device Control was written")
            // Another connection knows nothing of the last one.
            let next = try await bench.withBeacon(bench.fleet[1]) { $0.confirmedConfig }
            #expect(next == nil)
        }
    }

    @Test func calibrationAtRestAndMoving() async throws {
        try await withBench(fleet: knownFleet(moving: true)) { bench throws in
            let resting = try await bench.withBeacon(bench.fleet[1]) { try await $0.calibrate() }
            #expect(resting.calibrated)
            #expect(abs(resting.vector.magnitude - 1000) < 30)
            #expect(try await bench.truth(bench.fleet[1]).calibration == resting)
            let error = await #expect(throws: OperationError.self) {
                try await bench.withBeacon(bench.fleet[0]) { try await $0.calibrate() }
            }
            #expect(error == .calibrationFailed(address: bench.fleet[0].address, .motionDetected))
            #expect(try await bench.truth(bench.fleet[0]).calibration.calibrated == false)
        }
    }

    @Test func recordsArePulledCompleteAndClearedOnlyWhenAsked() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let state = bench.fleet[0]
            for _ in 0..<3 { try await bench.daemon.drive(state.address, minutes: 25, harshEvents: 6) }
            let truth = try await bench.truth(state)
            let (trips, events, incidents) = try await bench.withBeacon(state) { beacon in
                (try await beacon.pullTrips(), try await beacon.pullEvents(), try await beacon.pullIncidents())
            }
            #expect(trips == truth.trips)
            #expect(events == truth.events)
            #expect(incidents == truth.incidents)
            #expect(trips.allSatisfy { $0.end - $0.start == 25 * 60 })
            // Pulling changes nothing on the beacon.
            #expect(try await bench.truth(state).trips.count == 3)
            try await bench.withBeacon(state) { beacon in
                try await beacon.clear(.clearTrips)
                #expect(try await beacon.pullTrips().isEmpty)
                #expect(try await beacon.pullEvents().count == truth.events.count)
            }
        }
    }

    @Test func factoryResetNeedsItsConfirmation() async throws {
        try await withBench(fleet: knownFleet()) { bench throws in
            let state = bench.fleet[2]
            let van = DrivingBehaviourConfig(cornering: 999, braking: 999, acceleration: 999, duration: 99, enable: [])
            _ = try await bench.withBeacon(state) { try await $0.writeConfig(van) }
            let refused = await #expect(throws: OperationError.self) {
                try await bench.withBeacon(state) { try await $0.factoryReset(confirmed: false) }
            }
            #expect(refused == .confirmationRequired("factory reset of \(state.address)"))
            #expect(try await bench.truth(state).config == van)
            try await bench.withBeacon(state) { try await $0.factoryReset(confirmed: true) }
            #expect(try await bench.truth(state).config == .factoryDefault)
        }
    }

    @Test func withRealisticLatency() async throws {
        try await withBench(count: 2, configure: { $0.latency = .realistic }) { bench throws in
            let state = bench.fleet[0]
            let config = DrivingBehaviourConfig(
                cornering: 300, braking: 350, acceleration: 300, duration: 500, enable: .detection)
            let change = try await bench.withBeacon(state) { beacon in
                _ = try await beacon.readInfo()
                return try await beacon.writeConfig(config)
            }
            #expect(try await bench.truth(state).config == change.after)
            #expect(change.after == config)
        }
    }
}
