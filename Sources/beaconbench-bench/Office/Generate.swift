// `beaconbench-bench office generate`: the fleet generator (issue 31;
// docs/office.md, "The fleet generator"). N bench inventories with two
// years of history each, written straight into SQLite through the
// Inventory (no radio), deterministic from a seed; benches are written by
// up to J processes at once, one file each.
import Foundation
import Inventory
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

struct GenerateOptions {
    var benches = 1
    var devices = 10_000
    var outcomesPerDevice = 20
    var readingsPerDevice = 50
    var seed: UInt64?
    var out: String?
    var jobs = 1
    var profiles: String?
    /// Internal: the one bench a child process writes.
    var only: Int?

    static let usage =
        "office generate --benches N --devices D [--outcomes-per-device 20] [--readings-per-device 50] --seed S"
        + " --out DIR [--jobs J] [--profiles DIR]"

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        func value(_ name: String) throws -> String {
            guard let value = rest.popFirst() else { throw GeneratorError("\(name) needs a value (\(Self.usage))") }
            return value
        }
        func number(_ name: String, _ range: ClosedRange<Int>) throws -> Int {
            let text = try value(name)
            guard let number = Int(text), range.contains(number) else {
                throw GeneratorError(
                    "\(name) takes a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
            }
            return number
        }
        while let option = rest.popFirst() {
            switch option {
            case "--benches": benches = try number(option, 1...12_000)
            case "--devices": devices = try number(option, 1...65_535)
            case "--outcomes-per-device": outcomesPerDevice = try number(option, 1...10_000)
            case "--readings-per-device": readingsPerDevice = try number(option, 0...100_000)
            case "--jobs": jobs = try number(option, 1...256)
            case "--only": only = try number(option, 0...11_999)
            case "--seed":
                let text = try value(option)
                guard let seed = text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text) else {
                    throw GeneratorError("--seed takes a number from 0 to 2^64 − 1 (decimal or 0x…), not '\(text)'")
                }
                self.seed = seed
            case "--out": out = try value(option)
            case "--profiles": profiles = try value(option)
            default: throw GeneratorError("unknown option '\(option)' (\(Self.usage))")
            }
        }
        guard seed != nil else { throw GeneratorError("--seed is needed (\(Self.usage))") }
        guard out != nil else { throw GeneratorError("--out is needed (\(Self.usage))") }
    }

    /// The arguments that give a child process the same fleet.
    func childArguments(bench: Int, profiles: String) -> [String] {
        [
            "office", "generate", "--benches", String(benches), "--devices", String(devices), "--outcomes-per-device",
            String(outcomesPerDevice), "--readings-per-device", String(readingsPerDevice), "--seed", String(seed ?? 0),
            "--out", out ?? "", "--profiles", profiles, "--only", String(bench),
        ]
    }
}

/// The manifest: what was asked and, per bench, what each table holds.
struct FleetManifest: Codable {
    var generator = "beaconbench-bench office generate"
    var seed: UInt64
    var benches: Int
    var devicesPerBench: Int
    var outcomesPerDevice: Int
    var readingsPerDevice: Int
    var historyStart: String
    var historyEnd: String
    var profiles: [String]
    /// Devices in the fleet (each bench's own; the devices a bench also
    /// sees of another bench are counted once).
    var fleetDevices: Int
    /// Rows per table over all benches.
    var totals: [String: Int]
    var files: [BenchResult]

    enum CodingKeys: String, CodingKey {
        case generator, seed, benches, profiles, totals
        case devicesPerBench = "devices_per_bench"
        case outcomesPerDevice = "outcomes_per_device"
        case readingsPerDevice = "readings_per_device"
        case historyStart = "history_start"
        case historyEnd = "history_end"
        case fleetDevices = "fleet_devices"
        case files = "bench_files"
    }
}

func generateFleet(_ arguments: [String]) async throws -> Never {
    let options: GenerateOptions
    do {
        options = try GenerateOptions(arguments)
    } catch {
        officeUsage("\(error)")
    }
    do {
        try await runGenerator(options)
    } catch {
        FileHandle.standardError.write(Data("error: office generate: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
}

/// The fleet's profiles written beside its benches (`OUT/profiles/`): a
/// bench syncing checks the assignments it pulls against them
/// (`fleetProfileDirectory`), wherever it is run from.
func copyProfiles(from directory: String, to destination: String) throws {
    try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: true)
    for file in (try FileManager.default.contentsOfDirectory(atPath: directory)).sorted() where file.hasSuffix(".json")
    {
        let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + file))
        try writeFile(data, to: destination + "/" + file)
    }
}

