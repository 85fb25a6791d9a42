// `beaconbench-bench office claims`: identity claims under contention
// (issue 31; docs/office.md, "Identity claims under contention").
//
//   office claims --to URL|--local-server [--benches 100] [--major 4242]
//       [--claims-per-bench 100] [--design blocks|lock|both] [--json]
//
// N child processes — one per bench, each with a bench id of its own and
// one connection, as a bench has — claim identities in one major at once
// through the product's `ServerIdentities`. Each is started, connects
// (the schema checked, the bench recorded), says it is ready on a socket
// and waits; when all are ready they are released together. Each claims
// K identities one after another for devices of its own (the minor it
// offers is the one a `sequential` profile's inventory would: one above
// its highest), times each claim, gives its unused blocks back, and
// writes what it got. Then the server is asked: every claim as the
// workers reported it, no minor twice, the blocks by state.
//
// `--design lock` runs the same against the design before server schema 9
// (one `pg_advisory_xact_lock` per major), `both` one after the other, the
// lock design in the next major (the two are not mixed in one major).
//
// `office claims --worker …` is one bench (internal: the options are the
// coordinator's).
import Foundation
import InventorySync
import LocalBus

#if canImport(Glibc)
    import Glibc
#endif

/// What one worker (bench) did.
struct ClaimWorkerResult: Codable {
    var bench: String
    var index: Int
    /// Wall-clock seconds (since 1970) of its first claim's start and its last claim's end.
    var started: Double
    var ended: Double
    /// Each claim's time, in microseconds, in order.
    var latencies: [Int]
    /// The minor each claim got (-1: the claim failed), in order.
    var minors: [Int]
    var errors: Int
    var firstError: String?
    var blocksLeased: Int
    var blocksReturned: Int
}

/// One design's run, as `office claims` reports it.
struct ClaimsRun: Codable {
    var design: String
    var major: Int
    var benches: Int
    var claimsPerBench: Int
    var claims: Int
    var errors: Int
    var seconds: Double
    var claimsPerSecond: Double
    var p50Milliseconds: Double
    var p99Milliseconds: Double
    var maxMilliseconds: Double
    /// Minors handed to two claims of the run (workers' reports).
    var duplicates: Int
    /// Claims a worker reported that the server does not hold as reported.
    var disagreements: Int
    /// Checked on the server: minors of the major claimed twice, addresses claimed twice.
    var serverDuplicateMinors: Int
    var serverDuplicateAddresses: Int
    var serverClaims: Int
    var blocksLeased: Int
    var blocksReturned: Int
    /// The run's blocks on the server afterwards, by state.
    var blocks: [String: Int]
    var loadAverage: String
    var firstError: String?
}

