import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus
import SBeaconProtocol
import TestSupport
import Testing

/// Outcomes that can be trusted, judged by the simulator's ground truth:
/// the profile's identity, unique identities with several processes on one
/// inventory, retries recorded once, reads recorded on a failing path,
/// links left by a killed process, a full disk.
@Suite("outcomes that can be trusted", .serialized, .timeLimit(.minutes(10)))
struct TrustedOutcomesTests {
    static func rows(_ path: String, _ sql: String) async throws -> [String] {
        try await runTool("/usr/bin/sqlite3", [path, sql]).stdout.split(separator: "\n").map(String.init)
    }

    /// Minors under `major` among the beacons: unique.
    static func expectUniqueIdentities(_ truth: [String: SimulatorControl.Report], _ label: String) {
        let held = truth.values.filter { !$0.factoryDefault }.map { "\($0.major).\($0.minor)" }
        #expect(Set(held).count == held.count, "\(label): duplicate identities \(held.sorted())")
    }

    @Test(arguments: [("van", 200), ("truck", 300), ("bus", 400), ("motorcycle", 500), ("car", 100)])
    func eachProfilesIdentityIsAppliedAndAudited(profile: String, major: Int) async throws {
        try await withNewFleet(count: 5) { bench in
            let run = try await bench.beaconbench(
                [
                    "--json", "run", bench.batch("provision-new.batch"), "--set", "profile=\(profile)", "--set",
                    "scan=120s", "--set", "expect=\(bench.beacons)",
                ])
            #expect(run.status == 0, "\(run.stderr.suffix(2000))")
            let truth = try await bench.truth()
            let provisioned = truth.values.filter { !$0.factoryDefault }
            #expect(provisioned.count == 3)
            #expect(provisioned.allSatisfy { Int($0.major) == major }, "\(provisioned.map(\.major))")
            Self.expectUniqueIdentities(truth, profile)
            let meant = try await Self.rows(
                bench.inventoryPath, "SELECT device, major, minor, source, profile FROM identities ORDER BY device")
            #expect(meant.count == 3)
            for line in meant {
                let fields = line.split(separator: "|").map(String.init)
                let report = try #require(truth[fields[0]])
                #expect(fields[1] == String(report.major) && fields[2] == String(report.minor), "\(line)")
                #expect(fields[3] == "profile" && fields[4] == profile)
            }
            // The audit agrees; `--set major=` still overrides, and says so.
            let audit = try await bench.beaconbench(["audit"])
            #expect(audit.status == 2)  // the two that could not be provisioned
            #expect(!audit.stdout.contains("identity-differs"), "\(audit.stdout)")
        }
    }

