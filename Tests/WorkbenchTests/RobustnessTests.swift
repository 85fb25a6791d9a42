import BeaconSimulator
import BlueZClient
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing
import Workbench

@Suite("Operations under the radio's faults and a bluetoothd restart", .timeLimit(.minutes(5)))
struct RobustnessTests {
    /// Each fault kind at 30 % with a fixed seed, ten config writes: each
    /// either succeeds and the beacon holds what was reported, or fails with
    /// a typed error — and a reported write is always really there.
    @Test(arguments: Fault.allCases.filter { $0 != .stalledReply })
    func eachFaultKindGivesSuccessOrATypedError(_ fault: Fault) async throws {
        try await withBench(
            fleet: knownFleet(),
            configure: {
                $0.faults = [fault: 0.3]
                $0.outage = .milliseconds(200)
            }
        ) { bench throws in
            let state = bench.fleet[0]
            let policy = ConnectPolicy(
                attempts: 6, backoff: .milliseconds(20), requiredServices: SBeacon.requiredServices)
            var successes = 0
            for round in 0..<10 {
                let config = DrivingBehaviourConfig(
                    cornering: 300 + UInt16(round), braking: 400, acceleration: 300, duration: 400, enable: .detection)
                do {
                    let change = try await bench.withBeacon(state, policy: policy) { try await $0.writeConfig(config) }
                    successes += 1
                    #expect(change.after == config)
                    #expect(
                        try await bench.truth(state).config == config, "reported \(config) but the beacon holds another"
                    )
                } catch let error as BlueZError {
                    #expect(!error.step.isEmpty)
                } catch let error as OperationError {
                    // A verification failure means the readback disagreed: reported, never hidden.
                    if case .verificationFailed = error {
                    } else if case .malformed = error {
                    } else {
                        Issue.record("unexpected \(error)")
                    }
                }
            }
            #expect(successes > 0, "no write got through \(fault) at 30 %")
        }
    }

    /// Every operation in turn, each fault kind at 20 % with a fixed seed:
    /// success with the beacon holding what was reported, or a typed error.
    @Test(arguments: Fault.allCases.filter { $0 != .stalledReply })
    func everyOperationUnderEachFaultKind(_ fault: Fault) async throws {
        try await withBench(
            fleet: knownFleet(),
            configure: {
                $0.faults = [fault: 0.2]
                $0.outage = .milliseconds(200)
            }
        ) { bench throws in
            let state = bench.fleet[1]
            try await bench.daemon.drive(state.address, minutes: 20, harshEvents: 8)
            let policy = ConnectPolicy(
                attempts: 8, backoff: .milliseconds(20), requiredServices: SBeacon.requiredServices)
            let config = DrivingBehaviourConfig(
                cornering: 333, braking: 444, acceleration: 355, duration: 250, enable: .all)
            let identity = BeaconIdentity(major: 300, minor: 3)
            var failures: [String] = []
            func attempt(_ name: String, _ body: @escaping (SBeacon) async throws -> Void) async {
                do {
                    try await bench.withBeacon(state, policy: policy, body)
                } catch let error as BlueZError {
                    failures.append("\(name): \(error)")
                } catch let error as OperationError {
                    failures.append("\(name): \(error)")
                } catch {
                    Issue.record("\(name): untyped error \(error)")
                }
            }
            await attempt("info") { _ = try await $0.readInfo() }
            await attempt("time") { beacon in
                let change = try await beacon.syncTime(now: Int64(Date().timeIntervalSince1970 * 1000))
                #expect(try await bench.truth(state).timeOffset == change.after)
            }
            await attempt("config") { beacon in
                let change = try await beacon.writeConfig(config)
                #expect(try await bench.truth(state).config == change.after)
            }
            await attempt("identity") { beacon in
                let change = try await beacon.setIdentity(identity)
                #expect(try await bench.truth(state).identity == change.after)
            }
            await attempt("calibrate") { beacon in
                let calibration = try await beacon.calibrate(timeout: .seconds(3))
                #expect(try await bench.truth(state).calibration == calibration)
            }
            await attempt("records") { beacon in
                let trips = try await beacon.pullTrips(timeout: .seconds(5))
                #expect(trips == (try await bench.truth(state).trips))
                let incidents = try await beacon.pullIncidents(timeout: .seconds(5))
                #expect(incidents == (try await bench.truth(state).incidents))
            }
            // Not everything may fail: the faults strike one time in five.
            #expect(failures.count < 6, "\(failures)")
        }
    }

    @Test func everyOperationWithRealisticLatency() async throws {
        try await withBench(fleet: knownFleet(), configure: { $0.latency = .realistic }) { bench throws in
            let state = bench.fleet[2]
            try await bench.daemon.drive(state.address, minutes: 15, harshEvents: 3)
            try await bench.withBeacon(state) { beacon in
                _ = try await beacon.readInfo()
                _ = try await beacon.syncTime(now: Int64(Date().timeIntervalSince1970 * 1000))
                _ = try await beacon.writeConfig(.factoryDefault)
                _ = try await beacon.setIdentity(BeaconIdentity(major: 9, minor: 9))
                _ = try await beacon.calibrate()
                #expect(try await beacon.pullTrips().count == 1)
                #expect(try await beacon.pullEvents().count == 3)
                try await beacon.clear(.clearEvents)
            }
            let truth = try await bench.truth(state)
            #expect(truth.identity == BeaconIdentity(major: 9, minor: 9))
            #expect(truth.calibration.calibrated)
            #expect(truth.events.isEmpty && truth.trips.count == 1)
        }
    }

    /// A rule that fires, doing nothing, when a calibration command has
    /// landed on beacon `address`: `WaitFor({"ruleFired": "calibrating"})`
    /// returns once the calibration is under way.
    static func calibrationMarker(_ address: String) throws -> FaultPlan {
        try FaultPlan(
            json: #"""
                {"rules": [{"id": "calibrating", "hook": "write.landed",
                  "target": {"address": "\#(address)", "characteristic": "\#(SBeaconUUID.calibrationControlPoint)"},
                  "trigger": {"nth": 1}, "action": {"kind": "stall", "ms": 0}}]}
                """#)
    }

    /// A bench whose beacons calibrate for 600 s, with the marker rule
    /// `calibrating` on beacon `index`'s calibration command.
    static func withCalibratingBench(beacon index: Int, _ body: (BenchFixture) async throws -> Void) async throws {
        let fleet = knownFleet()
        let plan = try calibrationMarker(fleet[index].address)
        try await withBench(
            fleet: fleet,
            configure: {
                $0.latency.calibration = .seconds(600)
                $0.faultPlan = plan
            }, body)
    }

    @Test func cancellingAnOperationStillDisconnects() async throws {
        try await Self.withCalibratingBench(beacon: 0) { bench throws in
            let state = bench.fleet[0]
            let task = Task { try await bench.withBeacon(state) { try await $0.calibrate(timeout: .seconds(900)) } }
            // Cancelled while it calibrates: once the command has landed.
            try await bench.control.waitFor(#"{"ruleFired": "calibrating"}"#)
            task.cancel()
            let result = await task.result
            #expect(throws: CancellationError.self) { try result.get() }
            try await bench.control.waitFor(#"{"disconnected": "\#(state.address)"}"#)
            #expect(!(await bench.daemon.isConnected(state.address)))
        }
    }

    @Test func retriesGetThroughTransientConnectFailures() async throws {
        try await withBench(
            fleet: knownFleet(), configure: { $0.faults = [.connectInProgress: 0.5, .connectAbort: 0.3] }
        ) {
            bench throws in
            let policy = ConnectPolicy(
                attempts: 10, backoff: .milliseconds(10), requiredServices: SBeacon.requiredServices)
            for state in bench.fleet + bench.fleet {
                let info = try await bench.withBeacon(state, policy: policy) { try await $0.readInfo() }
                #expect(info.serial == state.serial)
            }
            let counts = await bench.daemon.faultCounts
            #expect((counts[.connectInProgress] ?? 0) + (counts[.connectAbort] ?? 0) > 0)
        }
    }

    @Test func servicesThatNeverResolveAreRetriedAfterADisconnect() async throws {
        // The fixture's client waits 3 s for ServicesResolved before it
        // disconnects and tries again.
        try await withBench(seed: 5, fleet: knownFleet(), configure: { $0.faults = [.servicesNeverResolved: 0.5] }) {
            bench throws in
            let policy = ConnectPolicy(
                attempts: 8, backoff: .milliseconds(10), requiredServices: SBeacon.requiredServices)
            let info = try await bench.withBeacon(bench.fleet[0], policy: policy) { try await $0.readInfo() }
            #expect(info.model == "SB-1")
        }
    }

    @Test func aBluetoothdRestartFailsTheOperationClearlyAndTheNextOneWorks() async throws {
        try await Self.withCalibratingBench(beacon: 1) { bench throws in
            let state = bench.fleet[1]
            // The calibration never ends (600 s): the operation fails either
            // way, by the restart or by its own 5-s wait for the result.
            let operation = Task {
                try await bench.withBeacon(state) { try await $0.calibrate(timeout: .seconds(5)) }
            }
            // bluetoothd restarts while the beacon calibrates (it restarted
            // 500 ms after the start, and the calibration took 2 s).
            try await bench.control.waitFor(#"{"ruleFired": "calibrating"}"#)
            try await bench.control.restart()
            let error = await #expect(throws: (any Error).self) { try await operation.value }
            #expect(error is BlueZError || error is OperationError, "\(String(describing: error))")
            // bluetoothd is back: discover again, and the next operation works.
            let adapter = try await bench.client.waitForAdapter(named: "hci0", timeout: .seconds(120))
            try await bench.client.startDiscovery(on: adapter)
            _ = try await bench.client.waitForDevice(address: state.address, timeout: .seconds(120))
            let info = try await bench.withBeacon(state) { try await $0.readInfo() }
            #expect(info.serial == state.serial)
        }
    }
}
