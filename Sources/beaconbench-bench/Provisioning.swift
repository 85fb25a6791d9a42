import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus

/// The repository (batches, profiles), found from this file.
let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

/// A new directory of its own under the temporary directory (the caller
/// removes it).
func scratchDirectory() throws -> String {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bench-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return directory
}

/// The built executables beside this one.
func sibling(_ name: String) throws -> String {
    guard let path = SimulatorProcess.sibling(name) else {
        throw LocalBusError("\(name) is not built beside beaconbench-bench (swift build -c release)")
    }
    return path
}

/// The realistic radio of docs/simulator.md: connect 1 s (one pending per
/// adapter), service resolution 0.3 s, an ATT request 60 ms, a calibration
/// 1.5 s, 5 connection slots per adapter.
enum RealisticRadio {
    static let connect = 1.0
    static let resolve = 0.3
    static let attRequest = 0.060
    static let calibration = 1.5
    static let slots = 5.0

    /// The floor of docs/simulator.md for `devices` spread over `adapters`,
    /// with the requests and calibrations the run really needed (averaged
    /// per device).
    static func floor(devices: Int, adapters: Int, requests: Int, calibrations: Int) -> Double {
        let n = Double((devices + adapters - 1) / adapters)
        let work =
            resolve + Double(requests) / Double(devices) * attRequest
            + Double(calibrations) / Double(devices) * calibration
        return max(n * connect + work, n * (connect + work) / slots)
    }
}

/// One run of beaconbench as a child process: wall time, CPU, peak RSS and
/// what it printed.
struct ChildRun {
    var status: Int32
    var wallSeconds: Double
    var cpuSeconds: Double
    var peakRSSMiB: Double
    /// What it wrote to the file system: `ru_oublock` × 512 (pages it
    /// dirtied; a page written again while still dirty counts once).
    var writtenBytes: Double = 0
    var output: String
}

func runMeasured(_ executable: String, _ arguments: [String], in directory: String) throws -> ChildRun {
    let outputPath = directory + "/out-\(UUID().uuidString).txt"
    let started = ContinuousClock.now
    let child = try ChildProcess(executable, arguments, standardOutput: outputPath)
    let (status, usage) = child.waitForExit()
    let wall = seconds(ContinuousClock.now - started)
    let cpu =
        Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
        + Double(usage.ru_stime.tv_usec) / 1e6
    let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
    return ChildRun(
        status: status, wallSeconds: wall, cpuSeconds: cpu, peakRSSMiB: Double(usage.ru_maxrss) / 1024,
        writtenBytes: Double(usage.ru_oublock) * 512, output: output)
}

struct ProvisioningResult: Codable {
    var scenario: String
    var beacons: Int
    var adapters: Int
    var concurrency: Int
    var latency: String
    /// The whole command: start, scan, the fleet run, the recap.
    var commandSeconds: Double
    /// From the first step outcome's start to the last one's end (inventory).
    var fleetSeconds: Double
    var floorSeconds: Double?
    var ratio: Double?
    var cpuSeconds: Double
    var cpuMillisecondsPerDevice: Double
    var peakRSSMiB: Double
    var changed: Int
    var skipped: Int
    var failed: Int
    var connects: Int
    var requests: Int
    var calibrations: Int
}

