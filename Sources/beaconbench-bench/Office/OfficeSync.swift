// `beaconbench-bench office sync`: N benches syncing at once to one
// server, each a `beaconbench --inventory F sync --to URL` child process
// (processes, as benches are), started together; per-bench wall time
// (p50/p99), throughput, exit codes; then the union check
// (UnionCheck.swift). With `--resync`, the same again with nothing new.
import Foundation
import Inventory
import LocalBus
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

// MARK: A PostgreSQL cluster of the harness's own

/// The harness's server: `LocalPostgres` (initdb, Unix socket only, trust,
/// `fsync=off`, `synchronous_commit=off`) in the directory `--local-server
/// DIR` names (kept) or a temporary one, with room for every bench at once.
func officeServer(directory: String?, benches: Int) async throws -> LocalPostgres {
    let server = try await LocalPostgres.create(port: 54_441, directory: directory)
    let connections = max(300, benches * 2 + 20)
    try await onThreadOfItsOwn { try server.start(maxConnections: connections) }
    return server
}

/// A new empty database `name` on `server` (dropped first if it exists).
func freshDatabase(_ server: LocalPostgres, _ name: String) async throws -> String {
    _ = try await server.psql("DROP DATABASE IF EXISTS \(name)")
    _ = try await server.psql("CREATE DATABASE \(name)")
    return server.url(name)
}

// MARK: Test benches (until the generator's land)

/// Makes `count` bench inventories of `devices` devices each in
/// `directory` (`bench-NNN.sqlite`; an existing file is kept): per device a
/// device row with an identity (major 1000 + bench, minor = device number:
/// no duplicate across benches), `outcomesPerDevice` step outcomes in one
/// run, a reading, an identity reservation; one device in ten shared with
/// the previous bench (same address, the other bench's identity). Written
/// through the Inventory API with the ledger on. The office generator
/// (`office generate`) replaces this: swap the body, keep the signature.
func makeOfficeBenches(
    count: Int, devices: Int, outcomesPerDevice: Int = 5, in directory: String
) async throws
    -> [String]
{
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    var paths: [String] = []
    for bench in 0..<count {
        let path = directory + String(format: "/bench-%03d.sqlite", bench)
        paths.append(path)
        if FileManager.default.fileExists(atPath: path) { continue }
        let inventory = try Inventory(path: path + ".part")
        func address(_ bench: Int, _ number: Int) -> String {
            String(format: "C2:%02X:%02X:%02X:00:00", bench & 0xFF, number >> 8 & 0xFF, number & 0xFF)
        }
        let run = try await inventory.beginRun(.init(command: "office test bench \(bench)"))
        var identities: [[String: Any]] = []
        var readings: [[String: Any]] = []
        // One in ten is the previous bench's device, seen here too.
        func deviceAddress(_ number: Int) -> String {
            bench > 0 && number % 10 == 9 ? address(bench - 1, number) : address(bench, number)
        }
        for number in 0..<devices {
            let shared = bench > 0 && number % 10 == 9
            var device = DeviceRecord(address: deviceAddress(number))
            let major = UInt16(1000 + (shared ? bench - 1 : bench))
            device.identity = .init(major: major, minor: UInt16(number % 65_536))
            device.battery = UInt8(40 + number % 60)
            device.firmware = .init(major: 1, minor: 0, patch: UInt8(8 + number % 2))
            device.profile = ["car", "van", "truck"][number % 3]
            try await inventory.recordDevice(device)
            if !shared {
                identities.append([
                    "device": device.address, "major": Int(major), "minor": number % 65_536,
                    "at": "2026-12-01T08:00:00.000Z",
                ])
            }
            readings.append([
                "device": device.address, "at": "2026-12-01T08:00:00.000Z", "battery": 40 + number % 60,
                "rssi": -40 - number % 50, "firmware": "1.0.\(8 + number % 2)",
            ])
        }
        let steps = ["info", "battery", "sync-time", "calibrate", "identity", "apply", "verify"]
        var batch: [(device: String?, step: String, status: Inventory.StepStatus, detail: String?)] = []
        for number in 0..<devices {
            for step in 0..<outcomesPerDevice {
                batch.append(
                    (
                        deviceAddress(number), steps[step % steps.count],
                        step % 17 == 16 ? .failed : .changed,
                        "bench \(bench) device \(number) step \(step): \"q\", \\, {b}"
                    ))
                if batch.count == 1_000 {
                    try await inventory.recordOutcomes(run: run, batch)
                    batch.removeAll(keepingCapacity: true)
                }
            }
        }
        if !batch.isEmpty { try await inventory.recordOutcomes(run: run, batch) }
        for chunk in stride(from: 0, to: readings.count, by: 5_000) {
            let part = Array(readings[chunk..<min(chunk + 5_000, readings.count)])
            _ = try await inventory.query(
                """
                INSERT INTO readings (device, at, battery, rssi, firmware)
                SELECT json_extract(value, '$.device'), json_extract(value, '$.at'), json_extract(value, '$.battery'),
                    json_extract(value, '$.rssi'), json_extract(value, '$.firmware') FROM json_each(?1)
                """, [.text(String(decoding: try JSONSerialization.data(withJSONObject: part), as: UTF8.self))])
        }
        for chunk in stride(from: 0, to: identities.count, by: 5_000) {
            let part = Array(identities[chunk..<min(chunk + 5_000, identities.count)])
            _ = try await inventory.query(
                """
                INSERT INTO identities (major, minor, device, source, profile, run_id, reserved_at)
                SELECT json_extract(value, '$.major'), json_extract(value, '$.minor'), json_extract(value, '$.device'),
                    'explicit', NULL, ?2, json_extract(value, '$.at') FROM json_each(?1)
                """,
                [
                    .text(String(decoding: try JSONSerialization.data(withJSONObject: part), as: UTF8.self)),
                    .integer(run),
                ])
        }
        try await inventory.endRun(run, .finished)
        _ = try await inventory.query("PRAGMA wal_checkpoint(TRUNCATE)")
        try FileManager.default.moveItem(atPath: path + ".part", toPath: path)
        for suffix in ["-wal", "-shm", "-reserve"] {
            try? FileManager.default.removeItem(atPath: path + ".part" + suffix)
        }
    }
    return paths
}

