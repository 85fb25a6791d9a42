import BeaconSimulator
import Foundation
import Inventory
import Ledger
import LocalBus
import SBeaconProtocol
import TestSupport

// `beaconbench-bench ledger`: what the ledger of issue 29 costs, measured
// side by side with the same work without it (`BEACONBENCH_LEDGER=off`,
// docs/ledger.md "Measuring without the ledger"). docs/benchmarks.md, "The
// ledger's cost", says what bounds each figure.

struct LedgerCostResult: Codable {
    /// One provisioning run of `beacons` fresh beacons, no radio latency.
    struct ProvisioningSample: Codable {
        var ledger: Bool
        var cpuSeconds: Double
        var cpuMillisecondsPerDevice: Double
        var wallSeconds: Double
        var peakRSSMiB: Double
        /// What the process wrote to the file system (`wait4`'s
        /// ru_oublock × 512: pages it dirtied, the WAL's above all).
        var writtenBytes: Double
        /// The inventory's file after `PRAGMA wal_checkpoint(TRUNCATE)`.
        var fileBytes: Int
        /// The ledger's tables and their indexes, from `dbstat`.
        var ledgerTableBytes: Int
        var changed: Int
        var skipped: Int
        var failed: Int
        /// Entries kept in `ledger`, and sealed rows (outcomes, readings…).
        var keptEntries: Int
        var sealedEntries: Int
        /// The kept entries by table and operation (`devices update`).
        var keptByKind: [String: Int] = [:]
        /// SQLite commits of the run on its inventory (`BEACONBENCH_STATS`,
        /// Database.commits), and per beacon.
        var commits = 0
        var commitsPerDevice: Double { Double(commits) / Double(max(1, beacons)) }
        var beacons = 0
    }
    var beacons: Int
    var provisioning: [ProvisioningSample] = []
    var cpuPerDeviceWith = 0.0
    var cpuPerDeviceWithout = 0.0
    var cpuRatio = 0.0
    /// SQLite commits per device, the median of the runs with the ledger.
    var commitsPerDevice = 0.0
    var fileBytesWith = 0
    var fileBytesWithout = 0
    var sizeRatio = 0.0
    var writtenRatio = 0.0

    /// `beaconbench --inventory FILE ledger verify` of the big ledger.
    var verifyEntries = 0
    var verifyKeptEntries = 0
    var verifySealedEntries = 0
    var verifyFileBytes = 0
    var verifyBuildSeconds: Double?
    var verifyWallSeconds: [Double] = []
    var verifyCPUSeconds: [Double] = []
    var verifyPeakRSSMiB = 0.0

    /// The proof of one device's entries in the big ledger.
    var proofDevice = ""
    var proofEntries = 0
    var proofHashesMax = 0
    var proofHashesMean = 0.0
    var proofBytesPerEntryMax = 0
    var proofFileBytes = 0
    var proofFileHashBytes = 0
    var proofFileEntryBytes = 0
    var proofDistinctHashes = 0
    var proofCollectSeconds = 0.0
    var proofCheckSeconds = 0.0

    /// Appending alone, in-process: µs of this process's CPU (user + sys)
    /// per row written, with and without; and of wall time.
    struct Append: Codable {
        var scenario: String
        var rows: Int
        var microsecondsWith: Double
        var microsecondsWithout: Double
        var microsecondsPerEntry: Double { microsecondsWith - microsecondsWithout }
        var wallMicrosecondsWith: Double
        var wallMicrosecondsWithout: Double
    }
    var appends: [Append] = []
}

/// The big ledger: 1,000,000 entries. Changing how it is made: bump the
/// generation number (a cached file of another generation is made again).
enum BigLedger {
    static let entries = 1_000_000
    static let generation = 2
    /// The device whose proof is measured: 100 entries, spread evenly.
    static let device = "C2:00:00:00:00:01"
    static let deviceEntries = 100
    /// A group: `devicesPerGroup` devices recorded (an insert each), 10
    /// outcomes each in one transaction, then each device updated 7 times
    /// (identity, battery, firmware, calibration, time, profile and
    /// config, battery again): 18 entries per device, 8 kept and 10
    /// sealed, as a provisioning run makes them (805 kept and 973 sealed
    /// for 100 beacons, docs/benchmarks.md).
    static let devicesPerGroup = 100
    static let outcomesPerDevice = 10
    static let updatesPerDevice = 7