func officeClaims(_ arguments: [String]) async throws -> Never {
    if arguments.first == "--worker" { try await claimWorker(Array(arguments.dropFirst())) }
    var url: String?
    var localServer = false
    var benches = 100
    var major = 4242
    var perBench = 100
    var designs: [ServerIdentities.Design] = [.blocks]
    var json = false
    var rest = arguments[...]
    func value(_ option: String) -> String {
        guard let value = rest.popFirst() else { officeUsage("\(option) needs a value") }
        return value
    }
    func number(_ option: String, _ range: ClosedRange<Int>) -> Int {
        let text = value(option)
        guard let number = Int(text), range.contains(number) else {
            officeUsage("\(option) takes a whole number in \(range.lowerBound)–\(range.upperBound), not '\(text)'")
        }
        return number
    }
    while let option = rest.popFirst() {
        switch option {
        case "--to": url = value(option)
        case "--local-server": localServer = true
        case "--benches": benches = number(option, 1...250)
        case "--major": major = number(option, 0...65534)
        case "--claims-per-bench": perBench = number(option, 1...65535)
        case "--design":
            let text = value(option)
            if text == "both" {
                designs = [.blocks, .lock]
            } else if let design = ServerIdentities.Design(rawValue: text) {
                designs = [design]
            } else {
                officeUsage("--design takes blocks, lock or both, not '\(text)'")
            }
        case "--json": json = true
        default:
            officeUsage(
                "office claims: unknown option '\(option)' (--to URL|--local-server, --benches N, --major M,"
                    + " --claims-per-bench K, --design blocks|lock|both, --json)")
        }
    }
    guard (url == nil) != !localServer else { officeUsage("office claims: give --to URL or --local-server") }
    // A block design's waste is under a block per bench.
    let needed = benches * perBench + (designs.contains(.blocks) ? benches * ServerIdentities.blockSize : 0)
    guard needed <= 65_535 else {
        officeUsage("office claims: \(benches) × \(perBench) claims do not fit in one major (65,535 minors)")
    }
    func log(_ text: String) { FileHandle.standardError.write(Data("… \(text)\n".utf8)) }

    var local: LocalPostgres?
    if localServer {
        // A cluster of its own under $TMPDIR, allowing every worker's
        // connection (PostgreSQL's default is 100).
        log("starting a PostgreSQL server of its own (under \(FileManager.default.temporaryDirectory.path))")
        let server = try await LocalPostgres.create(port: 54_342)
        local = server
        do {
            try await server.start()
            _ = try await server.psql("ALTER SYSTEM SET max_connections = \(max(100, benches + 20))")
            await server.stop()
            try await server.start()
        } catch {
            await server.remove()
            throw error
        }
        url = server.url
    }
    guard let url else { exit(2) }

    var runs: [ClaimsRun] = []
    do {
        for (offset, design) in designs.enumerated() {
            let runMajor = major + offset
            guard runMajor <= 65535 else { officeUsage("office claims: major \(runMajor) is beyond 65535") }
            log("\(design.rawValue): \(benches) benches × \(perBench) claims in major \(runMajor)")
            let run = try await claimsRun(
                url: url, design: design, major: UInt16(runMajor), benches: benches, perBench: perBench, log: log)
            runs.append(run)
        }
    } catch {
        await local?.remove()
        throw error
    }
    await local?.remove()
    if json {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        print(String(decoding: try encoder.encode(runs), as: UTF8.self))
    } else {
        print(
            "identity claims: \(benches) benches (processes) at once, one major, \(perBench) claims each;"
                + " \(PostgresNameOnly.describe(url)); load average \(runs.first?.loadAverage ?? "?")")
        print(
            "design  major  claims  seconds  claims/s  p50 ms  p99 ms  max ms  errors  duplicates  blocks leased/returned"
        )
        for run in runs {
            print(
                [
                    run.design.padding(toLength: 6, withPad: " ", startingAt: 0), String(run.major), String(run.claims),
                    format(run.seconds, 2), format(run.claimsPerSecond, 0), format(run.p50Milliseconds, 1),
                    format(run.p99Milliseconds, 1), format(run.maxMilliseconds, 1), String(run.errors),
                    "\(run.duplicates) (server: \(run.serverDuplicateMinors))",
                    "\(run.blocksLeased)/\(run.blocksReturned)",
                ].joined(separator: "  "))
        }
        for run in runs where !run.blocks.isEmpty {
            print(
                "\(run.design): the run's blocks afterwards: "
                    + run.blocks.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))
        }
        if runs.count == 2, runs[1].claimsPerSecond > 0, runs[0].p99Milliseconds > 0 {
            print(
                "blocks vs lock: \(format(runs[0].claimsPerSecond / runs[1].claimsPerSecond, 1)) × the claims/s,"
                    + " p99 \(format(runs[1].p99Milliseconds / runs[0].p99Milliseconds, 1)) × lower")
        }
    }
    let failed = runs.contains {
        $0.errors > 0 || $0.duplicates > 0 || $0.disagreements > 0 || $0.serverDuplicateMinors > 0
            || $0.serverDuplicateAddresses > 0
    }
    if failed {
        for run in runs where run.firstError != nil { log("\(run.design): first error: \(run.firstError ?? "")") }
        log("FAILED: errors, duplicates or claims the server does not hold as reported (see above)")
        exit(1)
    }
    exit(0)
}

/// A server's name for messages, never with a password.
enum PostgresNameOnly {
    static func describe(_ url: String) -> String {
        ServerIdentities(url: url, benchID: "-").location
    }
}

