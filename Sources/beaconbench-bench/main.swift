// beaconbench-bench: benchmarks that print numbers. Run through
// `scripts/bench` (release build). Each scenario starts its own private
// dbus-daemon; nothing touches the machine's buses.
//
//   beaconbench-bench all|dbus|inventory|sync|peers|faults|ledger|startup [--quick] [--seconds S] [--json FILE]
//   beaconbench-bench wire-decode [ITERATIONS [slow|fast]]  (one signal's decode, fast against libdbus)
//       startup: [--runs R] [--beaconbench PATH]  (--version and the prompt beside bluetoothctl; Startup.swift)
//       ledger: [--count N] [--runs R]  (the ledger's cost, with and without it; LedgerBenchmark.swift)
//       faults: [--count N] [--runs R] [--mode NAME]…  (issue 26's modes against no faults; Faults.swift)
//       peers: [--count N] [--listen-count N] [--listen-seconds S] [--runs N] [--vanish-count N]
//       (beaconbench beside bleak 3.1 and bluetoothctl; Peers.swift)
//   beaconbench-bench office generate|sync|claims|reads|faults …  (issue 31; Office/, docs/office.md)
//   beaconbench-bench inventory-writer PATH   (the crash-safety test's writer)
//   beaconbench-bench ledger-build PATH       (the ledger benchmark's 1,000,000 entries)
//   beaconbench-bench ledger-append [--runs R] (the ledger benchmark's appends alone, for perf)
import DBusBinding
import Foundation
import TestSupport

struct Measurement: Codable {
    var scenario: String
    var calls: Int
    var seconds: Double
    var callsPerSecond: Double
}

/// Calls `Add` on an echo-like server from `callers` concurrent tasks for
/// `seconds`, and counts completed round trips.
func measureRoundTrips(
    client: BusConnection, callers: Int, seconds: Double, scenario: String
) async throws
    -> Measurement
{
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    let started = ContinuousClock.now
    let calls = try await withThrowingTaskGroup(of: Int.self) { group in
        for caller in 0..<callers {
            group.addTask {
                var done = 0
                while ContinuousClock.now < deadline {
                    let reply = try await client.call(
                        "org.example.Bench", "/org/example/Bench", "org.example.Bench1", "Add",
                        [.int32(Int32(caller)), .int32(Int32(done))])
                    guard reply.body == [.int32(Int32(caller) &+ Int32(done))] else {
                        throw TestSupportError("wrong answer")
                    }
                    done += 1
                }
                return done
            }
        }
        return try await group.reduce(0, +)
    }
    let elapsed = ContinuousClock.now - started
    let elapsedSeconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    return Measurement(
        scenario: scenario, calls: calls, seconds: elapsedSeconds, callsPerSecond: Double(calls) / elapsedSeconds)
}

func dbusBenchmark(seconds: Double) async throws -> [Measurement] {
    let bus = try await PrivateBus.start()
    defer { bus.stop() }
    let server = try await BusConnection.connect(.address(bus.address))
    let client = try await BusConnection.connect(.address(bus.address))
    let bench = BusInterface(
        name: "org.example.Bench1",
        methods: [
            .init(name: "Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int32)]) {
                call in [.int32(call.body[0].int32! &+ call.body[1].int32!)]
            }
        ])
    try await server.export(bench, at: "/org/example/Bench")
    _ = try await server.requestName("org.example.Bench")

    var results: [Measurement] = []
    // Warm up.
    _ = try await measureRoundTrips(client: client, callers: 8, seconds: 0.5, scenario: "warm-up")
    for callers in [1, 8, 64] {
        results.append(
            try await measureRoundTrips(
                client: client, callers: callers, seconds: seconds,
                scenario: "Swift client → Swift server, \(callers) concurrent caller\(callers == 1 ? "" : "s")"))
    }
    // The same callers preferring the client connection's thread (as a
    // fleet run does): a reply resumes its caller there, no thread woken.
    for callers in [1, 8] {
        results.append(
            try await withTaskExecutorPreference(client.taskExecutor) {
                try await measureRoundTrips(
                    client: client, callers: callers, seconds: seconds,
                    scenario:
                        "Swift client → Swift server, \(callers) concurrent caller\(callers == 1 ? "" : "s") on the connection's thread"
                )
            })
    }

    // The same measure with dbus-python as the client, sequential calls.
    let python = """
        import dbus, sys, time
        bus = dbus.bus.BusConnection(sys.argv[1])
        proxy = bus.get_object("org.example.Bench", "/org/example/Bench", introspect=False)
        add = proxy.get_dbus_method("Add", "org.example.Bench1")
        seconds = float(sys.argv[2]); n = 0
        start = time.monotonic(); end = start + seconds
        while time.monotonic() < end:
            add(dbus.Int32(1), dbus.Int32(n), signature="ii"); n += 1
        print(n, time.monotonic() - start)
        """
    let output = try await runTool("/usr/bin/python3", ["-c", python, bus.address, String(seconds)])
    let fields = output.stdout.split(whereSeparator: \.isWhitespace).compactMap { Double($0) }
    if output.status == 0, fields.count == 2 {
        results.append(
            Measurement(
                scenario: "dbus-python client → Swift server, 1 caller", calls: Int(fields[0]), seconds: fields[1],
                callsPerSecond: fields[0] / fields[1]))
    } else {
        FileHandle.standardError.write(Data("dbus-python comparison skipped: \(output.stderr)\n".utf8))
    }
    await client.close()
    await server.close()
    return results
}

