import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import SBeaconProtocol
import TestSupport
import Testing

/// `batches/provision-new.batch` over 100 simulated beacons with each of the
/// simulator's faults, then a rerun: every device ends ok, skipped or failed
/// with a reason, the inventory never claims what a beacon does not hold,
/// and the reruns converge.
@Suite("fault matrix", .timeLimit(.minutes(15)))
struct FaultMatrixTests {
    static let car = EndToEndTests.car

    static let kinds: [(String, UInt64)] = [
        ("connect-in-progress=0.1", 11), ("connect-abort=0.1", 12), ("services-never-resolved=0.1", 13),
        ("disconnect-mid-operation=0.1", 14), ("att-error=0.1", 15), ("stalled-reply=0.1", 16),
        ("dropped-notification=0.1", 17), ("vanish=0.1", 18), ("adapter-off=0.1", 19), ("all=0.03", 20),
    ]

    /// The environment variable that replays one plan: its value is a
    /// fault plan (JSON, as a failing case prints it) or the path of a file
    /// holding one. Run `swift test --filter 'FaultMatrixTests/replay'`.
    static let replayVariable = "BEACONBENCH_FAULT_PLAN"
    static let common = ["--count", "100", "--fresh", "--stall-seconds", "2", "--outage-seconds", "1"]

    @Test(arguments: kinds)
    func provisioningThrough(faults: String, seed: UInt64) async throws {
        let simulator = Self.common + ["--seed", String(seed), "--faults", faults]
        // The same faults as one plan: probability rules with the seed.
        let plan = try SimulatorCommandLine(arguments: simulator).options.effectivePlan.json
        try await Self.provision(simulator, label: "\(faults) (replay: \(Self.replayVariable)='\(plan)')")
    }

    /// One plan, from `BEACONBENCH_FAULT_PLAN`: the fleet is made with the
    /// plan's seed, as the failing case's was.
    @Test(
        .enabled(
            if: ProcessInfo.processInfo.environment[replayVariable] != nil, "runs only with BEACONBENCH_FAULT_PLAN set")
    )
    func replay() async throws {
        let value = try #require(ProcessInfo.processInfo.environment[Self.replayVariable])
        let text =
            value.trimmingCharacters(in: .whitespaces).hasPrefix("{")
            ? value : try String(contentsOfFile: value, encoding: .utf8)
        let plan = try FaultPlan(json: text)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("replay-\(UUID().uuidString).json")
            .path
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try await Self.provision(
            Self.common + ["--seed", String(plan.seed), "--fault-plan", file], label: "replay of \(file)")
    }

    /// provision-new over the fleet, then reruns, checking convergence;
    /// every failure message carries `label`.
    static func provision(_ simulator: [String], label faults: String) async throws {
        try await SharedResource.faultMatrixCase.withTurn {
            try await provisionNow(simulator, label: faults)
        }
    }

