import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus
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
        let reports = try await withControl { try await $0.beacons() }
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

extension SimulatorControl.Client {
    /// Any other control call (`Restart`, `Unplug`, `Shake`, …); its string
    /// answer, if any.
    @discardableResult
    func control(_ method: MemberName, _ arguments: [BusValue] = []) async throws -> String {
        let reply = try await connection.call(
            SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, method, arguments,
            timeout: .seconds(60))
        return reply.body.first?.string ?? ""
    }
}

extension ConsoleFixture {
    /// A control-interface client on this bench's bus for `body`, closed after.
    func withControl<T: Sendable>(_ body: (SimulatorControl.Client) async throws -> T) async throws -> T {
        let connection = try await BusConnection.connect(.address(busAddress))
        do {
            let result = try await body(SimulatorControl.Client(connection))
            await connection.close()
            return result
        } catch {
            await connection.close()
            throw error
        }
    }

    /// `WaitFor(condition)` on the simulator (docs/simulator.md): returns the
    /// state reached; throws naming the condition after `cap`.
    @discardableResult
    func waitFor(_ condition: String, cap: Duration = .seconds(300)) async throws -> String {
        do {
            return try await withControl { try await $0.waitFor(condition, timeout: cap) }
        } catch { throw TestSupportError("waited for \(condition) (cap \(cap)): \(error)") }
    }

    /// Starts beaconbench on this bench (its environment, bus and
    /// inventory) without waiting for it: its output goes to files read as
    /// it arrives (the console writes each line with write(2), unbuffered).
    func startBeaconbench(_ arguments: [String], name: String = "tool") throws -> RunningTool {
        var variables: [String] = []
        for key in ProcessInfo.processInfo.environment.keys where key.hasPrefix("BEACONBENCH_") {
            variables += ["-u", key]
        }
        for key in ["XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "NO_COLOR"] {
            variables.append("\(key)=\(environment[key] ?? "")")
        }
        let out = directory + "/\(name).\(UUID().uuidString.prefix(8))"
        let child = try ChildProcess(
            "/usr/bin/env",
            variables + [builtProduct("beaconbench"), "--bus", busAddress, "--inventory", inventoryPath] + arguments,
            standardOutput: out + ".out", standardError: out + ".err")
        return RunningTool(child: child, stdoutPath: out + ".out", stderrPath: out + ".err")
    }
}

/// A beaconbench started by `startBeaconbench`, its output read as it comes.
struct RunningTool: Sendable {
    let child: ChildProcess
    let stdoutPath: String
    let stderrPath: String

    var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Waits (at most `cap`) until a JSON line of its output satisfies
    /// `matches`; returns it. Fails naming `what`, with the output so far.
    @discardableResult
    func waitForJSON(
        _ what: String, cap: Duration = .seconds(300), _ matches: @escaping ([String: Any]) -> Bool
    ) async throws -> [String: Any] {
        var found: [String: Any]?
        do {
            try await waitUntil(what, cap: cap) {
                found = ConsoleFixture.jsonLines(stdout).first(where: matches)
                return found != nil || !child.isRunning
            }
        } catch { throw TestSupportError("\(error); stdout: \(stdout.suffix(2000)) stderr: \(stderr.suffix(2000))") }
        guard let found else {
            throw TestSupportError(
                "beaconbench ended before \(what); stdout: \(stdout.suffix(2000)) stderr: \(stderr.suffix(2000))")
        }
        return found
    }

    /// Waits (at most `cap`) until its output (`stdout` or `stderr`) says `condition`.
    func waitForText(
        _ what: String, inStandardError: Bool = false, cap: Duration = .seconds(300),
        _ condition: @escaping (String) -> Bool
    ) async throws {
        var seen = false
        do {
            try await waitUntil(what, cap: cap) {
                seen = condition(inStandardError ? stderr : stdout)
                return seen || !child.isRunning
            }
        } catch { throw TestSupportError("\(error); stdout: \(stdout.suffix(2000)) stderr: \(stderr.suffix(2000))") }
        if !seen, !condition(inStandardError ? stderr : stdout) {
            throw TestSupportError(
                "beaconbench ended before \(what); stdout: \(stdout.suffix(2000)) stderr: \(stderr.suffix(2000))")
        }
    }

    /// Waits for it to exit (on a thread of its own; SIGKILL after `cap`, a
    /// stall guard); its status and output.
    func finish(cap: TimeInterval = 300) async -> Finished {
        let child = child
        let guardian = Watchdog(after: cap) { child.send(SIGKILL) }
        defer { guardian.cancel() }
        let status = await child.waitForExit().status
        return Finished(waitStatus: status, stdout: stdout, stderr: stderr)
    }

    struct Finished {
        /// As `waitpid` reports it.
        var waitStatus: Int32
        var stdout: String
        var stderr: String
        /// The exit status; 128 + the signal when a signal ended it.
        var status: Int32 { waitStatus & 0x7f == 0 ? (waitStatus >> 8) & 0xff : 128 + (waitStatus & 0x7f) }
    }
}
