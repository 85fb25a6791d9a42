// `beaconbench-bench office faults [restart] [kill] [reset] [blackhole]`:
// N benches sync at once to the harness's own PostgreSQL (each case in a
// fresh database of it) and a fault strikes mid-sync, at a moment the
// server says (not after a sleep):
//
//   restart    `pg_ctl restart -m fast` once `--trigger` benches (default
//              half) have a committed chunk (a row in bench_ledger_heads)
//   kill       one bench (the first) `kill -9`ed once the server holds its
//              first committed chunk
//   reset      the network cut for `--cut-seconds` (60) by the proxy
//              (bench/office/cutproxy.py): connections closed, new ones
//              refused; from the same trigger as restart
//   blackhole  the same, connections held open and silent
//
// Then the syncs that did not complete are run again (as the next run
// would), and the union check (UnionCheck.swift) says whether anything
// was lost (a bench's row missing on the server) or doubled (a server row
// no bench has, a duplicate identity). docs/office.md, "Faults".
import Foundation
import Inventory
import LocalBus

#if canImport(Glibc)
    import Glibc
#endif

/// What one fault case found.
struct FaultCaseResult {
    var name: String
    var benches: Int
    var first: SyncRound
    var rerun: SyncRound?
    var report: UnionCheck.Report
    var fault: String

    var completedFirst: Int { first.runs.filter(\.completed).count }
    var retried: Int { rerun?.runs.count ?? 0 }
    var completedNext: Int { rerun?.runs.filter(\.completed).count ?? 0 }
    var lost: Int { report.tallies.reduce(0) { $0 + $1.missing } }
    var doubled: Int { report.tallies.reduce(0) { $0 + $1.extra } + report.duplicates.count }
    var ok: Bool { report.ok && completedFirst + completedNext == benches }

    var line: String {
        "\(name): \(benches) benches; \(fault); first run completed \(completedFirst), next run retried \(retried)"
            + " and completed \(completedNext); lost \(lost), doubled \(doubled), rows differing"
            + " \(report.tallies.reduce(0) { $0 + $1.changed }); union \(report.ok ? "exact" : "NOT exact")"
    }

    var json: [String: Any] {
        [
            "kind": "fault_case", "case": name, "benches": benches, "fault": fault, "completed_first": completedFirst,
            "retried_next": retried, "completed_next": completedNext, "lost": lost, "doubled": doubled,
            "union_exact": report.ok, "first_wall_s": first.wall,
            "first_p50_s": percentile(first.runs.map(\.seconds), 50),
            "first_p99_s": percentile(first.runs.map(\.seconds), 99),
            "first_exit_codes": first.runs.map { $0.signal.map { -Int($0) } ?? Int($0.status) },
            "next_exit_codes": rerun?.runs.map { $0.signal.map { -Int($0) } ?? Int($0.status) } ?? [],
            "ok": ok,
        ]
    }
}