    @Test func anIdentityChangedBehindTheToolsBackIsAnAuditFinding() async throws {
        try await withNewFleet(count: 3) { bench in
            let run = try await bench.beaconbench(
                [
                    "run", bench.batch("provision-new.batch"), "--set", "profile=van", "--set", "scan=120s", "--set",
                    "expect=\(bench.beacons)",
                ])
            #expect(run.status == 0, "\(run.stderr.suffix(2000))")
            // An explicit identity written by another command: the inventory knows why.
            let explicit = try await bench.beaconbench(["identity", "major=200", "minor=77", "C0:FE:00:00:00:01"])
            #expect(explicit.status == 0, "\(explicit.stderr)")
            #expect(try await bench.truth()["C0:FE:00:00:00:01"]?.minor == 77)
            // Another beacon is told to take the same: refused, nothing written.
            let clash = try await bench.beaconbench(["identity", "major=200", "minor=77", "C0:FE:00:00:00:03"])
            #expect(clash.status == 2)
            #expect(
                (clash.stdout + clash.stderr).contains("meant for C0:FE:00:00:00:01"), "\(clash.stdout) \(clash.stderr)"
            )
            #expect(try await bench.truth()["C0:FE:00:00:00:03"]?.minor != 77)
            // The inventory's meaning differs from what a beacon holds: the audit says so.
            _ = try await Self.rows(
                bench.inventoryPath, "UPDATE identities SET minor = 999 WHERE device = 'C0:FE:00:00:00:01'")
            let audit = try await bench.beaconbench(["audit"])
            #expect(audit.stdout.contains("identity-differs"), "\(audit.stdout)")
        }
    }

    /// Two and three processes on one inventory over one fleet of 30:
    /// never a duplicate, everything converges, each exits 0.
    @Test(arguments: [2, 3])
    func severalProcessesOnOneInventoryNeverDuplicate(processes: Int) async throws {
        let simulator = ["--count", "30", "--fresh", "--seed", String(60 + processes)] + CrashTests.brisk
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            for round in 0..<2 {
                let outputs = try await withThrowingTaskGroup(of: ToolOutput.self) { group in
                    for _ in 0..<processes {
                        group.addTask {
                            try await bench.beaconbench(
                                [
                                    "--json", "run", bench.batch("provision-new.batch"), "--set", "select=all",
                                    // 20 s at most: a beacon another process
                                    // holds connected does not advertise, so
                                    // a scan may not hear all 30 (soak: a
                                    // 120 s cap cost 120 s); the truth below
                                    // is the judge, not this scan's count.
                                    "--set", "scan=20s", "--set", "expect=\(bench.beacons)",
                                ], timeout: 400)
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                // Several processes contend for one adapter's connect slot: a
                // device may give up on InProgress in one process (another
                // process does it); the truth below is the judge.
                for (index, output) in outputs.enumerated() {
                    // On a failure, every error and warning line it wrote
                    // (the last lines alone are progress and the recap), and
                    // its JSON errors and recoveries.
                    let said = output.stderr.split(separator: "\n").filter {
                        $0.contains("error") || $0.contains("warning") || $0.contains("cannot")
                    }
                    let lines = ConsoleFixture.jsonLines(output.stdout).filter {
                        ["error", "recovery", "summary"].contains($0["kind"] as? String ?? "")
                    }
                    #expect(
                        output.status == 0 || output.status == 2,
                        """
                        process \(index + 1) of \(processes), round \(round): exit \(output.status)
                        \(said.suffix(40).joined(separator: "\n"))
                        \(lines.map { "\($0)" }.joined(separator: "\n"))
                        last of stderr: \(output.stderr.suffix(1500))
                        """)
                }
                let truth = try await bench.truth()
                Self.expectUniqueIdentities(truth, "\(processes) processes, round \(round)")
                let duplicates = try await Self.rows(
                    bench.inventoryPath,
                    "SELECT major, minor FROM devices WHERE profile IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1")
                #expect(duplicates.isEmpty, "\(duplicates)")
                try await CrashTests.converged(bench, "\(processes) processes, round \(round)")
            }
        }
    }

    /// Connects refused with InProgress and retried: one `connect` row per
    /// device, ok; the failure query counts none. InProgress is not the
    /// beacon's failure (docs/reliability.md, busy): the retries are not
    /// charged to the row, and the simulator's count of Connect calls shows
    /// they happened.
    @Test func aRetriedConnectIsOneOkOutcome() async throws {
        try await withNewFleet(count: 8, simulatorOptions: ["--faults", "connect-in-progress=0.5", "--seed", "7"]) {
            bench in
            let run = try await bench.beaconbench(
                [
                    "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                    "expect=\(bench.beacons)",
                ])
            #expect(run.status == 0, "\(run.stderr.suffix(2000))")
            let failed = try await Self.rows(
                bench.inventoryPath, "SELECT count(*) FROM outcomes WHERE status = 'failed'")
            #expect(failed == ["0"])
            let connects = try await Self.rows(
                bench.inventoryPath,
                "SELECT device, count(*), sum(retries) FROM outcomes WHERE step = 'connect' GROUP BY 1")
            #expect(connects.count == 8)
            #expect(connects.allSatisfy { $0.split(separator: "|")[1] == "1" }, "\(connects)")
            #expect(connects.allSatisfy { $0.split(separator: "|")[2] == "0" }, "busy charged to a beacon: \(connects)")
            let counters = try await RecoveryTests.counters(bench)
            #expect(counters.connects > 8, "no connect was refused and retried: \(counters)")
            let recap = ConsoleFixture.summary(run.stdout)
            #expect(recap?["failed"] as? Int == 0)
        }
    }

    /// A beacon that moves refuses calibration: what was read before is recorded.
    @Test func aRefusedCalibrationStillRecordsTheStateRead() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("moving-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let fleet = scratch + "/fleet.json"
        try Data(
            """
            [{"address": "C0:FE:00:00:00:01", "factoryDefault": true, "calibrated": false, "moving": true,
              "battery": 80, "firmware": "1.0.8", "major": 1, "minor": 1}]
            """.utf8
        ).write(to: URL(fileURLWithPath: fleet))
        try await withResource({ try await ConsoleFixture.start(["--fleet", fleet]) }, stop: { await $0.stop() }) {
            bench in
            let run = try await bench.beaconbench([
                "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)",
            ])
            #expect(run.status == 2)
            let row = try await Self.rows(
                bench.inventoryPath,
                "SELECT calibrated, calibration_read_at IS NOT NULL, battery FROM devices WHERE address = 'C0:FE:00:00:00:01'"
            )
            #expect(row.count == 1 && row[0].hasPrefix("0|1|"), "\(row)")
        }
    }

    /// A run killed while connected leaves links bluetoothd keeps; the next
    /// run takes them down (saying so) and finishes the job at once.
    @Test func linksLeftByAKilledRunAreTakenDown() async throws {
        let simulator = ["--count", "20", "--fresh", "--seed", "71"] + CrashTests.brisk
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            // Killed while connected: at an ATT write held at the simulator
            // once at least 3 links are up.
            try await bench.withControl {
                try await $0.setFaultPlan(
                    #"{"rules":[{"id":"links","hook":"att.write","target":{"any":true},"when":{"linksUpAtLeast":3},"#
                        + #""trigger":{"nth":1},"times":1,"action":{"kind":"stall","until":"released","hold":"links"}}]}"#
                )
            }
            let child = try ChildProcess(
                builtProduct("beaconbench"),
                [
                    "--bus", bench.busAddress, "--inventory", bench.inventoryPath, "run",
                    bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)",
                ])
            try await bench.waitFor(#"{"held": "links"}"#)
            child.send(SIGKILL)
            _ = await child.waitForExit()
            _ = try await bench.withControl { try await $0.release("links") }
            let left = try await bench.truth().values.filter(\.connected).count
            #expect(left > 0, "the kill left no link to take down")
            let started = ContinuousClock.now
            let rerun = try await bench.beaconbench(
                [
                    "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                    "expect=\(bench.beacons)",
                ], timeout: 200)
            #expect(rerun.stdout.contains("left connected by"), "\(rerun.stdout.suffix(3000))")
            for line in ConsoleFixture.jsonLines(rerun.stdout) where (line["failed"] as? Int ?? 0) > 0 {
                #expect(FaultMatrixTests.isPermanent(line["reason"] as? String ?? ""), "\(line)")
            }
            print("links left by a killed run: \(left); the rerun took \(ContinuousClock.now - started)")
            try await CrashTests.converged(bench, "after the kill")
        }
    }

    /// The inventory on a small tmpfs that fills up: the run stops, exit 3
    /// with SQLite's message, the run row not left `running`, and no beacon
    /// holds a value the inventory could not record as written.
    @Test(.enabled(if: getuid() == 0, "mounting a tmpfs needs root (CI runs as root)"))
    func aFullDiskStopsTheRunWithExit3() async throws {
        let mount = FileManager.default.temporaryDirectory.appendingPathComponent("full-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
        // Room for a new inventory (136 KiB with the ledger's tables), its
        // -shm (32 KiB), the reserve (256 KiB), the scan's commits to the
        // write-ahead log, and a few devices' steps.
        let mounted = try await runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=512k", "tmpfs", mount])
        try #require(mounted.status == 0, "\(mounted.stderr)")
        defer {
            unmount(mount)
            try? FileManager.default.removeItem(atPath: mount)
        }
        let simulator = ["--count", "60", "--fresh", "--seed", "81"] + CrashTests.brisk
        try await withResource({ try await ConsoleFixture.start(simulator) }, stop: { await $0.stop() }) { bench in
            let inventory = mount + "/inventory.sqlite"
            let run = try await runTool(
                builtProduct("beaconbench"),
                [
                    "--bus", bench.busAddress, "--inventory", inventory, "run", bench.batch("provision-new.batch"),
                    "--set", "scan=120s", "--set", "expect=\(bench.beacons)", "--set", "select=all",
                ], environment: bench.environment, timeout: 300)
            #expect(run.status == 3, "\(run.status): \(run.stderr.suffix(2000))")
            #expect(run.stderr.contains("disk is full"), "\(run.stderr.suffix(2000))")
            let status = try await Self.rows(inventory, "SELECT status FROM runs")
            #expect(!status.isEmpty && !status.contains("running"), "\(status) \(run.stderr.suffix(1500))")
            let running = try await Self.rows(inventory, "SELECT count(*) FROM outcomes WHERE status = 'running'")
            #expect(running == ["0"])
        }
    }
}

