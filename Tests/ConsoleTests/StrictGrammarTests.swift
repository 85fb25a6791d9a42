import Console
import FleetReport
import Foundation
import Inventory
import TestSupport
import Testing

/// One grammar for what a person writes (docs/batch-language.md,
/// "Values"): decimal numbers, documented units, real dates, each key once,
/// and `report` reading and combining selectors as `select` does.
@Suite("the strict value grammar", .timeLimit(.minutes(5)))
struct StrictGrammarTests {
    static let profiles: Set<String> = ["car", "van", "truck", "bus", "motorcycle"]

    static func refusal(_ text: String) -> String? {
        do {
            _ = try BatchParser(file: "g.batch", profiles: Self.profiles).parse(text)
            return nil
        } catch {
            return error.description
        }
    }

    @Test func numbersAndDurationsAreDecimal() {
        #expect(ValueGrammar.whole("42") == 42)
        #expect(ValueGrammar.whole("-70") == -70)
        #expect(ValueGrammar.whole("007") == 7)
        #expect(ValueGrammar.whole("65535", as: UInt16.self) == 65535)
        for text in ["+5", "0x10", "1e3", "", "-", "--5", " 5", "5 ", "4_000", "١٢", "99999999999999999999", "-0x1"] {
            #expect(ValueGrammar.whole(text) == nil, "whole '\(text)'")
        }
        #expect(ValueGrammar.whole("65536", as: UInt16.self) == nil)
        #expect(ValueGrammar.whole("-1", as: UInt8.self) == nil)
        #expect(ValueGrammar.duration("10s") == 10)
        #expect(ValueGrammar.duration("500ms") == 0.5)
        #expect(ValueGrammar.duration("1.5m") == 90)
        #expect(ValueGrammar.duration("2h") == 7200)
        #expect(ValueGrammar.duration("30") == 30)
        for text in [
            "0x10", "0x10s", "0x1p4", "1e3", "1E3s", "+5", "+5s", "-5s", "inf", "nan", "infinity", ".5s", "5.s",
            "1.2.3s", "10 s", "10S", "", "s", "ms",
        ] {
            #expect(ValueGrammar.duration(text) == nil, "duration '\(text)'")
        }
    }