    static func cachePath() -> String {
        repository + "/bench-results/cache/ledger-\(entries)-g\(generation).sqlite"
    }

    static func address(_ number: Int) -> String {
        String(format: "C1:%02X:%02X:%02X:00:01", number >> 16 & 0xFF, number >> 8 & 0xFF, number & 0xFF)
    }

    /// Writes the big ledger at `path` (a new file) through the Inventory
    /// API, with the ledger on. Run in a child (`beaconbench-bench
    /// ledger-build PATH`): this process stays small, so the verify's peak
    /// RSS measured later is its own.
    static func build(path: String) async throws {
        let inventory = try Inventory(path: path)
        let run = try await inventory.beginRun(.init(command: "benchmark: the big ledger", operatorName: "bench"))
        var special = DeviceRecord(address: device)
        special.battery = 90
        try await inventory.recordDevice(special)
        var size = try await inventory.ledgerTreeHead().size
        let steps = [
            "info", "battery", "sync-time", "calibrate", "identity", "apply car", "verify car", "read back", "time",
            "summary",
        ]
        // The device's other 99 entries: one outcome every `spacing` entries.
        let spacing = entries / deviceEntries
        var nextSpecial = spacing
        var specialDone = 1
        var number = 0
        let groupEntries = devicesPerGroup * (outcomesPerDevice + 1 + updatesPerDevice)
        while size < entries - 1 {
            let room = entries - 1 - size
            if room >= groupEntries + 1 {
                let first = number
                for _ in 0..<devicesPerGroup {
                    // Seen in a scan: its address, when.
                    try await inventory.recordDevice(DeviceRecord(address: address(number)))
                    number += 1
                }
                var batch: [(device: String?, step: String, status: Inventory.StepStatus, detail: String?)] = []
                for index in first..<number {
                    for step in steps {
                        batch.append((address(index), step, .changed, "\(step) of device \(index): done"))
                    }
                }
                if size + devicesPerGroup + batch.count >= nextSpecial, specialDone < deviceEntries {
                    batch.insert((device, "info", .ok, "the proof's device, entry \(specialDone)"), at: batch.count / 2)
                    specialDone += 1
                    nextSpecial += spacing
                }
                try await inventory.recordOutcomes(run: run, batch)
                for index in first..<number {
                    // What a provisioning run reads and writes, one commit each.
                    for update in 0..<updatesPerDevice {
                        var record = DeviceRecord(address: address(index))
                        switch update {
                        case 0:
                            record.identity = .init(major: 100, minor: UInt16(index % 65_000))
                            record.model = "SB-1"
                            record.serial = String(format: "SN%08d", index)
                        case 1: record.battery = UInt8(40 + index % 60)
                        case 2: record.firmware = .init(major: 1, minor: 0, patch: 8)
                        case 3:
                            record.calibration = .init(
                                calibrated: true, calibratedAt: 60, vector: .init(x: 10, y: 5, z: 990))
                            record.calibratedAt = Date()
                        case 4: record.timeOffset = 1_795_531_158_597 + Int64(index)
                        case 5:
                            record.profile = "car"
                            record.config = DrivingBehaviourConfig(
                                cornering: 350, braking: 350, acceleration: 450, duration: 300, enable: .all)
                        default: record.battery = UInt8(39 + index % 60)
                        }
                        try await inventory.recordDevice(record)
                    }
                }
            } else {
                // The last few: outcomes, so the run's end is entry 999,999.
                let batch = (0..<room).map { index in
                    (
                        device: String?.some(address(index)), step: "info", status: Inventory.StepStatus.ok,
                        detail: String?.some("filler \(index)")
                    )
                }
                try await inventory.recordOutcomes(run: run, batch)
            }
            size = try await inventory.ledgerTreeHead().size
        }
        try await inventory.endRun(run, .finished)
        let final = try await inventory.ledgerTreeHead().size
        guard final == entries, specialDone == deviceEntries else {
            throw LocalBusError("the big ledger has \(final) entries, \(specialDone) about \(device)")
        }
        _ = try await inventory.query("PRAGMA wal_checkpoint(TRUNCATE)")
    }
}