/// Two benches, one server: no duplicate identity while the server can be
/// reached; a `duplicate-identity` finding naming both devices and their
/// benches when it could not.
@Suite("identities across benches", .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct IdentitiesAcrossBenchesTests {
    @Test func twoBenchesOneServer() async throws {
        try await withResource({ try await LocalPostgres.create(port: 54_339) }, stop: { await $0.remove() }) {
            server in
            try await server.start()
            let unreachable = "postgresql://127.0.0.1:1/nowhere"
            for (label, registry) in [("reachable", server.url), ("unreachable", unreachable)] {
                let numbers =
                    label == "reachable"
                    ? ([1, 2, 3, 4, 5], [20, 21, 22, 23, 24]) : ([40, 41, 42, 43], [60, 61, 62, 63])
                try await withNewFleet(numbers: numbers.0) { first in
                    try await withNewFleet(numbers: numbers.1) { second in
                        for bench in [first, second] {
                            let run = try await bench.beaconbench(
                                [
                                    "--server", registry, "run", bench.batch("provision-new.batch"), "--set",
                                    "scan=120s", "--set", "expect=\(bench.beacons)",
                                ])
                            #expect(run.status == 0, "\(label): \(run.stderr.suffix(2000))")
                            if registry == unreachable { #expect(run.stderr.contains("unreachable"), "\(run.stderr)") }
                            let sync = try await bench.beaconbench(["sync", "--to", server.url])
                            #expect(sync.status == 0, "\(sync.stderr)")
                        }
                        let truth = Array(try await first.truth().values) + Array(try await second.truth().values)
                        let held = truth.filter { !$0.factoryDefault }.map { "\($0.major).\($0.minor)" }
                        #expect(held.count == (numbers.0.count - 2) + (numbers.1.count - 2))
                        let audit = try await first.beaconbench(["--inventory", server.url, "audit"])
                        if label == "reachable" {
                            #expect(Set(held).count == held.count, "duplicates with the server reachable: \(held)")
                        } else {
                            // Both benches started at minor 1: the office sees it.
                            #expect(Set(held).count < held.count)
                            #expect(audit.stdout.contains("duplicate-identity"), "\(audit.stdout)")
                            #expect(audit.stdout.contains("(bench "), "\(audit.stdout)")
                        }
                    }
                }
            }
        }
    }
}