/// One design: N workers started, released together, their reports and the
/// server's census compared.
func claimsRun(
    url: String, design: ServerIdentities.Design, major: UInt16, benches: Int, perBench: Int,
    log: (String) -> Void
) async throws -> ClaimsRun {
    // A major of its own: its claims and blocks are this run's alone.
    let before = try await ServerIdentities.census(url: url, major: major, addressPrefix: "-", benchPrefix: "-")
    guard before.claimsInMajor == 0, before.freeBlocks == 0 else {
        officeUsage(
            "office claims: major \(major) already holds \(before.claimsInMajor) claims on this server: pick an"
                + " unused one with --major")
    }
    let token = String(format: "%06X", UInt32.random(in: 0...0xFF_FFFF))
    let addressPrefix = "\(token.prefix(2)):\(token.dropFirst(2).prefix(2)):\(token.suffix(2)):"
    let benchPrefix = "claims-\(token)-"
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let executable = try selfExecutable()

    struct Worker {
        let process: ChildProcess
        let socket: Int32
        let output: String
        let errors: String
    }
    var workers: [Worker] = []
    defer {
        for worker in workers {
            close(worker.socket)
            worker.process.terminate()
        }
    }
    for index in 0..<benches {
        var pair: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw LocalBusError("socketpair: \(String(cString: strerror(errno)))")
        }
        let output = directory + "/worker-\(index).json"
        let errors = directory + "/worker-\(index).err"
        let process: ChildProcess
        do {
            process = try ChildProcess(
                executable,
                [
                    "office", "claims", "--worker", "--to", url, "--bench", benchPrefix + String(format: "%03d", index),
                    "--index", String(index), "--address-prefix", addressPrefix, "--major", String(major),
                    "--claims", String(perBench), "--design", design.rawValue, "--handshake",
                ], standardOutput: output, standardError: errors, descriptor: pair[1])
        } catch {
            close(pair[0])
            close(pair[1])
            throw error
        }
        close(pair[1])
        workers.append(Worker(process: process, socket: pair[0], output: output, errors: errors))
    }
    // Every worker connected and waiting: each says so with one byte.
    let readyBy = ContinuousClock.now + .seconds(300)
    for (index, worker) in workers.enumerated() {
        var byte: UInt8 = 0
        guard waitReadable(worker.socket, until: readyBy), read(worker.socket, &byte, 1) == 1 else {
            let stderr = (try? String(contentsOfFile: worker.errors, encoding: .utf8)) ?? ""
            throw LocalBusError(
                "claim worker \(index) did not say it was ready within 300 s (connected to the server):"
                    + " \(stderr.suffix(1000))")
        }
    }
    log("\(benches) workers connected; released together")
    let load = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3)
        .joined(separator: " ")
    var go: UInt8 = UInt8(ascii: "G")
    for worker in workers { _ = write(worker.socket, &go, 1) }
    var results: [ClaimWorkerResult] = []
    for (index, worker) in workers.enumerated() {
        let process = worker.process
        let (status, _) = await onThreadOfItsOwn { process.waitForExit() }
        let text = (try? String(contentsOfFile: worker.output, encoding: .utf8)) ?? ""
        guard status == 0, let result = try? JSONDecoder().decode(ClaimWorkerResult.self, from: Data(text.utf8)) else {
            let stderr = (try? String(contentsOfFile: worker.errors, encoding: .utf8)) ?? ""
            throw LocalBusError("claim worker \(index) failed (wait status \(status)): \(stderr.suffix(1000))")
        }
        results.append(result)
    }
    let census = try await ServerIdentities.census(
        url: url, major: major, addressPrefix: addressPrefix, benchPrefix: benchPrefix)

    var latencies = results.flatMap(\.latencies).sorted()
    if latencies.isEmpty { latencies = [0] }
    func percentile(_ fraction: Double) -> Double {
        let rank = max(0, min(latencies.count - 1, Int((fraction * Double(latencies.count)).rounded(.up)) - 1))
        return Double(latencies[rank]) / 1_000
    }
    var minors: [Int] = []
    var disagreements = 0
    for result in results {
        for (claim, minor) in result.minors.enumerated() where minor >= 0 {
            minors.append(minor)
            if census.claims[claimAddress(addressPrefix, bench: result.index, claim: claim)].map(Int.init) != minor {
                disagreements += 1
            }
        }
    }
    let claims = minors.count
    let seconds = (results.map(\.ended).max() ?? 0) - (results.map(\.started).min() ?? 0)
    return ClaimsRun(
        design: design.rawValue, major: Int(major), benches: benches, claimsPerBench: perBench, claims: claims,
        errors: results.map(\.errors).reduce(0, +), seconds: seconds,
        claimsPerSecond: seconds > 0 ? Double(claims) / seconds : 0, p50Milliseconds: percentile(0.5),
        p99Milliseconds: percentile(0.99), maxMilliseconds: Double(latencies.last ?? 0) / 1_000,
        duplicates: claims - Set(minors).count, disagreements: disagreements + (census.claims.count - claims),
        serverDuplicateMinors: census.duplicateMinors, serverDuplicateAddresses: census.duplicateAddresses,
        serverClaims: census.claims.count, blocksLeased: results.map(\.blocksLeased).reduce(0, +),
        blocksReturned: results.map(\.blocksReturned).reduce(0, +), blocks: census.blocks,
        loadAverage: load ?? "?", firstError: results.compactMap(\.firstError).first)
}

