import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus
import SBeaconProtocol
import TestSupport
import Testing

/// bluetoothd restarting under a fleet run, and beaconbench killed with
/// SIGKILL at random moments: the inventory stays whole and true.
@Suite("crashes and restarts", .serialized)
struct CrashTests {
    /// A radio slow enough that a run of a few dozen beacons takes seconds.
    static let brisk = [
        "--connect-ms", "80", "--resolve-ms", "40", "--att-ms", "8", "--calibration-ms", "300", "--advert-ms", "200",
    ]

    static func provisionable(_ report: SimulatorControl.Report) -> Bool {
        report.battery >= 30 && report.firmware == "1.0.8" && !report.moving
    }

    /// Every beacon that can be provisioned is, and the inventory says what it holds.
    static func converged(_ bench: ConsoleFixture, _ label: String) async throws {
        let truth = try await bench.truth()
        let records = try await Inventory(path: bench.inventoryPath).devicesByAddress()
        try FaultMatrixTests.inventoryClaimsOnlyTheTruth(truth, records, label)
        for (address, report) in truth where provisionable(report) {
            #expect(FaultMatrixTests.held(report) == EndToEndTests.car, "\(label): \(address) holds \(report.config)")
            #expect(records[address]?.profile == "car", "\(label): \(address)")
            #expect(records[address]?.timeOffset == report.timeOffset, "\(label): \(address)")
        }
    }

    @Test func bluetoothdRestartingMidRunIsSurvived() async throws {
        let simulator = ["--count", "30", "--fresh", "--seed", "31"] + Self.brisk
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            async let run = bench.beaconbench(
                [
                    "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                    "expect=\(bench.beacons)",
                ], timeout: 300)
            // Restart once the run is writing beacons.
            let connection = try await BusConnection.connect(.address(bench.busAddress))
            var writing = false
            for _ in 0..<400 where !writing {
                try await Task.sleep(for: .milliseconds(25))
                writing = try await bench.truth().values.contains { !$0.factoryDefault }
            }
            #expect(writing)
            _ = try await connection.call(
                SimulatorControl.busName, SimulatorControl.path, SimulatorControl.interfaceName, "Restart", [])
            await connection.close()
            let output = try await run
            #expect(output.status == 0 || output.status == 2, "\(output.stderr.suffix(3000))")
            // Only a beacon that cannot be calibrated (it moves) may fail.
            for line in ConsoleFixture.jsonLines(output.stdout, kind: "recap") where (line["failed"] as? Int ?? 0) > 0 {
                if !FaultMatrixTests.isPermanent(line["reason"] as? String ?? "") {
                    Issue.record("failed after the restart: \(line)")
                }
            }
            try await Self.converged(bench, "restart")
        }
    }

    @Test func killedAt20RandomMomentsTheInventoryStaysWholeAndTrue() async throws {
        let simulator = ["--count", "50", "--fresh", "--seed", "41"] + Self.brisk
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            var random = SystemRandomNumberGenerator()
            let arguments = [
                "--bus", bench.busAddress, "--inventory", bench.inventoryPath, "run",
                bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)",
            ]
            var killedRuns = 0
            for kill in 0..<20 {
                let child = try ChildProcess(builtProduct("beaconbench"), arguments)
                if kill % 2 == 1 {
                    // Every other kill once the run has begun (on a loaded
                    // machine start-up and the scan can take most of 2.5 s).
                    let deadline = ContinuousClock.now + .seconds(20)
                    while ContinuousClock.now < deadline {
                        // Read-only, and only once the child has made the file.
                        guard FileManager.default.fileExists(atPath: bench.inventoryPath) else {
                            try await Task.sleep(for: .milliseconds(20))
                            continue
                        }
                        let begun = try? await Inventory(path: bench.inventoryPath, readOnly: true).query(
                            "SELECT count(*) FROM runs WHERE pid = ?", [.integer(Int64(child.pid))]
                        ).first?.first?.integer
                        if (begun ?? 0) > 0 { break }
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    try await Task.sleep(for: .milliseconds(Int.random(in: 0...1500, using: &random)))
                } else {
                    try await Task.sleep(for: .milliseconds(Int.random(in: 300...2500, using: &random)))
                }
                Glibc.kill(child.pid, SIGKILL)
                let (status, _) = await child.waitForExit()
                let wasKilled = status & 0x7f == SIGKILL

                // Whole: SQLite's own check.
                let check = try await runTool("/usr/bin/sqlite3", [bench.inventoryPath, "PRAGMA integrity_check"])
                #expect(check.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "ok", "kill \(kill)")
                // The next start marks the killed run and its steps interrupted.
                let inventory = try Inventory(path: bench.inventoryPath)
                let running = try await inventory.query(
                    "SELECT count(*) FROM outcomes WHERE status = 'running'"
                ).first?.first?.integer
                #expect(running == 0, "kill \(kill): steps left running")
                // (Killed during its scan, a run has no row yet.)
                let itsRun = try await inventory.query(
                    "SELECT status FROM runs WHERE pid = ?", [.integer(Int64(child.pid))])
                // A kill can land after the run recorded its end, while the
                // process was closing (fast runs): it finished, truly.
                if wasKilled, let status = itsRun.first?.first?.text, status != "finished" {
                    #expect(status == "interrupted", "kill \(kill)")
                    killedRuns += 1
                }
                // True: whatever it records, the beacons hold.
                let records = try await inventory.devicesByAddress()
                try FaultMatrixTests.inventoryClaimsOnlyTheTruth(try await bench.truth(), records, "kill \(kill)")
            }
            #expect(killedRuns >= 10, "too few runs were killed while running: \(killedRuns)")
            let interrupted =
                try await Inventory(path: bench.inventoryPath).query(
                    "SELECT count(*) FROM outcomes WHERE status = 'interrupted'"
                ).first?.first?.integer ?? 0
            #expect(interrupted > 0)

            // Runs left alone finish the job: as after any failure, a rerun
            // picks up what is left (on a loaded machine one run once left
            // a beacon unprovisioned), so up to three.
            for _ in 0..<3 {
                let final = try await bench.beaconbench(
                    [
                        "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                        "expect=\(bench.beacons)",
                    ], timeout: 300)
                #expect(final.status == 0 || final.status == 2, "\(final.stderr.suffix(2000))")
                let truth = try await bench.truth()
                if truth.values.allSatisfy({ !Self.provisionable($0) || FaultMatrixTests.held($0) == EndToEndTests.car }
                ) {
                    break
                }
            }
            try await Self.converged(bench, "after the kills")
        }
    }
}
