import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus

// `faults` (issue 26): `provision-new.batch` over N new beacons on the
// realistic radio, once without faults and once per failure mode of
// docs/reliability.md ("Recovering without an operator"), each in a fresh
// simulator with its fault plan (docs/simulator.md, "One plan per mode")
// written to a scratch file. The bound judged: wall time within 3× the
// fault-free run, every beacon converged (within one rerun).

/// One failure mode: the simulator's plan and options, and how many extra
/// beacons the fleet has (mode 7's beacons that left).
struct FaultMode: Sendable {
    var name: String
    /// What the plan does, for the table's notes.
    var summary: String
    var plan: String?
    var simulatorOptions: [String] = []
    var extraBeacons = 0
}

/// The characteristic the config write goes to (docs/simulator.md, mode 5).
private let configCharacteristic = "53420201-6561-636f-6e00-000000000000"

/// Beacons at every `step` from `first` below `count`: 5 % (step 20) or
/// 10 % (step 10) of the fleet.
private func spread(_ count: Int, first: Int, step: Int) -> [Int] { Array(stride(from: first, to: count, by: step)) }

/// The rules of each mode over a fleet of `count` new beacons (indices
/// 0..<count; mode 7's extra beacons are count..<count+10).
func faultModes(count: Int) -> [FaultMode] {
    let stale = spread(count, first: 3, step: 20).map { beacon in
        #"{"id":"stale-\#(beacon)","hook":"connect.requested","target":{"beacon":\#(beacon)},"#
            + #""trigger":{"nth":1},"action":{"kind":"stale","flap":true}}"#
    }
    let wedge =
        #"{"id":"wedge","hook":"discovery.start","target":{"adapter":0},"trigger":{"nth":1},"#
        + #""action":{"kind":"wedge","discoveryError":"not-ready","connect":{"abortAfterMs":2000}}}"#
    // The 30th beacon's first Connect (about 30 % into the run).
    let replugBeacon = min(29, count - 1)
    let replug =
        #"{"id":"replug","hook":"connect.requested","target":{"beacon":\#(replugBeacon)},"trigger":{"nth":1},"#
        + #""action":{"kind":"replug","goneMs":1500,"newIndex":"next"}}"#
    let shift = spread(count, first: 5, step: 10).flatMap { beacon in
        [
            #"{"id":"shift-\#(beacon)","hook":"write.landed","target":{"beacon":\#(beacon),"#
                + #""characteristic":"\#(configCharacteristic)"},"trigger":{"nth":1},"#
                + #""action":{"kind":"shift-gatt","delta":16}}"#,
            #"{"id":"shift-drop-\#(beacon)","hook":"write.landed","target":{"beacon":\#(beacon),"#
                + #""characteristic":"\#(configCharacteristic)"},"trigger":{"nth":1},"#
                + #""action":{"kind":"drop-link","reason":"remote"}}"#,
        ]
    }
    let busy =
        #"{"id":"busy","hook":"connect.requested","target":{"any":true},"trigger":{"every":true},"#
        + #""action":{"kind":"busy-while-discovering"}}"#
    let cached = (count..<count + 10).map { beacon in
        #"{"id":"cached-\#(beacon)","hook":"time","target":{"beacon":\#(beacon)},"trigger":{"atMs":0},"#
            + #""action":{"kind":"vanish","ms":null,"keepObject":true,"preheard":{"rssi":-42,"agoMs":20000}}}"#
    }
    func plan(_ rules: [String], slots: Int? = nil) -> String {
        let adapters = slots.map { #""adapters":[{"index":0,"slots":\#($0),"slotFailure":"abort"}],"# } ?? ""
        return "{" + adapters + #""rules":["# + rules.joined(separator: ",\n") + "]}"
    }
    return [
        FaultMode(name: "none", summary: "no faults", plan: nil),
        FaultMode(
            name: "1 stale", summary: "beacons \(spread(count, first: 3, step: 20)) stale until RemoveDevice",
            plan: plan(stale)),
        FaultMode(
            name: "2 slots", summary: "--slots 2, --concurrency default (5)", plan: nil,
            simulatorOptions: ["--slots", "2"]),
        FaultMode(
            name: "3 wedge", summary: "hci0 wedged at the first StartDiscovery (NotReady) until a power cycle",
            plan: plan([wedge])),
        FaultMode(
            name: "4 replug", summary: "hci0 → hci1 at beacon \(replugBeacon)'s first Connect, gone 1.5 s",
            plan: plan([replug])),
        FaultMode(
            name: "5 shift-gatt",
            summary:
                "GATT handles +16 on beacons \(spread(count, first: 5, step: 10)) after the config write, link dropped",
            plan: plan(shift)),
        FaultMode(
            name: "6 busy-while-discovering", summary: "every Connect InProgress while discovery runs",
            plan: plan([busy])),
        FaultMode(
            name: "7 cached", summary: "10 more beacons heard 20 s ago at −42 dBm that left (must not be provisioned)",
            plan: plan(cached), extraBeacons: 10),
        FaultMode(
            name: "all combined", summary: "modes 1 and 3–7 together on a 2-slot adapter",
            plan: plan(stale + [wedge, replug] + shift + [busy] + cached, slots: 2), extraBeacons: 10),
    ]
}

struct FaultRunResult: Codable {
    var mode: String
    var attempt: Int
    var beacons: Int
    /// beaconbench's exit status.
    var status: Int32
    var commandSeconds: Double
    var fleetSeconds: Double
    /// commandSeconds / the fault-free run's commandSeconds.
    var ratio: Double?
    var changed: Int
    var skipped: Int
    var failed: Int
    /// `recovery` JSON lines by action (`status` failed ones as `action (failed)`).
    var recoveries: [String: Int]
    var removeDevice: Int
    var powerCycles: Int
    var connects: Int
    var slotRefusals: Int
    var staleRefusals: Int
    var startDiscoveryRefusals: Int
    /// The plan's rules that fired, and how often.
    var firedRules: [String: Int]
    /// The recap's failures (`device: reason`) and the last lines of
    /// standard error when the run did not converge.
    var failures: [String]
    /// Beacons of the 10 that left (mode 7) that the run wrote to.
    var cachedWritten: Int?
    /// The devices the recap calls failed.
    var failedDevices: [String] = []
    /// Converged: exit 0 or 2, every failed device one the fault-free run
    /// failed too (the fleet's moving beacons cannot be calibrated) or one
    /// of mode 7's beacons that left, none of those written.
    var converged = false
}

struct FaultsReport: Codable {
    var machine: String
    var date: String
    var count: Int
    var runs: [FaultRunResult] = []
}

/// One run of `mode` over `count` new beacons (plus its extra beacons).
func faultRun(
    mode: FaultMode, count: Int, attempt: Int, baseline: Double?, baselineFailed: Set<String>?
) async throws -> FaultRunResult {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var options = [
        "--count", String(count + mode.extraBeacons), "--fresh", "--adapters", "1", "--latency", "realistic",
    ]
    options += mode.simulatorOptions
    if let plan = mode.plan {
        let path = directory + "/plan.json"
        try plan.write(toFile: path, atomically: true, encoding: .utf8)
        options += ["--fault-plan", path]
    }
    let simulator = try await SimulatorProcess.start(executable: try sibling("beaconbench-sim"), arguments: options)
    defer { simulator.stop() }

    let inventoryPath = directory + "/inventory.sqlite"
    let arguments = [
        "--bus", simulator.bus.address, "--inventory", inventoryPath, "--json", "run",
        repository + "/batches/provision-new.batch", "--set", "scan=3s",
    ]
    let errorPath = directory + "/stderr.txt"
    let started = ContinuousClock.now
    let child = try ChildProcess(
        try sibling("beaconbench"), arguments, standardOutput: directory + "/stdout.txt", standardError: errorPath)
    let (status, _) = await child.waitForExit()
    let wall = seconds(ContinuousClock.now - started)
    let output = (try? String(contentsOfFile: directory + "/stdout.txt", encoding: .utf8)) ?? ""
    let errors = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
    let lines = output.split(separator: "\n").compactMap {
        try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
    }
    let summary = lines.first { $0["kind"] as? String == "summary" } ?? [:]
    var recoveries: [String: Int] = [:]
    for line in lines where line["kind"] as? String == "recovery" {
        let action = line["action"] as? String ?? "?"
        recoveries[line["status"] as? String == "ok" ? action : action + " (failed)", default: 0] += 1
    }
    var failures = lines.filter { $0["kind"] as? String == "recap" && ($0["failed"] as? Int ?? 0) > 0 }.map {
        "\($0["device"] as? String ?? "?"): \($0["reason"] as? String ?? "?")"
    }
    let failed = summary["failed"] as? Int ?? 0
    let exit = status >> 8
    let failedDevices = lines.filter { $0["kind"] as? String == "recap" && ($0["failed"] as? Int ?? 0) > 0 }.map {
        $0["device"] as? String ?? "?"
    }
    if exit != 0 && exit != 2 {
        let tail = errors.split(separator: "\n").suffix(5).map { "stderr: " + SafeLine.clean(String($0)) }
        failures += ["exit status \(exit)"] + tail
    }

    let connection = try await BusConnection.connect(.address(simulator.bus.address))
    let control = SimulatorControl.Client(connection)
    let counters = try await control.counters()
    let firedReply = try await connection.call(
        SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "FiredRules", [])
    var cachedWritten: Int?
    var cachedAddresses: [String] = []
    if mode.extraBeacons > 0 {
        // The beacons that left must be as they came from the box.
        let reply = try await connection.call(
            SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Beacons", [])
        let beacons =
            (try? JSONSerialization.jsonObject(with: Data((reply.body.first?.string ?? "[]").utf8)) as? [[String: Any]])
            ?? []
        cachedAddresses = beacons.suffix(mode.extraBeacons).compactMap { $0["address"] as? String }
        cachedWritten = beacons.suffix(mode.extraBeacons).filter { $0["factoryDefault"] as? Bool == false }.count
    }
    await connection.close()
    let fired =
        (try? JSONSerialization.jsonObject(with: Data((firedReply.body.first?.string ?? "{}").utf8))
        as? [String: Any])?["fired"] as? [String: Int] ?? [:]
    // The plan's rules of one kind summed: stale-3, stale-23 … → stale.
    var firedKinds: [String: Int] = [:]
    for (rule, times) in fired {
        let kind = rule.split(separator: "-").filter { Int($0) == nil }.joined(separator: "-")
        firedKinds[kind, default: 0] += times
    }

    let inventory = try Inventory(path: inventoryPath)
    let span =
        try await inventory.query("SELECT min(started_at), max(ended_at) FROM outcomes WHERE step <> 'recover'")
        .first ?? []
    let parse = { (value: SQLiteValue?) in value?.text.flatMap(Inventory.parseTimestamp) }
    let fleetSeconds =
        if let first = parse(span.first), let last = parse(span.last) { last.timeIntervalSince(first) } else { 0.0 }
    var result = FaultRunResult(
        mode: mode.name, attempt: attempt, beacons: count, status: exit, commandSeconds: wall,
        fleetSeconds: fleetSeconds, ratio: baseline.map { wall / $0 }, changed: summary["changed"] as? Int ?? 0,
        skipped: summary["skipped"] as? Int ?? 0, failed: failed, recoveries: recoveries,
        removeDevice: counters.removeDevice.values.reduce(0, +), powerCycles: counters.powerCycles.values.reduce(0, +),
        connects: counters.connects, slotRefusals: counters.slotRefusals, staleRefusals: counters.staleRefusals,
        startDiscoveryRefusals: counters.startDiscoveryRefusals, firedRules: firedKinds, failures: failures,
        cachedWritten: cachedWritten, failedDevices: failedDevices)
    let left = Set(cachedAddresses)
    let unexpected = Set(failedDevices).subtracting(baselineFailed ?? Set(failedDevices)).subtracting(left)
    result.converged = (exit == 0 || exit == 2) && unexpected.isEmpty && (cachedWritten ?? 0) == 0
    if !unexpected.isEmpty {
        result.failures.insert("failed beyond the fault-free run's: \(unexpected.sorted())", at: 0)
    }
    return result
}

/// Control characters out of a line of the tool's standard error before it
/// reaches this terminal.
enum SafeLine {
    static func clean(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.prefix(300).map { $0.properties.generalCategory == .control ? "?" : $0 }))
    }
}

