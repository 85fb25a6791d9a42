import BeaconSimulator
import BlueZClient
import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Testing

@testable import Workbench

/// Every fleet step (`StepSamples.all`) against the rules a step must keep:
/// what it writes and reads is forgotten when it fails, it reads only what
/// it declares, its name is the outcome's step name, equality is by type
/// and value.
@Suite("Fleet steps: what each declares holds", .timeLimit(.minutes(3)))
struct FleetStepTests {
    static let car = FleetRunnerTests.profiles["car"]!
    static let van = FleetRunnerTests.profiles["van"]!
    static let samples = StepSamples.all(car)
    static let firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)

    /// One observation of every kind.
    static let everyKind: [SBeacon.Observation] = [
        .identity(BeaconIdentity(major: 1, minor: 1)), .config(.factoryDefault), .calibration(.uncalibrated),
        .timeOffset(5), .battery(80), .firmware(FirmwareVersion(major: 1, minor: 0, patch: 7)),
    ]

    @Test func everyKindHasAnObservation() {
        #expect(Set(Self.everyKind.map(\.kind)) == Set(SBeacon.Observation.Kind.allCases))
    }

    /// A value a step writes, read before the write, may no longer be what
    /// the beacon holds when the step fails (the write can land just
    /// before the link drops): it is forgotten, unless the step says why
    /// every read stays true. Nothing else is forgotten.
    @Test(arguments: FleetStepTests.samples)
    func whatItWritesAndReadsIsForgottenOnFailure(_ sample: DeviceStep) {
        let step = sample.step
        let writtenAndRead = step.writes.intersection(step.reads)
        let forgotten: Set<SBeacon.Observation.Kind>
        switch step.onFailure {
        case .forget(let kinds):
            #expect(
                writtenAndRead.isSubset(of: kinds),
                "\(sample.name) writes and reads \(writtenAndRead) but forgets only \(kinds) when it fails")
            #expect(kinds.isSubset(of: step.writes), "\(sample.name) forgets \(kinds), more than it writes")
            forgotten = kinds
        case .keepAll(let reason):
            #expect(!reason.isEmpty, "\(sample.name) keeps every read without saying why")
            #expect(!writtenAndRead.isEmpty, "\(sample.name) keeps all but writes nothing it reads: forget([])")
            forgotten = []
        }
        let kept = FleetRunner.stillTrue(Self.everyKind, after: sample)
        #expect(kept == Self.everyKind.filter { !forgotten.contains($0.kind) })
    }

    /// Every type conforming to `FleetStep` under `Sources/Workbench/Steps/`
    /// has its line in `StepSamples.all`, so every test here sees it.
    @Test func everyStepTypeHasASample() throws {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/Workbench/Steps")
        var declared: Set<String> = []
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) where file.hasSuffix(".swift") {
            let source = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            for match in source.matches(of: #/struct (\w+): FleetStep\b/#) { declared.insert(String(match.output.1)) }
        }
        #expect(declared.count >= 12, "\(declared.sorted())")
        #expect(Set(Self.samples.map { String(describing: type(of: $0.step)) }) == declared)
    }

    /// The names are the outcomes' step names, as the inventories hold them.
    @Test func namesAreTheOutcomeStepNames() {
        let named: [(DeviceStep, String)] = [
            (.info, "info"), (.requireBattery(atLeast: 30), "require battery>=30"),
            (.requireFirmware(atLeast: Self.firmware), "require firmware>=1.0.8"), (.syncTime, "sync-time"),
            (.calibrate, "calibrate"),
            (.identity(IdentityPlan(major: 100, minor: .fixed(7), source: .explicit)), "identity"),
            (.apply(Self.car), "apply car"), (.verify(Self.van), "verify van"), (.pullTrips(clear: true), "trips"),
            (.pullEvents(clear: false), "events"), (.pullIncidents(clear: true), "incidents"),
            (.auditLive(nil), "audit --live"), (.auditLive(Self.car), "audit --live"), (.reboot, "reboot"),
            (.factoryReset, "factory-reset"),
        ]
        for (step, name) in named {
            #expect(step.name == name)
            #expect(step.step.skippedStopsTheDevice == name.hasPrefix("require "), "\(name)")
        }
        // Every step has a name of its own: outcomes tell them apart.
        #expect(Set(Self.samples.map(\.name)).count == Self.samples.count)
    }

    /// Equal when of the same type with equal values, as the enum was.
    @Test func equalityIsByTypeAndValue() {
        for (i, a) in Self.samples.enumerated() {
            for (j, b) in Self.samples.enumerated() {
                #expect((a == b) == (i == j), "\(a.name) vs \(b.name)")
            }
        }
        #expect(DeviceStep.apply(Self.car) == .apply(FleetRunnerTests.profiles["car"]!))
        #expect(DeviceStep.apply(Self.car) != .apply(Self.van))
        #expect(DeviceStep.apply(Self.car) != .verify(Self.car))
        #expect(DeviceStep.requireBattery(atLeast: 30) != .requireBattery(atLeast: 31))
        #expect(DeviceStep.pullTrips(clear: true) != .pullTrips(clear: false))
        #expect(DeviceStep.pullTrips(clear: true) != .pullEvents(clear: true))
        #expect(DeviceStep.auditLive(nil) != .auditLive(Self.car))
        #expect(
            DeviceStep.identity(IdentityPlan(major: 1, minor: .next, source: .explicit))
                != .identity(IdentityPlan(major: 2, minor: .next, source: .explicit)))
    }

    /// Each step, in a dry run and then for real, on a simulated beacon of
    /// its own: what it reads is among what it declares, whether it
    /// succeeds or fails.
    @Test func everyStepReadsOnlyWhatItDeclares() async throws {
        let samples = Self.samples
        try await withBench(count: samples.count, seed: 5) { bench throws in
            let inventory = try FleetRunnerTests.inventory()
            let run = try await inventory.beginRun(.init(command: "steps"))
            let identities = IdentityReserver(
                client: bench.client, inventory: inventory, run: run, dryRun: false, sharedIdentities: nil,
                progress: { _ in })
            let recorder = InventoryRecorder { failure in Issue.record("the inventory failed: \(failure)") }
            var readBy: [String: Set<SBeacon.Observation.Kind>] = [:]
            for (sample, state) in zip(samples, bench.fleet) {
                let observations = Observations()
                let policy = ConnectPolicy(attempts: 2, requiredServices: SBeacon.requiredServices)
                var outcomes: [String] = []
                // As the runner does: the device is claimed (its row made) first.
                _ = try await inventory.claimDevice(state.address, run: run)
                // Each mode on a link of its own, as a run's step would be.
                for dryRun in [true, false] {
                    do {
                        try await bench.client.withConnection(to: state.address, policy: policy) { session in
                            let beacon = try await SBeacon(session, observer: { observations.add($0) })
                            let context = StepContext(
                                address: beacon.address, dryRun: dryRun, profiles: FleetRunnerTests.profiles,
                                inventory: inventory, recorder: recorder, identities: identities,
                                declared: sample.step.records)
                            do {
                                let result = try await sample.step.perform(on: beacon, context)
                                outcomes.append("\(result.status)")
                            } catch {
                                outcomes.append("failed: \(error)")
                            }
                        }
                    } catch {
                        // A link a reboot or reset took down may fail to close.
                        if outcomes.count < (dryRun ? 1 : 2) { Issue.record("\(sample.name): \(error)") }
                    }
                    let read = Set(observations.take().map(\.kind))
                    readBy[sample.name, default: []].formUnion(read)
                    #expect(
                        read.isSubset(of: sample.step.reads),
                        "\(sample.name) (dry run: \(dryRun)) read \(read), declares \(sample.step.reads)")
                }
                // Both modes ran (a step that fails is checked too).
                #expect(outcomes.count == 2, "\(sample.name): \(outcomes)")
            }
            // The observer works: a full read tells every kind (firmware
            // only when its revision is a version).
            #expect(
                readBy["info", default: []].isSuperset(of: [.identity, .config, .calibration, .timeOffset, .battery]))
        }
    }
}
