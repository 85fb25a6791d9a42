import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import TestSupport
import Testing

/// The built `beaconbench` against the built `beaconbench-sim` on a private
/// bus, with an inventory, history and XDG directories in a temporary
/// directory of the test's own.
struct ConsoleFixture {
    let simulator: SimulatorProcess?
    let directory: String

    var inventoryPath: String { directory + "/inventory.sqlite" }
    var busAddress: String { simulator?.bus.address ?? "unix:path=\(directory)/no-bus" }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// Starts the simulator with `simulatorArguments` (none: no simulator).
    /// (Waits for the simulator's ready line on a thread of its own: see
    /// LocalBus/OffPool.swift.)
    static func start(_ simulatorArguments: [String]?) async throws -> ConsoleFixture {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "beaconbench-console-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var simulator: SimulatorProcess?
        if var simulatorArguments {
            // bluetoothd forgets a device 30 s after it was last heard; a
            // test that does not test forgetting must not depend on how
            // long a loaded machine takes between its scan and its use of
            // a beacon (threeBenchesOneFleet failed "not seen" so).
            if !simulatorArguments.contains("--temporary-timeout") {
                simulatorArguments += ["--temporary-timeout", "3600"]
            }
            simulator = try await SimulatorProcess.start(
                executable: builtProduct("beaconbench-sim"), arguments: simulatorArguments)
        }
        return ConsoleFixture(simulator: simulator, directory: directory)
    }

    func stop() async {
        await simulator?.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `stop()` blocking its thread (briefly: SIGTERM, the simulator saves
    /// and exits), for a `defer`, where no `await` is possible.
    func stop() {
        simulator?.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The environment beaconbench runs in: its files under `directory`.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_DATA_HOME"] = directory + "/data"
        environment["XDG_STATE_HOME"] = directory + "/state"
        environment["XDG_CONFIG_HOME"] = directory + "/config"
        environment["NO_COLOR"] = "1"
        for name in environment.keys where name.hasPrefix("BEACONBENCH_") { environment[name] = nil }
        return environment
    }

    /// Runs beaconbench on this bench's bus and inventory.
    func beaconbench(
        _ arguments: [String], stdin: String? = nil, timeout: TimeInterval = 120
    ) async throws
        -> ToolOutput
    {
        try await runTool(
            builtProduct("beaconbench"), ["--bus", busAddress, "--inventory", inventoryPath] + arguments,
            environment: environment, stdin: stdin, timeout: timeout)
    }

    func batch(_ name: String) -> String { Self.repository + "/batches/" + name }

    /// How many beacons the simulator holds (its ready line's `beacons=N`).
    var beacons: Int {
        simulator?.readyLine.split(separator: " ").first { $0.hasPrefix("beacons=") }
            .flatMap { Int($0.dropFirst("beacons=".count)) } ?? 0
    }

    /// A scan that lasts until every beacon is heard (`--until`), 120 s at
    /// most: what a test that counts beacons afterwards scans with, not a
    /// fixed second of luck. (The shipped batches take the same as
    /// `--set scan=120s --set expect=\(beacons)`.)
    var scanAll: String { "scan 120s --until \(beacons)" }

    /// The simulator's ground truth, by address.
    func truth() async throws -> [String: SimulatorControl.Report] {
        let connection = try await BusConnection.connect(.address(busAddress))
        let reply = try await connection.call(
            SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Beacons", [])
        await connection.close()
        let reports = try JSONDecoder().decode(
            [SimulatorControl.Report].self, from: Data((reply.body.first?.string ?? "").utf8))
        return Dictionary(uniqueKeysWithValues: reports.map { ($0.address, $0) })
    }

    /// What a run may change on a beacon (not its uptime, RSSI or link).
    static func provisioned(_ report: SimulatorControl.Report) -> String {
        "\(report.config) \(report.major).\(report.minor) \(report.calibration) \(report.timeOffset) \(report.factoryDefault)"
    }

    /// A fleet file of `count` factory-new beacons; the last two cannot be
    /// provisioned (battery 20 %, firmware 1.0.6).
    static func newFleet(count: Int, in directory: String) throws -> String {
        try newFleet(numbers: Array(1...count), in: directory)
    }

    /// The same with beacons numbered `numbers` (addresses C0:FE:00:00:HH:LL);
    /// the last two cannot be provisioned.
    static func newFleet(numbers: [Int], in directory: String) throws -> String {
        let count = numbers.count
        let entries = numbers.enumerated().map { position, number -> [String: Any] in
            let index = position + 1
            var entry: [String: Any] = [
                "address": String(format: "C0:FE:00:00:%02X:%02X", number / 256, number % 256), "factoryDefault": true,
                "calibrated": false, "battery": 80, "firmware": "1.0.8", "major": 1, "minor": 1,
            ]
            if index == count - 1 { entry["battery"] = 20 }
            if index == count { entry["firmware"] = "1.0.6" }
            return entry
        }
        let path = directory + "/fleet.json"
        try JSONSerialization.data(withJSONObject: entries, options: [.prettyPrinted]).write(
            to: URL(fileURLWithPath: path))
        return path
    }

    /// JSON lines of a `--json` run.
    static func jsonLines(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// The JSON lines of one kind (docs/json.md).
    static func jsonLines(_ text: String, kind: String) -> [[String: Any]] {
        jsonLines(text).filter { $0["kind"] as? String == kind }
    }

    /// A run's `summary` line.
    static func summary(_ text: String) -> [String: Any]? { jsonLines(text, kind: "summary").first }
}

/// Starts a fleet file of `count` new beacons on the simulator, runs `body`, stops.
func withNewFleet(
    count: Int, simulatorOptions: [String] = [], _ body: (ConsoleFixture) async throws -> Void
) async throws {
    try await withNewFleet(numbers: Array(1...count), simulatorOptions: simulatorOptions, body)
}

/// The same with the beacons numbered `numbers` (see `newFleet`).
func withNewFleet(
    numbers: [Int], simulatorOptions: [String] = [], _ body: (ConsoleFixture) async throws -> Void
) async throws {
    let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let fleet = try ConsoleFixture.newFleet(numbers: numbers, in: scratch)
    try await withResource(
        { try await ConsoleFixture.start(["--fleet", fleet] + simulatorOptions) }, stop: { await $0.stop() }, body)
}