/// `sqlite3 PATH SQL` (the CLI), its output's lines split at `|`.
func sqliteCLI(_ path: String, _ sql: String) async throws -> [[String]] {
    let output = try await runTool("/usr/bin/sqlite3", [path, sql])
    guard output.status == 0 else { throw LocalBusError("sqlite3 \(sql): \(output.stderr)") }
    return output.stdout.split(separator: "\n").map {
        $0.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
    }
}

func fileSize(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
}

/// One provisioning run of `count` fresh simulated beacons without radio
/// latency, the ledger on or off (`env BEACONBENCH_LEDGER=on|off
/// beaconbench …`: the same exec either way), then the inventory measured.
func ledgerProvisioningSample(count: Int, ledger: Bool) async throws -> LedgerCostResult.ProvisioningSample {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let simulator = try await SimulatorProcess.start(
        executable: try sibling("beaconbench-sim"),
        arguments: ["--count", String(count), "--fresh", "--adapters", "1", "--latency", "none"])
    defer { simulator.stop() }
    let inventoryPath = directory + "/inventory.sqlite"
    let statsPath = directory + "/stats.jsonl"
    let run = try runMeasured(
        "/usr/bin/env",
        [
            "BEACONBENCH_LEDGER=\(ledger ? "on" : "off")", "BEACONBENCH_STATS=\(statsPath)",
            try sibling("beaconbench"), "--bus", simulator.bus.address,
            "--inventory", inventoryPath, "--json", "run", repository + "/batches/provision-new.batch", "--set",
            "scan=3s",
        ], in: directory)
    guard run.status == 0 || run.status >> 8 == 2 else {
        throw LocalBusError("beaconbench exited with status \(run.status >> 8): \(run.output)")
    }
    let summary = jsonLines(run.output).first { $0["kind"] as? String == "summary" } ?? [:]
    // `{"run":1,"commits":N}`: the one run's line, written at its end.
    let statsLines = ((try? String(contentsOfFile: statsPath, encoding: .utf8)) ?? "").split(separator: "\n")
    struct Stats: Decodable { var run: Int64, commits: Int }
    guard statsLines.count == 1,
        let commits = try? JSONDecoder().decode(Stats.self, from: Data(statsLines[0].utf8)).commits
    else {
        throw LocalBusError("BEACONBENCH_STATS wrote \(statsLines) (one line of one run expected)")
    }
    // The inventory as the run left it, read by the sqlite3 CLI (opening
    // it with Inventory for writing would begin a ledger in the one without).
    _ = try await sqliteCLI(inventoryPath, "PRAGMA wal_checkpoint(TRUNCATE)")
    let fileBytes = fileSize(inventoryPath)
    var ledgerBytes = 0
    for row in try await sqliteCLI(inventoryPath, "SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
    where row.count == 2 && (row[0].hasPrefix("ledger") || row[0].hasPrefix("sqlite_autoindex_ledger")) {
        ledgerBytes += Int(row[1]) ?? 0
    }
    let counts =
        try await sqliteCLI(
            inventoryPath,
            """
            SELECT (SELECT count(*) FROM ledger),
              (SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL)
              + (SELECT count(*) FROM readings WHERE ledger_seq IS NOT NULL)
              + (SELECT count(*) FROM trips WHERE ledger_seq IS NOT NULL)
              + (SELECT count(*) FROM events WHERE ledger_seq IS NOT NULL)
              + (SELECT count(*) FROM incidents WHERE ledger_seq IS NOT NULL)
            """
        ).first?.compactMap { Int($0) } ?? []
    guard counts.count == 2, ledger || counts == [0, 0] else {
        throw LocalBusError("the run without the ledger wrote \(counts) entries: the switch did not hold")
    }
    // ledger.entry's bytes 2 and 3: the table (1 + its index in
    // LedgerTable.all, 0 a note) and the operation (LedgerStorage.swift).
    let tables = [
        "note", "runs", "devices", "identities", "assignments", "outcomes", "readings", "trips", "events", "incidents",
    ]
    let operations = ["insert", "update", "delete", "note"]
    var kinds: [String: Int] = [:]
    for row in try await sqliteCLI(
        inventoryPath, "SELECT hex(substr(entry, 2, 1)), hex(substr(entry, 3, 1)), count(*) FROM ledger GROUP BY 1, 2")
    where row.count == 3 {
        let table = Int(row[0], radix: 16).flatMap { $0 < tables.count ? tables[$0] : nil } ?? row[0]
        let operation = Int(row[1], radix: 16).flatMap { $0 < operations.count ? operations[$0] : nil } ?? row[1]
        kinds[table + " " + operation] = Int(row[2]) ?? 0
    }
    return LedgerCostResult.ProvisioningSample(
        ledger: ledger, cpuSeconds: run.cpuSeconds, cpuMillisecondsPerDevice: run.cpuSeconds * 1000 / Double(count),
        wallSeconds: run.wallSeconds, peakRSSMiB: run.peakRSSMiB, writtenBytes: run.writtenBytes,
        fileBytes: fileBytes, ledgerTableBytes: ledgerBytes, changed: summary["changed"] as? Int ?? 0,
        skipped: summary["skipped"] as? Int ?? 0, failed: summary["failed"] as? Int ?? 0, keptEntries: counts[0],
        sealedEntries: counts[1], keptByKind: kinds, commits: commits, beacons: count)
}

/// An inventory opened in this process with the ledger on or off. The
/// switch is read from the environment when it opens (nothing else in
/// this process reads it meanwhile).
func inventory(at path: String, ledger: Bool) throws -> Inventory {
    if !ledger { setenv("BEACONBENCH_LEDGER", "off", 1) }
    defer { unsetenv("BEACONBENCH_LEDGER") }
    return try Inventory(path: path)
}

/// This process's CPU time so far (user + system), in seconds.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
        + Double(usage.ru_stime.tv_usec) / 1e6
}

