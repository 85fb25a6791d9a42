import Foundation
import LocalBus
import TestSupport
import Testing

/// beaconbench against a bluetoothd that lies (Tests/Peers/hostile_bluez.py):
/// wrong types, missing properties, a 1 MiB advert, 5,000 junk objects, a
/// Connect with the wrong reply, one with no reply, a device vanishing
/// mid-call, half a GATT tree. Every command ends, with an error that says
/// what went wrong, and nothing crashes.
@Suite("a hostile bluetoothd", .timeLimit(.minutes(10)))
struct HostileBluezTests {
    @Test func everyCommandEndsWithAReason() async throws {
        try await withResource({ try await PrivateBus.start() }, stop: { await $0.stop() }) { bus in
            let output = bus.directory + "/peer.out"
            try await withResource(
                {
                    try ChildProcess(
                        "/usr/bin/python3", [ConsoleFixture.repository + "/Tests/Peers/hostile_bluez.py", bus.address],
                        standardOutput: output)
                }, stop: { await $0.terminate() }
            ) { peer in
                try await waitUntil("the hostile bluetoothd's ready line") {
                    (try? String(contentsOfFile: output, encoding: .utf8))?.contains("ready") == true
                }
                try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { fixture in
                    func run(_ arguments: [String]) async throws -> ToolOutput {
                        try await runTool(
                            builtProduct("beaconbench"),
                            ["--bus", bus.address, "--inventory", fixture.inventoryPath] + arguments,
                            environment: fixture.environment, timeout: 240)
                    }
                    // Listed first: the vanishing device is gone once its `info` has run.
                    let listed = try await run(["--json", "devices"])
                    #expect(listed.status == 0, "\(listed.stderr)")
                    // Only the four that advertise the SBeacon UUID; the rest are ignored.
                    #expect(ConsoleFixture.jsonLines(listed.stdout).count == 4, "\(listed.stdout)")

                    async let scan = run(["scan", "1s"])
                    async let wrongReply = run(["info", "C0:00:00:00:00:03"])
                    async let noReply = run(["info", "C0:00:00:00:00:04"])
                    async let vanishing = run(["info", "C0:00:00:00:00:05"])
                    async let halfTree = run(["info", "C0:00:00:00:00:06"])
                    async let notSBeacon = run(["info", "C0:00:00:00:00:02"])

                    let scanned = try await scan
                    #expect(scanned.status == 3, "\(scanned.stderr)")
                    #expect(scanned.stderr.contains("error:"))
                    for (name, result, reason) in [
                        ("wrong reply", try await wrongReply, "connect"),
                        ("no reply", try await noReply, "no answer within"),
                        ("vanishing", try await vanishing, "gone"),
                        ("half a GATT tree", try await halfTree, "is missing"),
                        ("not an SBeacon", try await notSBeacon, "connect"),
                    ] {
                        #expect(result.status == 2, "\(name): \(result.stderr)")
                        #expect(result.stdout.contains(reason), "\(name): \(result.stdout)")
                    }
                    #expect(peer.isRunning)
                }
            }
        }
    }
}