    static func provisionNow(_ simulator: [String], label faults: String) async throws {
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            let started = ContinuousClock.now
            var runs: [[String: [String: Any]]] = []
            // The first run, then reruns of what is still new or half done.
            for attempt in 0..<3 {
                let run = try await bench.beaconbench(
                    [
                        "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=10s", "--set",
                        "expect=\(bench.beacons)",
                    ], timeout: 600)
                #expect(run.status == 0 || run.status == 2, "\(faults): \(run.stderr.suffix(2000))")
                let recaps = Dictionary(
                    ConsoleFixture.jsonLines(run.stdout, kind: "recap").compactMap { line in
                        (line["device"] as? String).map { ($0, line) }
                    }
                ) { first, _ in first }
                runs.append(recaps)
                for (address, recap) in recaps {
                    // Every device ends in a known state; a failure or a skip says why.
                    if (recap["failed"] as? Int ?? 0) > 0 || (recap["skipped"] as? Int ?? 0) > 0 {
                        #expect((recap["reason"] as? String)?.isEmpty == false, "\(faults): \(address) \(recap)")
                    }
                }
                let truth = try await bench.truth()
                let records = try await Inventory(path: bench.inventoryPath).devicesByAddress()
                try Self.inventoryClaimsOnlyTheTruth(truth, records, faults)
                let unsettled = recaps.values.filter { ($0["failed"] as? Int ?? 0) > 0 }.filter { recap in
                    !Self.isPermanent(recap["reason"] as? String ?? "")
                }
                let kind = faults.prefix { $0 != " " }
                if unsettled.isEmpty {
                    print("fault matrix \(kind): settled after \(attempt + 1) run(s)")
                    break
                }
                // What a rerun is for (printed, so the soak shows it).
                let reasons = unsettled.map { "\($0["device"] as? String ?? "?"): \($0["reason"] as? String ?? "?")" }
                print("fault matrix \(kind): run \(attempt + 1) left \(unsettled.count) failed: \(reasons)")
                #expect(attempt < 2, "\(faults): still failing after 3 runs: \(unsettled)")
            }
            // Printed, not asserted (no speed bound in a test); each run's
            // stall guard is its 600 s timeout.
            print("fault matrix \(faults.prefix { $0 != " " }): \(ContinuousClock.now - started)")

            // Converged: every beacon that can be provisioned is, and the
            // inventory says exactly what it holds.
            let truth = try await bench.truth()
            let records = try await Inventory(path: bench.inventoryPath).devicesByAddress()
            var provisioned = 0
            for (address, report) in truth {
                let canBe = report.battery >= 30 && report.firmware == "1.0.8" && !report.moving
                guard canBe else { continue }
                provisioned += 1
                let record = try #require(records[address], "\(faults): \(address) not in the inventory")
                #expect(Self.held(report) == Self.car, "\(faults): \(address) holds \(report.config)")
                #expect(record.profile == "car", "\(faults): \(address)")
                #expect(record.config == Self.car, "\(faults): \(address)")
                #expect(report.major == 100)
                #expect(
                    record.identity == BeaconIdentity(major: report.major, minor: report.minor), "\(faults): \(address)"
                )
                #expect(
                    report.calibration.calibrated && record.calibration?.calibrated == true, "\(faults): \(address)")
                #expect(record.timeOffset == report.timeOffset, "\(faults): \(address)")
            }
            #expect(provisioned > 50, "\(faults): the fleet has too few provisionable beacons to mean anything")
            let minors = truth.values.filter { $0.major == 100 }.map(\.minor)
            #expect(Set(minors).count == minors.count, "\(faults): two beacons share a minor")
        }
    }

    static func held(_ report: SimulatorControl.Report) -> DrivingBehaviourConfig {
        DrivingBehaviourConfig(
            cornering: report.config.cornering, braking: report.config.braking,
            acceleration: report.config.acceleration, duration: report.config.duration,
            enable: .init(rawValue: report.config.enable))
    }

    /// Failures that no rerun can cure: the beacon itself says no.
    static func isPermanent(_ reason: String) -> Bool {
        reason.contains("motion detected") || reason.contains("sensor fault")
    }

    /// Whatever the inventory records of a beacon, the beacon holds.
    static func inventoryClaimsOnlyTheTruth(
        _ truth: [String: SimulatorControl.Report], _ records: [String: DeviceRecord], _ faults: String
    ) throws {
        for (address, record) in records {
            let report = try #require(truth[address], "\(faults): \(address) is not a simulated beacon")
            if let config = record.config {
                #expect(config == Self.held(report), "\(faults): \(address) recorded \(config), holds \(report.config)")
            }
            if record.profile == "car" { #expect(record.config == Self.car, "\(faults): \(address)") }
            if let identity = record.identity, record.profile != nil {
                #expect(identity == BeaconIdentity(major: report.major, minor: report.minor), "\(faults): \(address)")
            }
            if record.calibration?.calibrated == true {
                #expect(report.calibration.calibrated, "\(faults): \(address) recorded as calibrated")
            }
        }
    }
}
