import Foundation
import TestSupport
import Testing

/// The REPL through a pseudo-terminal (Tests/Peers/repl_driver.py types and
/// reads as a person at a terminal would).
@Suite("the REPL on a terminal", .serialized, .timeLimit(.minutes(5)))
struct ReplTests {
    enum ProfileTests {
        static let good = """
            {"description": "x",
             "driving_behaviour": {"cornering_mg": 300, "braking_mg": 300, "acceleration_mg": 300, "duration_ms": 500, "enabled": ["DB"]},
             "requirements": {"minimum_battery_percent": 20, "minimum_firmware": "1.0.7", "calibration_required": false}}
            """
    }

    struct Transcript: Decodable {
        var ok: Bool
        var step: Int
        var status: Int?
        var transcript: String
    }

    /// Types `steps` into `beaconbench --bus … --inventory …` on a pty.
    static func drive(
        _ bench: ConsoleFixture, _ steps: [[String: Any]], arguments: [String] = []
    ) async throws -> Transcript {
        let script = bench.directory + "/script-\(UUID().uuidString).json"
        try JSONSerialization.data(withJSONObject: steps).write(to: URL(fileURLWithPath: script))
        let driver = ConsoleFixture.repository + "/Tests/Peers/repl_driver.py"
        let output = try await runTool(
            "/usr/bin/python3",
            [
                driver, script, "--", builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory",
                bench.inventoryPath,
            ] + arguments, environment: bench.environment, timeout: 600)
        return try JSONDecoder().decode(Transcript.self, from: Data(output.stdout.utf8))
    }

    @Test func completionHistoryCtrlCAndEventsAboveTheTypedLine() async throws {
        try await withNewFleet(count: 3) { bench in
            let first = try await Self.drive(
                bench,
                [
                    ["expect": "]> "],
                    // A command, then a profile name, completed.
                    ["send": "prof\t"], ["expect": "profiles "],
                    ["send": "sh\tv\t"], ["expect": "show van "],
                    ["send": "\n"], ["expect": "cornering     320 mG"], ["expect": "]> "],
                    // Ctrl-C cancels a long scan, not the session.
                    // (Once all three are seen: the prompt then says 3 seen.)
                    ["send": "scan 60s\n"],
                    [
                        "expectAll": [
                            "[NEW] SBeacon C0:FE:00:00:00:01", "[NEW] SBeacon C0:FE:00:00:00:02",
                            "[NEW] SBeacon C0:FE:00:00:00:03",
                        ]
                    ],
                    ["send": "\u{3}"], ["expect": "(stopped early)"], ["expect": "3 seen]> "],
                    // Selectors and MAC endings complete from what was seen.
                    ["send": "sel\t0000000\t\t"], ["expect": "00000002"],
                    ["send": "2\n"], ["expect": "selected 1 device"],
                    // Ctrl-C at the prompt abandons the line.
                    ["send": "half typed", "echo": true], ["send": "\u{3}"], ["expect": "^C"], ["expect": "]> "],
                    ["eof": true],
                ])
            #expect(first.ok, "stopped at step \(first.step): \(first.transcript)")
            #expect(first.status == 0)

            // History survives the session, in a file only its owner reads.
            let history = bench.directory + "/state/beaconbench/history"
            let attributes = try FileManager.default.attributesOfItem(atPath: history)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
            let second = try await Self.drive(
                bench,
                [
                    ["expect": "]> "],
                    ["send": "\u{1B}[A"], ["expect": "select 00000002"],
                    ["send": "\u{1B}[A"], ["expect": "can 60s"],  // readline redraws only what differs
                    ["send": "\u{15}"],
                    ["eof": true],
                ])
            #expect(second.ok, "stopped at step \(second.step): \(second.transcript)")
            #expect(second.status == 0)
        }
    }

    /// The profiles are read at the first line, not before the prompt
    /// (docs/benchmarks.md, "Start-up"); a broken one still ends the
    /// session with the message a batch gets (file, key, rule), status 1.
    @Test func profilesAreReadAtTheFirstLineAndABrokenOneEndsTheSession() async throws {
        try await withNewFleet(count: 1) { bench in
            let directory = bench.directory + "/more-profiles"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory)
            let broken = directory + "/heavy.json"
            try #"""
            {"description": "x",
             "driving_behaviour": {"cornering_mg": 300, "braking_mg": 6000, "acceleration_mg": 300, "duration_ms": 500, "enabled": ["DB"]},
             "requirements": {"minimum_battery_percent": 20, "minimum_firmware": "1.0.7", "calibration_required": false}}
            """#.write(toFile: broken, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: broken)
            let result = try await Self.drive(
                bench,
                [
                    ["expect": "]> "],
                    ["send": "profiles\n"],
                    ["expect": "\(broken): driving_behaviour.braking_mg: 6000 is outside 50–5000 mG"],
                    ["eof": true],
                ], arguments: ["--profiles", directory])
            #expect(result.ok, "stopped at step \(result.step): \(result.transcript)")
            #expect(result.status == 1, "\(result.transcript)")
            // A good one is there at the first line (and Tab completes it).
            try FileManager.default.removeItem(atPath: broken)
            try ProfileTests.good.write(toFile: directory + "/light.json", atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: directory + "/light.json")
            let good = try await Self.drive(
                bench,
                [
                    ["expect": "]> "],
                    ["send": "profiles show lig\t"], ["expect": "show light "],
                    ["send": "\n"], ["expect": "cornering     300 mG"], ["expect": "]> "],
                    ["eof": true],
                ], arguments: ["--profiles", directory])
            #expect(good.ok, "stopped at step \(good.step): \(good.transcript)")
            #expect(good.status == 0)
        }
    }

    @Test func aBeaconFoundInTheBackgroundIsAnnouncedAboveTheTypedLine() async throws {
        try await withNewFleet(count: 3) { bench in
            // The third beacon comes into range only while the operator types.
            let update = [
                "busctl", "--address=\(bench.busAddress)", "call", "org.beaconbench.Simulator",
                "/org/beaconbench/Simulator", "org.beaconbench.Simulator1", "Update", "ss", "C0:FE:00:00:00:03",
            ]
            _ = try await runTool(update[0], Array(update.dropFirst()) + ["{\"inRange\": false}"])
            let steps: [[String: Any]] = [
                ["expect": "]> "],
                ["send": "scan on\n"], ["expect": "background scan on"],
                ["expect": "[NEW] SBeacon C0:FE:00:00:00:02"], ["expect": "]> "],
                ["send": "inventory li", "echo": true],
                ["run": update + ["{\"inRange\": true}"]],
                ["expect": "[NEW] SBeacon C0:FE:00:00:00:03"],
                // The prompt and the half-typed line, drawn again below the event.
                ["expect": "]> inventory li"],
                ["send": "st\n"], ["expect": "in \(bench.inventoryPath)"],
                ["send": "scan off\n"], ["expect": "background scan off"],
                ["eof": true],
            ]
            let session = try await Self.drive(bench, steps)
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            #expect(session.status == 0)
        }
    }
}
