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

    static func stop(_ simulator: SimulatorProcess) { simulator.stop() }

    static func controlReport(_ simulator: SimulatorProcess, _ address: String) async throws -> SimulatorControl.Report
    {
        let connection = try await BusConnection.connect(.address(simulator.bus.address))
        defer { Task { await connection.close() } }
        let reply = try await connection.call(
            SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Beacon",
            [.string(address)])
        return try JSONDecoder().decode(SimulatorControl.Report.self, from: Data((reply.body[0].string ?? "").utf8))
    }

    @Test func readyLineHelpUsageErrorsAndACleanExit() async throws {
        let simulator = try await Self.startSimulator(["--count", "4", "--adapters", "2"])
        #expect(simulator.readyLine == "ready bus=\(simulator.bus.address) adapters=2 beacons=4")
        // A generous grace: on a loaded machine (the whole suite at once) the
        // way out can take seconds; it must still be a clean exit 0.
        let status = await simulator.process.terminateReportingStatus(grace: .seconds(30))
        #expect(status == 0)
        await simulator.bus.stop()

        let help = try await runTool(builtProduct("beaconbench-sim"), ["--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("--latency none|realistic"))
        let bad = try await runTool(builtProduct("beaconbench-sim"), ["--latency", "fast"])
        #expect(bad.status == 1)
        #expect(bad.stderr.contains("error: --latency is none or realistic, not 'fast'"))
    }

    @Test func bluetoothctlScansConnectsListsAndReadsTheBattery() async throws {
        let simulator = try await Self.startSimulator(["--count", "2", "--seed", "11"])
        defer { Self.stop(simulator) }
        // Scans of 2 s until both are listed (on a loaded machine
        // bluetoothctl's start-up can take most of one scan).
        var addresses: [String] = []
        for _ in 0..<5 where addresses.count < 2 {
            let scan = try await runTool(
                "bluetoothctl", ["--timeout", "2", "scan", "on"], environment: simulator.bus.clientEnvironment,
                timeout: 30)
            #expect(scan.stdout.contains("Discovery started"))
            let devices = try await runTool(
                "bluetoothctl", ["devices"], environment: simulator.bus.clientEnvironment, timeout: 30)
            addresses = devices.stdout.split(separator: "\n").compactMap { line -> String? in
                let fields = line.split(separator: " ")
                return fields.count >= 3 && fields[0] == "Device" && fields[2] == "SBeacon" ? String(fields[1]) : nil
            }
        }
        #expect(addresses.count == 2)
        let address = try #require(addresses.first)
        let script = """
            (echo "connect \(address)"; sleep 2; echo "menu gatt"; echo "list-attributes \(address)"; sleep 1;
             echo "select-attribute 00002a19-0000-1000-8000-00805f9b34fb"; sleep 1; echo "read"; sleep 1;
             echo "back"; echo "disconnect \(address)"; sleep 1; echo "quit") | bluetoothctl
            """
        let session = try await runTool(
            "/bin/sh", ["-c", script], environment: simulator.bus.clientEnvironment, timeout: 60)
        let text = session.stdout.replacingOccurrences(of: "\u{1B}[K", with: "")
            .replacingOccurrences(of: "\u{1B}\\[[0-9;]*m", with: "", options: .regularExpression)
        #expect(text.contains("Connection successful"))
        #expect(text.contains("Battery Level"))
        #expect(text.contains("53420201-6561-636f-6e00-000000000000"))
        let battery = try await Self.controlReport(simulator, address).battery
        let hex = String(format: "%02x", battery)
        #expect(text.contains("Value:"))
        // bluetoothctl prints the value as a hex dump under "Value:".
        let lines = text.split(separator: "\n")
        let valueAt = try #require(lines.firstIndex { $0.contains("Value:") })
        try #require(valueAt + 1 < lines.count, "no hex dump after Value:")
        #expect(lines[valueAt + 1].contains("  \(hex) "), "\(lines[valueAt...].prefix(2))")
        #expect(text.contains("Successful disconnected"))
    }

    @Test func bleakScansConnectsReadsWritesAndIsNotified() async throws {
        let simulator = try await Self.startSimulator(["--count", "3", "--seed", "5"])
        defer { Self.stop(simulator) }
        let run = try await runTool(
            "python3", ["\(Self.peers)/bleak_client.py"], environment: simulator.bus.clientEnvironment, timeout: 120)
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