/// The address of a worker's claim: the run's prefix (three octets), the
/// bench, the claim's number.
func claimAddress(_ prefix: String, bench: Int, claim: Int) -> String {
    prefix + String(format: "%02X:%02X:%02X", bench & 0xFF, (claim >> 8) & 0xFF, claim & 0xFF)
}

/// This program's path, to start workers with.
func selfExecutable() throws -> String {
    var buffer = [CChar](repeating: 0, count: 4_096)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard length > 0 else { throw LocalBusError("cannot read /proc/self/exe") }
    return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Waits until `descriptor` has something to read (or its other end
/// closed), or `deadline`.
func waitReadable(_ descriptor: Int32, until deadline: ContinuousClock.Instant) -> Bool {
    while true {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { return false }
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(min(60_000, left.components.seconds * 1_000 + 1))
        let ready = poll(&entry, 1, milliseconds)
        if ready > 0 { return true }
        if ready < 0 && errno != EINTR { return false }
    }
}

/// `office claims --worker`: one bench claiming K identities in a major,
/// one after another, through `ServerIdentities`; its report as JSON on
/// standard output. With `--handshake`: a byte on descriptor 3 once
/// connected, then claims only when a byte comes back.
func claimWorker(_ arguments: [String]) async throws -> Never {
    var options: [String: String] = [:]
    var handshake = false
    var rest = arguments[...]
    while let option = rest.popFirst() {
        if option == "--handshake" {
            handshake = true
            continue
        }
        guard option.hasPrefix("--"), let value = rest.popFirst() else { officeUsage("claim worker: '\(option)'") }
        options[String(option.dropFirst(2))] = value
    }
    guard let url = options["to"], let bench = options["bench"], let prefix = options["address-prefix"],
        let major = options["major"].flatMap({ UInt16($0) }), let count = options["claims"].flatMap({ Int($0) }),
        let design = options["design"].flatMap({ ServerIdentities.Design(rawValue: $0) })
    else { officeUsage("claim worker: --to, --bench, --address-prefix, --major, --claims, --design are needed") }
    let index = options["index"].flatMap { Int($0) } ?? 0
    let identities = ServerIdentities(url: url, benchID: bench, design: design)
    try await identities.connect()
    if handshake {
        var byte = UInt8(ascii: "R")
        guard write(3, &byte, 1) == 1, read(3, &byte, 1) == 1 else { exit(3) }
    }
    var latencies: [Int] = []
    var minors: [Int] = []
    latencies.reserveCapacity(count)
    minors.reserveCapacity(count)
    var errors = 0
    var firstError: String?
    // What a `sequential` profile's inventory offers: one above its highest.
    var highest: UInt16 = 0
    let started = Date().timeIntervalSince1970
    for claim in 0..<count {
        let address = claimAddress(prefix, bench: index, claim: claim)
        let begun = ContinuousClock.now
        do {
            let minor = try await identities.claim(
                address: address, major: major, preferred: highest == 65535 ? 65535 : highest + 1, floor: highest)
            highest = max(highest, minor)
            minors.append(Int(minor))
        } catch {
            errors += 1
            if firstError == nil { firstError = "\(error)" }
            minors.append(-1)
        }
        let elapsed = ContinuousClock.now - begun
        latencies.append(
            Int(elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000))
    }
    let ended = Date().timeIntervalSince1970
    var returned = 0
    if design == .blocks {
        do {
            returned = try await identities.returnBlocks()
        } catch {
            errors += 1
            if firstError == nil { firstError = "returning blocks: \(error)" }
        }
    }
    let result = ClaimWorkerResult(
        bench: bench, index: index, started: started, ended: ended, latencies: latencies, minors: minors,
        errors: errors, firstError: firstError, blocksLeased: identities.blocksLeased, blocksReturned: returned)
    FileHandle.standardOutput.write(try JSONEncoder().encode(result))
    exit(0)
}
