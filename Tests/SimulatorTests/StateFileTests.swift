import BeaconSimulator
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing

@Suite("Fleet files and state kept across runs of the built simulator", .timeLimit(.minutes(5)))
struct StateFileTests {
    @Test func aSecondRunSeesWhatTheFirstOneWrote() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-state-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let state = directory + "/fleet.state"

        let first = try await StockClientTests.startSimulator(["--count", "2", "--seed", "3", "--state", state])
        let connection = try await BusConnection.connect(.address(first.bus.address))
        let control = SimulatorControl.Client(connection)
        let address = try #require(try await control.beacons().first?.address)
        try await control.update(address, #"{"battery": 12, "firmware": "1.0.6"}"#)
        await connection.close()
        await #expect(first.process.terminateReportingStatus() == 0)
        await first.bus.stop()
        let attributes = try FileManager.default.attributesOfItem(atPath: state)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)

        // A different --count: the state file is the fleet now.
        try await StockClientTests.withSimulator(["--count", "9", "--state", state]) { second in
            #expect(second.readyLine.hasSuffix("beacons=2"))
            let report = try await StockClientTests.controlReport(second, address)
            #expect(report.battery == 12)
            #expect(report.firmware == "1.0.6")
        }
    }

    @Test func fleetFilesAreReadAndBadOnesNamed() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-fleet-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let good = directory + "/good.json"
        try #"""
        [{"address": "C1:00:00:00:00:01", "firmware": "1.0.7", "battery": 40, "calibrated": true},
         {"address": "C1:00:00:00:00:02", "factoryDefault": true, "moving": true,
          "config": {"cornering": 300, "braking": 300, "acceleration": 300, "duration": 500, "enable": 1}}]
        """#.write(toFile: good, atomically: true, encoding: .utf8)
        let fleet = try FleetFile.load(good, now: 1_800_000_000_000)
        #expect(fleet.map(\.address) == ["C1:00:00:00:00:01", "C1:00:00:00:00:02"])
        #expect(fleet[0].calibration.calibrated && fleet[0].firmware.description == "1.0.7")
        #expect(fleet[1].moving && fleet[1].factoryDefault)

        let cases: [(String, String)] = [
            (#"[{"address": "nope"}]"#, "beacon 1: address 'nope' is not six hex octets"),
            (
                #"[{"address": "C1:00:00:00:00:01"}, {"address": "c1:00:00:00:00:01"}]"#,
                "beacon 2: address c1:00:00:00:00:01 appears twice"
            ),
            (#"[{"address": "C1:00:00:00:00:01", "battery": 120}]"#, "beacon 1: battery 120.0 is outside 0–100"),
            (
                #"[{"address": "C1:00:00:00:00:01", "config": {"cornering": 1, "braking": 300, "acceleration": 300, "duration": 500, "enable": 1}}]"#,
                "beacon 1: config: cornering 1 mG is outside 50–5000 mG"
            ),
            (#"[{"serial": "x"}]"#, "beacon 1: 'address' is missing"),
        ]
        for (index, (text, message)) in cases.enumerated() {
            let path = directory + "/bad\(index).json"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            let error = #expect(throws: FleetFileError.self) { try FleetFile.load(path, now: 0) }
            #expect(error?.description == "\(path): \(message)")
        }
        let run = try await runTool(
            builtProduct("beaconbench-sim"), ["--bus", "unix:path=/nonexistent", "--fleet", directory + "/bad0.json"])
        #expect(run.status == 1)
        #expect(run.stderr.contains("bad0.json: beacon 1: address 'nope'"))
    }
}
