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
@Suite("crashes and restarts", .serialized, .exclusive(.heavyLoad), .timeLimit(.minutes(10)))
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
            // Restart while the run is writing beacons: its first write that
            // lands is held at the simulator, bluetoothd restarts, the write
            // goes on.
            try await bench.withControl {
                try await $0.setFaultPlan(Self.hold("restart", at: "write.landed", nth: 1))
            }
            async let run = bench.beaconbench(
                [
                    "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                    "expect=\(bench.beacons)",
                ], timeout: 300)
            try await bench.waitFor(#"{"held": "restart"}"#)
            try await Self.restartAndRelease(bench, "restart")
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

    /// A fault plan whose one rule holds the `nth` occurrence at `hook` of
    /// whichever beacon gets there first (once) until `Release(name)`.
    static func hold(_ name: String, at hook: String, nth: Int) -> String {
        #"{"rules":[{"id":"\#(name)","hook":"\#(hook)","target":{"any":true},"trigger":{"nth":\#(nth)},"times":1,"#
            + #""action":{"kind":"stall","until":"released","hold":"\#(name)"}}]}"#
    }

    static func restartAndRelease(_ bench: ConsoleFixture, _ hold: String) async throws {
        try await bench.withControl { control in
            try await control.control("Restart")
            #expect(try await control.release(hold) == 1)
        }
    }

    /// Twenty runs killed with SIGKILL: one in four at a random moment
    /// (start-up, its scan, or work: what is asserted holds for any moment),
    /// the others while a step is held at the simulator — a Connect just
    /// asked for, an ATT write before the beacon sees it, or one the beacon
    /// applied before its reply — so each of those is killed mid-run by
    /// construction and must be found `interrupted`. (The count of runs
    /// killed while running used to depend on random sleeps: on a fast
    /// machine a later run, with little left to do, had finished before its
    /// kill; on a slow one the kill came during start-up or the scan.)
    @Test func killedAt20RandomMomentsTheInventoryStaysWholeAndTrue() async throws {
        let simulator = ["--count", "50", "--fresh", "--seed", "41"] + Self.brisk
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            var random = SystemRandomNumberGenerator()
            let arguments = [
                "--bus", bench.busAddress, "--inventory", bench.inventoryPath, "run",
                bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)",
            ]
            var killedRuns = 0
            var heldKills = 0
            let hooks = ["connect.requested", "att.write", "write.landed"]
            for kill in 0..<20 {
                let hook = kill % 4 == 0 ? nil : hooks[(kill % 4) - 1]
                let name = "kill-\(kill)"
                try await bench.withControl { control in
                    if let hook {
                        try await control.setFaultPlan(
                            // (Counted per beacon: a beacon is asked to connect once
                            // a run, and written several times — but late in the
                            // series, after earlier killed runs configured most of
                            // the fleet, a beacon may have a single write left: a
                            // landed write is held at the first, an ATT write at
                            // the first or second, so that some beacon always gets
                            // there. A third landed write never came in two runs
                            // of this series on a quiet machine.)
                            Self.hold(
                                name, at: hook,
                                nth: hook == "att.write" ? Int.random(in: 1...2, using: &random) : 1))
                    } else {
                        try await control.setFaultPlan(#"{"rules":[]}"#)
                    }
                }
                let child = try ChildProcess(builtProduct("beaconbench"), arguments)
                if let hook {
                    do {
                        try await bench.waitFor(#"{"held": "\#(name)"}"#)
                    } catch {
                        child.send(SIGKILL)
                        _ = await child.waitForExit()
                        throw TestSupportError("kill \(kill) at \(hook): \(error)")
                    }
                    heldKills += 1
                } else {
                    // A random moment: the outcome asserted does not depend on it.
                    try await Task.sleep(for: .milliseconds(Int.random(in: 0...1500, using: &random)))
                }
                child.send(SIGKILL)
                let (status, _) = await child.waitForExit()
                let wasKilled = status & 0x7f == SIGKILL
                if hook != nil {
                    #expect(wasKilled, "kill \(kill) at \(hook ?? ""): wait status \(status)")
                    // The held step goes on, its client gone.
                    _ = try await bench.withControl { try await $0.release(name) }
                }

                // Whole: SQLite's own check.
                let check = try await runTool("/usr/bin/sqlite3", [bench.inventoryPath, "PRAGMA integrity_check"])
                #expect(check.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "ok", "kill \(kill)")
                // The next start marks the killed run and its steps interrupted.
                let inventory = try Inventory(path: bench.inventoryPath)
                let running = try await inventory.query(
                    "SELECT count(*) FROM outcomes WHERE status = 'running'"
                ).first?.first?.integer
                #expect(running == 0, "kill \(kill): steps left running")
                // Every change committed is in the ledger, and nothing else.
                let ledger = try await inventory.verifyLedger()
                #expect(ledger.ok, "kill \(kill): \(ledger.findings.prefix(3))")
                // (Killed during its scan, a run has no row yet.)
                let itsRun = try await inventory.query(
                    "SELECT status FROM runs WHERE pid = ?", [.integer(Int64(child.pid))])
                // A kill can land after the run recorded its end, while the
                // process was closing (fast runs): it finished, truly.
                if hook != nil {
                    #expect(itsRun.first?.first?.text == "interrupted", "kill \(kill) at \(hook ?? ""): \(itsRun)")
                }
                // Each device's steps are found once in a run, and at most
                // one of them in flight (the step held, or the one begun
                // with its predecessor's end); the held step is among them.
                if let runID = try await inventory.query(
                    "SELECT id FROM runs WHERE pid = ?", [.integer(Int64(child.pid))]
                ).first?.first?.integer {
                    let twice = try await inventory.query(
                        "SELECT device, step, count(*) FROM outcomes WHERE run_id = ? GROUP BY 1, 2 HAVING count(*) > 1",
                        [.integer(runID)])
                    #expect(twice.isEmpty, "kill \(kill): steps recorded twice: \(twice)")
                    let inFlight = try await inventory.query(
                        "SELECT device, count(*) FROM outcomes WHERE run_id = ? AND status = 'interrupted' GROUP BY 1 HAVING count(*) > 1",
                        [.integer(runID)])
                    #expect(inFlight.isEmpty, "kill \(kill): devices with two steps in flight: \(inFlight)")
                    if let hook {
                        let heldSteps =
                            try await inventory.query(
                                "SELECT count(*) FROM outcomes WHERE run_id = ? AND status = 'interrupted' AND (step = 'connect') = ?",
                                [.integer(runID), .integer(hook == "connect.requested" ? 1 : 0)]
                            ).first?.first?.integer ?? 0
                        #expect(heldSteps >= 1, "kill \(kill) at \(hook): the held step is not found interrupted")
                    }
                }
                if wasKilled, let status = itsRun.first?.first?.text, status != "finished" {
                    #expect(status == "interrupted", "kill \(kill)")
                    killedRuns += 1
                }
                // True: whatever it records, the beacons hold.
                let records = try await inventory.devicesByAddress()
                try FaultMatrixTests.inventoryClaimsOnlyTheTruth(try await bench.truth(), records, "kill \(kill)")
            }
            #expect(killedRuns >= heldKills, "runs killed while running: \(killedRuns) of \(heldKills) held")
            print("killed while running: \(killedRuns) of 20 (\(heldKills) at a held step)")
            let interrupted =
                try await Inventory(path: bench.inventoryPath).query(
                    "SELECT count(*) FROM outcomes WHERE status = 'interrupted'"
                ).first?.first?.integer ?? 0
            #expect(interrupted > 0)

            try await bench.withControl { try await $0.setFaultPlan(#"{"rules":[]}"#) }
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
