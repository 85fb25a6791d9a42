import BeaconSimulator
import DBusBinding
import Foundation
import LocalBus
import TestSupport

// The peers of issue 17: beaconbench beside what a user would run instead,
// on the same simulated bench in the same run, each compared as a ratio.
// - provisioning: batches/provision-new.batch against bench/peers/bleak_provision.py
//   (bleak 3.1), no radio latency: whole-process CPU per device found;
// - passive listening: `beaconbench scan S` against bench/peers/bleak_listen.py,
//   beacons advertising at 1 Hz: % of one core and CPU per D-Bus signal;
// - start-up: `--version` and the prompt on a pty against bluetoothctl.

/// One child process of a peer comparison.
struct PeerRun: Codable {
    var tool: String
    var wallSeconds: Double
    var cpuSeconds: Double
    var peakRSSMiB: Double
    /// SBeacons the tool found in its scan.
    var found: Int
    var provisioned: Int
    var skipped: Int
    var failed: Int
    var cpuMillisecondsPerDevice: Double
    /// What the simulator saw the tool do.
    var connects: Int
    var reads: Int
    var writes: Int
    var calibrations: Int
}

struct PeerProvisioning: Codable {
    var beacons: Int
    var runs: [PeerRun]
    /// CPU per device found, ms: min and median over the runs.
    var beaconbenchMin: Double
    var beaconbenchMedian: Double
    var bleakMin: Double
    var bleakMedian: Double
    /// beaconbench's median / bleak's median.
    var ratio: Double
    /// Both tools found, provisioned, skipped and failed the same numbers
    /// in every run.
    var sameDevices: Bool
}

struct PeerListenRun: Codable {
    var tool: String
    var wallSeconds: Double
    var cpuSeconds: Double
    /// CPU over the whole process's wall time, % of one core.
    var percentOfCore: Double
    /// Signals the simulated bluetoothd sent while the tool discovered
    /// (devices added, RSSI updates, devices removed).
    var signals: Int
    var microsecondsPerSignal: Double
    /// Beacons the tool reported seeing.
    var seen: Int
    /// bleak: detection callbacks.
    var callbacks: Int?
    /// CPU per signal with start-up and the first round of devices left
    /// out: (CPU − CPU of a 2 s run) / (signals − its signals).
    var steadyMicrosecondsPerSignal: Double?
}

struct PeerListening: Codable {
    var beacons: Int
    var seconds: Double
    var advertMilliseconds: Int
    var beaconbench: PeerListenRun
    var bleak: PeerListenRun
    var percentRatio: Double
    var perSignalRatio: Double
}

/// The bleak script as first written: the scan stopped before the fleet
/// is worked on, BlueZ' TemporaryTimeout left at 30 s, a realistic radio.
struct PeerVanishing: Codable {
    var beacons: Int
    var found: Int
    var provisioned: Int
    var skipped: Int
    var failed: Int
    /// Failed with "device … not found": removed by bluetoothd before their turn.
    var lost: Int
    var wallSeconds: Double
}

struct PeersResult: Codable {
    var python: String
    var provisioning: PeerProvisioning?
    var vanishing: PeerVanishing?
    var listening: PeerListening?
}

struct PeerOptions {
    var count = 200
    var listenCount = 2000
    var listenSeconds = 60.0
    var runs = 3
    /// Beacons of the TemporaryTimeout check (0: none).
    var vanishCount = 100

    static let quick = PeerOptions(
        count: 100, listenCount: 2000, listenSeconds: 15, runs: 3, vanishCount: 0)
}

/// The Python that has bleak: `BENCH_PYTHON`, else the first `python3` on
/// the PATH, resolved to the interpreter itself (a pyenv shim is a shell
/// script whose CPU would be counted).
func peerPython() async throws -> String {
    if let python = ProcessInfo.processInfo.environment["BENCH_PYTHON"] { return python }
    let output = try await runTool(
        "python3", ["-c", "import sys, bleak; print(sys.executable)"], environment: ProcessInfo.processInfo.environment)
    guard output.status == 0, let path = output.stdout.split(separator: "\n").last.map(String.init) else {
        throw LocalBusError("python3 with bleak not found (scripts/install-deps installs it): \(output.stderr)")
    }
    return path
}