/// Every mode `runs` times (the fault-free run first: the others' ratios are
/// to its first run); a mode that did not converge is run once more.
func faultsBenchmark(count: Int, runs: Int, modes only: [String]? = nil) async throws -> FaultsReport {
    var report = FaultsReport(
        machine: machineDescription(), date: ISO8601DateFormatter().string(from: Date()), count: count)
    var baseline: Double?
    var baselineFailed: Set<String>?
    for mode in faultModes(count: count) where only == nil || mode.name == "none" || only!.contains(mode.name) {
        var attempt = 1
        while attempt <= runs + 1 {
            FileHandle.standardError.write(Data("… faults: \(mode.name), run \(attempt), \(count) beacons\n".utf8))
            let result = try await faultRun(
                mode: mode, count: count, attempt: attempt, baseline: baseline, baselineFailed: baselineFailed)
            report.runs.append(result)
            if mode.name == "none", baseline == nil {
                baseline = result.commandSeconds
                baselineFailed = Set(result.failedDevices)
            }
            let converged = result.converged
            // Each run as it ends: a long matrix stopped part way keeps what it measured.
            let recovered = result.recoveries.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
            FileHandle.standardError.write(
                Data(
                    ("… faults: \(mode.name) run \(attempt): wall \(format(result.commandSeconds)) s, fleet "
                        + "\(format(result.fleetSeconds)) s, ratio \(result.ratio.map { format($0, 2) } ?? "-"), "
                        + "\(result.changed)/\(result.skipped)/\(result.failed) changed/skipped/failed, recoveries "
                        + "[\(recovered.joined(separator: ", "))], RemoveDevice \(result.removeDevice), power cycles "
                        + "\(result.powerCycles)\n").utf8))
            if !converged {
                FileHandle.standardError.write(
                    Data("… faults: \(mode.name) did not converge (failed \(result.failed)); one rerun\n".utf8))
            }
            // `runs` runs, and one rerun if the last did not converge.
            if attempt >= runs && (converged || attempt > runs) { break }
            attempt += 1
        }
    }
    return report
}