func printTable(_ results: [Measurement]) {
    let width = results.map(\.scenario.count).max() ?? 10
    print("scenario".padding(toLength: width, withPad: " ", startingAt: 0) + "    calls   seconds    calls/s")
    for result in results {
        let row =
            result.scenario.padding(toLength: width, withPad: " ", startingAt: 0)
            + String(
                format: result.callsPerSecond < 100 ? " %8d %9.2f %10.2f" : " %8d %9.2f %10.0f", result.calls,
                result.seconds, result.callsPerSecond)
        print(row)
    }
}

/// One line of the summary table: a number against its goal.
struct Row: Codable {
    var scenario: String
    var value: String
    var goal: String
    var met: Bool?
}

func printRows(_ rows: [Row]) {
    let widths = [
        max(8, rows.map(\.scenario.count).max() ?? 0), max(6, rows.map(\.value.count).max() ?? 0),
        max(4, rows.map(\.goal.count).max() ?? 0),
    ]
    func pad(_ text: String, _ width: Int) -> String { text.padding(toLength: width, withPad: " ", startingAt: 0) }
    print(pad("scenario", widths[0]) + "  " + pad("result", widths[1]) + "  " + pad("goal", widths[2]) + "  met")
    for row in rows {
        print(
            pad(row.scenario, widths[0]) + "  " + pad(row.value, widths[1]) + "  " + pad(row.goal, widths[2]) + "  "
                + (row.met.map { $0 ? "yes" : "NO" } ?? "-"))
    }
}

struct Report: Codable {
    var machine: String
    var date: String
    var rows: [Row] = []
    var provisioning: [ProvisioningResult] = []
    var passiveAudit: PassiveAuditResult?
    var startup: StartupResult?
    var dbus: [Measurement] = []
    var inventory: [Measurement] = []
    var sync: SyncResult?
    var peers: PeersResult?
    var faults: FaultsReport?
    var ledger: LedgerCostResult?
}

