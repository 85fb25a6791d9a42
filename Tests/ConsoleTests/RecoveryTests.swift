import BeaconSimulator
import DBusBinding
import Foundation
import TestSupport
import Testing

/// The built `beaconbench` recovering under the simulator's fault plans
/// (docs/reliability.md, "Recovering without an operator"): the recap's
/// `recovery` lines, the outcome log's `recover` rows, and the simulator's
/// counters saying nothing was done more than its policy allows.
@Suite("recovering without an operator", .serialized, .timeLimit(.minutes(10)))
struct RecoveryTests {
    /// Writes `plan` to a file and runs `body` on a fleet of `count` new
    /// beacons (the last two cannot be provisioned) with it.
    static func withPlan(
        _ plan: String, count: Int, simulatorOptions: [String] = [], _ body: (ConsoleFixture) async throws -> Void
    ) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("plan-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let path = scratch + "/plan.json"
        try plan.write(toFile: path, atomically: true, encoding: .utf8)
        try await withNewFleet(count: count, simulatorOptions: ["--fault-plan", path] + simulatorOptions, body)
    }

    /// The simulator's `Counters()`, through its control-interface client.
    static func counters(_ bench: ConsoleFixture) async throws -> SimulatedBluetoothd.Counters {
        try await bench.withControl { try await $0.counters() }
    }

    /// provision-new under the bench's plan: exit 0, every line in shape,
    /// nothing failed and `changed` devices changed.
    @discardableResult
    static func provisionConverges(
        _ bench: ConsoleFixture, changed: Int, options: [String] = []
    ) async throws -> ToolOutput {
        let run = try await bench.beaconbench(
            options + ["run", bench.batch("provision-new.batch"), "--json"], timeout: 300)
        #expect(run.status == 0, "\(run.stderr)")
        try checkShapes(run.stdout)
        let summary = try #require(ConsoleFixture.summary(run.stdout), "\(run.stdout)")
        #expect(summary["failed"] as? Int == 0, "\(summary)")
        #expect(summary["changed"] as? Int == changed, "\(summary)")
        return run
    }

    /// Every line fits docs/json.md.
    static func checkShapes(_ stdout: String) throws {
        let kinds = try JSONShapeTests.documentedKinds()
        for line in stdout.split(separator: "\n").map(String.init) {
            for problem in JSONShapeTests.problems(line, kinds) { Issue.record(Comment(rawValue: problem)) }
        }
    }