    @Test func datesAreCheckedFieldByField() throws {
        let now = Date(timeIntervalSince1970: 1_764_000_000)
        #expect(try ValueGrammar.time("2026-11-30", now: now) == Date(timeIntervalSince1970: 1_795_996_800))
        #expect(try ValueGrammar.time("2028-02-29", now: now) == Date(timeIntervalSince1970: 1_835_395_200))
        #expect(try ValueGrammar.time("2026-11-30T14:00:00Z", now: now) == Date(timeIntervalSince1970: 1_796_047_200))
        #expect(
            try ValueGrammar.time("2026-11-30T15:30:00.5+01:30", now: now)
                == Date(timeIntervalSince1970: 1_796_047_200.5))
        #expect(try ValueGrammar.time("7d", now: now) == now.addingTimeInterval(-7 * 86_400))
        #expect(try ValueGrammar.time("1.5h", now: now) == now.addingTimeInterval(-5400))
        let refused: [(String, String)] = [
            ("2026-02-30", "day 30 is past the end of February 2026 (it has 28 days)"),
            ("2027-02-29", "day 29 is past the end of February 2027 (it has 28 days)"),
            ("2026-04-31", "day 31 is past the end of April 2026 (it has 30 days)"),
            ("2026-13-01", "month 13 is not 01–12"),
            ("2026-00-10", "month 0 is not 01–12"),
            ("2026-11-00", "day 00 is not a day"),
            ("2026-11-30T24:00:00Z", "hour 24 is not 00–23"),
            ("2026-11-30T14:60:00Z", "minute 60 is not 00–59"),
            ("2026-11-30T14:00:60Z", "second 60 is not 00–59"),
            ("2026-11-30T14:00:00", "a time ends with its zone: Z or +HH:MM (got none)"),
            ("2026-11-30T14:00:00+25:00", "zone +25:00 is not within −14:00–+14:00"),
            ("+2026-11-30", "a date (2026-11-30), a time (2026-11-30T14:00:00Z) or an age (7d, 12h, 30m) expected"),
            ("2026-1-30", "a date (2026-11-30), a time (2026-11-30T14:00:00Z) or an age (7d, 12h, 30m) expected"),
            ("0x7d", "an age is a decimal number and a unit d, h, m or s (7d, 1.5h)"),
            ("1e3d", "an age is a decimal number and a unit d, h, m or s (7d, 1.5h)"),
            ("99999999d", "an age of at most 36500 days (100 years)"),
            ("1969-12-31", "year 1969 is outside 1970–9999"),
        ]
        for (text, reason) in refused {
            let error = #expect(throws: ValueGrammar.Failure.self) { try ValueGrammar.time(text, now: now) }
            #expect(error?.reason == reason, "\(text)")
        }
    }

    static let broken: [(String, String)] = [
        ("scan 0x10", "g.batch:1:6: error: '0x10' is not a duration in 100 ms–3600 s"),
        ("scan 1e3", "g.batch:1:6: error: '1e3' is not a duration"),
        ("scan +5s", "g.batch:1:6: error: '+5s' is not a duration"),
        ("scan inf", "g.batch:1:6: error: 'inf' is not a duration"),
        ("\nwatch nan", "g.batch:2:7: error: 'nan' is not a duration in 100 ms–86400 s"),
        ("scan 10s --rssi +0", "g.batch:1:17: error: --rssi wants DBM in -127–0, got '+0'"),
        ("scan 10s --rssi -70 --rssi -50", "g.batch:1:21: error: --rssi is given twice (first at 1:10); write it once"),
        ("select battery<+30", "g.batch:1:8: error: battery< wants a percentage 0–100, got '+30'"),
        ("select minor=0x1-5", "g.batch:1:8: error: minor= wants a range A-B with A ≤ B in 0–65535, got '0x1-5'"),
        ("require firmware>=+1.0.8", "g.batch:1:9: error: firmware>= wants a version like 1.0.8, got '+1.0.8'"),
        (
            "records --since 2026-02-30",
            "g.batch:1:17: error: --since wants a date (2026-11-30), a time (2026-11-30T14:00:00Z) or an age (7d, 12h, 30m), got '2026-02-30': day 30 is past the end of February 2026 (it has 28 days)"
        ),
        (
            "assign van major=1 major=2 C0:FE:00:00:00:01",
            "g.batch:1:20: error: 'major' is given twice (first at 1:12); write each key once"
        ),
        (
            "assign van cornering=300 \\\n  cornering=400",
            "g.batch:2:3: error: 'cornering' is given twice (first at 1:12); write each key once"
        ),
        ("assign van major=+5", "g.batch:1:12: error: major must be 0–65535 or 'profile', got '+5'"),
        ("assign van braking=0x140", "g.batch:1:12: error: braking must be"),
        (
            "identity car minor=1 minor=2",
            "g.batch:1:22: error: 'minor' is given twice (first at 1:14); write each key once"
        ),
    ]

    @Test func badValuesInABatchAreRefusedAtTheirPlace() {
        for (text, message) in Self.broken {
            let refusal = Self.refusal(text)
            #expect(refusal?.hasPrefix(message) == true, "\(text): \(refusal ?? "accepted")")
        }
        // What the grammar takes still parses.
        for text in [
            "scan 1.5m --rssi -70", "watch 2h", "records --since 2028-02-29 --until 2026-11-30T14:00:00+01:00",
            "records --since 90d", "assign van major=250 minor=auto cornering=300 C0:FE:00:00:00:01",
            "select battery<30 minor=1-40 firmware<1.0.8",
        ] {
            #expect(Self.refusal(text) == nil, "\(text): \(Self.refusal(text) ?? "")")
        }
    }

    @Test func theCommandLineTakesTheSameGrammar() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let cases: [([String], String)] = [
            (["scan", "0x10"], "<command line>:1:6: error: '0x10' is not a duration"),
            (["scan", "1e3"], "<command line>:1:6: error: '1e3' is not a duration"),
            (["records", "--since", "2026-02-30"], "day 30 is past the end of February 2026"),
            (
                ["assign", "van", "major=1", "major=2", "C0:FE:00:00:00:01"],
                "<command line>:1:20: error: 'major' is given twice (first at 1:12)"
            ),
            (["--concurrency", "+4", "inventory", "list"], "--concurrency wants 1–64, got '+4'"),
        ]
        for (arguments, message) in cases {
            let run = try await bench.beaconbench(arguments)
            #expect(run.status == 1, "\(arguments): exit \(run.status) \(run.stderr)")
            #expect(run.stderr.contains(message), "\(arguments): \(run.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: bench.inventoryPath), "a refused line touched the inventory")
        #expect(throws: Invocation.UsageError.self) { try Invocation.parse(["--sim", "+3"]) }
        #expect(throws: Invocation.UsageError.self) {
            try Invocation.parse(["run", "b", "--set", "a=1", "--set", "a=2"])
        }
    }

    /// `report` combines selectors as `select` documents: addresses and MAC
    /// endings name devices (any of them), every other selector must hold.
    @Test func reportCombinesSelectorsAsSelectDoes() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let inventory = try Inventory(path: bench.inventoryPath)
        let devices: [(String, String, UInt8)] = [
            ("C0:FE:00:00:00:01", "car", 10), ("C0:FE:00:00:00:02", "car", 80), ("C0:FE:00:00:00:03", "van", 10),
        ]
        for (address, profile, battery) in devices {
            var record = DeviceRecord(address: address)
            record.battery = battery
            try await inventory.recordDevice(record)
            try await inventory.assignProfile(profile, to: address)
        }
        let cases: [([String], Int)] = [
            (["profile=car"], 2), (["battery<30"], 2), (["profile=car", "battery<30"], 1),
            (["C0:FE:00:00:00:01", "00000003"], 2), (["C0:FE:00:00:00:01", "00000003", "profile=car"], 1),
            (["all", "profile=van", "battery<30"], 1), (["profile=van", "battery<5"], 0),
        ]
        for (selectors, expected) in cases {
            let page = bench.directory + "/report.html"
            let run = try await bench.beaconbench(["--json", "report", "--out", page] + selectors)
            #expect(run.status == 0, "\(selectors): \(run.stderr)")
            let line = ConsoleFixture.jsonLines(run.stdout, kind: "report").first
            #expect(line?["devices"] as? Int == expected, "report \(selectors.joined(separator: " ")): \(run.stdout)")
        }
    }
}
