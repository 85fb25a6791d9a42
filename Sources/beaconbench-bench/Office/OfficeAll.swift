// `beaconbench-bench office all [--devices D] [--benches N] [--hundred-devices H]`: the office
// scenarios one after the other at a size `make bench` can afford (a few
// minutes), each as its own child process, its output printed as it ends:
//
//   1. office generate: N benches (10) of D devices (1,000), seed 1
//   2. office sync: one bench alone, then the N at once, with two
//      re-syncs, each round followed by the union check
//   3. office reads: every office read against the N benches' server
//   4. office generate and sync: 100 benches of H devices (100,
//      `--hundred-devices`) at once, with a re-sync and the union check
//   5. office claims: 100 benches claiming in one major, blocks and lock
//   6. office migrate: the last migrations applied to a 100,000-device
//      server while three of the benches sync
//
// The judged sizes (10,000 devices per bench, 100 benches, 1,000,000
// devices) are the same commands with other options: docs/office.md.
import Foundation
import LocalBus

func officeAll(_ arguments: [String]) async throws -> Never {
    var devices = 1_000
    var benches = 10
    var hundredDevices = 100
    var rest = arguments[...]
    while let option = rest.popFirst() {
        guard let text = rest.popFirst(), let value = Int(text), value > 0 else {
            officeUsage("office all: \(option) wants a whole number above 0")
        }
        switch option {
        case "--devices": devices = value
        case "--benches": benches = value
        case "--hundred-devices": hundredDevices = value
        default: officeUsage("office all: unknown option '\(option)'")
        }
    }
    let tool = try sibling("beaconbench-bench")
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    var failures: [String] = []

    func step(_ title: String, _ arguments: [String]) async {
        print("\n== office \(title)")
        let log = directory + "/step.log"
        do {
            let child = try ChildProcess(tool, ["office"] + arguments, standardOutput: log, standardError: log + ".err")
            let status = await onThreadOfItsOwn { child.waitForExit().status }
            print((try? String(contentsOfFile: log, encoding: .utf8)) ?? "", terminator: "")
            if status != 0 {
                let error = (try? String(contentsOfFile: log + ".err", encoding: .utf8)) ?? ""
                print("(exit status \(status)) \(error.suffix(2_000))")
                failures.append(title)
            }
        } catch {
            print("could not run: \(error)")
            failures.append(title)
        }
    }

    let fleet = directory + "/fleet"
    await step(
        "generate: \(benches) benches × \(devices) devices",
        [
            "generate", "--benches", String(benches), "--devices", String(devices), "--seed", "1", "--out", fleet,
            "--jobs", "2",
        ])
    let files = ((try? FileManager.default.contentsOfDirectory(atPath: fleet)) ?? []).filter { $0.hasSuffix(".sqlite") }
        .sorted().map { fleet + "/" + $0 }
    guard files.count == benches else {
        print("office all: the generator left \(files.count) bench files, not \(benches)")
        exit(1)
    }
    // Each scenario gets fresh copies: a sync changes a bench's file.
    func copies(_ name: String, _ sources: [String]) throws -> [String] {
        let target = directory + "/" + name
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        return try sources.map { source in
            let copy = target + "/" + (source as NSString).lastPathComponent
            try FileManager.default.copyItem(atPath: source, toPath: copy)
            return copy
        }
    }

    await step(
        "sync: 1 bench",
        ["sync", "--local-server", directory + "/pg1", "--benches"] + (try copies("one", [files[0]])) + [
            "--resync", "1",
        ])

    let server = try await LocalPostgres.create(port: 54_335)
    do {
        try await server.start()
        await step(
            "sync: \(benches) benches at once",
            ["sync", "--to", server.url, "--benches"] + (try copies("all", files)) + ["--resync", "2"])
        await step("reads", ["reads", "--to", server.url])
    } catch {
        print("office all: \(error)")
        failures.append("server")
    }
    await server.remove()

    // A hundred benches at once: smaller ones, so that make bench affords
    // them (the judged 100 × 10,000 is the same command on `office
    // generate`'s defaults: docs/office.md).
    let hundred = directory + "/fleet100"
    await step(
        "generate: 100 benches × \(hundredDevices) devices",
        [
            "generate", "--benches", "100", "--devices", String(hundredDevices), "--seed", "2", "--out", hundred,
            "--jobs", "2",
        ])
    await step(
        "sync: 100 benches at once",
        ["sync", "--local-server", directory + "/pg100", "--benches", hundred, "--resync", "1"])
    try? FileManager.default.removeItem(atPath: hundred)

    await step(
        "claims: 100 benches in one major",
        [
            "claims", "--local-server", "--benches", "100", "--major", "4242", "--claims-per-bench", "20", "--design",
            "both",
        ])
    await step(
        "migrate: a 100,000-device server while 3 benches sync",
        ["migrate", "--devices", "100000", "--benches"] + (try copies("migrate", Array(files.prefix(3)))))

    print(
        failures.isEmpty
            ? "\noffice all: every scenario ran" : "\noffice all: failed: \(failures.joined(separator: ", "))")
    exit(failures.isEmpty ? 0 : 1)
}