/// Waits until `condition` holds, checking every 50 ms; fails after `cap`
/// naming what it waited for. `stop` ends the wait early (false returned).
func waitUntil(
    _ what: String, cap: Duration = .seconds(600), stop: () -> Bool = { false }, _ condition: () -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + cap
    while ContinuousClock.now < deadline {
        if condition() { return true }
        if stop() { return false }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw OfficePostgresError("waited \(cap) for \(what)")
}

/// Rows of `bench_ledger_heads` (benches with a committed chunk), or 0
/// when the server cannot say yet (no schema, restarting).
func benchesWithAChunk(_ url: String, bench: String? = nil) -> Int {
    guard let server = try? OfficePostgres(url) else { return 0 }
    if let bench {
        return (try? server.integer("SELECT count(*) FROM bench_ledger_heads WHERE bench_id = $1", [bench])) ?? 0
    }
    return (try? server.integer("SELECT count(*) FROM bench_ledger_heads")) ?? 0
}

/// The cut-network proxy, a child process.
final class CutProxy {
    let child: ChildProcess
    let control: String
    let port: Int

    init(script: String, port: Int, target: String, directory: String) async throws {
        control = directory + "/cut.ctl"
        self.port = port
        try "up\n".write(toFile: control, atomically: true, encoding: .utf8)
        let output = directory + "/proxy.out"
        child = try ChildProcess(
            "/usr/bin/python3", [script, String(port), target, control], standardOutput: output,
            standardError: directory + "/proxy.err")
        _ = try await waitUntil("the proxy to listen on port \(port) (\(output))", cap: .seconds(60)) {
            ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("ready")
        }
    }

    func set(_ mode: String) throws { try (mode + "\n").write(toFile: control, atomically: true, encoding: .utf8) }

    deinit { child.terminate() }
}

/// `bench/office/cutproxy.py` from the working directory or above the executable.
func findCutProxy() -> String? {
    var candidates = [FileManager.default.currentDirectoryPath + "/bench/office/cutproxy.py"]
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    for _ in 0..<5 {
        candidates.append(directory.appendingPathComponent("bench/office/cutproxy.py").path)
        directory = directory.deletingLastPathComponent()
    }
    return candidates.first { FileManager.default.fileExists(atPath: $0) }
}

func officeFaults(_ arguments: [String]) async throws -> Never {
    await officeGuarded { try await officeFaultsRun(arguments) }
}

func officeFaultsRun(_ arguments: [String]) async throws -> Never {
    var options = OfficeOptions(arguments)
    var cases: [String] = []
    var cutSeconds = 60.0
    var trigger: Int?
    var proxyScript = findCutProxy()
    var proxyPort = 54_499
    var keepDatabases = false
    var queue = options.rest[...]
    while let argument = queue.popFirst() {
        switch argument {
        case "restart", "kill", "reset", "blackhole": cases.append(argument)
        case "all": cases += ["restart", "kill", "reset", "blackhole"]
        case "--cut-seconds": cutSeconds = queue.popFirst().flatMap { Double($0) } ?? cutSeconds
        case "--trigger": trigger = queue.popFirst().flatMap { Int($0) }
        case "--keep-databases": keepDatabases = true
        case "--proxy": proxyScript = queue.popFirst()
        case "--proxy-port": proxyPort = queue.popFirst().flatMap { Int($0) } ?? proxyPort
        default: officeUsage("office faults: unknown option \(argument)")
        }
    }
    if cases.isEmpty { cases = ["restart", "kill", "reset", "blackhole"] }
    // Checked before any case runs: found missing at the third case, an
    // hour of syncs at the judged size would be spent for nothing.
    if cases.contains("reset") || cases.contains("blackhole") {
        guard let proxyScript else {
            officeUsage(
                "office faults reset|blackhole: bench/office/cutproxy.py is neither here nor above the executable: give --proxy PATH"
            )
        }
        guard FileManager.default.isReadableFile(atPath: proxyScript) else {
            officeUsage("office faults: --proxy \(proxyScript): no such file (bench/office/cutproxy.py)")
        }
    }
    guard options.url == nil else {
        officeUsage("office faults restarts and cuts its own server: --local-server [DIR], not --to")
    }
    try await options.resolveBenches()
    let server = try await officeServer(directory: options.localServer ?? nil, benches: options.benches.count)
    defer { server.remove() }
    if !server.temporary {
        officeLog("the server's data directory \(server.directory) is kept after the run (named by --local-server)")
    }
    try FileManager.default.createDirectory(atPath: options.logs, withIntermediateDirectories: true)
    let benches = options.benches
    let threshold = trigger ?? max(1, benches.count / 2)
    var benchIDs: [String] = []
    for path in benches { benchIDs.append(try await Inventory(path: path, readOnly: true).benchID()) }
    var allOK = true
    for name in cases {
        let url = try await freshDatabase(server, "fault_\(name)")
        officeLog("\(name): \(benches.count) benches syncing at once")
        var fault = ""
        var syncURL = url
        var proxy: CutProxy?
        if name == "reset" || name == "blackhole" {
            guard let proxyScript else { throw OfficePostgresError("bench/office/cutproxy.py not found: --proxy PATH") }
            proxy = try await CutProxy(
                script: proxyScript, port: proxyPort, target: server.socket, directory: options.logs)
            syncURL = "postgresql://bench@127.0.0.1:\(proxyPort)/fault_\(name)"
        }
        let fleet = try SyncFleet(
            beaconbench: options.beaconbench, url: syncURL, benches: benches, logDirectory: options.logs, tag: name,
            profiles: options.profiles)
        switch name {
        case "restart":
            let reached = try await waitUntil("\(threshold) benches with a committed chunk", stop: { fleet.allDone }) {
                benchesWithAChunk(url) >= threshold
            }
            if reached {
                let at = benchesWithAChunk(url)
                let started = ContinuousClock.now
                try server.restart()
                fault =
                    "pg_ctl restart -m fast when \(at) benches had a committed chunk (restart took \(String(format: "%.2f", seconds(ContinuousClock.now - started))) s)"
            } else {
                fault = "no restart: every sync ended before \(threshold) benches had a committed chunk"
            }
        case "kill":
            let victim = 0
            let reached = try await waitUntil(
                "bench \(benchIDs[victim])'s first committed chunk", stop: { !fleet.running(victim) }
            ) { benchesWithAChunk(url, bench: benchIDs[victim]) > 0 }
            // Held for the moment of the kill, so that it lands mid-sync
            // whatever the bench's size: a bench past its ledger waits here
            // for `devices` (SHARE blocks the upserts), one still pushing its
            // ledger goes on until killed.
            let hold = try OfficePostgres(url)
            try hold.exec("BEGIN")
            try hold.exec("LOCK TABLE devices IN SHARE MODE")
            let midSync = reached && fleet.running(victim)
            // (Not ChildProcess.send: its reaper thread holds the child's lock while waiting.)
            kill(fleet.children[victim].pid, SIGKILL)
            _ = try await waitUntil("bench \(victim)'s process to end after kill -9") { !fleet.running(victim) }
            try hold.exec("COMMIT")
            fault =
                midSync
                ? "bench \(benchIDs[victim]) killed (-9) after its first committed chunk, mid-sync"
                : "bench \(benchIDs[victim]) ended before the kill: NOT a mid-sync kill"
            if !midSync { allOK = false }
        default:
            let reached = try await waitUntil("\(threshold) benches with a committed chunk", stop: { fleet.allDone }) {
                benchesWithAChunk(url) >= threshold
            }
            if reached, let proxy {
                let at = benchesWithAChunk(url)
                try proxy.set(name)
                // The fault's length is the case's parameter (a minute cut).
                try await Task.sleep(for: .milliseconds(Int(cutSeconds * 1000)))
                try proxy.set("up")
                fault = "network \(name) for \(Int(cutSeconds)) s from when \(at) benches had a committed chunk"
            } else {
                fault = "no cut: every sync ended before \(threshold) benches had a committed chunk"
            }
        }
        let runs = await fleet.wait()
        let first = SyncRound(name: "\(name) first run", runs: runs, wall: runs.map(\.seconds).max() ?? 0)
        print(first.line)
        for run in runs where !run.completed {
            print(
                "  \(run.bench): \(run.signal.map { "signal \($0)" } ?? "exit \(run.status)"): "
                    + String(run.stderr.split(separator: "\n").last ?? "").prefix(300))
        }
        let failed = runs.filter { !$0.completed }.map(\.bench)
        var rerun: SyncRound?
        if !failed.isEmpty {
            officeLog("\(name): the next run: \(failed.count) syncs again")
            var next = try await syncRound(
                "\(name)-next", beaconbench: options.beaconbench, url: syncURL, benches: failed, logs: options.logs,
                profiles: options.profiles)
            next.name = "\(name) next run"
            print(next.line)
            rerun = next
        }
        proxy = nil
        let report = try await UnionCheck.run(url: url, benches: benches)
        for line in UnionCheck.lines(report) where !line.hasPrefix("table ") { print("  " + line) }
        let result = FaultCaseResult(
            name: name, benches: benches.count, first: first, rerun: rerun, report: report, fault: fault)
        print(result.line)
        if options.json { printJSON(result.json) }
        allOK = allOK && result.ok
        // Checked, so nothing more is read from it; and the four cases'
        // databases at the judged size would not fit on a disk together.
        // A case that failed keeps its database: it is the evidence.
        if keepDatabases {
            officeLog("\(name): database fault_\(name) kept (--keep-databases)")
        } else if !result.ok {
            officeLog(
                "\(name): database fault_\(name) kept: the case failed, its data is the evidence"
                    + (server.temporary ? " (the server is temporary: --local-server DIR keeps it after the run)" : ""))
        } else {
            _ = try await server.psql("DROP DATABASE fault_\(name)")
        }
    }
    await server.remove()
    exit(allOK ? 0 : 1)
}