func simulatorActivity(_ simulator: SimulatorProcess) async throws -> SimulatedBluetoothd.Activity {
    let connection = try await BusConnection.connect(.address(simulator.bus.address))
    defer { Task { await connection.close() } }
    let reply = try await connection.call(
        SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Activity", [])
    return try JSONDecoder().decode(
        SimulatedBluetoothd.Activity.self, from: Data((reply.body.first?.string ?? "{}").utf8))
}

/// The JSON objects of a tool's output, one a line.
func jsonLines(_ text: String) -> [[String: Any]] {
    text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
}

/// A Python peer, with the private bus as its system bus (`env` execs
/// Python in the same process, so `wait4` sees Python's CPU).
func runPeerScript(
    _ python: String, _ script: String, _ arguments: [String], bus: String, in directory: String
) throws -> ChildRun {
    try runMeasured(
        "/usr/bin/env",
        ["DBUS_SYSTEM_BUS_ADDRESS=\(bus)", python, repository + "/bench/peers/" + script] + arguments, in: directory)
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    return sorted.count % 2 == 1
        ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// provision-new.batch against the bleak script, each on a fresh simulator
/// of `count` new beacons with no radio latency, `runs` times each,
/// alternating.
func peerProvisioning(count: Int, runs: Int, python: String) async throws -> PeerProvisioning {
    func log(_ text: String) { FileHandle.standardError.write(Data("…   \(text)\n".utf8)) }
    var results: [PeerRun] = []
    for run in 0..<runs {
        for tool in ["beaconbench", "bleak"] {
            let directory = try scratchDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // The same fleet for both (seed 1); the temporary timeout raised
            // so that the bleak script's devices stay after its scan stops.
            let simulator = try await SimulatorProcess.start(
                executable: try sibling("beaconbench-sim"),
                arguments: ["--count", String(count), "--fresh", "--latency", "none", "--temporary-timeout", "600"])
            defer { simulator.stop() }
            var result: PeerRun
            if tool == "beaconbench" {
                let child = try runMeasured(
                    try sibling("beaconbench"),
                    [
                        "--bus", simulator.bus.address, "--inventory", directory + "/inventory.sqlite", "--json",
                        "run", repository + "/batches/provision-new.batch", "--set", "scan=3s",
                    ], in: directory)
                guard child.status == 0 || child.status >> 8 == 2 else {
                    throw LocalBusError("beaconbench exited with status \(child.status >> 8): \(child.output)")
                }
                let lines = jsonLines(child.output)
                let summary = lines.first { $0["kind"] as? String == "summary" } ?? [:]
                let scan = lines.first { $0["kind"] as? String == "scan" } ?? [:]
                result = PeerRun(
                    tool: tool, wallSeconds: child.wallSeconds, cpuSeconds: child.cpuSeconds,
                    peakRSSMiB: child.peakRSSMiB, found: scan["seen"] as? Int ?? 0,
                    provisioned: summary["changed"] as? Int ?? 0, skipped: summary["skipped"] as? Int ?? 0,
                    failed: summary["failed"] as? Int ?? 0, cpuMillisecondsPerDevice: 0, connects: 0, reads: 0,
                    writes: 0, calibrations: 0)
            } else {
                let child = try runPeerScript(
                    python, "bleak_provision.py", ["--scan", "3"], bus: simulator.bus.address, in: directory)
                let summary = jsonLines(child.output).last ?? [:]
                guard child.status == 0, summary["found"] != nil else {
                    throw LocalBusError("bleak_provision.py exited with status \(child.status >> 8): \(child.output)")
                }
                if let errors = summary["errors"] as? [String: Any], !errors.isEmpty { log("bleak errors: \(errors)") }
                result = PeerRun(
                    tool: tool, wallSeconds: child.wallSeconds, cpuSeconds: child.cpuSeconds,
                    peakRSSMiB: child.peakRSSMiB, found: summary["found"] as? Int ?? 0,
                    provisioned: summary["provisioned"] as? Int ?? 0, skipped: summary["skipped"] as? Int ?? 0,
                    failed: summary["failed"] as? Int ?? 0, cpuMillisecondsPerDevice: 0, connects: 0, reads: 0,
                    writes: 0, calibrations: 0)
            }
            let activity = try await simulatorActivity(simulator)
            result.connects = activity.connects
            result.reads = activity.reads
            result.writes = activity.writes
            result.calibrations = activity.calibrations
            result.cpuMillisecondsPerDevice = result.cpuSeconds * 1000 / Double(max(1, result.found))
            log(
                "run \(run + 1) \(tool): \(format(result.cpuMillisecondsPerDevice, 2)) ms/device, "
                    + "\(result.found) found, \(result.provisioned)/\(result.skipped)/\(result.failed)")
            results.append(result)
        }
    }
    let cpu = { (tool: String) in results.filter { $0.tool == tool }.map(\.cpuMillisecondsPerDevice) }
    let outcome = { (run: PeerRun) in [run.found, run.provisioned, run.skipped, run.failed] }
    let reference = results.first.map(outcome)
    return PeerProvisioning(
        beacons: count, runs: results, beaconbenchMin: cpu("beaconbench").min() ?? 0,
        beaconbenchMedian: median(cpu("beaconbench")), bleakMin: cpu("bleak").min() ?? 0,
        bleakMedian: median(cpu("bleak")), ratio: median(cpu("beaconbench")) / max(1e-9, median(cpu("bleak"))),
        sameDevices: results.allSatisfy { outcome($0) == reference })
}

/// The bleak script on a realistic radio with BlueZ' default
/// TemporaryTimeout: how many devices it loses when its scan stops.
func peerVanishing(count: Int, python: String) async throws -> PeerVanishing {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let simulator = try await SimulatorProcess.start(
        executable: try sibling("beaconbench-sim"),
        arguments: ["--count", String(count), "--fresh", "--latency", "realistic"])
    defer { simulator.stop() }
    let child = try runPeerScript(
        python, "bleak_provision.py", ["--scan", "3"], bus: simulator.bus.address, in: directory)
    let summary = jsonLines(child.output).last ?? [:]
    guard child.status == 0, summary["found"] != nil else {
        throw LocalBusError("bleak_provision.py exited with status \(child.status >> 8): \(child.output)")
    }
    let errors = summary["errors"] as? [String: Int] ?? [:]
    return PeerVanishing(
        beacons: count, found: summary["found"] as? Int ?? 0, provisioned: summary["provisioned"] as? Int ?? 0,
        skipped: summary["skipped"] as? Int ?? 0, failed: summary["failed"] as? Int ?? 0,
        lost: errors.filter { $0.key.contains("not found") }.values.reduce(0, +), wallSeconds: child.wallSeconds)
}

/// One listening run of `tool` on a fresh simulator.
func listenOnce(
    tool: String, count: Int, seconds: Double, python: String, advertMilliseconds: Int
) async throws
    -> PeerListenRun
{
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let simulator = try await SimulatorProcess.start(
        executable: try sibling("beaconbench-sim"),
        arguments: ["--count", String(count), "--latency", "none", "--advert-ms", String(advertMilliseconds)])
    defer { simulator.stop() }
    let before = try await simulatorActivity(simulator).discoverySignals
    let child: ChildRun
    var seen = 0
    var callbacks: Int?
    if tool == "beaconbench" {
        child = try runMeasured(
            try sibling("beaconbench"),
            [
                "--bus", simulator.bus.address, "--inventory", directory + "/inventory.sqlite", "--json", "scan",
                "\(max(1, Int(seconds.rounded())))s",
            ], in: directory)
        guard child.status == 0 else {
            throw LocalBusError("beaconbench scan exited with status \(child.status >> 8): \(child.output)")
        }
        seen = jsonLines(child.output).first { $0["kind"] as? String == "scan" }?["seen"] as? Int ?? 0
    } else {
        child = try runPeerScript(
            python, "bleak_listen.py", ["--seconds", String(seconds)], bus: simulator.bus.address, in: directory)
        let summary = jsonLines(child.output).last ?? [:]
        guard child.status == 0, summary["beacons"] != nil else {
            throw LocalBusError("bleak_listen.py exited with status \(child.status >> 8): \(child.output)")
        }
        seen = summary["beacons"] as? Int ?? 0
        callbacks = summary["callbacks"] as? Int
    }
    let signals = try await simulatorActivity(simulator).discoverySignals - before
    return PeerListenRun(
        tool: tool, wallSeconds: child.wallSeconds, cpuSeconds: child.cpuSeconds,
        percentOfCore: child.cpuSeconds / child.wallSeconds * 100, signals: signals,
        microsecondsPerSignal: child.cpuSeconds * 1e6 / Double(max(1, signals)), seen: seen, callbacks: callbacks)
}

/// `beaconbench scan S` against the bleak listener, each on a fresh
/// simulator of `count` beacons advertising every `advertMilliseconds`;
/// then each for 2 s, for the steady-state cost of a signal (the long
/// run's CPU and signals less the short one's: start-up and the first
/// round of InterfacesAdded left out).
func peerListening(
    count: Int, seconds: Double, python: String, advertMilliseconds: Int = 1000
) async throws
    -> PeerListening
{
    var runs: [PeerListenRun] = []
    for tool in ["beaconbench", "bleak"] {
        var run = try await listenOnce(
            tool: tool, count: count, seconds: seconds, python: python, advertMilliseconds: advertMilliseconds)
        if seconds > 4 {
            let short = try await listenOnce(
                tool: tool, count: count, seconds: 2, python: python, advertMilliseconds: advertMilliseconds)
            if run.signals > short.signals {
                run.steadyMicrosecondsPerSignal =
                    (run.cpuSeconds - short.cpuSeconds) * 1e6 / Double(run.signals - short.signals)
            }
        }
        FileHandle.standardError.write(
            Data(
                ("…   \(tool): \(format(run.percentOfCore, 2)) % of a core, \(run.signals) signals, "
                    + "\(format(run.microsecondsPerSignal)) µs/signal"
                    + (run.steadyMicrosecondsPerSignal.map { " (steady \(format($0)) µs)" } ?? "")
                    + ", \(run.seen) seen\n").utf8))
        runs.append(run)
    }
    return PeerListening(
        beacons: count, seconds: seconds, advertMilliseconds: advertMilliseconds, beaconbench: runs[0], bleak: runs[1],
        percentRatio: runs[0].percentOfCore / max(1e-9, runs[1].percentOfCore),
        perSignalRatio: runs[0].microsecondsPerSignal / max(1e-9, runs[1].microsecondsPerSignal))
}

func peersBenchmark(_ options: PeerOptions) async throws -> PeersResult {
    func log(_ text: String) { FileHandle.standardError.write(Data("… \(text)\n".utf8)) }
    let python = try await peerPython()
    var result = PeersResult(python: python)
    log(
        "peers: provisioning \(options.count) new beacons, no radio latency, beaconbench and bleak, \(options.runs) runs"
    )
    result.provisioning = try await peerProvisioning(count: options.count, runs: options.runs, python: python)
    if options.vanishCount > 0 {
        log("peers: the bleak script on a realistic radio, TemporaryTimeout 30 s, \(options.vanishCount) beacons")
        result.vanishing = try await peerVanishing(count: options.vanishCount, python: python)
    }
    log("peers: listening to \(options.listenCount) beacons at 1 Hz for \(format(options.listenSeconds, 0)) s")
    result.listening = try await peerListening(
        count: options.listenCount, seconds: options.listenSeconds, python: python)
    return result
}

/// The rows of the summary table: each ratio beside the absolute figures.
func peerRows(_ result: PeersResult) -> [Row] {
    var rows: [Row] = []
    if let p = result.provisioning {
        rows.append(
            Row(
                scenario:
                    "peers: provisioning CPU per device (\(p.beacons), no latency), min/median of \(p.runs.count / 2)",
                value:
                    "beaconbench \(format(p.beaconbenchMin, 2))/\(format(p.beaconbenchMedian, 2)) ms, "
                    + "bleak \(format(p.bleakMin, 2))/\(format(p.bleakMedian, 2)) ms = \(format(p.ratio, 2)) ×",
                goal: "≤ 0.5 × bleak", met: p.ratio <= 0.5))
        let describe = { (tool: String) -> String in
            guard let run = p.runs.first(where: { $0.tool == tool }) else { return "-" }
            return "\(run.found) found, \(run.provisioned)/\(run.skipped)/\(run.failed)"
        }
        rows.append(
            Row(
                scenario: "peers: same devices (found, provisioned/skipped/failed)",
                value: "beaconbench \(describe("beaconbench")), bleak \(describe("bleak"))", goal: "the same",
                met: p.sameDevices))
    }
    if let v = result.vanishing {
        rows.append(
            Row(
                scenario: "peers: bleak script, realistic radio, TemporaryTimeout 30 s (\(v.beacons) beacons)",
                value: "\(v.lost) lost when its scan stopped; \(v.provisioned)/\(v.skipped)/\(v.failed)",
                goal: "-"))
    }
    if let l = result.listening {
        rows.append(
            Row(
                scenario: "peers: listening to \(l.beacons) beacons at 1 Hz for \(format(l.seconds, 0)) s, % of a core",
                value:
                    "beaconbench \(format(l.beaconbench.percentOfCore, 2)) %, bleak \(format(l.bleak.percentOfCore, 2)) % "
                    + "= \(format(l.percentRatio, 2)) ×",
                goal: "≤ 1 %", met: l.beaconbench.percentOfCore <= 1))
        rows.append(
            Row(
                scenario: "peers: CPU per D-Bus signal while listening",
                value:
                    "beaconbench \(format(l.beaconbench.microsecondsPerSignal)) µs (\(l.beaconbench.signals)), "
                    + "bleak \(format(l.bleak.microsecondsPerSignal)) µs (\(l.bleak.signals)) "
                    + "= \(format(l.perSignalRatio, 2)) ×"
                    + steady(l),
                goal: "≤ 10 µs", met: l.beaconbench.microsecondsPerSignal <= 10))
    }
    return rows
}

extension PeerOptions {
    func with(_ change: (inout PeerOptions) -> Void) -> PeerOptions {
        var copy = self
        change(&copy)
        return copy
    }
}

/// Each run of each peer, below the table.
func printPeerDetails(_ result: PeersResult) {
    print()
    print("peer runs (python: \(result.python)):")
    if let p = result.provisioning {
        for run in p.runs {
            print(
                "  provision \(p.beacons), \(run.tool): \(format(run.cpuMillisecondsPerDevice, 2)) ms/device "
                    + "(CPU \(format(run.cpuSeconds, 2)) s, wall \(format(run.wallSeconds, 2)) s, "
                    + "RSS \(format(run.peakRSSMiB)) MiB), \(run.found) found, \(run.provisioned) provisioned, "
                    + "\(run.skipped) skipped, \(run.failed) failed; \(run.connects) connects, \(run.reads) reads, "
                    + "\(run.writes) writes, \(run.calibrations) calibrations")
        }
    }
    if let l = result.listening {
        for run in [l.beaconbench, l.bleak] {
            print(
                "  listen \(l.beacons) at \(l.advertMilliseconds) ms for \(format(l.seconds, 0)) s, \(run.tool): "
                    + "CPU \(format(run.cpuSeconds, 3)) s over \(format(run.wallSeconds, 2)) s "
                    + "= \(format(run.percentOfCore, 2)) % of a core; \(run.signals) signals "
                    + "(\(format(Double(run.signals) / max(1e-9, run.wallSeconds), 0))/s), "
                    + "\(format(run.microsecondsPerSignal)) µs each"
                    + (run.steadyMicrosecondsPerSignal.map { " (\(format($0)) µs in the steady state)" } ?? "")
                    + "; \(run.seen) beacons seen"
                    + (run.callbacks.map { ", \($0) callbacks" } ?? ""))
        }
    }
}

/// The steady-state figures beside the whole-process ones, when measured.
func steady(_ l: PeerListening) -> String {
    guard let b = l.beaconbench.steadyMicrosecondsPerSignal, let p = l.bleak.steadyMicrosecondsPerSignal else {
        return ""
    }
    return "; steady state \(format(b)) vs \(format(p)) µs = \(format(b / max(1e-9, p), 2)) ×"
}
