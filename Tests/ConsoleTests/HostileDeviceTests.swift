import Foundation
import TestSupport
import Testing

/// Beacons whose names and Device Information strings hold escape
/// sequences, BEL, NUL, C1 controls, bidi overrides, invalid UTF-8, CSV
/// formulas and 4,000-byte values (Tests/Fixtures/hostile-fleet.json): the
/// shipped batches, every listing and export and a REPL session run on a
/// pseudo-terminal into a terminal emulator (Tests/Peers/screen.py, pyte),
/// which must show no effect of a foreign escape sequence; the CSV export
/// read back holds no formula; the JSON gives the strings exactly.
@Suite("hostile beacons", .serialized, .timeLimit(.minutes(10)))
struct HostileDeviceTests {
    static let fleet = ConsoleFixture.repository + "/Tests/Fixtures/hostile-fleet.json"
    static let addresses = (1...6).map { "C0:FE:15:00:00:0\($0)" }

    /// The escape sequences beaconbench itself may write on a terminal with
    /// NO_COLOR: clearing its progress line, and readline's bracketed paste.
    static let ownSequences: Set<String> = ["\\x1b[K", "\\x1b[?2004h", "\\x1b[?2004l"]

    /// Runs beaconbench on the emulated terminal; its report.
    func onScreen(
        _ bench: ConsoleFixture, _ arguments: [String], input: [String] = [], timeout: Int = 150
    ) async throws -> [String: Any] {
        var screen = [
            ConsoleFixture.repository + "/Tests/Peers/screen.py", "--cols", "200", "--rows", "60",
            "--timeout", String(timeout),
        ]
        for line in input { screen += ["--input", line] }
        if !input.isEmpty { screen += ["--prompt", "\\]> $", "--eof"] }
        screen += ["--", builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory", bench.inventoryPath]
        let run = try await runTool(
            "/usr/bin/env", ["python3"] + screen + arguments, environment: bench.environment,
            timeout: TimeInterval(timeout + 30))
        #expect(run.status == 0, "screen.py: \(run.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    /// Nothing a foreign sequence does: no title, clear, cursor move, bell,
    /// colour, charset or mode change; no raw BEL, NUL, DEL, C1 or invalid
    /// byte; and no line forged by a newline in a device's string.
    func expectNoForeignEffect(_ report: [String: Any], _ what: String) {
        let effects = report["effects"] as? [String: Int] ?? [:]
        let modes = (report["modes"] as? [[String: Any]] ?? []).filter {
            ($0["modes"] as? [Int]) != [2004]
        }
        for effect in [
            "title", "icon_name", "erase_in_display", "cursor_moves", "edits", "bell", "charset", "sgr", "reset",
            "reports", "unknown",
        ] {
            #expect(
                effects[effect] == 0, "\(what): \(effect) \(effects[effect] ?? -1): \(report["effect_calls"] ?? "")")
        }
        #expect(modes.isEmpty, "\(what): modes \(modes)")
        let raw = report["raw"] as? [String: Int] ?? [:]
        for count in ["bel", "nul", "del", "c1_code_points", "c1_bytes", "invalid_utf8", "shift_in_out"] {
            #expect(raw[count] == 0, "\(what): raw \(count) \(raw[count] ?? -1)")
        }
        let sequences = (report["escape_sequences"] as? [[String: Any]] ?? []).compactMap { $0["text"] as? String }
        #expect(Set(sequences).isSubset(of: Self.ownSequences), "\(what): \(sequences)")
        let lines = (report["display"] as? [String] ?? []) + (report["scrollback"] as? [String] ?? [])
        #expect(!lines.contains { $0.hasPrefix("C0:FE:15:00:00:99") }, "\(what): a forged line")
        #expect(report["timed_out"] as? Bool == false, "\(what): timed out")
    }

    @Test func nothingTheBeaconsSayReachesTheTerminalRaw() async throws {
        let bench = try await ConsoleFixture.start(["--fleet", Self.fleet])
        defer { bench.stop() }

        let provision = try await onScreen(bench, ["run", bench.batch("provision-new.batch")])
        expectNoForeignEffect(provision, "provision-new.batch")
        #expect(provision["exit_status"] as? Int == 0)
        // `require firmware` takes the version from the bench-summary advert
        // (1.0.8, well formed); the hostile Firmware Revision string is
        // read by `info` below.

        for (name, extra) in [
            ("audit.batch", [String]()), ("apply-profile.batch", ["--set", "profile=van", "--set", "select=all"]),
            ("bench-test.batch", ["--set", "scan=2s", "--set", "seconds=1s"]),
            ("pull-records.batch", ["--set", "scan=2s"]),
        ] {
            let report = try await onScreen(bench, ["run", bench.batch(name)] + extra)
            expectNoForeignEffect(report, name)
        }

        // Every listing and export, in one batch.
        let listings = bench.directory + "/listings.batch"
        try
            ([
                "inventory list", "log", "audit", "audit --passive", "inventory export --csv",
                "inventory export --json",
                "profiles list",
            ] + Self.addresses.map { "inventory show \($0)" }).joined(separator: "\n")
            .write(toFile: listings, atomically: true, encoding: .utf8)
        let listed = try await onScreen(bench, ["run", listings])
        expectNoForeignEffect(listed, "listings")
        let info = try await onScreen(bench, ["info"] + Self.addresses)
        expectNoForeignEffect(info, "info")
        // What `info` read of the first beacon, escaped, in its outcome.
        let log = try await onScreen(bench, ["log", "C0:FE:15:00:00:01", "--limit", "3"])
        expectNoForeignEffect(log, "log")
        // Joined as written: the detail wraps at the screen's 200 columns.
        let shown = ((log["scrollback"] as? [String] ?? []) + (log["display"] as? [String] ?? [])).joined()
        #expect(shown.contains("firmware '1.0.8\\x1b]0;pwned\\x07\\x1b[2J' (not a version)"), "\(shown)")
        let json = try await onScreen(bench, ["--json", "inventory", "list"])
        expectNoForeignEffect(json, "--json inventory list")

        // A REPL session: events above the prompt, the prompt itself.
        let repl = try await onScreen(
            bench, [], input: ["scan 2s", "devices", "select all", "info", "inventory show C0:FE:15:00:00:03"])
        expectNoForeignEffect(repl, "the REPL")
    }

    @Test func theCSVHoldsNoFormulaAndTheJSONIsExact() async throws {
        let bench = try await ConsoleFixture.start(["--fleet", Self.fleet])
        defer { bench.stop() }
        let info = try await bench.beaconbench(["info"] + Self.addresses)
        #expect(info.status == 0 || info.status == 2, "\(info.stderr)")

        let csv = try await bench.beaconbench(["inventory", "export", "--csv"])
        #expect(csv.status == 0, "\(csv.stderr)")
        let file = bench.directory + "/export.csv"
        try csv.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        let check = try await runTool(
            "/usr/bin/env",
            [
                "python3", "-c",
                """
                import csv, sys
                rows = list(csv.reader(open(sys.argv[1], newline='')))
                bad = [c for row in rows for c in row if c[:1] in ('=', '+', '-', '@', '\\t', '\\r')]
                controls = [c for row in rows for c in row if any(ord(x) < 32 or 127 <= ord(x) < 160 for x in c)]
                print(len(rows), len(bad), len(controls))
                """, file,
            ])
        #expect(
            check.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "7 0 0", "\(check.stdout) \(check.stderr)")
        #expect(csv.stdout.contains(",'+1,'-1+2,'@SUM(1),"), "\(csv.stdout)")

        let export = try await bench.beaconbench(["inventory", "export", "--json"])
        let devices = ConsoleFixture.jsonLines(export.stdout, kind: "device_row")
        let byAddress = Dictionary(uniqueKeysWithValues: devices.map { ($0["address"] as? String ?? "", $0) })
        #expect(byAddress["C0:FE:15:00:00:01"]?["model"] as? String == "SB-1\u{1B}[31m\u{1B}[5;5H")
        #expect(byAddress["C0:FE:15:00:00:03"]?["model"] as? String == "\u{2066}SB-1\u{2069}\u{200F}\u{202D}")
        #expect(byAddress["C0:FE:15:00:00:06"]?["model"] as? String == "+1")
        // Invalid UTF-8 is stored as U+FFFD; 4,000 bytes are cut at 512.
        #expect(byAddress["C0:FE:15:00:00:04"]?["model"] as? String == "\u{FFFD}\u{FFFD}")
        #expect((byAddress["C0:FE:15:00:00:05"]?["serial"] as? String)?.utf8.count == 512)
        #expect(!export.stdout.unicodeScalars.contains { (0x7F...0x9F).contains($0.value) || $0 == "\u{1B}" })
    }
}