/// Appending alone: the same rows written with and without the ledger, in
/// fresh inventories, alternating, `rounds` times; the median of each.
func ledgerAppendCosts(rounds: Int = 3) async throws -> [LedgerCostResult.Append] {
    let rows = 10_000
    typealias Work = (Inventory, Int64) async throws -> Void
    let outcome = { (index: Int) in
        (
            device: String?.some(BigLedger.address(index % 100)), step: "calibrate",
            status: Inventory.StepStatus.changed, detail: String?.some("calibrated: vector (10, 5, 990)")
        )
    }
    let scenarios: [(String, Work)] = [
        (
            "sealed: recordOutcomes, 1,000 rows per transaction",
            { inventory, run in
                for batch in 0..<(rows / 1000) {
                    try await inventory.recordOutcomes(run: run, (batch * 1000..<(batch + 1) * 1000).map(outcome))
                }
            }
        ),
        (
            "sealed: recordOutcomes, 1 row per transaction",
            { inventory, run in
                for index in 0..<rows { try await inventory.recordOutcomes(run: run, [outcome(index)]) }
            }
        ),
        (
            "sealed: live steps (endStep with the next step begun: 1 commit each)",
            { inventory, run in
                // As a fleet run writes them (one device's steps in a row).
                var step = try await inventory.beginStep(run: run, device: BigLedger.address(0), step: "info")
                for index in 0..<rows {
                    let next: Inventory.StepNext = index + 1 < rows ? .begin("info") : .none
                    step =
                        try await inventory.endStep(
                            step, .init(.ok, detail: "read", durationMilliseconds: 4), next: next) ?? step
                }
            }
        ),
        (
            "kept: recordDevice updates, 1 per transaction",
            { inventory, _ in
                // 100 devices exist (made before the clock starts); each is
                // seen again 100 times with a new battery level.
                for index in 0..<rows {
                    var record = DeviceRecord(address: BigLedger.address(index % 100))
                    record.battery = UInt8(index / 100 % 100)
                    try await inventory.recordDevice(record)
                }
            }
        ),
    ]
    var results: [LedgerCostResult.Append] = []
    for (name, work) in scenarios {
        var with: [Double] = []
        var without: [Double] = []
        var wallWith: [Double] = []
        var wallWithout: [Double] = []
        for _ in 0..<rounds {
            for ledger in [true, false] {
                let directory = try scratchDirectory()
                defer { try? FileManager.default.removeItem(atPath: directory) }
                let store = try inventory(at: directory + "/inventory.sqlite", ledger: ledger)
                let run = try await store.beginRun(.init(command: "benchmark", operatorName: "bench"))
                for index in 0..<100 {
                    var record = DeviceRecord(address: BigLedger.address(index))
                    record.battery = 100
                    try await store.recordDevice(record)
                }
                let before = try await store.query("SELECT count(*) FROM ledger").first?.first?.integer ?? -1
                let started = ContinuousClock.now
                let cpuStarted = processCPUSeconds()
                try await work(store, run)
                let cpu = processCPUSeconds() - cpuStarted
                let elapsed = seconds(ContinuousClock.now - started)
                let after = try await store.query("SELECT count(*) FROM ledger").first?.first?.integer ?? -1
                let sealed =
                    try await store.query("SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL")
                    .first?.first?.integer ?? -1
                // The entries are there (or not) as the scenario says.
                let entries = Int(after - before + sealed)
                guard ledger ? entries == rows : (after == 0 && sealed == 0) else {
                    throw LocalBusError("\(name): \(entries) entries with the ledger \(ledger ? "on" : "off")")
                }
                if ledger {
                    with.append(cpu)
                    wallWith.append(elapsed)
                } else {
                    without.append(cpu)
                    wallWithout.append(elapsed)
                }
            }
        }
        results.append(
            LedgerCostResult.Append(
                scenario: name, rows: rows, microsecondsWith: median(with) * 1e6 / Double(rows),
                microsecondsWithout: median(without) * 1e6 / Double(rows),
                wallMicrosecondsWith: median(wallWith) * 1e6 / Double(rows),
                wallMicrosecondsWithout: median(wallWithout) * 1e6 / Double(rows)))
    }
    return results
}

