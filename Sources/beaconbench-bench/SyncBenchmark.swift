import Foundation
import Inventory
import InventorySync
import LocalBus
import Profiles
import SBeaconProtocol

/// What the sync benchmark measured.
struct SyncResult: Codable {
    var outcomeRows: Int
    var deviceRows: Int
    var syncSeconds: Double
    var outcomeSeconds: Double
    var outcomeRowsPerSecond: Double
    var resyncSeconds: Double
    var serverDevices: Int
    var auditSeconds: Double
    /// Of which reading the merged devices from the server.
    var auditQuerySeconds: Double
    var auditFindings: Int
}

/// `beaconbench-bench sync`: a PostgreSQL server of its own (initdb into a
/// temporary directory), a bench inventory of `outcomes` step outcomes and
/// `devices` devices, pushed with `InventorySync.push` (timed as a whole
/// and for the outcomes table alone); a repeated sync with nothing new; a
/// second bench that saw a fifth of the devices again, synced; then an
/// audit of the merged fleet read from the server (`ServerInventory`, the
/// `fleet_devices` view) against the shipped profiles.
func syncBenchmark(outcomes: Int = 1_000_000, devices: Int = 100_000) async throws -> SyncResult {
    let profiles = try shippedProfiles()
    func log(_ text: String) { FileHandle.standardError.write(Data("… \(text)\n".utf8)) }
    let server = try await LocalPostgres.create(port: 54_330)
    defer { server.remove() }
    try await server.start()
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }

    log("filling a bench inventory: \(outcomes) outcomes, \(devices) devices")
    let first = try Inventory(path: directory + "/first.sqlite")
    try await fill(first, devices: 0..<devices, outcomes: outcomes, profile: "car", config: profiles["car"]?.config)

    log("sync")
    var tableEnded: [String: ContinuousClock.Instant] = [:]
    var tableStarted: [String: ContinuousClock.Instant] = [:]
    let started = ContinuousClock.now
    let report = try await InventorySync.push(first, to: server.url) { table, _ in
        let now = ContinuousClock.now
        if tableStarted[table] == nil { tableStarted[table] = tableEnded.values.max() ?? started }
        tableEnded[table] = now
    }
    let syncSeconds = seconds(ContinuousClock.now - started)
    let outcomeSeconds = seconds((tableEnded["outcomes"] ?? started) - (tableStarted["outcomes"] ?? started))

    log("sync again, nothing new")
    let again = ContinuousClock.now
    _ = try await InventorySync.push(first, to: server.url)
    let resyncSeconds = seconds(ContinuousClock.now - again)

    log("a second bench with a fifth of the devices, later")
    let second = try Inventory(path: directory + "/second.sqlite")
    try await fill(
        second, devices: 0..<(devices / 5), outcomes: 10_000, profile: "van", config: profiles["van"]?.config)
    _ = try await InventorySync.push(second, to: server.url)

    log("audit of the fleet on the server")
    let auditStarted = ContinuousClock.now
    let fleet = try ServerInventory(url: server.url)
    let subjects = try await fleet.auditSubjects()
    let querySeconds = seconds(ContinuousClock.now - auditStarted)
    let findings = subjects.map { Auditor.audit($0, profiles: profiles) }.filter { !$0.isClean }.count
    let auditSeconds = seconds(ContinuousClock.now - auditStarted)
    return SyncResult(
        outcomeRows: report.sent["outcomes"] ?? 0, deviceRows: report.sent["devices"] ?? 0,
        syncSeconds: syncSeconds, outcomeSeconds: outcomeSeconds,
        outcomeRowsPerSecond: Double(report.sent["outcomes"] ?? 0) / outcomeSeconds, resyncSeconds: resyncSeconds,
        serverDevices: subjects.count, auditSeconds: auditSeconds, auditQuerySeconds: querySeconds,
        auditFindings: findings)
}

/// Devices numbered `devices` (provisioned with `profile`, a reading each)
/// and `outcomes` step outcomes spread over them, in batched transactions.
private func fill(
    _ inventory: Inventory, devices: Range<Int>, outcomes: Int, profile: String, config: DrivingBehaviourConfig?
) async throws {
    let run = try await inventory.beginRun(.init(command: "benchmark"))
    for number in devices {
        var device = DeviceRecord(address: syntheticAddress(number))
        device.identity = .init(major: 100, minor: UInt16(number % 65_000))
        device.battery = UInt8(40 + number % 60)
        device.firmware = .init(major: 1, minor: 0, patch: 8)
        device.calibration = .init(calibrated: true, calibratedAt: 60, vector: .init(x: 10, y: 5, z: 990))
        device.calibratedAt = Date()
        device.config = config
        device.profile = profile
        try await inventory.recordDevice(device)
    }
    let steps = ["sync-time", "calibrate", "identity", "apply \(profile)", "verify \(profile)"]
    var written = 0
    while written < outcomes {
        let count = min(1_000, outcomes - written)
        let batch = (written..<(written + count)).map { index in
            (
                device: devices.isEmpty ? nil : Optional(syntheticAddress(devices.lowerBound + index % devices.count)),
                step: steps[index % steps.count], status: Inventory.StepStatus.changed,
                detail: Optional("row \(index): \"quoted\", back\\slash, {braces}")
            )
        }
        try await inventory.recordOutcomes(run: run, batch)
        written += count
    }
    try await inventory.endRun(run, .finished)
}

private func syntheticAddress(_ number: Int) -> String {
    String(format: "C1:%02X:%02X:%02X:00:00", number >> 16 & 0xFF, number >> 8 & 0xFF, number & 0xFF)
}

/// The summary table's lines for a sync benchmark.
func syncRows(_ result: SyncResult) -> [Row] {
    [
        Row(
            scenario: "sync: \(result.outcomeRows) outcome rows to PostgreSQL",
            value: "\(Int(result.outcomeRowsPerSecond))/s (\(format(result.outcomeSeconds)) s)", goal: "-", met: nil),
        Row(
            scenario: "sync: whole first sync (+ \(result.deviceRows) devices)",
            value: "\(format(result.syncSeconds)) s", goal: "-", met: nil),
        Row(scenario: "sync again, nothing new", value: "\(format(result.resyncSeconds)) s", goal: "-", met: nil),
        Row(
            scenario: "audit of \(result.serverDevices) devices on the server",
            value:
                "\(format(result.auditSeconds * 1000, 0)) ms (reading \(format(result.auditQuerySeconds * 1000, 0)) ms)",
            goal: "-",
            met: nil),
    ]
}