// MARK: N syncs at once

/// One bench's sync: its exit status, wall time and what it said it sent.
struct BenchSyncRun: Sendable {
    var bench: String
    var status: Int32
    var signal: Int32?
    var seconds: Double
    var sent: [String: Int]
    var stderr: String
    var completed: Bool { status == 0 && signal == nil }
}

/// N `beaconbench … sync` children started together.
final class SyncFleet: @unchecked Sendable {
    let children: [ChildProcess]
    let benches: [String]
    let logs: [String]
    let started: ContinuousClock.Instant
    private let lock = NSLock()
    private var ends: [Int: (Int32, Double)] = [:]
    private var waiting: CheckedContinuation<Void, Never>?

    init(
        beaconbench: String, url: String, benches: [String], logDirectory: String, tag: String, profiles: String? = nil
    ) throws {
        try FileManager.default.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
        self.benches = benches
        let profiles = profiles ?? fleetProfileDirectory(benches)
        logs = benches.indices.map { logDirectory + "/\(tag)-\($0)" }
        started = .now
        var made: [ChildProcess] = []
        for (index, bench) in benches.enumerated() {
            made.append(
                try ChildProcess(
                    beaconbench, ["--json", "--profiles", profiles, "--inventory", bench, "sync", "--to", url],
                    standardOutput: logs[index] + ".out", standardError: logs[index] + ".err"))
        }
        children = made
        // Each child reaped on a thread of its own, its end time taken there.
        for (index, child) in children.enumerated() {
            Thread.detachNewThread { [self] in
                let (status, _) = child.waitForExit()
                let elapsed = ContinuousClock.now - started
                lock.lock()
                ends[index] = (
                    status, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                )
                let done = ends.count == children.count
                let continuation = done ? waiting : nil
                if done { waiting = nil }
                lock.unlock()
                continuation?.resume()
            }
        }
    }

    /// Whether child `index` has not exited yet.
    func running(_ index: Int) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return ends[index] == nil
    }

    var allDone: Bool {
        lock.lock()
        defer { lock.unlock() }
        return ends.count == children.count
    }

    /// Waits for every child; their results in bench order.
    func wait() async -> [BenchSyncRun] {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if ends.count == children.count {
                lock.unlock()
                continuation.resume()
            } else {
                waiting = continuation
                lock.unlock()
            }
        }
        return benches.indices.map { index in
            let (status, seconds) = ends[index] ?? (-1, 0)
            let out = (try? String(contentsOfFile: logs[index] + ".out", encoding: .utf8)) ?? ""
            let err = (try? String(contentsOfFile: logs[index] + ".err", encoding: .utf8)) ?? ""
            var sent: [String: Int] = [:]
            for line in out.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let counts = object["sent"] as? [String: Any]
                else { continue }
                for (table, value) in counts { sent[table] = (value as? Int) ?? (value as? NSNumber)?.intValue ?? 0 }
            }
            let signaled = status & 0x7F != 0 && status & 0x7F != 0x7F
            return BenchSyncRun(
                bench: benches[index], status: signaled ? -1 : (status >> 8) & 0xFF,
                signal: signaled ? status & 0x7F : nil, seconds: seconds, sent: sent, stderr: err)
        }
    }
}