    @Test func aStaleBeaconIsRemovedOnceAndTheBatchConverges() async throws {
        let stale = "C0:FE:00:00:00:02"
        let plan = #"""
            {"rules": [{"id": "m1", "hook": "connect.requested", "target": {"address": "\#(stale)"},
              "trigger": {"nth": 1}, "action": {"kind": "stale"}}]}
            """#
        try await Self.withPlan(plan, count: 5) { bench in
            let run = try await Self.provisionConverges(bench, changed: 3)
            let recoveries = ConsoleFixture.jsonLines(run.stdout, kind: "recovery")
            #expect(recoveries.count == 1, "\(recoveries)")
            #expect(recoveries.first?["action"] as? String == "remove-device")
            #expect(recoveries.first?["status"] as? String == "ok")
            #expect(recoveries.first?["device"] as? String == stale)
            #expect(
                recoveries.first?["detail"] as? String == "remove-device after 3 × le-connection-abort-by-local")
            let counters = try await Self.counters(bench)
            #expect(counters.removeDevice == [stale: 1], "\(counters)")
            // The outcome log has the row.
            let log = try await bench.beaconbench(["log", "--json", "--limit", "200"])
            let rows = ConsoleFixture.jsonLines(log.stdout, kind: "outcome").filter {
                $0["step"] as? String == "recover"
            }
            #expect(rows.count == 1, "\(log.stdout)")
            #expect(rows.first?["device"] as? String == stale)
            #expect(rows.first?["status"] as? String == "ok")
        }
    }

    @Test func nineBeaconsOnATwoSlotAdapterConvergeAtConcurrencyTwo() async throws {
        let plan = #"{"adapters": [{"index": 0, "slots": 2, "slotFailure": "abort"}], "rules": []}"#
        try await Self.withPlan(plan, count: 11) { bench in
            let run = try await Self.provisionConverges(bench, changed: 9, options: ["--concurrency", "5"])
            let recoveries = ConsoleFixture.jsonLines(run.stdout, kind: "recovery")
            let lowered = recoveries.filter { $0["action"] as? String == "concurrency" }
            #expect(lowered.count == 1, "\(recoveries)")
            #expect((lowered.first?["detail"] as? String)?.hasPrefix("concurrency 5 → 2 on hci") == true)
            #expect(lowered.first?["device"] is NSNull)
            let counters = try await Self.counters(bench)
            #expect(counters.removeDevice.isEmpty, "\(counters)")
        }
    }

    static let wedgeAtTheFirstScan = #"""
        {"rules": [{"id": "m3", "hook": "discovery.start", "target": {"adapter": 0}, "trigger": {"nth": 1},
          "action": {"kind": "wedge", "discoveryError": "not-ready", "connect": {"abortAfterMs": 2000}}}]}
        """#

    @Test func anAdapterWedgedAtTheScanIsPowerCycledOnceAndTheBatchConverges() async throws {
        try await Self.withPlan(Self.wedgeAtTheFirstScan, count: 5) { bench in
            let run = try await Self.provisionConverges(bench, changed: 3)
            let recoveries = ConsoleFixture.jsonLines(run.stdout, kind: "recovery")
            #expect(recoveries.map { $0["action"] as? String } == ["power-cycle"], "\(recoveries)")
            let counters = try await Self.counters(bench)
            let cycles = counters.powerCycles
            #expect(cycles.count == 1 && cycles.values.first == 1, "\(counters)")
            #expect(counters.removeDevice.isEmpty, "\(counters)")
        }
    }

    @Test func withNoAdapterResetAWedgedAdapterIsNotCycledAndTheScanSaysWhy() async throws {
        try await Self.withPlan(Self.wedgeAtTheFirstScan, count: 3) { bench in
            let run = try await bench.beaconbench(
                ["--no-adapter-reset", "run", bench.batch("provision-new.batch")], timeout: 300)
            #expect(run.status == 3, "\(run.stdout) \(run.stderr)")
            #expect(run.stderr.contains("is wedged"), "\(run.stderr)")
            #expect(run.stderr.contains("--no-adapter-reset"), "\(run.stderr)")
            let counters = try await Self.counters(bench)
            #expect(counters.powerCycles.isEmpty, "\(counters)")
        }
    }

    @Test func aRunCarriesOnWhenHci0ComesBackAsHci1() async throws {
        let plan = #"""
            {"rules": [{"id": "m4", "hook": "connect.requested", "target": {"address": "C0:FE:00:00:00:03"},
              "trigger": {"nth": 1}, "action": {"kind": "replug", "goneMs": 1500, "newIndex": "next"}}]}
            """#
        try await Self.withPlan(plan, count: 6) { bench in
            let run = try await Self.provisionConverges(bench, changed: 4)
            let follows = ConsoleFixture.jsonLines(run.stdout, kind: "recovery").filter {
                $0["action"] as? String == "follow-adapter"
            }
            #expect(follows.count == 1, "\(run.stdout)")
            #expect((follows.first?["detail"] as? String)?.hasSuffix("hci0 → hci1") == true, "\(follows)")
        }
    }

    @Test func anAdapterGoneForGoodDuringTheScanIsNotNothingToDo() async throws {
        // hci0 goes 2 s into the scan and stays away past the 30 s allowed.
        let plan = #"""
            {"rules": [{"id": "gone", "hook": "time", "target": {"adapter": 0}, "trigger": {"atMs": 2000},
              "action": {"kind": "replug", "goneMs": 120000, "newIndex": "next"}}]}
            """#
        try await Self.withPlan(plan, count: 3) { bench in
            let run = try await bench.beaconbench(["run", bench.batch("provision-new.batch")], timeout: 300)
            #expect(run.status == 3, "\(run.stdout) \(run.stderr)")
            #expect(run.stderr.contains("went away"), "\(run.stderr)")
            #expect(!run.stderr.contains("nothing to do"), "\(run.stderr)")
        }
    }

    @Test func anAdapterBackUnderANewNameDuringTheScanIsScannedAgain() async throws {
        // hci0 goes 2 s into the scan and comes back as hci1 3 s later,
        // knowing none of the new beacons (never connected).
        let plan = #"""
            {"rules": [{"id": "replug", "hook": "time", "target": {"adapter": 0}, "trigger": {"atMs": 2000},
              "action": {"kind": "replug", "goneMs": 3000, "newIndex": "next"}}]}
            """#
        try await Self.withPlan(plan, count: 4) { bench in
            try await Self.provisionConverges(bench, changed: 2)
        }
    }

    @Test func aStationTakesNoCachedObjectForABeaconOnTheBench() async throws {
        // Beacons 1–3 were heard at −42 dBm 20 s ago and left: bluetoothd
        // still has their objects and RSSI. Beacons 4 and 5 are on the
        // bench; 6 (battery 20 %) and 7 (firmware 1.0.6) too.
        let left = (1...3).map(StationTests.address)
        let rules = left.enumerated().map { index, address in
            #"{"id": "m7-\#(index)", "hook": "time", "target": {"address": "\#(address)"}, "trigger": {"atMs": 0},"#
                + #" "action": {"kind": "vanish", "keepObject": true, "preheard": {"rssi": -42, "agoMs": 20000}}}"#
        }
        try await Self.withPlan(#"{"rules": [\#(rules.joined(separator: ","))]}"#, count: 7) { bench in
            let output = try await bench.beaconbench(
                ["--json", "station", "--profile", "car", "--rssi-min", "-60", "--count", "4"], timeout: 240)
            #expect(output.status == 0, "\(output.stderr)")
            let lines = ConsoleFixture.jsonLines(output.stdout, kind: "station")
            let verdicts = Dictionary(
                lines.map { ($0["device"] as? String ?? "", $0["verdict"] as? String ?? "") }
            ) { first, _ in first }
            for address in left { #expect(verdicts[address] == nil, "a beacon that left was taken: \(verdicts)") }
            for number in [4, 5] { #expect(verdicts[StationTests.address(number)] == "converged", "\(verdicts)") }
            for number in [6, 7] { #expect(verdicts[StationTests.address(number)] == "skipped", "\(verdicts)") }
            // No connect was tried on them: no outcome names them.
            let log = try await bench.beaconbench(["log", "--json", "--limit", "500"])
            let named = Set(
                ConsoleFixture.jsonLines(log.stdout, kind: "outcome").compactMap { $0["device"] as? String })
            for address in left { #expect(!named.contains(address), "\(address) was worked on") }
        }
    }

    @Test func aBeaconHeardButNotServedBeforeItLeftIsMissed() async throws {
        try await withNewFleet(count: 3, simulatorOptions: ["--latency", "realistic"]) { bench in
            try await StationTests.clearTheBench(bench)
            async let station = bench.beaconbench(
                ["--json", "--concurrency", "1", "station", "--profile", "car", "--rssi-min", "-60", "--for", "25s"],
                timeout: 240)
            try await StationTests.bringIn(bench, 1, rssi: -45)
            try await StationTests.bringIn(bench, 2, rssi: -55)
            // Beacon 1 is being served (one slot): beacon 2 waits, then leaves.
            try await bench.waitFor(#"{"connected": "\#(StationTests.address(1))"}"#)
            try await StationTests.update(bench, StationTests.address(2), #"{"inRange": false}"#)
            let output = try await station
            #expect(output.status == 2, "a missed beacon is a failure: \(output.stderr)")
            let lines = ConsoleFixture.jsonLines(output.stdout, kind: "station")
            let missed = lines.first { $0["device"] as? String == StationTests.address(2) }
            #expect(missed?["verdict"] as? String == "missed", "\(output.stdout)")
            // Left while queued, or — when its turn came within the 3 s it
            // still counted as near — while its connect was under way.
            let reason = missed?["reason"] as? String ?? ""
            #expect(
                reason == "left while queued (slots busy)" || reason.hasPrefix("left during connect"), "\(reason)")
            let summary = try #require(ConsoleFixture.jsonLines(output.stdout, kind: "station_summary").first)
            #expect(summary["missed"] as? Int == 1, "\(summary)")
        }
    }
}
