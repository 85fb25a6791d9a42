import BeaconSimulator
import DBusBinding
import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

/// The install-bench station and the desired state (`assign`, `drift`),
/// end to end: the built binary against the simulator, beacons moved in
/// and out of range through its control interface.
@Suite("station, assign and drift", .serialized, .timeLimit(.minutes(10)))
struct StationTests {
    static func address(_ number: Int) -> String { String(format: "C0:FE:00:00:%02X:%02X", number / 256, number % 256) }

    /// `Update(address, json)` on the simulator's control interface.
    static func update(_ bench: ConsoleFixture, _ address: String, _ json: String) async throws {
        try await bench.withControl { try await $0.update(address, json) }
    }

    static func control(_ bench: ConsoleFixture, _ method: MemberName, _ arguments: [BusValue] = []) async throws {
        try await bench.withControl { _ = try await $0.control(method, arguments) }
    }

    /// Every beacon of the fleet out of range, before the station starts.
    static func clearTheBench(_ bench: ConsoleFixture) async throws {
        for address in try await bench.truth().keys { try await update(bench, address, #"{"inRange": false}"#) }
    }

    /// Puts a beacon on the bench (in range, strong).
    static func bringIn(_ bench: ConsoleFixture, _ number: Int, rssi: Int = -45) async throws {
        try await update(bench, address(number), #"{"inRange": true, "rssi": \#(rssi)}"#)
    }

    /// Waits until the station has said its verdict on beacon `number`
    /// (its `station` JSON line); returns the line.
    @discardableResult
    static func verdict(_ station: RunningTool, _ number: Int) async throws -> [String: Any] {
        try await station.waitForJSON("the station's line for beacon \(number)") {
            $0["kind"] as? String == "station" && $0["device"] as? String == address(number)
        }
    }

    @Test func beaconsBroughtOneByOneAreProvisionedAndThePalletBehindIsLeftAlone() async throws {
        // 1–4 good, 5 battery 20 %, 6 firmware 1.0.6.
        try await withNewFleet(count: 6, simulatorOptions: CrashTests.brisk) { bench in
            try await Self.clearTheBench(bench)
            // Beacon 4 stands on the pallet behind: heard, but weak.
            try await Self.bringIn(bench, 4, rssi: -88)
            let station = try bench.startBeaconbench(
                ["--json", "station", "--profile", "car", "--rssi-min", "-60", "--count", "5"])
            // Each beacon once the station has said its verdict on the one before.
            for number in [1, 2, 5, 3, 6] {
                try await Self.bringIn(bench, number)
                try await Self.verdict(station, number)
            }
            let output = await station.finish()
            #expect(output.status == 0, "\(output.stderr)")
            let lines = ConsoleFixture.jsonLines(output.stdout, kind: "station")
            let verdicts = Dictionary(
                lines.map { ($0["device"] as? String ?? "", $0["verdict"] as? String ?? "") }
            ) { first, _ in first }
            #expect(lines.count == 5, "\(output.stdout)")
            for number in [1, 2, 3] { #expect(verdicts[Self.address(number)] == "converged", "\(verdicts)") }
            for number in [5, 6] { #expect(verdicts[Self.address(number)] == "skipped", "\(verdicts)") }
            #expect(verdicts[Self.address(4)] == nil, "the pallet's beacon was taken: \(verdicts)")
            // The tally counts up one by one, and the summary is right.
            #expect(lines.compactMap { $0["done"] as? Int } == [1, 2, 3, 4, 5])
            let summary = try #require(ConsoleFixture.jsonLines(output.stdout, kind: "station_summary").first)
            #expect(summary["done"] as? Int == 5 && summary["converged"] as? Int == 3)
            #expect(summary["skipped"] as? Int == 2 && summary["failed"] as? Int == 0)
            // The beacons hold the car profile and distinct identities; the pallet's is untouched.
            let truth = try await bench.truth()
            let converged = [1, 2, 3].compactMap { truth[Self.address($0)] }
            #expect(converged.allSatisfy { $0.major == 100 && $0.config.cornering == 350 && !$0.factoryDefault })
            #expect(Set(converged.map(\.minor)).count == 3)
            #expect(truth[Self.address(4)]?.factoryDefault == true)
            #expect(truth[Self.address(5)]?.factoryDefault == true)
            // Each line names the identity to label the beacon with.
            for number in [1, 2, 3] {
                let report = try #require(truth[Self.address(number)])
                let line = lines.first { $0["device"] as? String == Self.address(number) }
                #expect(line?["identity"] as? String == "\(report.major).\(report.minor)")
            }
        }
    }

    @Test func aBeaconTakenAwayHalfWayIsReportedNotRetriedForEver() async throws {
        try await withNewFleet(count: 4, simulatorOptions: ["--latency", "realistic"]) { bench in
            try await Self.clearTheBench(bench)
            // Half-way: the station's first write to beacon 1 (index 0) is
            // held at the simulator; the beacon is taken away while it waits.
            try await bench.withControl {
                try await $0.setFaultPlan(
                    #"{"rules":[{"id":"half-way","hook":"att.write","target":{"beacon":0},"trigger":{"nth":1},"#
                        + #""action":{"kind":"stall","until":"released","hold":"half-way"}}]}"#)
            }
            let started = ContinuousClock.now
            let station = try bench.startBeaconbench(
                ["--json", "station", "--profile", "car", "--rssi-min", "-60", "--count", "1"])
            try await Self.bringIn(bench, 1)
            try await bench.waitFor(#"{"held": "half-way"}"#)
            try await Self.update(bench, Self.address(1), #"{"inRange": false}"#)
            try await bench.withControl { _ = try await $0.release("half-way") }
            // (A stall guard, not a speed bound: `finish` kills it after 300 s.)
            let output = await station.finish()
            print("taken away half-way: the station gave up after \(ContinuousClock.now - started)")
            #expect(output.status == 2, "\(output.stderr)")
            let line = try #require(ConsoleFixture.jsonLines(output.stdout, kind: "station").first, "\(output.stdout)")
            #expect(line["verdict"] as? String == "taken-away", "\(line)")
            #expect((line["reason"] as? String ?? "").contains("taken away half-way"), "\(line)")
        }
    }

    /// Ctrl-C, and SIGTERM as systemd stops a service: the same clean stop,
    /// the status as shells report each signal.
    @Test(arguments: [(SIGINT, Int32(130)), (SIGTERM, Int32(143))])
    func aSignalEndsTheStationWithARecap(signal: Int32, expected: Int32) async throws {
        try await withNewFleet(count: 4, simulatorOptions: CrashTests.brisk) { bench in
            try await Self.clearTheBench(bench)
            let station = try bench.startBeaconbench(["station", "--profile", "car"])
            try await Self.bringIn(bench, 1)
            // Ctrl-C once its line for beacon 1 is out (the line comes once
            // the beacon holds its state).
            try await station.waitForText("the station's line for beacon 1") {
                $0.contains(Self.address(1)) && $0.contains("converged")
            }
            station.child.send(signal)
            let finished = await station.finish()
            let status = finished.waitStatus
            #expect(status >> 8 & 0xff == expected, "wait status \(status)")
            let lines = finished.stdout
            let messages = finished.stderr
            #expect(lines.contains(Self.address(1)) && lines.contains("converged"), "\(lines)")
            #expect(messages.contains("STATION RECAP") && messages.contains("1 done: 1 converged"), "\(messages)")
            let inventory = try Inventory(path: bench.inventoryPath, readOnly: true)
            let runs = try await inventory.query("SELECT status FROM runs").compactMap { $0.first?.text }
            #expect(runs == ["interrupted"])
        }
    }

    @Test func aDryRunStationWritesNothingAndRecordsNoConvergence() async throws {
        try await withNewFleet(count: 3, simulatorOptions: CrashTests.brisk) { bench in
            try await Self.clearTheBench(bench)
            let assign = try await bench.beaconbench(["assign", "van", Self.address(1)])
            #expect(assign.status == 0, "\(assign.stderr)")
            async let station = bench.beaconbench(["--json", "station", "--dry-run", "--count", "1"], timeout: 120)
            try await Self.bringIn(bench, 1)
            let output = try await station
            #expect(output.status == 0, "\(output.stderr)")
            let line = try #require(ConsoleFixture.jsonLines(output.stdout, kind: "station").first)
            #expect(line["verdict"] as? String == "skipped", "\(line)")
            #expect((line["reason"] as? String ?? "").hasPrefix("dry run:"), "\(line)")
            #expect(try await bench.truth()[Self.address(1)]?.factoryDefault == true)
            let inventory = try Inventory(path: bench.inventoryPath, readOnly: true)
            #expect(try await inventory.assignments().first?.convergedAt == nil)
        }
    }

    @Test func theStationRidesOutABluetoothdRestart() async throws {
        try await withNewFleet(count: 5, simulatorOptions: CrashTests.brisk) { bench in
            try await Self.clearTheBench(bench)
            let station = try bench.startBeaconbench(["--json", "station", "--profile", "van", "--count", "3"])
            try await Self.bringIn(bench, 1)
            try await Self.verdict(station, 1)
            // `Restart` answers once org.bluez is back (adapters, no devices).
            try await Self.control(bench, "Restart")
            try await Self.bringIn(bench, 2)
            try await Self.bringIn(bench, 3)
            let output = await station.finish()
            #expect(output.status == 0, "\(output.stderr)")
            let lines = ConsoleFixture.jsonLines(output.stdout, kind: "station")
            #expect(lines.map { $0["verdict"] as? String } == ["converged", "converged", "converged"], "\(lines)")
            let truth = try await bench.truth()
            #expect([1, 2, 3].allSatisfy { truth[Self.address($0)]?.major == 200 })
        }
    }

    @Test func theStationRidesOutAnAdapterUnplugged() async throws {
        try await withNewFleet(count: 5, simulatorOptions: CrashTests.brisk) { bench in
            try await Self.clearTheBench(bench)
            let station = try bench.startBeaconbench(["--json", "station", "--profile", "car", "--count", "2"])
            try await Self.bringIn(bench, 1)
            try await Self.verdict(station, 1)
            // hci0 pulled out for 3 s, then put back; beacon 2 comes once
            // the station says it discovers again (it noticed, and recovered).
            try await Self.control(bench, "Unplug", [.uint32(0), .uint32(3000)])
            try await station.waitForText("the station discovering again after the unplug", inStandardError: true) {
                $0.contains("station: discovering again")
            }
            try await Self.bringIn(bench, 2)
            let output = await station.finish()
            #expect(output.status == 0, "\(output.stderr)")
            let lines = ConsoleFixture.jsonLines(output.stdout, kind: "station")
            #expect(lines.map { $0["verdict"] as? String } == ["converged", "converged"], "\(lines)")
            #expect(try await bench.truth()[Self.address(2)]?.major == 100)
            // It noticed, and said so once it discovered again.
            #expect(output.stderr.contains("station: discovering again"), "\(output.stderr)")
        }
    }

    @Test func convergeInABatchBringsEachDeviceToItsOwnDesiredState() async throws {
        // 1 and 2 good, 3 battery 20 %, 4 firmware 1.0.6.
        try await withNewFleet(count: 4, simulatorOptions: CrashTests.brisk) { bench in
            let assign = try await bench.beaconbench(["assign", "van", "major=250", "braking=500", Self.address(1)])
            #expect(assign.status == 0, "\(assign.stderr)")
            let file = bench.directory + "/converge.batch"
            try "\(bench.scanAll)\nselect all\nconverge --profile car\n".write(
                toFile: file, atomically: true, encoding: .utf8)
            let run = try await bench.beaconbench(["--json", "run", file])
            #expect(run.status == 0, "\(run.stderr)")
            let recaps = Dictionary(
                ConsoleFixture.jsonLines(run.stdout, kind: "recap").map {
                    ($0["device"] as? String ?? "", $0["result"] as? String ?? "")
                }
            ) { first, _ in first }
            #expect(
                recaps == [
                    Self.address(1): "changed", Self.address(2): "changed", Self.address(3): "skipped",
                    Self.address(4): "skipped",
                ], "\(recaps)")
            let truth = try await bench.truth()
            #expect(truth[Self.address(1)]?.major == 250 && truth[Self.address(1)]?.config.braking == 500)
            #expect(truth[Self.address(2)]?.major == 100 && truth[Self.address(2)]?.config.braking == 350)
            let inventory = try Inventory(path: bench.inventoryPath, readOnly: true)
            #expect(try await inventory.assignments().first?.convergedAt != nil)
            let drift = try await bench.beaconbench(["drift"])
            #expect(drift.status == 0, "\(drift.stdout)")
            // Again: everything holds, nothing is written.
            let again = try await bench.beaconbench(["--json", "run", file])
            let results = ConsoleFixture.jsonLines(again.stdout, kind: "recap").compactMap { $0["result"] as? String }
            #expect(results.filter { $0 == "changed" }.isEmpty, "\(results)")
        }
    }

    @Test func assignConvergeAndDriftBehindTheToolsBack() async throws {
        try await withNewFleet(count: 4, simulatorOptions: CrashTests.brisk) { bench in
            try await Self.clearTheBench(bench)
            let one = Self.address(1)
            let two = Self.address(2)
            // Bad input: an error naming the field, exit 1, nothing recorded.
            for (arguments, names) in [
                (["assign", "nosuch", one], "nosuch"), (["assign", "car", "minor=70000", one], "minor"),
                (["assign", "car", "cornering=10", one], "cornering"),
                (["assign", "car", "colour=red", one], "colour"),
                (["assign", "car"], "devices"),
            ] {
                let refused = try await bench.beaconbench(arguments)
                #expect(refused.status == 1, "\(arguments): \(refused.stderr)")
                #expect(refused.stderr.contains(names), "\(arguments): \(refused.stderr)")
            }
            let none = try await bench.beaconbench(["drift"])
            #expect(none.status == 0 && none.stderr.contains("0 of 0 assigned"), "\(none.stderr)")

            let assigned = try await bench.beaconbench([
                "--json", "assign", "van", "major=250", "minor=7", "cornering=400", one,
            ])
            #expect(assigned.status == 0, "\(assigned.stderr)")
            let record = try #require(ConsoleFixture.jsonLines(assigned.stdout, kind: "assignment").first)
            #expect(record["major"] as? Int == 250 && record["minor"] as? Int == 7)
            #expect((record["overrides"] as? [String: Any])?["cornering"] as? Int == 400)
            #expect(record["replaced"] is NSNull)
            // Assigned twice: the second replaces the first, and says so.
            _ = try await bench.beaconbench(["assign", "truck", two])
            let again = try await bench.beaconbench(["--json", "assign", "car", two])
            #expect(again.stderr.contains("replaces truck"), "\(again.stderr)")
            #expect(
                ConsoleFixture.jsonLines(again.stdout, kind: "assignment").first?["replaced"] as? String
                    == "truck major=profile minor=auto")

            // Before this bench saw them: pending, not drifting.
            let before = try await bench.beaconbench(["--json", "drift"])
            #expect(before.status == 0)
            #expect(before.stderr.contains("0 of 2 assigned devices drift; 2 never seen"), "\(before.stderr)")

            // The station converges both to their assignments (no --profile:
            // an unassigned beacon is skipped).
            let station = try bench.startBeaconbench(["--json", "station", "--count", "3"])
            for number in [1, 2, 3] {
                try await Self.bringIn(bench, number)
                try await Self.verdict(station, number)
            }
            let output = await station.finish()
            #expect(output.status == 0, "\(output.stderr)")
            let verdicts = Dictionary(
                ConsoleFixture.jsonLines(output.stdout, kind: "station").map {
                    ($0["device"] as? String ?? "", $0["verdict"] as? String ?? "")
                }
            ) { first, _ in first }
            #expect(verdicts == [one: "converged", two: "converged", Self.address(3): "skipped"], "\(verdicts)")
            let truth = try await bench.truth()
            #expect(truth[one]?.major == 250 && truth[one]?.minor == 7 && truth[one]?.config.cornering == 400)
            #expect(truth[one]?.config.braking == 330)  // the van profile's
            #expect(truth[two]?.major == 100 && truth[two]?.config.cornering == 350)
            let clean = try await bench.beaconbench(["--json", "drift"])
            #expect(clean.status == 0, "\(clean.stdout)")
            #expect(ConsoleFixture.jsonLines(clean.stdout, kind: "drift").isEmpty)
            let inventory = try Inventory(path: bench.inventoryPath, readOnly: true)
            let converged = try await inventory.assignments().filter { $0.convergedAt != nil }.map(\.address)
            #expect(converged == [one, two])

            // Changed behind the tool's back, then read by a bench: drift names the field.
            try await Self.update(bench, one, #"{"config": {"cornering": 999}}"#)
            let info = try await bench.beaconbench(["info", one])
            #expect(info.status == 0, "\(info.stderr)")
            let after = try await bench.beaconbench(["--json", "drift"])
            #expect(after.status == 2)
            let drift = ConsoleFixture.jsonLines(after.stdout, kind: "drift")
            #expect(drift.count == 1, "\(after.stdout)")
            #expect(drift.first?["device"] as? String == one && drift.first?["field"] as? String == "cornering")
            #expect(drift.first?["desired"] as? String == "400" && drift.first?["observed"] as? String == "999")
            #expect(drift.first?["observed_at"] is String)
            // The audit reports it too.
            let audit = try await bench.beaconbench(["--json", "audit"])
            let codes = ConsoleFixture.jsonLines(audit.stdout, kind: "audit").filter { $0["device"] as? String == one }
                .flatMap { ($0["findings"] as? [[String: Any]] ?? []).compactMap { $0["code"] as? String } }
            #expect(codes.contains("drift"), "\(audit.stdout)")
        }
    }
}

/// The office assigns on the shared server; two benches sync, see the
/// beacons and converge them; the server says which bench did it first.
@Suite("the office and two benches", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct OfficeTests {
    @Test func anOfficeAssignsTwoBenchesConvergeAndDriftIsEmpty() async throws {
        try await withResource({ try await LocalPostgres.create() }, stop: { await $0.remove() }) { server in
            try await server.start()
            try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { office in
                func officeRun(_ arguments: [String]) async throws -> ToolOutput {
                    try await runTool(
                        builtProduct("beaconbench"), ["--inventory", server.url] + arguments,
                        environment: office.environment)
                }
                func sync(_ bench: ConsoleFixture) async throws -> [String: Any] {
                    let sync = try await bench.beaconbench([
                        "--json", "sync", "--to", server.url, "--include-simulated",
                    ])
                    #expect(sync.status == 0, "\(sync.stderr)")
                    return try #require(ConsoleFixture.jsonLines(sync.stdout, kind: "sync").first)
                }
                let address = StationTests.address
                // Bench A holds beacons 1–6, bench B beacons 3, 4 and 7–9: beacon 3
                // passes both benches (two simulators: two copies of it).
                try await withNewFleet(numbers: [1, 2, 3, 4, 5, 6], simulatorOptions: CrashTests.brisk) { first in
                    try await withNewFleet(numbers: [3, 4, 7, 8, 9], simulatorOptions: CrashTests.brisk) { second in
                        _ = try await sync(first)
                        _ = try await sync(second)
                        // Bench A assigns beacon 2 itself, before the office does.
                        let local = try await first.beaconbench(["assign", "truck", address(2)])
                        #expect(local.status == 0, "\(local.stderr)")
                        // The office's is later: the clock has passed the local
                        // assignment's millisecond (the time it records) first.
                        let localAt = try #require(
                            try await Inventory(path: first.inventoryPath, readOnly: true).assignments()
                                .first { $0.address == address(2) }?.assignedAt)
                        let parser = ISO8601DateFormatter()
                        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                        let localDate = try #require(parser.date(from: localAt), "\(localAt)")
                        try await waitUntil("the clock to pass the local assignment's time \(localAt)") {
                            Date().timeIntervalSince(localDate) > 0.002
                        }
                        let assigned = try await officeRun([
                            "--json", "assign", "van", "major=250", address(1), address(2), address(3), address(7),
                        ])
                        #expect(assigned.status == 0, "\(assigned.stderr)")
                        #expect(ConsoleFixture.jsonLines(assigned.stdout, kind: "assignment").count == 4)
                        // Not converged yet: never read.
                        let before = try await officeRun(["--json", "drift"])
                        #expect(before.status == 2, "\(before.stderr)")
                        let pending = ConsoleFixture.jsonLines(before.stdout, kind: "drift")
                        #expect(
                            Set(pending.compactMap { $0["field"] as? String }) == ["config", "identity"], "\(pending)")
                        #expect(pending.allSatisfy { $0["observed"] is NSNull })
                        // The office's audit shows them too.
                        let audit = try await officeRun(["--json", "audit"])
                        let drifting = ConsoleFixture.jsonLines(audit.stdout, kind: "audit").filter {
                            ($0["findings"] as? [[String: Any]] ?? []).contains { $0["code"] as? String == "drift" }
                        }
                        #expect(drifting.count == 4, "\(audit.stdout)")

                        // Bench A syncs: its truck for beacon 2 loses to the office's later van, and says so.
                        let pulledA = try await sync(first)
                        #expect(pulledA["assignments_pulled"] as? Int == 4, "\(pulledA)")
                        let conflicts = pulledA["assignment_conflicts"] as? [String] ?? []
                        #expect(conflicts.count == 1 && conflicts[0].contains("truck"), "\(conflicts)")
                        await #expect(try server.count("SELECT count(*) FROM assignment_conflicts") == 1)
                        let pulledB = try await sync(second)
                        #expect(pulledB["assignments_pulled"] as? Int == 4, "\(pulledB)")

                        // Bench A sees beacons 1, 2, 3 first.
                        try await StationTests.clearTheBench(first)
                        async let stationA = first.beaconbench(["--json", "station", "--count", "3"], timeout: 240)
                        for number in [1, 2, 3] { try await StationTests.bringIn(first, number) }
                        let outputA = try await stationA
                        #expect(outputA.status == 0, "\(outputA.stderr)")
                        let pushedA = try await sync(first)
                        #expect(pushedA["assignments_converged"] as? Int == 3, "\(pushedA)")
                        // Then bench B sees 3 (later: A keeps the credit) and 7.
                        try await StationTests.clearTheBench(second)
                        async let stationB = second.beaconbench(["--json", "station", "--count", "2"], timeout: 240)
                        for number in [3, 7] { try await StationTests.bringIn(second, number) }
                        let outputB = try await stationB
                        #expect(outputB.status == 0, "\(outputB.stderr)")
                        let pushedB = try await sync(second)
                        #expect(pushedB["assignments_converged"] as? Int == 1, "\(pushedB)")

                        let benchA = try await Inventory(path: first.inventoryPath, readOnly: true).benchID()
                        let benchB = try await Inventory(path: second.inventoryPath, readOnly: true).benchID()
                        let credited = try await server.rows(
                            "SELECT address, converged_bench FROM fleet_assignments WHERE converged_at IS NOT NULL ORDER BY address"
                        )
                        #expect(
                            credited == [
                                [address(1), benchA], [address(2), benchA], [address(3), benchA], [address(7), benchB],
                            ],
                            "\(credited)")
                        // Both benches' beacons hold the van identity and thresholds.
                        for (bench, numbers) in [(first, [1, 2, 3]), (second, [3, 7])] {
                            let truth = try await bench.truth()
                            for number in numbers {
                                #expect(truth[address(number)]?.major == 250, "\(number)")
                                #expect(truth[address(number)]?.config.cornering == 320, "\(number)")
                            }
                        }
                        let after = try await officeRun(["--json", "drift"])
                        #expect(after.status == 0, "\(after.stdout)\n\(after.stderr)")
                        #expect(ConsoleFixture.jsonLines(after.stdout, kind: "drift").isEmpty)
                        for bench in [first, second] {
                            let drift = try await bench.beaconbench(["drift"])
                            #expect(drift.status == 0, "\(drift.stdout)")
                        }
                    }
                }
            }
        }
    }

    /// A fleet file of good factory-new beacons numbered `numbers`.
    static func goodFleet(_ numbers: [Int], in directory: String) throws -> String {
        let entries = numbers.map { number -> [String: Any] in
            [
                "address": StationTests.address(number), "factoryDefault": true, "calibrated": false, "battery": 80,
                "firmware": "1.0.8", "major": 1, "minor": 1,
            ]
        }
        let path = directory + "/fleet-\(numbers.first ?? 0).json"
        try JSONSerialization.data(withJSONObject: entries).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func fiftyAssignedOverTwoBenchesLeaveNoDrift() async throws {
        try await withResource({ try await LocalPostgres.create() }, stop: { await $0.remove() }) { server in
            try await server.start()
            try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { office in
                let scratch = try scratchDirectory("office50")
                defer { try? FileManager.default.removeItem(atPath: scratch) }
                let all = Array(1...50)
                let fleets = [
                    try Self.goodFleet(Array(1...25), in: scratch), try Self.goodFleet(Array(26...50), in: scratch),
                ]
                // The shipped batch.
                let batch = ConsoleFixture.repository + "/batches/converge.batch"
                try await withResource(
                    { try await ConsoleFixture.start(["--fleet", fleets[0]] + CrashTests.brisk) },
                    stop: { await $0.stop() }
                ) { first in
                    try await withResource(
                        { try await ConsoleFixture.start(["--fleet", fleets[1]] + CrashTests.brisk) },
                        stop: { await $0.stop() }
                    ) { second in
                        for bench in [first, second] {
                            let sync = try await bench.beaconbench(["sync", "--to", server.url, "--include-simulated"])
                            #expect(sync.status == 0, "\(sync.stderr)")
                        }
                        // The office: all 50 as vans under a major of their own, minors given out fleet-wide.
                        let assign = try await runTool(
                            builtProduct("beaconbench"),
                            ["--inventory", server.url, "assign", "van", "major=260"] + all.map(StationTests.address),
                            environment: office.environment)
                        #expect(assign.status == 0, "\(assign.stderr)")
                        for bench in [first, second] {
                            let pull = try await bench.beaconbench(["sync", "--to", server.url, "--include-simulated"])
                            #expect(pull.status == 0 && pull.stderr.contains("pulled 50"), "\(pull.stderr)")
                            let run = try await bench.beaconbench(
                                ["run", batch, "--set", "scan=120s", "--set", "expect=\(bench.beacons)"], timeout: 300)
                            #expect(run.status == 0, "\(run.stderr.suffix(2000))")
                            let push = try await bench.beaconbench(["sync", "--to", server.url, "--include-simulated"])
                            #expect(
                                push.status == 0 && push.stderr.contains("converged here first 25"), "\(push.stderr)")
                        }
                        let drift = try await runTool(
                            builtProduct("beaconbench"), ["--inventory", server.url, "--json", "drift"],
                            environment: office.environment)
                        #expect(drift.status == 0, "\(drift.stdout.prefix(2000))")
                        #expect(drift.stderr.contains("0 of 50 assigned devices drift"), "\(drift.stderr)")
                        await #expect(
                            try server.count("SELECT count(*) FROM fleet_assignments WHERE converged_at IS NOT NULL")
                                == 50)
                        await #expect(
                            try server.count("SELECT count(DISTINCT converged_bench) FROM fleet_assignments") == 2)
                        // 50 distinct identities under 260.
                        await #expect(
                            try server.count("SELECT count(DISTINCT minor) FROM fleet_devices WHERE major = 260") == 50)
                    }
                }
            }
        }
    }
}