/// The p-th percentile (nearest rank) of `values`.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
    return sorted[min(max(rank, 1), sorted.count) - 1]
}

/// What a round of syncs measured.
struct SyncRound {
    var name: String
    var runs: [BenchSyncRun]
    var wall: Double
    var rows: Int { runs.reduce(0) { $0 + $1.sent.values.reduce(0, +) } }
    var line: String {
        let seconds = runs.map(\.seconds)
        let codes = Dictionary(
            runs.map { ($0.signal.map { "signal \($0)" } ?? "exit \($0.status)", 1) }, uniquingKeysWith: +
        )
        .sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
        return "\(name): \(runs.count) benches in " + String(format: "%.2f", wall) + " s; per bench p50 "
            + String(format: "%.2f", percentile(seconds, 50)) + " s, p99 "
            + String(format: "%.2f", percentile(seconds, 99))
            + " s, min " + String(format: "%.2f", seconds.min() ?? 0) + " s, max "
            + String(format: "%.2f", seconds.max() ?? 0) + " s; \(rows) rows sent ("
            + String(format: "%.0f", Double(rows) / max(wall, 0.001)) + " rows/s); \(codes)"
            + "; deadlocks reported \(mentions("deadlock detected")), serialization failures reported"
            + " \(mentions("could not serialize"))"
    }
    /// Syncs whose standard error mentions `text` (a server error they met).
    func mentions(_ text: String) -> Int { runs.filter { $0.stderr.contains(text) }.count }

    var json: [String: Any] {
        let seconds = runs.map(\.seconds)
        return [
            "deadlocks_reported": mentions("deadlock detected"),
            "serialization_failures_reported": mentions("could not serialize"),
            "kind": "sync_round", "round": name, "benches": runs.count, "wall_s": wall,
            "p50_s": percentile(seconds, 50),
            "p99_s": percentile(seconds, 99), "max_s": seconds.max() ?? 0, "rows_sent": rows,
            "rows_per_s": Double(rows) / max(wall, 0.001), "completed": runs.filter(\.completed).count,
            "exit_codes": runs.map { $0.signal.map { -Int($0) } ?? Int($0.status) },
        ]
    }
}

func syncRound(
    _ name: String, beaconbench: String, url: String, benches: [String], logs: String, profiles: String? = nil
) async throws
    -> SyncRound
{
    let fleet = try SyncFleet(
        beaconbench: beaconbench, url: url, benches: benches, logDirectory: logs, tag: name, profiles: profiles)
    let runs = await fleet.wait()
    return SyncRound(name: name, runs: runs, wall: runs.map(\.seconds).max() ?? 0)
}

// MARK: Options shared by sync and faults

struct OfficeOptions {
    var url: String?
    var localServer: String?? = nil
    var benches: [String] = []
    var make: (count: Int, devices: Int, outcomes: Int, directory: String)?
    var beaconbench = siblingExecutable("beaconbench")
    var logs = FileManager.default.temporaryDirectory.appendingPathComponent("office-logs-\(getpid())").path
    var json = false
    /// The profiles each bench's sync checks pulled assignments against
    /// (`--profiles DIR`; else `fleetProfileDirectory`).
    var profiles: String?
    var rest: [String] = []

    /// Parses the shared options; the others are left in `rest`.
    init(_ arguments: [String]) {
        var queue = arguments[...]
        var makeCount: Int?
        var devices = 100
        var outcomes = 5
        var directory: String?
        while let argument = queue.popFirst() {
            switch argument {
            case "--to": url = queue.popFirst()
            case "--local-server":
                if let next = queue.first, !next.hasPrefix("--") {
                    localServer = .some(queue.popFirst())
                } else {
                    localServer = .some(nil)
                }
            case "--benches":
                while let next = queue.first, !next.hasPrefix("--") {
                    queue.removeFirst()
                    var isDirectory: ObjCBool = false
                    if FileManager.default.fileExists(atPath: next, isDirectory: &isDirectory), isDirectory.boolValue {
                        let files = (try? FileManager.default.contentsOfDirectory(atPath: next)) ?? []
                        benches += files.filter { $0.hasSuffix(".sqlite") }.sorted().map { next + "/" + $0 }
                    } else {
                        benches.append(next)
                    }
                }
            case "--make": makeCount = queue.popFirst().flatMap { Int($0) }
            case "--devices": devices = queue.popFirst().flatMap { Int($0) } ?? devices
            case "--outcomes-per-device": outcomes = queue.popFirst().flatMap { Int($0) } ?? outcomes
            case "--dir": directory = queue.popFirst()
            case "--beaconbench": beaconbench = queue.popFirst() ?? beaconbench
            case "--logs": logs = queue.popFirst() ?? logs
            case "--json": json = true
            case "--profiles": profiles = queue.popFirst()
            default: rest.append(argument)
            }
        }
        if let makeCount {
            make = (
                makeCount, devices, outcomes, directory ?? FileManager.default.currentDirectoryPath + "/office-benches"
            )
        }
    }