/// The whole ledger scenario: (a) provisioning CPU and size with and
/// without, (b) `ledger verify` of 1,000,000 entries, (c) a device's proof
/// in that ledger, (d) appending alone.
func ledgerBenchmark(count: Int = 100, rounds: Int = 5) async throws -> LedgerCostResult {
    func log(_ text: String) { FileHandle.standardError.write(Data("… \(text)\n".utf8)) }
    var result = LedgerCostResult(beacons: count)

    // (a) Alternating, so the machine's drift falls on both alike.
    for round in 1...rounds {
        for ledger in [true, false] {
            log(
                "ledger: provisioning \(count) beacons, no latency, ledger \(ledger ? "on" : "off") (\(round)/\(rounds))"
            )
            result.provisioning.append(try await ledgerProvisioningSample(count: count, ledger: ledger))
        }
    }
    let with = result.provisioning.filter(\.ledger)
    let without = result.provisioning.filter { !$0.ledger }
    result.cpuPerDeviceWith = median(with.map(\.cpuMillisecondsPerDevice))
    result.cpuPerDeviceWithout = median(without.map(\.cpuMillisecondsPerDevice))
    result.cpuRatio = result.cpuPerDeviceWith / result.cpuPerDeviceWithout
    result.commitsPerDevice = median(with.map(\.commitsPerDevice))
    result.fileBytesWith = Int(median(with.map { Double($0.fileBytes) }))
    result.fileBytesWithout = Int(median(without.map { Double($0.fileBytes) }))
    result.sizeRatio = Double(result.fileBytesWith) / Double(result.fileBytesWithout)
    result.writtenRatio = median(with.map(\.writtenBytes)) / median(without.map(\.writtenBytes))

    // (b) The big ledger, made once and kept (bench-results/cache).
    let big = BigLedger.cachePath()
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let beaconbench = try sibling("beaconbench")
    func verify() throws -> ChildRun {
        try runMeasured(beaconbench, ["--inventory", big, "--json", "ledger", "verify"], in: directory)
    }
    var first: ChildRun?
    if FileManager.default.fileExists(atPath: big) {
        let run = try verify()
        if run.status == 0 { first = run } else { try FileManager.default.removeItem(atPath: big) }
    }
    if first == nil {
        log("ledger: building a ledger of \(BigLedger.entries) entries (kept in \(big))")
        try FileManager.default.createDirectory(
            atPath: (big as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm", "-reserve"] { try? FileManager.default.removeItem(atPath: big + suffix) }
        let built = try runMeasured(
            try sibling("beaconbench-bench"), ["ledger-build", big], in: directory)
        guard built.status == 0 else { throw LocalBusError("ledger-build failed: \(built.output)") }
        result.verifyBuildSeconds = built.wallSeconds
        first = try verify()
    }
    log("ledger: verify of \(BigLedger.entries) entries, 3 times")
    var runs = [first!]
    for _ in 0..<2 { runs.append(try verify()) }
    guard runs.allSatisfy({ $0.status == 0 }) else {
        throw LocalBusError("ledger verify of the big ledger failed: \(runs.map(\.output))")
    }
    result.verifyWallSeconds = runs.map(\.wallSeconds)
    result.verifyCPUSeconds = runs.map(\.cpuSeconds)
    result.verifyPeakRSSMiB = runs.map(\.peakRSSMiB).max() ?? 0
    result.verifyFileBytes = fileSize(big)
    let counts =
        try await sqliteCLI(
            big, "SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL)"
        ).first?.compactMap { Int($0) } ?? [0, 0]
    result.verifyKeptEntries = counts.first ?? 0
    result.verifySealedEntries = counts.last ?? 0
    result.verifyEntries = result.verifyKeptEntries + result.verifySealedEntries

    // (c) The proof of the device with 100 entries in it.
    log("ledger: the proof of \(BigLedger.device)")
    let store = try Inventory(path: big, readOnly: true)
    let head = try await store.ledgerTreeHead()
    var started = ContinuousClock.now
    let entries = try await store.ledgerEntries(about: BigLedger.device, size: head.size)
    result.proofCollectSeconds = seconds(ContinuousClock.now - started)
    let key = directory + "/key"
    let keygen = try await runTool(
        "/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", key])
    guard keygen.status == 0 else { throw LocalBusError("ssh-keygen: \(keygen.stderr)") }
    let publicKey = try String(contentsOfFile: key + ".pub", encoding: .utf8).trimmingCharacters(
        in: .whitespacesAndNewlines)
    let signers = directory + "/allowed_signers"
    try "bench@ledger namespaces=\"beaconbench-ledger\" \(publicKey)\n".write(
        toFile: signers, atomically: true, encoding: .utf8)
    let note = try SignedCheckpoint.sign(
        try Checkpoint(origin: Checkpoint.origin(bench: try await store.benchID()), size: head.size, root: head.root),
        keyPath: key, signer: "bench@ledger")
    let file = try ProofFile.make(
        device: BigLedger.device, at: nil, checkpointNote: note,
        entries: entries.map { (index: $0.index, bytes: $0.entry, proof: $0.proof) })
    started = ContinuousClock.now
    let report = try ProofFile.check(file, allowedSigners: signers)
    result.proofCheckSeconds = seconds(ContinuousClock.now - started)
    _ = report
    result.proofDevice = BigLedger.device
    result.proofEntries = entries.count
    result.proofHashesMax = entries.map(\.proof.count).max() ?? 0
    result.proofHashesMean = Double(entries.map(\.proof.count).reduce(0, +)) / Double(max(1, entries.count))
    result.proofBytesPerEntryMax = result.proofHashesMax * 32
    result.proofFileBytes = file.count
    // As hex in the file: 64 digits, 2 quotes, a comma (but after the last).
    result.proofFileHashBytes = entries.map { $0.proof.count * 67 - ($0.proof.isEmpty ? 0 : 1) }.reduce(0, +)
    result.proofFileEntryBytes = entries.map(\.entry.count).reduce(0, +)
    result.proofDistinctHashes = Set(entries.flatMap { $0.proof.map(\.hex) }).count

    // (d) Appending alone.
    log("ledger: appending alone (in-process, 3 rounds)")
    result.appends = try await ledgerAppendCosts()
    return result
}

func ledgerRows(_ result: LedgerCostResult) -> [Row] {
    let kib = { (bytes: Int) in format(Double(bytes) / 1024, 1) + " KiB" }
    var rows = [
        Row(
            scenario:
                "ledger: CPU per device, provisioning \(result.beacons), no latency (median of \(result.provisioning.count / 2) each)",
            value:
                "\(format(result.cpuPerDeviceWith, 2)) ms with, \(format(result.cpuPerDeviceWithout, 2)) ms without: \(format(result.cpuRatio, 3))",
            goal: "≤ 1.10", met: result.cpuRatio <= 1.10),
        Row(
            scenario:
                "SQLite commits per device, provisioning \(result.beacons), no latency (BEACONBENCH_STATS, median)",
            value:
                "\(format(result.commitsPerDevice, 1)) (27.0 before one commit per step, docs/benchmarks.md)",
            goal: "≤ 12 (one per step)", met: result.commitsPerDevice <= 12),
        Row(
            scenario: "ledger: inventory size after that run (checkpointed file)",
            value:
                "\(kib(result.fileBytesWith)) with, \(kib(result.fileBytesWithout)) without: \(format(result.sizeRatio, 3))",
            goal: "≤ 1.20", met: result.sizeRatio <= 1.20),
        Row(
            scenario: "ledger: bytes written by that run (ru_oublock), with / without",
            value: format(result.writtenRatio, 3), goal: "-", met: nil),
        Row(
            scenario: "ledger: verify \(result.verifyEntries) entries (wall, median of 3)",
            value:
                "\(format(median(result.verifyWallSeconds), 2)) s (CPU \(format(median(result.verifyCPUSeconds), 2)) s, RSS \(format(result.verifyPeakRSSMiB)) MiB)",
            goal: "≤ 10 s", met: median(result.verifyWallSeconds) <= 10),
        Row(
            scenario: "ledger: inclusion proof of one entry (most hashes × 32 bytes)",
            value: "\(result.proofHashesMax) hashes, \(result.proofBytesPerEntryMax) bytes", goal: "≤ 4 KiB",
            met: result.proofBytesPerEntryMax <= 4096),
        Row(
            scenario: "ledger: proof file of a device with \(result.proofEntries) entries",
            value:
                "\(kib(result.proofFileBytes)) (hashes \(kib(result.proofFileHashBytes)), entries \(kib(result.proofFileEntryBytes)))",
            goal: "(≤ 4 KiB?)", met: result.proofFileBytes <= 4096),
        Row(
            scenario: "ledger: ProofFile.check of that file",
            value:
                "\(format(result.proofCheckSeconds * 1000, 0)) ms (collected in \(format(result.proofCollectSeconds * 1000, 0)) ms)",
            goal: "-", met: nil),
    ]
    for append in result.appends {
        rows.append(
            Row(
                scenario: "ledger: append, \(append.scenario)",
                value:
                    "CPU \(format(append.microsecondsWith, 1)) µs/row with, \(format(append.microsecondsWithout, 1)) without: +\(format(append.microsecondsPerEntry, 1)) µs/entry"
                    + " (wall \(format(append.wallMicrosecondsWith, 1)), \(format(append.wallMicrosecondsWithout, 1)))",
                goal: "-", met: nil))
    }
    return rows
}

func printLedgerDetails(_ result: LedgerCostResult) {
    print()
    print("provisioning runs (ledger on/off, in the order run):")
    for sample in result.provisioning {
        print(
            "  \(sample.ledger ? "with   " : "without"): CPU \(format(sample.cpuSeconds, 3)) s"
                + " (\(format(sample.cpuMillisecondsPerDevice, 2)) ms/device), wall \(format(sample.wallSeconds, 1)) s,"
                + " RSS \(format(sample.peakRSSMiB, 1)) MiB, written \(format(sample.writtenBytes / 1024, 0)) KiB,"
                + " file \(sample.fileBytes) B (ledger tables \(sample.ledgerTableBytes) B),"
                + " \(sample.commits) commits (\(format(sample.commitsPerDevice, 1))/device),"
                + " entries \(sample.keptEntries) kept + \(sample.sealedEntries) sealed"
                + " (\(sample.keptByKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")));"
                + " \(sample.changed) changed, \(sample.skipped) skipped, \(sample.failed) failed")
    }
    print(
        "verify: \(result.verifyEntries) entries (\(result.verifyKeptEntries) kept, \(result.verifySealedEntries) sealed), file \(result.verifyFileBytes) B;"
            + " wall \(result.verifyWallSeconds.map { format($0, 2) }.joined(separator: " / ")) s,"
            + " CPU \(result.verifyCPUSeconds.map { format($0, 2) }.joined(separator: " / ")) s"
            + (result.verifyBuildSeconds.map { "; built in \(format($0, 1)) s" } ?? "; from the cache"))
    print(
        "proof of \(result.proofDevice): \(result.proofEntries) entries, \(format(result.proofHashesMean, 2)) hashes each on average"
            + " (at most \(result.proofHashesMax)), \(result.proofDistinctHashes) distinct; file \(result.proofFileBytes) B"
    )
}
