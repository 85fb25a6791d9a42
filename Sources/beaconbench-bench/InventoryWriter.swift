import Foundation
import Inventory
import Profiles
import SBeaconProtocol

/// `beaconbench-bench inventory-writer PATH`: begins a run and records step
/// outcomes as a fleet run does: the first step's `running` row, then each
/// step's end and the next one's `running` row in one transaction
/// (`Inventory.endStep`), printing `committed N` after the N-th step's end
/// is committed, until killed. The crash-safety test kills it with SIGKILL
/// at random moments and checks what the file holds.
func inventoryWriter(path: String) async throws -> Never {
    let inventory = try Inventory(path: path)
    let run = try await inventory.beginRun(.init(command: "inventory-writer", operatorName: "crash-test"))
    print("run \(run)")
    fflush(nil)
    var committed = 0
    var step = try await inventory.beginStep(run: run, device: nil, step: "step 0")
    while true {
        let next = try await inventory.endStep(
            step, .init(.ok, detail: String(repeating: "x", count: committed % 500)),
            next: .begin("step \(committed + 1)"))
        guard let next else { fatalError("endStep began no row") }
        step = next
        committed += 1
        print("committed \(committed)")
        fflush(nil)
    }
}

/// `beaconbench-bench inventory`: outcome logging rate (batched in
/// transactions of 1,000, and one transaction per outcome as live steps do)
/// and the time to open an existing inventory.
func inventoryBenchmark() async throws -> [Measurement] {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = directory + "/inventory.db"
    let inventory = try Inventory(path: path)
    let run = try await inventory.beginRun(.init(command: "benchmark"))
    var results: [Measurement] = []

    let batches = 200
    let batch = (0..<1000).map { index in
        (
            device: String?.none, step: "write config", status: Inventory.StepStatus.changed,
            detail: String?.some("row \(index)")
        )
    }
    var started = ContinuousClock.now
    for _ in 0..<batches { try await inventory.recordOutcomes(run: run, batch) }
    var elapsed = seconds(ContinuousClock.now - started)
    results.append(
        Measurement(
            scenario: "inventory: outcomes logged, 1,000 per transaction", calls: batches * 1000, seconds: elapsed,
            callsPerSecond: Double(batches * 1000) / elapsed))

    let single = 5_000
    started = ContinuousClock.now
    for index in 0..<single {
        let step = try await inventory.beginStep(run: run, device: nil, step: "step \(index)")
        try await inventory.finishStep(step, .ok)
    }
    elapsed = seconds(ContinuousClock.now - started)
    results.append(
        Measurement(
            scenario: "inventory: live steps (begin + finish, 2 commits each)", calls: single, seconds: elapsed,
            callsPerSecond: Double(single) / elapsed))

    // As a fleet run writes them: a step's end with the next one's begin.
    started = ContinuousClock.now
    var step = try await inventory.beginStep(run: run, device: nil, step: "step 0")
    for index in 0..<single {
        step = try await inventory.endStep(step, .init(.ok), next: .begin("step \(index + 1)")) ?? step
    }
    elapsed = seconds(ContinuousClock.now - started)
    try await inventory.finishStep(step, .ok)
    results.append(
        Measurement(
            scenario: "inventory: live steps (end + next begin, 1 commit each)", calls: single, seconds: elapsed,
            callsPerSecond: Double(single) / elapsed))

    // An audit of 10,000 devices over 1,000,000 outcome rows.
    let deviceCount = 10_000
    for number in 0..<deviceCount {
        var device = DeviceRecord(
            address: String(format: "C1:%02X:%02X:00:00:%02X", number >> 8 & 0xFF, number & 0xFF, number % 7))
        device.battery = UInt8(number % 100)
        device.firmware = FirmwareVersion(major: 1, minor: 0, patch: UInt8(6 + number % 3))
        device.calibration = CalibrationState(
            calibrated: number % 5 != 0, calibratedAt: 60, vector: Vector(x: 10, y: 5, z: 990))
        device.calibratedAt = Date()
        device.config = DrivingBehaviourConfig(
            cornering: 350, braking: 350, acceleration: 450, duration: 300, enable: .all)
        device.profile = ["car", "van", "truck"][number % 3]
        try await inventory.recordDevice(device)
    }
    let outcomesNeeded = 1_000_000 - (batches * 1000 + 2 * single + 1)
    for _ in 0..<(outcomesNeeded / 1000) { try await inventory.recordOutcomes(run: run, batch) }
    let profiles = try shippedProfiles()
    let audits = 5
    started = ContinuousClock.now
    var findings = 0
    for _ in 0..<audits {
        let reports = try await inventory.auditSubjects().map { Auditor.audit($0, profiles: profiles) }
        findings = reports.reduce(0) { $0 + $1.findings.count }
    }
    elapsed = seconds(ContinuousClock.now - started)
    results.append(
        Measurement(
            scenario: "inventory: audit 10,000 devices, 1,000,000 outcomes (ms each)", calls: audits,
            seconds: elapsed, callsPerSecond: elapsed * 1000 / Double(audits)))
    precondition(findings > 0, "the audit found nothing to report: the benchmark's fleet is wrong")

    let opens = 50
    started = ContinuousClock.now
    for _ in 0..<opens { _ = try Inventory(path: path) }
    elapsed = seconds(ContinuousClock.now - started)
    results.append(
        Measurement(
            scenario: "inventory: open an existing file (ms each)", calls: opens, seconds: elapsed,
            callsPerSecond: elapsed * 1000 / Double(opens)))
    return results
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// The profiles in the repository's `profiles/`.
func shippedProfiles() throws -> [String: Profile] {
    try ProfileLoader.loadAll(from: [repository + "/profiles"])
}