func benchFileName(_ index: Int) -> String { "bench-" + String(format: "%03d", index) + ".sqlite" }

func runGenerator(_ options: GenerateOptions) async throws {
    let out = options.out ?? "."
    let profileDirectory = options.profiles ?? shippedProfileDirectory()
    let loaded = try ProfileLoader.loadAll(from: [profileDirectory])
    let profiles = loaded.keys.sorted().compactMap { loaded[$0] }
    guard !profiles.isEmpty else { throw GeneratorError("no profiles in \(profileDirectory) (--profiles DIR)") }
    guard options.benches * profiles.count + History.firstMajor <= 65_536 else {
        throw GeneratorError(
            "\(options.benches) benches × \(profiles.count) profiles do not fit the identity majors (at most 65,535)")
    }
    let spec = FleetSpec(
        benches: options.benches, devices: options.devices, outcomesPerDevice: options.outcomesPerDevice,
        readingsPerDevice: options.readingsPerDevice, seed: options.seed ?? 0, profiles: profiles,
        weights: profiles.map { History.profileWeights[$0.name] ?? 5 })

    if let only = options.only {
        // A child: one bench, its result beside it for the parent.
        guard only < spec.benches else { throw GeneratorError("--only \(only): there are \(spec.benches) benches") }
        let result = try await generateBench(spec, index: only, directory: out)
        let data = try JSONEncoder().encode(result)
        try writeFile(data, to: out + "/." + benchFileName(only) + ".json")
        return
    }

    try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
    for index in 0..<spec.benches {
        for suffix in ["", "-wal", "-journal"]
        where FileManager.default.fileExists(atPath: out + "/" + benchFileName(index) + suffix) {
            throw GeneratorError("\(out)/\(benchFileName(index))\(suffix) exists: give --out a new or empty directory")
        }
    }
    print(
        "generating \(spec.benches) bench\(spec.benches == 1 ? "" : "es") × \(spec.devices) devices,"
            + " \(spec.outcomesPerDevice) outcomes and \(spec.readingsPerDevice) readings per device, seed \(spec.seed),"
            + " \(min(options.jobs, spec.benches)) at once, into \(out)")
    let start = ContinuousClock.now
    let cpuBefore = processCPUSeconds()
    var results: [BenchResult] = []
    if options.jobs == 1 || spec.benches == 1 {
        for index in 0..<spec.benches {
            results.append(try await generateBench(spec, index: index, directory: out))
        }
    } else {
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var running: [pid_t: Int] = [:]
        var next = 0
        var failures: [String] = []
        while next < spec.benches || !running.isEmpty {
            while running.count < options.jobs && next < spec.benches && failures.isEmpty {
                let pid = try spawn(executable, options.childArguments(bench: next, profiles: profileDirectory))
                running[pid] = next
                next += 1
            }
            if running.isEmpty { break }
            var status: Int32 = 0
            let pid = waitpid(-1, &status, 0)
            if pid < 0 {
                if errno == EINTR { continue }
                throw GeneratorError("waitpid: \(String(cString: strerror(errno)))")
            }
            guard let bench = running.removeValue(forKey: pid) else { continue }
            if status != 0 { failures.append("bench \(bench): the process ended with status \(status)") }
        }
        guard failures.isEmpty else { throw GeneratorError(failures.joined(separator: "; ")) }
        for index in 0..<spec.benches {
            let path = out + "/." + benchFileName(index) + ".json"
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            results.append(try JSONDecoder().decode(BenchResult.self, from: data))
            try FileManager.default.removeItem(atPath: path)
        }
    }
    let elapsed = seconds(ContinuousClock.now - start)
    let cpu = processCPUSeconds() - cpuBefore + childrenCPUSeconds()
    var totals: [String: Int] = [:]
    for result in results {
        for (table, counted) in result.tables { totals[table, default: 0] += counted.rows }
    }
    let manifest = FleetManifest(
        seed: spec.seed, benches: spec.benches, devicesPerBench: spec.devices,
        outcomesPerDevice: spec.outcomesPerDevice, readingsPerDevice: spec.readingsPerDevice,
        historyStart: Inventory.ledgerTime(Date(timeIntervalSince1970: Double(History.start / 1000))),
        historyEnd: Inventory.ledgerTime(Date(timeIntervalSince1970: Double(History.end / 1000))),
        profiles: profiles.map(\.name), fleetDevices: spec.benches * spec.devices, totals: totals, files: results)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    try writeFile(try encoder.encode(manifest) + Data("\n".utf8), to: out + "/manifest.json")
    try copyProfiles(from: profileDirectory, to: out + "/profiles")
    let rows = rowCount(totals)
    let bytes = results.reduce(0) { $0 + $1.bytes }
    print(
        "generated \(spec.benches) bench\(spec.benches == 1 ? "" : "es"): \(rows) rows, \(totals["ledger"] ?? 0) kept ledger"
            + " entries (ledger size \(results.reduce(0) { $0 + $1.ledgerSize })) in \(format(elapsed, 1)) s wall"
            + " (\(Int(Double(rows) / max(elapsed, 0.001))) rows/s), CPU \(format(cpu, 1)) s;"
            + " \(format(Double(bytes) / 1e6 / Double(max(1, results.count)), 1)) MB per bench,"
            + " \(format(Double(bytes) / 1e6, 1)) MB in all; \(out)/manifest.json")
}

