// `beaconbench-bench office reads --to URL [--limit N] [--since TIME]
//     [--only NAME]… [--profiles DIR] [--beaconbench PATH] [--json FILE]`:
// each of the office's reads run once against the server at URL, as a child
// process of the built beaconbench (`--inventory URL`), its output to a
// file: wall time, CPU, peak RSS (wait4's rusage), output size, exit status.
// docs/office.md, "The office's reads".
import Foundation
import LocalBus

/// One office read: its name in the table and beaconbench's arguments
/// after `--inventory URL`.
struct OfficeRead: Codable {
    var name: String
    var arguments: [String]
}

/// The reads measured, one line each (a new read is one more line).
/// `directory`: where a read may write a file of its own.
func officeReads(limit: Int, since: String, directory: String) -> [OfficeRead] {
    [
        OfficeRead(name: "inventory list --limit", arguments: ["inventory", "list", "--limit", String(limit)]),
        OfficeRead(name: "inventory list", arguments: ["inventory", "list"]),
        OfficeRead(name: "log --since", arguments: ["log", "--since", since, "--limit", "50"]),
        OfficeRead(name: "records list", arguments: ["records", "list", "--limit", String(limit)]),
        OfficeRead(name: "drift", arguments: ["drift"]),
        OfficeRead(name: "audit", arguments: ["audit"]),
        OfficeRead(name: "report", arguments: ["report", "--out", directory + "/report.html"]),
    ]
}

struct OfficeReadResult: Codable {
    var name: String
    var command: String
    /// beaconbench's exit status (2: findings, for audit and drift).
    var status: Int32
    var wallSeconds: Double
    var cpuSeconds: Double
    var peakRSSMiB: Double
    var outputBytes: Int
}

func officeReadsMain(_ arguments: [String]) async throws -> Never {
    var arguments = arguments
    var url: String?
    var limit = 100
    var since = "30d"
    var only: [String] = []
    var profiles: String?
    var executable: String?
    var jsonPath: String?
    func value(_ option: String) -> String {
        guard !arguments.isEmpty else { officeUsage("office reads: \(option) wants a value") }
        return arguments.removeFirst()
    }
    while !arguments.isEmpty {
        let option = arguments.removeFirst()
        switch option {
        case "--to": url = value(option)
        case "--limit":
            guard let number = Int(value(option)), number > 0 else {
                officeUsage("office reads: --limit wants a whole number above 0")
            }
            limit = number
        case "--since": since = value(option)
        case "--only": only.append(value(option))
        case "--profiles": profiles = value(option)
        case "--beaconbench": executable = value(option)
        case "--json": jsonPath = value(option)
        default: officeUsage("office reads: unknown option '\(option)'")
        }
    }
    guard let url else { officeUsage("office reads needs --to URL (the server to read)") }
    let beaconbench = try executable ?? sibling("beaconbench")
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var reads = officeReads(limit: limit, since: since, directory: directory)
    if !only.isEmpty {
        let unknown = only.filter { name in !reads.contains { $0.name == name } }
        guard unknown.isEmpty else {
            officeUsage("office reads: no read named \(unknown) (\(reads.map(\.name).joined(separator: ", ")))")
        }
        reads = reads.filter { only.contains($0.name) }
    }
    let common = (profiles.map { ["--profiles", $0] } ?? []) + ["--inventory", url]
    var results: [OfficeReadResult] = []
    for read in reads {
        let output = directory + "/out"
        let started = ContinuousClock.now
        let child = try ChildProcess(
            beaconbench, common + read.arguments, standardOutput: output, standardError: directory + "/err")
        let (status, usage) = await child.waitForExit()
        let wall = seconds(ContinuousClock.now - started)
        let cpu =
            Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
            + Double(usage.ru_stime.tv_usec) / 1e6
        let size = (try? FileManager.default.attributesOfItem(atPath: output)[.size] as? Int) ?? 0
        let exit = status >> 8
        if exit != 0, exit != 2 {
            let error = (try? String(contentsOfFile: directory + "/err", encoding: .utf8)) ?? ""
            FileHandle.standardError.write(Data("\(read.name): exit \(exit): \(error.suffix(400))\n".utf8))
        }
        try? FileManager.default.removeItem(atPath: output)
        results.append(
            OfficeReadResult(
                name: read.name, command: "beaconbench --inventory URL " + read.arguments.joined(separator: " "),
                status: exit, wallSeconds: wall, cpuSeconds: cpu, peakRSSMiB: Double(usage.ru_maxrss) / 1024,
                outputBytes: size))
    }
    let width = max(10, results.map(\.name.count).max() ?? 0)
    print("read".padding(toLength: width, withPad: " ", startingAt: 0) + "  exit    wall s   CPU s  peak MiB    output")
    for result in results {
        print(
            result.name.padding(toLength: width, withPad: " ", startingAt: 0)
                + String(
                    format: "  %4d  %8.3f  %6.2f  %8.1f  %8d", result.status, result.wallSeconds, result.cpuSeconds,
                    result.peakRSSMiB, result.outputBytes))
    }
    if let jsonPath {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(results).write(to: URL(fileURLWithPath: jsonPath))
    }
    let failed = results.contains { $0.status != 0 && $0.status != 2 }
    exit(failed ? 1 : 0)
}
