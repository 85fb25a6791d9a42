import BeaconSimulator
import DBusBinding
import Foundation
import TestSupport
import Testing

/// The built `beaconbench-sim` against stock BlueZ clients: bluetoothctl
/// from Debian's bluez, and a bleak script, pointed at a private bus through
/// DBUS_SYSTEM_BUS_ADDRESS.
@Suite("beaconbench-sim with bluetoothctl and bleak", .timeLimit(.minutes(5)))
struct StockClientTests {
    static let peers = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Peers").path

    /// The built simulator on a private bus (LocalBus' launcher, as `beaconbench --sim` uses it).
    static func startSimulator(_ arguments: [String]) async throws -> SimulatorProcess {
        try await SimulatorProcess.start(executable: builtProduct("beaconbench-sim"), arguments: arguments)
    }

    /// Runs `body` with the built simulator on a private bus, and always
    /// stops both (on a thread of their own: stopping waits for the exit).
    static func withSimulator(_ arguments: [String], _ body: (SimulatorProcess) async throws -> Void) async throws {
        try await withResource({ try await startSimulator(arguments) }, stop: { await $0.stop() }, body)
    }

    static func controlReport(_ simulator: SimulatorProcess, _ address: String) async throws -> SimulatorControl.Report
    {
        let connection = try await BusConnection.connect(.address(simulator.bus.address))
        do {
            let report = try await SimulatorControl.Client(connection).beacon(address)
            await connection.close()
            return report
        } catch {
            await connection.close()
            throw error
        }
    }

    @Test func readyLineHelpUsageErrorsAndACleanExit() async throws {
        let simulator = try await Self.startSimulator(["--count", "4", "--adapters", "2"])
        #expect(simulator.readyLine == "ready bus=\(simulator.bus.address) adapters=2 beacons=4")
        // SIGTERM the moment the ready line is read: a clean exit 0. (The
        // grace is a stall guard; a signal in that moment was once lost,
        // see SimulatorMain.Endings.)
        let status = await simulator.process.terminateReportingStatus(grace: .seconds(120))
        #expect(status == 0)
        await simulator.bus.stop()

        let help = try await runTool(builtProduct("beaconbench-sim"), ["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("--latency none|realistic"))
        let bad = try await runTool(builtProduct("beaconbench-sim"), ["--latency", "fast"])
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("error: --latency is none or realistic, not 'fast'"))
    }

    /// bluetoothctl in a pseudo-terminal (Tests/Peers/repl_driver.py), as a
    /// person types: each command once what it waits for has been printed
    /// (the agent registered, both beacons, "Connection successful",
    /// "Value:"), each wait capped at minutes. (It was fed by a pipe behind
    /// `sleep 2` and `sleep 1`, after up to five 2-s scans.)
    @Test func bluetoothctlScansConnectsListsAndReadsTheBattery() async throws {
        try await Self.withSimulator(["--count", "2", "--seed", "11"]) { simulator in
            let connection = try await BusConnection.connect(.address(simulator.bus.address))
            let fleet = try await SimulatorControl.Client(connection).beacons().map(\.address)
            await connection.close()
            try #require(fleet.count == 2)
            let address = fleet[0]
            let cap = 120
            let steps: [[String: Any]] = [
                ["expect": "Agent registered", "timeout": cap],
                ["send": "scan on\n"], ["expect": "Discovery started", "timeout": cap],
                // Each beacon listed by `devices`, or announced ([NEW]) later:
                // either way after the command.
                ["send": "devices\n"], ["expect": "Device \(fleet[0]) SBeacon", "timeout": cap],
                ["send": "devices\n"], ["expect": "Device \(fleet[1]) SBeacon", "timeout": cap],
                // The simulator resolves services before Connect returns.
                ["send": "connect \(address)\n"], ["expect": "Connection successful", "timeout": cap],
                ["send": "menu gatt\n"], ["send": "list-attributes \(address)\n"],
                ["send": "select-attribute 00002a19-0000-1000-8000-00805f9b34fb\n"],
                ["send": "read\n"], ["expect": "Value:", "timeout": cap],
                ["send": "back\n"], ["send": "disconnect \(address)\n"],
                ["expect": "Successful disconnected", "timeout": cap],
                ["send": "quit\n"],
            ]
            let script = simulator.bus.directory + "/bluetoothctl.json"
            try JSONSerialization.data(withJSONObject: steps).write(to: URL(fileURLWithPath: script))
            let run = try await runTool(
                "python3", ["\(Self.peers)/repl_driver.py", script, "--", "/usr/bin/bluetoothctl"],
                environment: simulator.bus.clientEnvironment, timeout: 900)
            let result = try #require(
                try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stderr)")
            let transcript = result["transcript"] as? String ?? ""
            let text = transcript.replacingOccurrences(of: "\u{1B}[K", with: "")
                .replacingOccurrences(of: "\u{1B}\\[[0-9;]*m", with: "", options: .regularExpression)
                .replacingOccurrences(of: "\r", with: "")
            #expect(result["ok"] as? Bool == true, "stopped at step \(result["step"] ?? "?"): \(text.suffix(2000))")
            #expect(text.contains("Connection successful"))
            #expect(text.contains("ServicesResolved: yes"))
            #expect(text.contains("Battery Level"))
            #expect(text.contains("53420201-6561-636f-6e00-000000000000"))
            let battery = try await Self.controlReport(simulator, address).battery
            let hex = String(format: "%02x", battery)
            // bluetoothctl prints the value as a hex dump under "Value:".
            let lines = text.split(separator: "\n")
            let valueAt = try #require(lines.firstIndex { $0.contains("Value:") })
            try #require(valueAt + 1 < lines.count, "no hex dump after Value:")
            #expect(lines[valueAt + 1].contains("  \(hex) "), "\(lines[valueAt...].prefix(2))")
            #expect(text.contains("Successful disconnected"))
        }
    }

    @Test func bleakScansConnectsReadsWritesAndIsNotified() async throws {
        try await Self.withSimulator(["--count", "3", "--seed", "5"]) { simulator in
            let run = try await runTool(
                "python3", ["\(Self.peers)/bleak_client.py"], environment: simulator.bus.clientEnvironment, timeout: 120
            )
            #expect(run.status == 0, "\(run.stderr)")
            var lines: [String: String] = [:]
            for line in run.stdout.split(separator: "\n") {
                let parts = line.split(separator: " ", maxSplits: 1)
                if parts.count == 2 { lines[String(parts[0])] = String(parts[1]) }
            }
            #expect(lines["beacons"] == "3")
            let address = try #require(lines["address"])
            let report = try await Self.controlReport(simulator, address)
            #expect(lines["firmware"] == report.firmware)
            #expect(lines["config"] == "c201f4015e012c010700")
            let config = report.config
            #expect(
                [config.cornering, config.braking, config.acceleration, config.duration, config.enable] == [
                    450, 500, 350, 300, 7,
                ])
            #expect(lines["notification"]?.hasPrefix(report.moving ? "8001" : "8000") == true)
        }
    }
}
