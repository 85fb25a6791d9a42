// beaconbench-bench: benchmarks that print numbers. Run through
// `scripts/bench` (release build). Each scenario starts its own private
// dbus-daemon; nothing touches the machine's buses.
//
//   beaconbench-bench dbus|inventory [--seconds S] [--json FILE]
//   beaconbench-bench inventory-writer PATH   (the crash-safety test's writer)
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
    let bus = try PrivateBus.start()
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

var arguments = Array(CommandLine.arguments.dropFirst())
let scenario = arguments.isEmpty ? "dbus" : arguments.removeFirst()
if scenario == "inventory-writer", let path = arguments.first {
    try await inventoryWriter(path: path)
}
var durationSeconds = 3.0
var jsonPath: String?
while !arguments.isEmpty {
    let option = arguments.removeFirst()
    switch option {
    case "--seconds": durationSeconds = Double(arguments.removeFirst()) ?? durationSeconds
    case "--json": jsonPath = arguments.removeFirst()
    default:
        FileHandle.standardError.write(
            Data("usage: beaconbench-bench dbus|inventory [--seconds S] [--json FILE]\n".utf8))
        exit(1)
    }
}
let results: [Measurement]
switch scenario {
case "dbus": results = try await dbusBenchmark(seconds: durationSeconds)
case "inventory": results = try await inventoryBenchmark()
default:
    FileHandle.standardError.write(Data("error: unknown scenario '\(scenario)' (known: dbus, inventory)\n".utf8))
    exit(1)
}
printTable(results)
if let jsonPath {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    try encoder.encode(results).write(to: URL(fileURLWithPath: jsonPath))
}