    /// The benches, made first when `--make` asks.
    mutating func resolveBenches() async throws {
        if let make {
            officeLog("making \(make.count) test benches of \(make.devices) devices in \(make.directory)")
            benches += try await makeOfficeBenches(
                count: make.count, devices: make.devices, outcomesPerDevice: make.outcomes, in: make.directory)
        }
        guard !benches.isEmpty else { officeUsage("no benches: --benches FILE… or --make N [--devices D] [--dir DIR]") }
    }
}

/// The profiles a fleet's benches sync with: the `profiles/` the
/// generator wrote beside the benches (their fleet's), else the shipped
/// ones (`shippedProfileDirectory`). Without them every pulled
/// assignment would name a profile the bench does not know, and be
/// refused.
func fleetProfileDirectory(_ benches: [String]) -> String {
    if let first = benches.first {
        let beside = URL(fileURLWithPath: first).deletingLastPathComponent().appendingPathComponent("profiles").path
        let files = (try? FileManager.default.contentsOfDirectory(atPath: beside)) ?? []
        if files.contains(where: { $0.hasSuffix(".json") }) { return beside }
    }
    return shippedProfileDirectory()
}

/// A program built beside this one.
func siblingExecutable(_ name: String) -> String {
    URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        .appendingPathComponent(name).path
}

func officeLog(_ text: String) {
    FileHandle.standardError.write(Data("… \(text)\n".utf8))
}

// MARK: office sync

/// `office sync --to URL | --local-server [DIR] --benches FILE… | --make N [--devices D] [--dir DIR]
///  [--resync [K]] [--no-check] [--json] [--beaconbench PATH] [--logs DIR]`
func officeSync(_ arguments: [String]) async throws -> Never {
    await officeGuarded { try await officeSyncRun(arguments) }
}

/// Runs an office subcommand: an error is one `error:` line and exit 2.
func officeGuarded(_ body: () async throws -> Never) async -> Never {
    do {
        try await body()
    } catch {
        FileHandle.standardError.write(Data("error: \(error)\n".utf8))
        exit(2)
    }
}

func officeSyncRun(_ arguments: [String]) async throws -> Never {
    var options = OfficeOptions(arguments)
    var resyncs = 0
    var check = true
    var queue = options.rest[...]
    while let argument = queue.popFirst() {
        switch argument {
        case "--resync":
            if let next = queue.first, let count = Int(next) {
                queue.removeFirst()
                resyncs = count
            } else {
                resyncs = 1
            }
        case "--no-check": check = false
        default: officeUsage("office sync: unknown option \(argument)")
        }
    }
    try await options.resolveBenches()
    var server: LocalPostgres?
    defer { server?.remove() }
    let url: String
    if let given = options.url {
        url = given
    } else if let directory = options.localServer {
        let own = try await officeServer(directory: directory, benches: options.benches.count)
        server = own
        url = own.url
        officeLog("PostgreSQL of its own in \(own.directory)")
    } else {
        officeUsage("office sync needs --to URL or --local-server [DIR]")
    }
    var ok = true
    var rounds: [SyncRound] = []
    for round in 0...resyncs {
        let name = round == 0 ? "first sync" : "re-sync \(round) (nothing new)"
        officeLog("\(name): \(options.benches.count) benches at once")
        let result = try await syncRound(
            round == 0 ? "first" : "resync\(round)", beaconbench: options.beaconbench, url: url,
            benches: options.benches, logs: options.logs, profiles: options.profiles)
        var shown = result
        shown.name = name
        rounds.append(shown)
        print(shown.line)
        if options.json { printJSON(shown.json) }
        for run in result.runs where !run.completed {
            ok = false
            print(
                "failed: \(run.bench): \(run.signal.map { "signal \($0)" } ?? "exit \(run.status)"): "
                    + String(run.stderr.split(separator: "\n").last ?? "").prefix(300))
        }
        if check {
            let report = try await UnionCheck.run(url: url, benches: options.benches)
            for line in UnionCheck.lines(report) { print(line) }
            if options.json { printJSON(UnionCheck.json(report)) }
            ok = ok && report.ok
        }
        // Each round's lines as it ends, also when stdout is a file (block-buffered).
        fflush(nil)
    }
    await server?.remove()
    server = nil
    exit(ok ? 0 : 1)
}