/// `batches/provision-new.batch` over `count` new simulated beacons.
func provisioningRun(
    count: Int, adapters: Int, concurrency: Int?, latency: String, scan: String = "3s"
) async throws -> ProvisioningResult {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let simulator = try await SimulatorProcess.start(
        executable: try sibling("beaconbench-sim"),
        arguments: ["--count", String(count), "--fresh", "--adapters", String(adapters), "--latency", latency])
    defer { simulator.stop() }
    let inventoryPath = directory + "/inventory.sqlite"
    var arguments = ["--bus", simulator.bus.address, "--inventory", inventoryPath, "--json"]
    if let concurrency { arguments += ["--concurrency", String(concurrency)] }
    arguments += ["run", repository + "/batches/provision-new.batch", "--set", "scan=\(scan)"]
    let run = try runMeasured(try sibling("beaconbench"), arguments, in: directory)
    guard run.status == 0 || run.status >> 8 == 2 else {
        throw LocalBusError("beaconbench exited with status \(run.status >> 8): \(run.output)")
    }
    // The run's result line: `{"kind":"summary", "changed":…}` (docs/json.md).
    let summary = jsonLines(run.output).first { $0["kind"] as? String == "summary" } ?? [:]

    let connection = try await BusConnection.connect(.address(simulator.bus.address))
    let reply = try await connection.call(
        SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Activity", [])
    await connection.close()
    let activity = try JSONDecoder().decode(
        SimulatedBluetoothd.Activity.self, from: Data((reply.body.first?.string ?? "{}").utf8))

    let inventory = try Inventory(path: inventoryPath)
    let span = try await inventory.query("SELECT min(started_at), max(ended_at) FROM outcomes").first ?? []
    let parse = { (value: SQLiteValue?) in value?.text.flatMap(Inventory.parseTimestamp) }
    let fleetSeconds =
        if let first = parse(span.first), let last = parse(span.last) { last.timeIntervalSince(first) } else { 0.0 }
    let floor =
        latency == "realistic"
        ? RealisticRadio.floor(
            devices: count, adapters: adapters, requests: activity.reads + activity.writes,
            calibrations: activity.calibrations) : nil
    return ProvisioningResult(
        scenario: "", beacons: count, adapters: adapters, concurrency: concurrency ?? 5 * adapters,
        latency: latency, commandSeconds: run.wallSeconds, fleetSeconds: fleetSeconds, floorSeconds: floor,
        ratio: floor.map { fleetSeconds / $0 }, cpuSeconds: run.cpuSeconds,
        cpuMillisecondsPerDevice: run.cpuSeconds * 1000 / Double(count), peakRSSMiB: run.peakRSSMiB,
        changed: summary["changed"] as? Int ?? 0, skipped: summary["skipped"] as? Int ?? 0,
        failed: summary["failed"] as? Int ?? 0, connects: activity.connects,
        requests: activity.reads + activity.writes, calibrations: activity.calibrations)
}

struct PassiveAuditResult: Codable {
    var beacons: Int
    var audited: Int
    var scanSeconds: Double
    /// When the last beacon was first seen, counted from the scan's start.
    var allSeenAfterSeconds: Double
    var commandSeconds: Double
}

/// `scan 10s` then `audit --passive` over `count` beacons advertising at
/// the realistic interval.
func passiveAuditRun(count: Int) async throws -> PassiveAuditResult {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let simulator = try await SimulatorProcess.start(
        executable: try sibling("beaconbench-sim"), arguments: ["--count", String(count), "--latency", "realistic"])
    defer { simulator.stop() }
    let batch = directory + "/passive.batch"
    try "scan 10s\naudit --passive\n".write(toFile: batch, atomically: true, encoding: .utf8)
    let run = try runMeasured(
        try sibling("beaconbench"),
        ["--bus", simulator.bus.address, "--inventory", directory + "/inventory.sqlite", "--json", "run", batch],
        in: directory)
    let lines = run.output.split(separator: "\n").compactMap {
        try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
    }
    let scan = lines.compactMap { $0["scan"] as? [String: Any] }.first ?? [:]
    return PassiveAuditResult(
        beacons: count, audited: lines.filter { $0["source"] as? String == "passive" }.count,
        scanSeconds: scan["seconds"] as? Double ?? 0, allSeenAfterSeconds: scan["last_found_after"] as? Double ?? 0,
        commandSeconds: run.wallSeconds)
}

/// Starts the REPL on a fresh pty and reads until `]> ` (or `prompt`, in
/// the output with its colours and readline's markers taken out).
/// `arguments` default to beaconbench's `--inventory` in `directory`;
/// `environment` is added to this process's.
func timeToPrompt(
    _ executable: String, _ directory: String, arguments: [String]? = nil, prompt: String = "]> ",
    environment extra: [String: String] = [:]
) throws -> Double {
    var master: Int32 = 0
    var slave: Int32 = 0
    guard openpty(&master, &slave, nil, nil, nil) == 0 else { throw LocalBusError("openpty failed") }
    defer { close(master) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    for target: Int32 in 0...2 { posix_spawn_file_actions_adddup2(&actions, slave, target) }
    posix_spawn_file_actions_addclose(&actions, master)
    var environment = ProcessInfo.processInfo.environment
    environment["XDG_STATE_HOME"] = directory + "/state"
    environment["XDG_DATA_HOME"] = directory + "/data"
    environment["TERM"] = "xterm"
    environment.merge(extra) { $1 }
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { for pointer in envp { free(pointer) } }
    let argv =
        ([executable] + (arguments ?? ["--inventory", directory + "/inventory.sqlite"])).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let started = ContinuousClock.now
    guard posix_spawn(&pid, executable, &actions, nil, argv, envp) == 0 else {
        throw LocalBusError("cannot start \(executable)")
    }
    close(slave)
    var seen = ""
    var buffer = [UInt8](repeating: 0, count: 4096)
    while !plainText(seen).contains(prompt) {
        var descriptor = pollfd(fd: master, events: Int16(POLLIN), revents: 0)
        guard poll(&descriptor, 1, 10_000) > 0 else { break }
        let count = read(master, &buffer, buffer.count)
        if count <= 0 { break }
        seen += String(decoding: buffer[..<count], as: UTF8.self)
    }
    let elapsed = seconds(ContinuousClock.now - started)
    kill(pid, SIGKILL)
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    guard plainText(seen).contains(prompt) else { throw LocalBusError("no prompt from \(executable): \(seen)") }
    return elapsed
}

/// Terminal output without its escape sequences (CSI) and readline's
/// \u{1} \u{2} markers.
func plainText(_ text: String) -> String {
    var result = ""
    var inEscape = false
    var afterEscape = false
    for scalar in text.unicodeScalars {
        if inEscape {
            // A CSI sequence ends with a byte in @…~.
            if afterEscape, scalar != "[" {
                inEscape = false
            } else if !afterEscape, (0x40...0x7E).contains(scalar.value) {
                inEscape = false
            }
            afterEscape = false
            continue
        }
        switch scalar {
        case "\u{1B}":
            inEscape = true
            afterEscape = true
        case "\u{1}", "\u{2}": continue
        default: result.unicodeScalars.append(scalar)
        }
    }
    return result
}