func machineDescription() -> String {
    let cpu =
        (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?.split(separator: "\n")
        .first { $0.hasPrefix("model name") }?.split(separator: ":").last?.trimmingCharacters(in: .whitespaces)
        ?? "unknown CPU"
    return "\(ProcessInfo.processInfo.activeProcessorCount) × \(cpu), "
        + "\(ProcessInfo.processInfo.physicalMemory / (1 << 30)) GiB"
}

func format(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }

/// Everything, one table. `quick` leaves out the 500-beacon realistic runs
/// and the 100-beacon run at concurrency 1 (about 20 minutes between them).
func allBenchmarks(
    quick: Bool, seconds: Double, peers: PeerOptions, faults: (count: Int, runs: Int)
) async throws
    -> Report
{
    var report = Report(machine: machineDescription(), date: ISO8601DateFormatter().string(from: Date()))
    func log(_ text: String) { FileHandle.standardError.write(Data("… \(text)\n".utf8)) }

    // 1. Provisioning throughput against the floor.
    var scenarios: [(count: Int, adapters: Int, concurrency: Int?)] = [
        (10, 1, nil), (100, 1, nil), (10, 2, nil), (100, 2, nil),
    ]
    if !quick { scenarios += [(500, 1, nil), (500, 2, nil), (100, 1, 1)] }
    for scenario in scenarios {
        log("provisioning \(scenario.count) beacons, \(scenario.adapters) adapter(s), realistic radio")
        var result = try await provisioningRun(
            count: scenario.count, adapters: scenario.adapters, concurrency: scenario.concurrency,
            latency: "realistic")
        result.scenario =
            "provision \(scenario.count), \(scenario.adapters) adapter\(scenario.adapters == 1 ? "" : "s")"
            + (scenario.concurrency.map { ", concurrency \($0)" } ?? "")
        report.provisioning.append(result)
        let ratio = result.ratio ?? 0
        report.rows.append(
            Row(
                scenario: result.scenario + ": fleet time / floor",
                value: "\(format(result.fleetSeconds)) s / \(format(result.floorSeconds ?? 0)) s = \(format(ratio, 2))",
                goal: scenario.count >= 100 && scenario.concurrency == nil ? "≤ 1.02" : "-",
                met: scenario.count >= 100 && scenario.concurrency == nil ? ratio <= 1.02 : nil))
    }

    // 2 and 7. CPU per device and memory, 500 beacons, no radio latency
    // (the goal: the peers' comparison below, ≤ 0.5 × a bleak script's).
    log("provisioning 500 beacons, no radio latency")
    var fast = try await provisioningRun(count: 500, adapters: 1, concurrency: nil, latency: "none")
    fast.scenario = "provision 500, no latency"
    report.provisioning.append(fast)
    report.rows.append(
        Row(
            scenario: "CPU per device (500, no latency)",
            value: "\(format(fast.cpuMillisecondsPerDevice, 2)) ms (\(format(fast.cpuSeconds, 2)) s in all)",
            goal: "≤ 2 ms", met: fast.cpuMillisecondsPerDevice <= 2))
    let big = report.provisioning.filter { $0.beacons == 500 }.max { $0.peakRSSMiB < $1.peakRSSMiB } ?? fast
    report.rows.append(
        Row(
            scenario: "peak RSS of a 500-beacon run", value: "\(format(big.peakRSSMiB)) MiB", goal: "≤ 64 MiB",
            met: big.peakRSSMiB <= 64))

    // 3. Passive audit of 500 beacons in one scan.
    log("passive audit of 500 beacons")
    let passive = try await passiveAuditRun(count: 500)
    report.passiveAudit = passive
    report.rows.append(
        Row(
            scenario: "passive audit of 500 in one 10 s scan",
            value: "\(passive.audited) audited, all seen after \(format(passive.allSeenAfterSeconds)) s",
            goal: "500 in 10 s", met: passive.audited == 500 && passive.allSeenAfterSeconds <= 10))

    // 8. The peers: bleak 3.1 scripts and bluetoothctl, ratios. Before the
    // inventory and sync scenarios: a child spawned once this process has
    // grown reports this process's size as its own peak RSS (vfork).
    do {
        let peerResult = try await peersBenchmark(peers)
        report.peers = peerResult
        report.rows += peerRows(peerResult)
    } catch {
        log("peers skipped: \(error)")
        report.rows.append(Row(scenario: "peers (bleak, bluetoothctl)", value: "skipped: \(error)", goal: "-"))
    }

    // 9. Provisioning under each failure mode of issue 26, against no faults.
    let faultReport = try await faultsBenchmark(count: faults.count, runs: faults.runs)
    report.faults = faultReport
    report.rows += faultRows(faultReport)

    // 4. Inventory.
    log("inventory")
    report.inventory = try await inventoryBenchmark()
    for measurement in report.inventory {
        let perSecond = !measurement.scenario.contains("(ms each)")
        // The goals of the inventory issue.
        let goal: (text: String, met: Bool)? =
            measurement.scenario.contains("audit")
            ? ("≤ 100 ms", measurement.callsPerSecond <= 100)
            : measurement.scenario.contains("1,000 per transaction")
                ? ("≥ 50000/s", measurement.callsPerSecond >= 50_000)
                : measurement.scenario.contains("open") ? ("≤ 5 ms", measurement.callsPerSecond <= 5) : nil
        report.rows.append(
            Row(
                scenario: measurement.scenario,
                value: perSecond
                    ? "\(Int(measurement.callsPerSecond))/s" : "\(format(measurement.callsPerSecond, 2)) ms",
                goal: goal?.text ?? "-", met: goal?.met))
    }

    // 4a. The ledger's cost: with and without it (issue 29).
    log("ledger")
    let ledger = try await ledgerBenchmark(count: 100, rounds: quick ? 3 : 5)
    report.ledger = ledger
    report.rows += ledgerRows(ledger)

    // 4b. Sync to a PostgreSQL server, and an audit of the fleet there.
    log("sync to PostgreSQL")
    let sync = try await syncBenchmark()
    report.sync = sync
    report.rows += syncRows(sync)

    // 5. D-Bus round trips.
    log("D-Bus round trips")
    report.dbus = try await dbusBenchmark(seconds: seconds)
    for measurement in report.dbus {
        let eight = measurement.scenario.contains("8 concurrent callers")
        report.rows.append(
            Row(
                scenario: measurement.scenario, value: "\(Int(measurement.callsPerSecond))/s",
                goal: eight ? "≥ 30000/s" : "-", met: eight ? measurement.callsPerSecond >= 30_000 : nil))
    }

    // 6. Start-up, beside bluetoothctl.
    log("start-up against bluetoothctl")
    let startup = try await startupBenchmark(runs: quick ? 11 : 21)
    report.startup = startup
    report.rows += startupRows(startup)

    return report
}

var arguments = Array(CommandLine.arguments.dropFirst())
let scenario = arguments.isEmpty ? "dbus" : arguments.removeFirst()
if scenario == "office" { try await officeMain(arguments) }
if scenario == "inventory-writer", let path = arguments.first {
    try await inventoryWriter(path: path)
}
if scenario == "ledger-build", let path = arguments.first {
    try await BigLedger.build(path: path)
    exit(0)
}
if scenario == "wire-decode" {
    // The fast decoder against the libdbus path, one message, one thread
    // (WireDecodeBenchmark.swift). Optional: iterations, a scenario prefix.
    let iterations = arguments.first.flatMap { Int($0) } ?? 200_000
    for result in try wireDecodeBenchmark(iterations: iterations, only: arguments.count > 1 ? arguments[1] : nil) {
        print(
            "\(result.scenario): \(format(result.nanosecondsPerMessage, 1)) ns/message (\(result.iterations) messages)")
    }
    exit(0)
}
var durationSeconds = 3.0
var jsonPath: String?
var quick = false
var peerOptions: PeerOptions?
var faultCount: Int?
var faultRuns: Int?
var faultModeNames: [String]?
var beaconbenchPath: String?
let usage =
    "usage: beaconbench-bench all|dbus|inventory|sync|peers|faults|ledger|startup [--quick] [--seconds S] [--json FILE]\n"
    + "       [--runs R] [--beaconbench PATH]   (startup: R rounds, alternating; PATH: another beaconbench)\n"
    + "       [--count N] [--runs R] [--mode NAME]…   (faults)\n"
    + "       [--count N] [--runs R]   (ledger: N beacons provisioned R times with and R without)\n"
    + "       [--count N] [--listen-count N] [--listen-seconds S] [--runs N] [--vanish-count N]   (peers)\n"
func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data((message + "\n" + usage).utf8))
    exit(1)
}
while !arguments.isEmpty {
    let option = arguments.removeFirst()
    func number() -> Double {
        guard let text = arguments.first, let value = Double(text), value > 0 else { fail("\(option) wants a number") }
        arguments.removeFirst()
        return value
    }
    switch option {
    case "--seconds": durationSeconds = number()
    case "--json":
        guard !arguments.isEmpty else { fail("--json wants a file") }
        jsonPath = arguments.removeFirst()
    case "--quick": quick = true
    case "--count":
        let count = Int(number())
        faultCount = count
        peerOptions = (peerOptions ?? PeerOptions()).with { $0.count = count }
    case "--listen-count": peerOptions = (peerOptions ?? PeerOptions()).with { $0.listenCount = Int(number()) }
    case "--listen-seconds": peerOptions = (peerOptions ?? PeerOptions()).with { $0.listenSeconds = number() }
    case "--runs":
        let runs = Int(number())
        faultRuns = runs
        peerOptions = (peerOptions ?? PeerOptions()).with { $0.runs = runs }
    case "--beaconbench":
        guard let path = arguments.first else { fail("--beaconbench wants an executable") }
        arguments.removeFirst()
        beaconbenchPath = path
    case "--mode":
        guard let name = arguments.first else { fail("--mode wants a mode's name (e.g. \"1 stale\")") }
        arguments.removeFirst()
        faultModeNames = (faultModeNames ?? []) + [name]
    case "--vanish-count":
        // 0 leaves the check out.
        guard let text = arguments.first, let value = Int(text), value >= 0 else {
            fail("--vanish-count wants a number")
        }
        arguments.removeFirst()
        peerOptions = (peerOptions ?? PeerOptions()).with { $0.vanishCount = value }
    default: fail("unknown option '\(option)'")
    }
}
let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
switch scenario {
case "all":
    let report = try await allBenchmarks(
        quick: quick, seconds: durationSeconds, peers: peerOptions ?? (quick ? .quick : PeerOptions()),
        faults: (faultCount ?? 100, faultRuns ?? 1))
    print("machine: \(report.machine)")
    printRows(report.rows)
    print()
    print("provisioning runs (fleet = first step to last, from the inventory; command = the whole process):")
    for run in report.provisioning {
        print(
            "  \(run.scenario): command \(format(run.commandSeconds)) s, fleet \(format(run.fleetSeconds)) s"
                + (run.floorSeconds.map { ", floor \(format($0)) s" } ?? "")
                + ", CPU \(format(run.cpuSeconds, 2)) s, RSS \(format(run.peakRSSMiB)) MiB, "
                + "\(run.changed) changed, \(run.skipped) skipped, \(run.failed) failed; "
                + "\(run.connects) connects, \(run.requests) ATT requests, \(run.calibrations) calibrations")
    }
    if let peers = report.peers { printPeerDetails(peers) }
    if let faults = report.faults {
        print()
        printFaults(faults)
    }
    if let ledger = report.ledger { printLedgerDetails(ledger) }
    if let jsonPath { try encoder.encode(report).write(to: URL(fileURLWithPath: jsonPath)) }
case "peers":
    let result = try await peersBenchmark(peerOptions ?? (quick ? .quick : PeerOptions()))
    printRows(peerRows(result))
    printPeerDetails(result)
    if let jsonPath { try encoder.encode(result).write(to: URL(fileURLWithPath: jsonPath)) }
case "faults":
    let result = try await faultsBenchmark(count: faultCount ?? 100, runs: faultRuns ?? 1, modes: faultModeNames)
    printFaults(result)
    if let jsonPath { try encoder.encode(result).write(to: URL(fileURLWithPath: jsonPath)) }
case "ledger":
    let result = try await ledgerBenchmark(count: faultCount ?? 100, rounds: faultRuns ?? 5)
    printRows(ledgerRows(result))
    printLedgerDetails(result)
    if let jsonPath { try encoder.encode(result).write(to: URL(fileURLWithPath: jsonPath)) }
case "startup":
    let result = try await startupBenchmark(runs: faultRuns ?? 21, beaconbench: beaconbenchPath)
    printRows(startupRows(result))
    if let jsonPath { try encoder.encode(result).write(to: URL(fileURLWithPath: jsonPath)) }
case "ledger-append":
    // Part (d) of `ledger` alone (for profiling: perf record -g …).
    for append in try await ledgerAppendCosts(rounds: faultRuns ?? 3) {
        print(
            "\(append.scenario): CPU \(format(append.microsecondsWith, 1)) µs with, \(format(append.microsecondsWithout, 1)) without;"
                + " wall \(format(append.wallMicrosecondsWith, 1)) µs with, \(format(append.wallMicrosecondsWithout, 1)) without"
        )
    }
case "sync":
    let result = try await syncBenchmark()
    printRows(syncRows(result))
    if let jsonPath { try encoder.encode(result).write(to: URL(fileURLWithPath: jsonPath)) }
case "dbus", "inventory":
    let results =
        scenario == "dbus" ? try await dbusBenchmark(seconds: durationSeconds) : try await inventoryBenchmark()
    printTable(results)
    if let jsonPath { try encoder.encode(results).write(to: URL(fileURLWithPath: jsonPath)) }
default:
    FileHandle.standardError.write(
        Data(
            "error: unknown scenario '\(scenario)' (known: all, dbus, inventory, sync, peers, faults, ledger, startup)\n"
                .utf8))
    exit(1)
}
