import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import SBeaconProtocol
import TestSupport
import Testing

/// The built binary against the simulator: what an operator does, checked
/// against the simulator's ground truth and the inventory.
@Suite("beaconbench end to end", .serialized, .timeLimit(.minutes(10)))
struct EndToEndTests {
    static let car = DrivingBehaviourConfig(
        cornering: 350, braking: 350, acceleration: 450, duration: 300, enable: [.detection, .lowPassFilter])

    @Test func provisionAFleetOf24ThenAuditThenRerunUnchanged() async throws {
        try await withNewFleet(count: 24) { bench in
            let first = try await bench.beaconbench([
                "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                "expect=\(bench.beacons)",
            ])
            #expect(first.status == 0, "\(first.stderr)")
            let lines = ConsoleFixture.jsonLines(first.stdout)
            let recaps = Dictionary(
                uniqueKeysWithValues: lines.filter { $0["kind"] as? String == "recap" }.compactMap { line in
                    (line["device"] as? String).map { ($0, line) }
                })
            let summary = try #require(ConsoleFixture.summary(first.stdout))
            #expect(summary["devices"] as? Int == 24)
            #expect(summary["changed"] as? Int == 22)
            #expect(summary["skipped"] as? Int == 2)
            #expect(summary["failed"] as? Int == 0)

            let truth = try await bench.truth()
            #expect(truth.count == 24)
            let inventory = try Inventory(path: bench.inventoryPath)
            let records = try await inventory.devicesByAddress()
            var minors = Set<UInt16>()
            for (address, report) in truth {
                let recap = try #require(recaps[address], "no recap for \(address)")
                let provisionable = report.battery >= 30 && report.firmware != "1.0.6"
                if provisionable {
                    // The recap says it changed; the beacon holds the profile, the identity and a calibration.
                    #expect(recap["changed"] as? Int == 4, "\(address): \(recap)")
                    #expect(recap["failed"] as? Int == 0)
                    let config = report.config
                    #expect(
                        DrivingBehaviourConfig(
                            cornering: config.cornering, braking: config.braking, acceleration: config.acceleration,
                            duration: config.duration, enable: .init(rawValue: config.enable)) == Self.car)
                    #expect(report.major == 100)
                    #expect(report.calibration.calibrated)
                    #expect(report.timeOffset != 0)
                    #expect(!report.factoryDefault)
                    minors.insert(report.minor)
                    // The inventory says the same, device by device.
                    let record = try #require(records[address])
                    #expect(record.profile == "car")
                    #expect(record.config == Self.car)
                    #expect(record.identity == BeaconIdentity(major: report.major, minor: report.minor))
                    #expect(record.calibration?.calibrated == true)
                    #expect(record.calibration?.vector.z == report.calibration.z)
                    #expect(record.timeOffset == report.timeOffset)
                    // What the requirements read is known too.
                    #expect(record.firmware?.description == report.firmware)
                    #expect(record.battery.map { abs(Int($0) - Int(report.battery)) <= 1 } == true, "\(address)")
                } else {
                    #expect(recap["changed"] as? Int == 0)
                    #expect((recap["reason"] as? String)?.isEmpty == false)
                    #expect(report.factoryDefault, "\(address) was written although it failed its requirement")
                    #expect(records[address]?.profile == nil)
                }
            }
            #expect(minors.count == 22, "minors must be unique")

            // The audit from the inventory: the provisioned are clean, the two skipped are not (exit 2).
            let audit = try await bench.beaconbench(["--json", "audit"])
            #expect(audit.status == 2, "\(audit.stderr)")
            let reports = ConsoleFixture.jsonLines(audit.stdout)
            #expect(reports.count == 24)
            #expect(reports.filter { $0["clean"] as? Bool == true }.count == 22)

            // The same batch over the whole box: everything unchanged, nothing written.
            let before = truth.mapValues(ConsoleFixture.provisioned)
            let second = try await bench.beaconbench([
                "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                "expect=\(bench.beacons)", "--set", "select=all",
            ])
            #expect(second.status == 0, "\(second.stderr)")
            let secondLines = ConsoleFixture.jsonLines(second.stdout)
            let secondSummary = try #require(ConsoleFixture.summary(second.stdout))
            #expect(secondSummary["changed"] as? Int == 0)
            #expect(secondSummary["failed"] as? Int == 0)
            for line in secondLines where line["kind"] as? String == "recap" {
                #expect(line["changed"] as? Int == 0, "\(line)")
            }
            #expect(try await bench.truth().mapValues(ConsoleFixture.provisioned) == before)
        }
    }

    @Test func dryRunChangesNothingAndListsTheDiffs() async throws {
        try await withNewFleet(count: 6) { bench in
            let before = try await bench.truth().mapValues(ConsoleFixture.provisioned)
            let run = try await bench.beaconbench([
                "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)",
                "--dry-run",
            ])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(try await bench.truth().mapValues(ConsoleFixture.provisioned) == before)
            #expect(run.stdout.contains("RECAP (dry run: nothing written)"))
            #expect(run.stdout.contains("6 devices: 4 would change, 0 ok, 2 skipped, 0 failed"), "\(run.stdout)")
            // Per device that would change: each field, before → after.
            for address in before.keys.sorted().prefix(4) {
                #expect(run.stderr.contains("\(address): config: cornering 300 mG"), "\(run.stderr)")
                #expect(run.stderr.contains("\(address): identity: 1.1 → 100."))
                #expect(run.stderr.contains("\(address): would calibrate"))
                #expect(run.stderr.contains("\(address): time offset: "))
            }
            #expect(run.stderr.contains("→ cornering 350 mG, braking 350 mG, acceleration 450 mG"))
            // The same as JSON: one object per change.
            let json = try await bench.beaconbench([
                "--json", "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set",
                "expect=\(bench.beacons)", "--dry-run",
            ])
            let changes = ConsoleFixture.jsonLines(json.stdout, kind: "step").filter { $0["diff"] is String }
            #expect(changes.count == 4 * 4, "\(json.stdout)")
            #expect(try await bench.truth().mapValues(ConsoleFixture.provisioned) == before)
            let records = try await Inventory(path: bench.inventoryPath).devices()
            // Nothing is claimed: no profile; what was read (and only that) is recorded.
            #expect(records.allSatisfy { $0.profile == nil })
            let truth = try await bench.truth()
            for record in records {
                if let config = record.config, let report = truth[record.address] {
                    #expect(config == FaultMatrixTests.held(report))
                }
            }
        }
    }

    /// Each broken batch: exit 1, the place and the problem, and nothing touched.
    static let brokenBatches: [(text: String, message: String)] = [
        ("scan 1s\nscna 5s\n", ":2:1: error: unknown command 'scna' (did you mean 'scan'?)"),
        ("scan 1s\nselect all\napply lorry\n", ":3:7: error: no profile 'lorry'"),
        ("select all\nrequire battery>=150\n", ":2:9: error: battery>= wants a percentage 0–100, got '150'"),
        (
            "select all\nidentity minor=auto\n",
            ":2:1: error: identity needs a profile or major=N (usage: identity [PROFILE] [major=N] [minor=auto|keep|N] [DEVICE…] [--dry-run])"
        ),
        ("select all\napply ${profile}\n", ":2:7: error: variable 'profile' is not set"),
        ("select all\nfactory-reset\n", ":2:1: error: factory-reset erases a beacon: write 'factory-reset --yes'"),
        ("scan 1s\ncalibrate\n", ":2:1: error: no devices for 'calibrate': 'select …' them first"),
        ("select \"all\n", ":1:8: error: a quote is not closed"),
        ("scan 1s --rssi 5\n", ":1:16: error: --rssi wants DBM in -127–0, got '5'"),
        (
            "select all\nsync-time\nidentity major=70000\n",
            ":3:10: error: major must be 0–65535 or 'profile', got '70000'"
        ),
        ("select battery<x\n", ":1:8: error: battery< wants a percentage 0–100, got 'x'"),
        ("select all\ninfo\nwatch forever\n", ":3:7: error: 'forever' is not a duration"),
        ("select all\n!rm -rf /\n", ":2:1: error: unknown command '!rm'"),
        (
            "select all\ntrips --purge\n",
            ":2:7: error: trips has no option '--purge' (it takes --clear, --json, --dry-run)"
        ),
    ]

    @Test func brokenBatchesExit1WithTheirPlaceAndTouchNothing() async throws {
        try await withNewFleet(count: 3) { bench in
            let before = try await bench.truth().mapValues(ConsoleFixture.provisioned)
            for (index, broken) in Self.brokenBatches.enumerated() {
                let file = bench.directory + "/broken\(index).batch"
                try broken.text.write(toFile: file, atomically: true, encoding: .utf8)
                let run = try await bench.beaconbench(["run", file])
                #expect(run.status == 1, "\(broken.text): \(run.stderr)")
                #expect(run.stderr.contains(file + broken.message), "\(broken.text): \(run.stderr)")
            }
            #expect(try await bench.truth().mapValues(ConsoleFixture.provisioned) == before)
            // The inventory was never even opened.
            #expect(!FileManager.default.fileExists(atPath: bench.inventoryPath))
        }
    }

    @Test func badProfilesAndArgumentsExit1() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let profiles = bench.directory + "/profiles"
            try FileManager.default.createDirectory(atPath: profiles, withIntermediateDirectories: true)
            let car = try String(contentsOfFile: ConsoleFixture.repository + "/profiles/car.json", encoding: .utf8)
            try car.replacingOccurrences(of: "\"braking_mg\": 350", with: "\"braking_mg\": 9000").write(
                toFile: profiles + "/car.json", atomically: true, encoding: .utf8)
            let badProfile = try await bench.beaconbench(["--profiles", profiles, "profiles", "list"])
            #expect(badProfile.status == 1)
            #expect(badProfile.stderr.contains(profiles + "/car.json"), "\(badProfile.stderr)")
            #expect(badProfile.stderr.contains("braking_mg"), "\(badProfile.stderr)")

            for arguments in [
                ["--concurrency", "0", "profiles"], ["run"], ["--frobnicate"], ["--adapter", "wlan0", "devices"],
                ["run", "a.batch", "b.batch"], ["run", "x.batch", "--set", "novalue"], ["--sim", "0", "devices"],
                ["run", bench.directory + "/missing.batch"],
            ] {
                let run = try await bench.beaconbench(arguments)
                #expect(run.status == 1, "\(arguments): \(run.stderr)")
                #expect(!run.stderr.isEmpty)
            }
            #expect(!FileManager.default.fileExists(atPath: bench.inventoryPath))
        }
    }

    @Test func exitStatusesZeroToThree() async throws {
        // 0: all well.
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { none in
            #expect(try await none.beaconbench(["profiles", "list"]).status == 0)
            #expect(try await none.beaconbench(["--version"]).stdout.hasPrefix("beaconbench "))
            // 1: bad input.
            #expect(try await none.beaconbench(["select", "everything"]).status == 1)
            // 3: no bus at that address; a bus without bluetoothd; an unusable inventory.
            let noBus = try await none.beaconbench(["scan", "1s"])
            #expect(noBus.status == 3, "\(noBus.stderr)")
            try await withResource({ try await PrivateBus.start() }, stop: { await $0.stop() }) { bus in
                let noBluetoothd = try await runTool(
                    builtProduct("beaconbench"),
                    ["--bus", bus.address, "--inventory", none.inventoryPath, "scan", "1s"],
                    environment: none.environment)
                #expect(noBluetoothd.status == 3)
                #expect(noBluetoothd.stderr.contains("bluetoothd is not running"), "\(noBluetoothd.stderr)")
                let badInventory = try await none.beaconbench([
                    "--inventory", "/proc/beaconbench/inventory.sqlite", "log",
                ])
                #expect(badInventory.status == 3, "\(badInventory.stderr)")

                // 2: a device fails (every ATT request answers an error).
                try await withNewFleet(count: 2, simulatorOptions: ["--faults", "att-error=1"]) { bench in
                    let run = try await bench.beaconbench(["info", "00000001"])
                    #expect(run.status == 2, "\(run.stderr)")
                    #expect(run.stdout.contains("C0:FE:00:00:00:01"))
                    let log = try await Inventory(path: bench.inventoryPath).outcomes(device: "C0:FE:00:00:00:01")
                    #expect(log.contains { $0.status == "failed" && ($0.error ?? "").contains("ATT") }, "\(log)")
                }
            }
        }
    }

    @Test func commandsFromStandardInputAndDevicesNamedOnTheLine() async throws {
        try await withNewFleet(count: 3) { bench in
            let run = try await bench.beaconbench(
                ["--json"], stdin: "\(bench.scanAll)\nselect all\ninfo\napply van 00000002\ninventory list\n")
            #expect(run.status == 0, "\(run.stderr)")
            let truth = try await bench.truth()
            #expect(truth["C0:FE:00:00:00:02"]?.config.cornering == 320)
            #expect(truth["C0:FE:00:00:00:01"]?.config.cornering == 300)
            // `info` gives the three devices it read, then `inventory list` the three.
            let listed = ConsoleFixture.jsonLines(run.stdout, kind: "device").suffix(3)
            #expect(listed.count == 3)
            #expect(listed.first { $0["address"] as? String == "C0:FE:00:00:00:02" }?["profile"] as? String == "van")
        }
    }

    @Test func watchShowsAShakeOnTheBench() async throws {
        try await withNewFleet(count: 2) { bench in
            // Long enough never to end by itself here: Ctrl-C ends it once
            // the shake is seen.
            let watching = try bench.startBeaconbench(["--json", "watch", "600s", "00000001"])
            // Shake once the watch is connected (the simulator says so).
            try await bench.waitFor(#"{"connected": "C0:FE:00:00:00:01"}"#)
            // It subscribes a moment after connecting, and a shake before the
            // subscription is not seen (as on a real bench): shake until the
            // watch shows one (every 300 ms: a poll interval).
            try await bench.withControl { control in
                try await waitUntil("the watch to show a shake", every: .milliseconds(300)) {
                    try await control.control("Shake", [.string("C0:FE:00:00:00:01"), .byte(5)])
                    return ConsoleFixture.jsonLines(watching.stdout, kind: "watch_event").contains {
                        $0["type"] as? String == "real_time"
                    } || !watching.child.isRunning
                }
            }
            watching.child.send(SIGINT)
            let output = await watching.finish()
            #expect(output.status == 130, "\(output.stderr)")
            let events = ConsoleFixture.jsonLines(output.stdout, kind: "watch_event").filter {
                $0["type"] as? String == "real_time"
            }
            #expect(!events.isEmpty, "\(output.stdout)")
            #expect(events.allSatisfy { $0["event"] as? String == "braking" })
            #expect(events.first?["device"] as? String == "C0:FE:00:00:00:01")
        }
    }

    /// SIGTERM (systemd, `timeout`) during a batch stops it as Ctrl-C does:
    /// the step under way ends `interrupted`, the run too, the recap is
    /// printed, and the status is 143.
    @Test func sigtermStopsABatchAsCtrlCDoesWithItsRecap() async throws {
        try await withNewFleet(count: 2) { bench in
            // The first threshold write is held at the simulator: the run is
            // mid-step when the signal comes.
            try await bench.withControl {
                try await $0.setFaultPlan(
                    #"{"rules":[{"id":"mid-step","hook":"att.write","target":{"beacon":0},"trigger":{"nth":1},"#
                        + #""action":{"kind":"stall","until":"released","hold":"mid-step"}}]}"#)
            }
            let batch = bench.directory + "/provision.batch"
            try "\(bench.scanAll)\nselect all\nsync-time\napply car\n".write(
                toFile: batch, atomically: true, encoding: .utf8)
            let running = try bench.startBeaconbench(["run", batch])
            try await bench.waitFor(#"{"held": "mid-step"}"#)
            running.child.send(SIGTERM)
            let finished = await running.finish()
            let status = finished.waitStatus
            #expect(status & 0x7f == 0 && status >> 8 & 0xff == 143, "wait status \(status): \(finished.stderr)")
            #expect(finished.stderr.contains("SIGTERM: stopping"), "\(finished.stderr)")
            #expect(
                finished.stdout.contains("RECAP") || finished.stderr.contains("RECAP"),
                "\(finished.stdout)\n\(finished.stderr)")
            let inventory = try Inventory(path: bench.inventoryPath, readOnly: true)
            let runs = try await inventory.query("SELECT status FROM runs").compactMap { $0.first?.text }
            #expect(runs == ["interrupted"], "\(runs)")
            let unfinished = try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'running'")
            #expect(unfinished.first?.first?.integer == 0, "a step left running")
            let interrupted = try await inventory.query("SELECT count(*) FROM outcomes WHERE status = 'interrupted'")
            #expect((interrupted.first?.first?.integer ?? 0) >= 1, "no step recorded interrupted")
        }
    }
}
