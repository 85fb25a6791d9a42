import Foundation
import TestSupport
import Testing

/// `scan DURATION --until N`: a bench that knows how many beacons it holds
/// waits until it has heard them, not for a fixed time. The tests' scans
/// before exact counts use it (issue 27: `scan 1s` then "30 seen" was
/// wall-clock luck under load).
@Suite("scan --until: as long as it takes to hear N beacons", .timeLimit(.minutes(10)))
struct ScanUntilTests {
    /// 30 beacons, `scan 600s --until 30`: all 30 seen, and the scan ends
    /// when the 30th is heard — the run is killed at 300 s (runTool's
    /// timeout) if it waits out the duration instead.
    @Test func endsWhenTheLastBeaconIsHeard() async throws {
        try await withNewFleet(count: 30) { bench in
            let run = try await bench.beaconbench(["--json"], stdin: "scan 600s --until 30\n", timeout: 300)
            #expect(run.status == 0, "\(run.stderr)")
            let scan = try #require(ConsoleFixture.jsonLines(run.stdout, kind: "scan").first, "\(run.stdout)")
            #expect(scan["seen"] as? Int == 30)
        }
    }

    /// A target the bench cannot meet: the whole duration, every beacon
    /// there is, and the shortfall said.
    @Test func aTargetNotMetIsSaid() async throws {
        try await withNewFleet(count: 3) { bench in
            let run = try await bench.beaconbench(["scan", "1s", "--until", "4"])
            #expect(run.status == 0, "\(run.stderr)")
            let said = run.stdout + run.stderr
            #expect(said.contains("scan: 3 SBeacons seen") && said.contains("fewer than the 4 awaited"), "\(said)")
            let zero = try await bench.beaconbench(["scan", "300ms", "--until", "0"])
            #expect(
                zero.status == 0 && !(zero.stdout + zero.stderr).contains("awaited"), "\(zero.stdout)\(zero.stderr)")
        }
    }

    /// Beacons announced as real ones are (`--split-adverts`: the first
    /// report the iBeacon advert alone, the bench summary in the next, 2 s
    /// later here): `--until` waits until each is heard whole, so the scan
    /// counts all of them new and `select new` — read from the summary —
    /// selects all of them (through real bluetoothd the scan ended with 3
    /// of 10 summaries unheard, and select new left those out).
    @Test func untilWaitsForEachBeaconWhole() async throws {
        try await withNewFleet(count: 8, simulatorOptions: ["--split-adverts", "--advert-ms", "2000"]) { bench in
            let run = try await bench.beaconbench(
                ["--json"], stdin: "scan 600s --until 8\nselect new\n", timeout: 300)
            #expect(run.status == 0, "\(run.stderr)")
            let scan = try #require(ConsoleFixture.jsonLines(run.stdout, kind: "scan").first, "\(run.stdout)")
            #expect(scan["seen"] as? Int == 8 && scan["new"] as? Int == 8, "\(scan)")
            let selected = try #require(ConsoleFixture.jsonLines(run.stdout, kind: "selection").first, "\(run.stdout)")
            #expect((selected["devices"] as? [Any])?.count == 8, "\(selected)")
        }
    }

    /// The shipped batches scan with `--until ${expect}`: `--set expect=N`
    /// ends provision-new's scan once N are heard.
    @Test func shippedBatchesTakeExpect() async throws {
        try await withNewFleet(count: 6) { bench in
            let run = try await bench.beaconbench(
                ["--json", "run", bench.batch("provision-new.batch"), "--set", "scan=600s", "--set", "expect=6"],
                timeout: 300)
            #expect(run.status == 0, "\(run.stderr)")
            #expect(ConsoleFixture.jsonLines(run.stdout, kind: "scan").first?["seen"] as? Int == 6)
        }
    }
}