/// The rows the history is made of (not the ledger's own tables).
func rowCount(_ tables: [String: Int]) -> Int {
    ["devices", "runs", "outcomes", "readings", "trips", "events", "incidents", "identities", "assignments"].reduce(0) {
        $0 + (tables[$1] ?? 0)
    }
}

/// Writes bench `index` and says how long it took.
func generateBench(_ spec: FleetSpec, index: Int, directory: String) async throws -> BenchResult {
    let start = ContinuousClock.now
    let cpuBefore = processCPUSeconds()
    var generator = BenchGenerator(spec: spec, index: index, path: directory + "/" + benchFileName(index))
    let result = try await generator.generate()
    let elapsed = seconds(ContinuousClock.now - start)
    let cpu = processCPUSeconds() - cpuBefore
    let rows = rowCount(result.tables.mapValues(\.rows))
    print(
        "bench \(String(format: "%03d", index)) (\(result.benchID)): \(rows) rows, ledger size \(result.ledgerSize),"
            + " \(format(Double(result.bytes) / 1e6, 1)) MB, \(format(elapsed, 1)) s wall"
            + " (\(Int(Double(rows) / max(elapsed, 0.001))) rows/s), CPU \(format(cpu, 1)) s")
    return result
}

/// CPU time of the child processes waited for so far.
func childrenCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
        + Double(usage.ru_stime.tv_usec) / 1e6
}

/// `data` into `path` (mode 0600, as the inventories), replacing it whole.
func writeFile(_ data: Data, to path: String) throws {
    let temporary = path + ".partial"
    let fd = open(temporary, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { throw GeneratorError("\(temporary): \(String(cString: strerror(errno)))") }
    let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
    guard written == data.count, rename(temporary, path) == 0 else {
        throw GeneratorError("\(path): \(String(cString: strerror(errno)))")
    }
}

/// Starts `path` with `arguments`; its output goes where this process's goes.
func spawn(_ path: String, _ arguments: [String]) throws -> pid_t {
    var pid: pid_t = 0
    let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    let result = posix_spawn(&pid, path, nil, nil, argv, environ)
    guard result == 0 else { throw GeneratorError("starting \(path): \(String(cString: strerror(result)))") }
    return pid
}

/// `profiles/` of the source tree this binary was built in (`.build/…`),
/// else `./profiles`.
func shippedProfileDirectory() -> String {
    if let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
        for _ in 0..<5 {
            let candidate = directory.appendingPathComponent("profiles")
            if FileManager.default.fileExists(atPath: candidate.appendingPathComponent("car.json").path) {
                return candidate.path
            }
            directory.deleteLastPathComponent()
        }
    }
    return FileManager.default.currentDirectoryPath + "/profiles"
}
