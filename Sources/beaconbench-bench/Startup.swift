import Foundation
import LocalBus

/// One start-up measure: the median and the fastest of its runs, in ms.
struct StartupFigure: Codable {
    var medianMilliseconds: Double
    var minimumMilliseconds: Double

    init(_ milliseconds: [Double]) {
        medianMilliseconds = median(milliseconds)
        minimumMilliseconds = milliseconds.min() ?? 0
    }
}

/// `beaconbench --version` and the time to its REPL prompt, beside
/// bluetoothctl's, with the harness's own floors, all taken in one run.
struct StartupResult: Codable {
    var runs: Int
    var beaconbench: String
    /// `/bin/true` through the same spawn: what the harness itself costs.
    var trueFloor: StartupFigure
    /// `/bin/echo ']> '` on a fresh pty: the prompt measure's own floor.
    var echoFloor: StartupFigure
    var beaconbenchVersion: StartupFigure
    var beaconbenchPrompt: StartupFigure
    /// nil when bluetoothctl is not installed.
    var bluetoothctlVersion: StartupFigure?
    var bluetoothctlPrompt: StartupFigure?
    var versionRatio: Double?
    var promptRatio: Double?
}

/// `runs` rounds, each measuring in turn `/bin/true`, `beaconbench
/// --version`, `bluetoothctl --version`, `]> ` on a pty, beaconbench's
/// prompt and bluetoothctl's: alternating, so that a busy moment of the
/// machine falls on all of them alike. Both prompts are taken against the
/// same private bus with a simulated bluetoothd of 10 beacons (beaconbench
/// with `--bus`, bluetoothctl with `DBUS_SYSTEM_BUS_ADDRESS`); neither
/// touches the machine's buses. `beaconbench` defaults to the one built
/// beside this executable (another binary, e.g. an older build, with
/// `--beaconbench PATH`).
func startupBenchmark(runs: Int, beaconbench: String? = nil) async throws -> StartupResult {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let simulator = try await SimulatorProcess.start(
        executable: try sibling("beaconbench-sim"), arguments: ["--count", "10"])
    defer { simulator.stop() }
    let beaconbench = try beaconbench ?? sibling("beaconbench")
    let bluetoothctl = ["/usr/bin/bluetoothctl", "/bin/bluetoothctl"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    let bus = simulator.bus.address
    var times: [String: [Double]] = [:]
    func spawned(_ key: String, _ executable: String, _ arguments: [String]) throws {
        let run = try runMeasured(executable, arguments, in: directory)
        guard run.status == 0 else { throw LocalBusError("\(executable) \(arguments) exited with \(run.status)") }
        times[key, default: []].append(run.wallSeconds * 1000)
    }
    for _ in 0..<runs {
        try spawned("true", "/bin/true", [])
        try spawned("bb version", beaconbench, ["--version"])
        if let bluetoothctl { try spawned("bt version", bluetoothctl, ["--version"]) }
        times["echo", default: []].append(
            try timeToPrompt("/bin/echo", directory, arguments: ["]> "], prompt: "]> ") * 1000)
        times["bb prompt", default: []].append(
            try timeToPrompt(
                beaconbench, directory, arguments: ["--bus", bus, "--inventory", directory + "/inventory.sqlite"],
                prompt: "]> ") * 1000)
        if let bluetoothctl {
            times["bt prompt", default: []].append(
                try timeToPrompt(
                    bluetoothctl, directory, arguments: [], prompt: "[bluetooth]# ",
                    environment: ["DBUS_SYSTEM_BUS_ADDRESS": bus]) * 1000)
        }
    }
    let figure = { (key: String) in times[key].map(StartupFigure.init) }
    let ratio = { (ours: StartupFigure, theirs: StartupFigure?) in
        theirs.map { ours.medianMilliseconds / max(1e-9, $0.medianMilliseconds) }
    }
    let version = StartupFigure(times["bb version"] ?? [])
    let prompt = StartupFigure(times["bb prompt"] ?? [])
    return StartupResult(
        runs: runs, beaconbench: beaconbench, trueFloor: StartupFigure(times["true"] ?? []),
        echoFloor: StartupFigure(times["echo"] ?? []), beaconbenchVersion: version, beaconbenchPrompt: prompt,
        bluetoothctlVersion: figure("bt version"), bluetoothctlPrompt: figure("bt prompt"),
        versionRatio: ratio(version, figure("bt version")), promptRatio: ratio(prompt, figure("bt prompt")))
}

/// The summary table's rows: each measure with bluetoothctl's beside it,
/// the ratio taken in the same run, and the harness's floor.
func startupRows(_ result: StartupResult) -> [Row] {
    func ms(_ figure: StartupFigure) -> String {
        "\(format(figure.medianMilliseconds, 2)) ms (min \(format(figure.minimumMilliseconds, 2)))"
    }
    func peer(_ figure: StartupFigure?, _ ratio: Double?) -> String {
        guard let figure, let ratio else { return "; bluetoothctl not installed" }
        return "; bluetoothctl \(ms(figure)) = \(format(ratio, 2)) ×"
    }
    return [
        Row(
            scenario: "start-up: --version, median of \(result.runs)",
            value: "beaconbench \(ms(result.beaconbenchVersion))"
                + peer(result.bluetoothctlVersion, result.versionRatio) + "; /bin/true \(ms(result.trueFloor))",
            goal: "≤ 5 ms", met: result.beaconbenchVersion.medianMilliseconds <= 5),
        Row(
            scenario: "start-up: time to the prompt on a pty, median of \(result.runs)",
            value: "beaconbench \(ms(result.beaconbenchPrompt))"
                + peer(result.bluetoothctlPrompt, result.promptRatio) + "; echo \(ms(result.echoFloor))",
            goal: "≤ 8 ms", met: result.beaconbenchPrompt.medianMilliseconds <= 8),
    ]
}