func printFaults(_ report: FaultsReport) {
    print("machine: \(report.machine)")
    print(
        "provision-new over \(report.count) new beacons, realistic radio, 1 adapter, scan 3 s; ratio = wall / fault-free wall"
    )
    let header = [
        "mode", "run", "wall s", "fleet s", "ratio", "changed", "skipped", "failed", "recoveries", "RemoveDevice",
        "power cycles",
    ]
    var table = [header]
    for run in report.runs {
        table.append([
            run.mode, String(run.attempt), format(run.commandSeconds), format(run.fleetSeconds),
            run.ratio.map { format($0, 2) } ?? "-", String(run.changed), String(run.skipped), String(run.failed),
            run.recoveries.isEmpty
                ? "-"
                : run.recoveries.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "),
            String(run.removeDevice), String(run.powerCycles),
        ])
    }
    let widths = header.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
    for row in table {
        print(
            row.indices.map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(
                separator: "  "))
    }
    print()
    for run in report.runs {
        let converged = run.converged
        let bound: String
        if let ratio = run.ratio { bound = ratio <= 3 ? ", within 3×" : ", OVER 3×" } else { bound = "" }
        let fired: String =
            run.firedRules.isEmpty
            ? "none" : run.firedRules.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        let cached: String = run.cachedWritten.map { "; beacons that left written: \($0)" } ?? ""
        let verdict: String = converged ? "converged" : "DID NOT CONVERGE"
        let counts: String =
            "\(run.connects) connects, \(run.slotRefusals) slot refusals, \(run.staleRefusals) stale refusals, "
            + "\(run.startDiscoveryRefusals) StartDiscovery refusals"
        print("  \(run.mode) (run \(run.attempt)): \(verdict)\(bound); \(counts); rules fired: \(fired)\(cached)")
        for failure in run.failures.prefix(12) { print("      \(failure)") }
        if run.failures.count > 12 { print("      … \(run.failures.count - 12) more") }
    }
}

/// The summary table's rows: each mode's (last) run against 3× the
/// fault-free run, and converged.
func faultRows(_ report: FaultsReport) -> [Row] {
    report.runs.filter { $0.mode != "none" || $0.attempt == 1 }.map { run in
        let converged = run.converged
        return Row(
            scenario: "faults \(report.count): \(run.mode) (run \(run.attempt))",
            value: "\(format(run.commandSeconds)) s"
                + (run.ratio.map { " = \(format($0, 2)) ×" } ?? "") + ", \(run.changed) changed, \(run.failed) failed",
            goal: run.mode == "none" ? "-" : "≤ 3 ×, converged",
            met: run.mode == "none" ? nil : converged && (run.ratio ?? 0) <= 3)
    }
}
