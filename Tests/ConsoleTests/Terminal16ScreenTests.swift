import Foundation
import TestSupport
import Testing

/// The REPL on a pseudo-terminal whose screen pyte emulates
/// (Tests/Peers/repl_driver.py): what a person would see.
@Suite("the terminal: screens through a pty", .serialized, .timeLimit(.minutes(5)))
struct Terminal16ScreenTests {
    struct Screen: Decodable {
        var display: [String]
        var cursor: [String: Int]
    }
    struct Session: Decodable {
        var ok: Bool
        var step: Int
        var status: Int?
        var transcript: String
        var esc: Int
        var screens: [String: Screen]
        var display: [String]
    }

    /// Runs the REPL on `bench` through the driver: `steps` typed on a
    /// terminal of type `term`, `environment` changed (nil unsets).
    static func drive(
        _ bench: ConsoleFixture, term: String = "xterm", cols: Int = 200, rows: Int = 50,
        environment: [String: String?] = [:], arguments: [String] = [], _ steps: [[String: Any]]
    ) async throws -> Session {
        let script = bench.directory + "/script-\(UUID().uuidString).json"
        var changes: [String: Any] = [:]
        for (name, value) in environment { changes[name] = value ?? NSNull() }
        let object: [String: Any] = ["steps": steps, "term": term, "cols": cols, "rows": rows, "env": changes]
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: script))
        let driver = ConsoleFixture.repository + "/Tests/Peers/repl_driver.py"
        // The python3 that scripts/install-deps gave pyte.
        let output = try await runTool(
            "/usr/bin/env",
            [
                "python3", driver, script, "--", builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory",
                bench.inventoryPath,
            ] + arguments, environment: bench.environment, timeout: 600)
        return try JSONDecoder().decode(Session.self, from: Data(output.stdout.utf8))
    }

    static func update(_ bench: ConsoleFixture, _ number: Int, inRange: Bool) -> [String] {
        [
            "busctl", "--address=\(bench.busAddress)", "call", "org.beaconbench.Simulator",
            "/org/beaconbench/Simulator", "org.beaconbench.Simulator1", "Update", "ss",
            String(format: "C0:FE:00:00:00:%02X", number), "{\"inRange\": \(inRange)}",
        ]
    }

    static func escaped(_ text: String) -> String { NSRegularExpression.escapedPattern(for: text) }

    /// Beacons come into range while the operator types, slowly, with
    /// colour on: each event is printed whole on a row of its own above
    /// the prompt, and the prompt and the half-typed line are drawn again
    /// below it, with nothing left over anywhere on the screen. On the
    /// narrower terminal the prompt and the typed line take two rows.
    @Test(arguments: [200, 110])
    func eventsAboveTheTypedLineLeaveNoResidue(columns: Int) async throws {
        try await withNewFleet(count: 5) { bench in
            for number in 3...5 {
                let update = Self.update(bench, number, inRange: false)
                _ = try await runTool(update[0], Array(update.dropFirst()))
            }
            let prompt = #"beaconbench \[hci0 · \d+ seen\]> "#
            var steps: [[String: Any]] = [
                ["expect": "]> "],
                ["send": "scan on\n"], ["expect": "background scan on"],
                ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:01 .*"#],
                ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:02 .*"#],
                ["screen": #"beaconbench \[hci0 · \d+ seen\]>"#],  // rows are right-stripped
            ]
            let typed =
                columns == 200
                ? ["inv", "entory", " li"]
                : [
                    "inventory list ", String(repeating: "abcdefghij", count: 4),
                    String(repeating: "klmnopqrst", count: 4) + " end",
                ]
            for (number, piece) in zip(3...5, typed) {
                // Typed key by key, each once the line editor has echoed the one before.
                steps += piece.map { ["send": String($0), "echo": true] }
                // (On the screen: with colour, `[NEW] ` is a colour of its own.)
                steps += [
                    ["run": Self.update(bench, number, inRange: true)],
                    ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:0\#(number) .*"#],
                ]
            }
            let line = typed.joined()
            // The prompt drawn again (its rows were cleared for the event).
            let promptWidth = 29  // "beaconbench [hci0 · N seen]> "
            let lastRow =
                promptWidth + line.count <= columns
                ? prompt + Self.escaped(line) : Self.escaped(String(line.suffix(promptWidth + line.count - columns)))
            steps += [
                ["screen": lastRow],
                ["snapshot": "typing"],
                ["send": "\u{15}scan off\n"], ["expect": "background scan off"],
                ["eof": true],
            ]
            let session = try await Self.drive(bench, cols: columns, environment: ["NO_COLOR": nil], steps)
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            #expect(session.status == 0)
            #expect(session.esc > 0, "colour and redraws expected on xterm")
            let screen = try #require(session.screens["typing"])
            var rows = screen.display
            while rows.last == "" { rows.removeLast() }
            let start = try #require(rows.firstIndex { $0.hasPrefix("background scan on") }, "\(rows)")
            #expect(start == 2, "\(rows)")  // the banner, the prompt with `scan on`
            #expect(rows[1].wholeMatch(of: try Regex(prompt + "scan on")) != nil, "\(rows)")
            let promptRows = columns == 200 ? 1 : 2
            let below = Array(rows[(start + 1)...])
            // Five events, whole, one per row, then the prompt.
            try #require(below.count == 5 + promptRows, "\(rows)")
            let event = try Regex(#"\[NEW\] SBeacon C0:FE:00:00:00:0([1-5]) \([0-9a-f]{8}\) rssi -?\d+ .*"#)
            var numbers: Set<String> = []
            for row in below.prefix(5) {
                #expect(row.wholeMatch(of: event) != nil, "a row that is not a whole event: \(row) in \(rows)")
                #expect(!row.contains("]>"), "prompt residue in \(row)")
                if let match = row.wholeMatch(of: event), let number = match.output[1].substring {
                    numbers.insert(String(number))
                }
            }
            #expect(numbers == ["1", "2", "3", "4", "5"], "\(rows)")
            // The prompt and the half-typed line, intact, the cursor at its end.
            let shown = below.suffix(promptRows).joined()
            #expect(shown.wholeMatch(of: try Regex(prompt + Self.escaped(line))) != nil, "\(rows)")
            if promptRows == 2 { #expect(below[5].count == columns, "\(rows)") }
            #expect(rows.filter { $0.contains("]> ") }.count == 2, "\(rows)")
            #expect(screen.cursor["y"] == rows.count - 1)
            #expect(screen.cursor["x"] == shown.count % columns, "\(screen.cursor) \(rows)")
        }
    }

    /// An event while the cursor is inside the typed line: the line is
    /// drawn again with the cursor where it was, and typing goes on there.
    @Test func anEventKeepsTheCursorInsideTheTypedLine() async throws {
        try await withNewFleet(count: 3) { bench in
            let update = Self.update(bench, 3, inRange: false)
            _ = try await runTool(update[0], Array(update.dropFirst()))
            let prompt = #"beaconbench \[hci0 · \d seen\]> "#
            let session = try await Self.drive(
                bench, environment: ["NO_COLOR": nil],
                [
                    ["expect": "]> "],
                    ["send": "scan on\n"], ["expect": "background scan on"],
                    ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:02 .*"#], ["screen": #"beaconbench \[.*\]>"#],
                    ["send": "inventory lst"], ["send": "\u{1B}[D"], ["send": "\u{1B}[D"],
                    ["run": Self.update(bench, 3, inRange: true)],
                    ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:03 .*"#], ["screen": prompt + "inventory lst"],
                    ["snapshot": "moved"],
                    ["send": "i"], ["screen": prompt + "inventory list"],
                    ["snapshot": "typed"],
                    // Ctrl-E, Ctrl-U: the whole line away.
                    ["send": "\u{5}\u{15}scan off\n"], ["expect": "background scan off"],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            for (name, column) in [("moved", 29 + 11), ("typed", 29 + 12)] {
                let screen = try #require(session.screens[name])
                let rows = screen.display.filter { !$0.isEmpty }
                #expect(rows.last?.hasSuffix(name == "moved" ? "]> inventory lst" : "]> inventory list") == true)
                #expect(rows.dropLast().last?.hasPrefix("[NEW] SBeacon C0:FE:00:00:00:03 ") == true, "\(rows)")
                #expect(
                    screen.cursor["y"] == rows.count - 1 && screen.cursor["x"] == column, "\(name): \(screen.cursor)")
            }
        }
    }

    /// The window narrowed while the prompt waits (readline's own SIGWINCH
    /// handler is not installed then): an event, then Ctrl-A and a key,
    /// are drawn for the new width, the line wrapping onto a second row.
    @Test func aResizedWindowIsFollowed() async throws {
        try await withNewFleet(count: 3) { bench in
            let update = Self.update(bench, 3, inRange: false)
            _ = try await runTool(update[0], Array(update.dropFirst()))
            let line = "inventory list " + String(repeating: "abcdefghij", count: 6)  // 75 + 29 columns
            let session = try await Self.drive(
                bench, cols: 200, environment: ["NO_COLOR": nil],
                [
                    ["expect": "]> "],
                    ["send": "scan on\n"], ["expect": "background scan on"],
                    ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:02 .*"#], ["screen": #"beaconbench \[.*\]>"#],
                    ["send": line], ["screen": #"beaconbench \[hci0 · \d seen\]> "# + Self.escaped(line)],
                    ["resize": [50, 80]],
                    ["run": Self.update(bench, 3, inRange: true)],
                    ["screen": #"\[NEW\] SBeacon C0:FE:00:00:00:03 .*"#],
                    ["screen": Self.escaped(String(line.suffix(29 + line.count - 80)))],
                    ["send": "\u{1}X"],
                    ["screen": #"beaconbench \[hci0 · \d seen\]> X"# + Self.escaped(String(line.prefix(80 - 30)))],
                    ["snapshot": "narrow"],
                    ["send": "\u{5}\u{15}scan off\n"], ["expect": "background scan off"],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            let screen = try #require(session.screens["narrow"])
            let rows = screen.display.filter { !$0.isEmpty }
            let shown = rows.suffix(2).joined()
            #expect(
                shown.wholeMatch(of: try Regex(#"beaconbench \[hci0 · \d seen\]> X"# + Self.escaped(line))) != nil,
                "\(rows)")
            // The event above it (80 columns wrap it too), no prompt left over.
            #expect(rows.dropLast(3).last?.hasPrefix("[NEW] SBeacon C0:FE:00:00:00:03 ") == true, "\(rows)")
            #expect(rows.filter { $0.contains("]> ") }.count == 2, "\(rows)")
            #expect(screen.cursor["y"] == rows.count - 2 && screen.cursor["x"] == 30, "\(screen.cursor) \(rows)")
        }
    }

    /// A command's output starts at the left of a row of its own below
    /// the line typed: readline drew a second prompt after each line, and
    /// the output overwrote it (`selected 2 devices (new)een]>`).
    @Test func aCommandsOutputLeavesNoPromptBehind() async throws {
        try await withNewFleet(count: 3) { bench in
            let session = try await Self.drive(
                bench, environment: ["NO_COLOR": nil],
                [
                    ["expect": "]> "],
                    ["send": "scan 120s --until 3\n"], ["expect": "scan: 3 SBeacons seen"],
                    ["screen": #"beaconbench \[.*\]>"#],
                    ["send": "select new\n"], ["screen": #"selected 3 devices \(new\)"#],
                    ["screen": #"beaconbench \[hci0 · 3 seen · 3 selected\]>"#],
                    ["send": "select 00000001\n"], ["screen": #"selected 1 device \(00000001\)"#],
                    ["screen": #"beaconbench \[hci0 · 3 seen · 1 selected\]>"#],
                    ["snapshot": "after"],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            #expect(session.status == 0)
            let rows = try #require(session.screens["after"]).display.filter { !$0.isEmpty }
            let prompts = rows.filter { $0.contains("]>") }
            #expect(prompts.count == 4, "\(rows)")
            for row in prompts {
                #expect(row.hasPrefix("beaconbench [hci0 · "), "a prompt's remains: \(row) in \(rows)")
            }
            let tail = Array(rows.suffix(5))
            #expect(tail.count == 5)
            #expect(tail[0].wholeMatch(of: #/beaconbench \[hci0 · 3 seen\]> select new/#) != nil, "\(rows)")
            #expect(tail[1] == "selected 3 devices (new)", "\(rows)")
            #expect(tail[2] == "beaconbench [hci0 · 3 seen · 3 selected]> select 00000001", "\(rows)")
            #expect(tail[3] == "selected 1 device (00000001)", "\(rows)")
            #expect(tail[4] == "beaconbench [hci0 · 3 seen · 1 selected]>", "\(rows)")
        }
    }

    /// Ctrl-D typed the moment a command's output appears ends the session,
    /// every time: typed while the command still runs (a scan, its first
    /// beacon shown) or once it has printed all (before or after the next
    /// prompt is up). It was lost when it came while the terminal was back
    /// in canonical mode between two lines (the kernel's end-of-file mark
    /// became a NUL byte when readline took the terminal again).
    @Test func ctrlDRightAfterACommandEndsTheSession() async throws {
        try await withNewFleet(count: 2) { bench in
            var failures: [String] = []
            for round in 1...20 {
                let (command, output) =
                    switch round % 3 {
                    case 0: ("scan 1s", "[NEW] SBeacon")
                    case 1: ("profiles list", "van")
                    default: ("help quit", "leave the REPL")
                    }
                let session = try await Self.drive(
                    bench,
                    [
                        ["expect": "]> "],
                        ["send": command + "\n"], ["expect": output],
                        ["eof": true],
                    ])
                if !session.ok || session.status != 0 {
                    failures.append(
                        "round \(round) (\(command)): step \(session.step), status \(String(describing: session.status))"
                    )
                }
            }
            #expect(failures.isEmpty, "\(failures)")
        }
    }

    /// TERM=dumb, colour not turned off otherwise: not one escape sequence
    /// in a session with a scan, background events, a fleet run, tables,
    /// an error and Ctrl-C; plain lines instead.
    @Test func aDumbTerminalGetsNoEscapeSequences() async throws {
        try await withNewFleet(count: 4) { bench in
            let update = Self.update(bench, 4, inRange: false)
            _ = try await runTool(update[0], Array(update.dropFirst()))
            let session = try await Self.drive(
                bench, term: "dumb", environment: ["NO_COLOR": nil],
                [
                    ["expect": "]> "],
                    ["send": "scan 120s --until 3\n"], ["expect": "scan: 3 SBeacons seen"], ["expect": "]> "],
                    ["send": "scan on\n"], ["expect": "background scan on"], ["expect": "]> "],
                    ["send": "inv"], ["run": Self.update(bench, 4, inRange: true)],
                    ["expect": "[NEW] SBeacon C0:FE:00:00:00:04"], ["expect": "]> inv"],
                    ["send": "\u{15}scan off\n"], ["expect": "background scan off"], ["expect": "]> "],
                    ["send": "select all\n"], ["expect": "selected 4 devices"], ["expect": "]> "],
                    ["send": "info\n"], ["expect": "RECAP"], ["expect": "4 devices:"], ["expect": "]> "],
                    ["send": "inventory list\n"], ["expect": "C0:FE:00:00:00:04"], ["expect": "]> "],
                    ["send": "audit\n"], ["expect": "AUDIT"], ["expect": "]> "],
                    ["send": "bogus-command\n"], ["expect": "error: "], ["expect": "]> "],
                    ["send": "half typed", "echo": true], ["send": "\u{3}"], ["expect": "^C"], ["expect": "]> "],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            #expect(session.status != nil)  // 2: the audit's findings and the error
            #expect(session.esc == 0, "escape bytes on a dumb terminal: \(session.transcript.debugDescription)")
            #expect(!session.transcript.contains("elapsed"), "a progress line on a dumb terminal")
            // Each device's end as a plain line.
            #expect(session.transcript.contains("C0:FE:00:00:00:01  ok"), "\(session.transcript)")
        }
    }

    /// The audit table in colour on a terminal: each column starts at the
    /// same place on the header and on every row (colour codes were
    /// counted as columns, and the header drifted).
    @Test func aColouredTableLinesUpOnTheScreen() async throws {
        try await withNewFleet(count: 4) { bench in
            let session = try await Self.drive(
                bench, environment: ["NO_COLOR": nil],
                [
                    ["expect": "]> "],
                    ["send": "scan 120s --until 4\n"], ["expect": "scan: 4 SBeacons seen"], ["expect": "]> "],
                    ["send": "select all\n"], ["expect": "selected 4 devices"], ["expect": "]> "],
                    ["send": "info\n"], ["expect": "RECAP"], ["expect": "4 devices:"], ["expect": "]> "],
                    ["send": "audit\n"], ["screen": #"\d+ devices?: \d+ clean, \d+ with findings"#],
                    ["snapshot": "audit"],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            #expect(session.transcript.contains("\u{1B}[31m"), "colour expected")
            let rows = try #require(session.screens["audit"]).display
            for title in ["RECAP", "AUDIT (inventory)"] {
                let start = try #require(rows.lastIndex { $0.hasPrefix(title) }, "\(rows)")
                let header = rows[start + 1]
                let body = rows[(start + 2)...].prefix { !$0.isEmpty && $0.hasPrefix("C0:FE") }
                #expect(body.count >= 4, "\(rows)")
                // Where each header word starts, every row has a column
                // boundary: a blank before it (the last column may be empty).
                var starts: [Int] = []
                var previous: Character = " "
                for (offset, character) in header.enumerated() {
                    if character != " " && previous == " " && offset > 0 {
                        let before = Array(header)[max(0, offset - 2)..<offset]
                        if before.allSatisfy({ $0 == " " }) { starts.append(offset) }
                    }
                    previous = character
                }
                #expect(starts.count >= 3, "\(header)")
                for row in body {
                    let characters = Array(row)
                    for start in starts where start < characters.count {
                        #expect(characters[start - 1] == " ", "\(title): \(row) not cut at \(start) like \(header)")
                    }
                }
                // Left-aligned text columns start exactly under their header.
                let code = try #require(header.range(of: title == "RECAP" ? "result" : "code"))
                let column = header.distance(from: header.startIndex, to: code.lowerBound)
                for row in body {
                    let characters = Array(row)
                    #expect(characters.count > column && characters[column] != " ", "\(row) under \(header)")
                }
            }
        }
    }

    /// --no-color on a colour terminal: no colour anywhere (the prompt,
    /// errors, events), the terminal's other sequences still there.
    @Test func noColorMeansNoColour() async throws {
        try await withNewFleet(count: 2) { bench in
            let session = try await Self.drive(
                bench, environment: ["NO_COLOR": nil], arguments: ["--no-color"],
                [
                    ["expect": "]> "],
                    ["send": "scan 120s --until 2\n"], ["expect": "scan: 2 SBeacons seen"], ["expect": "]> "],
                    ["send": "bogus\n"], ["expect": "error: "], ["expect": "]> "],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            #expect(session.transcript.contains("[NEW] SBeacon C0:FE:00:00:00:01"))
            #expect(session.transcript.contains("\r\u{1B}[K"), "the status line is still drawn")
            #expect(
                session.transcript.firstMatch(of: #/\x1B\[[0-9;]*m/#) == nil,
                "colour: \(session.transcript.debugDescription)")
        }
    }

    /// A batch run (not the REPL) through screen.py: on a dumb terminal no
    /// escape byte at all and plain lines per device; on xterm, colour and
    /// the progress line. Colour is not turned off otherwise (NO_COLOR
    /// unset).
    @Test(arguments: ["dumb", "xterm-256color"])
    func aBatchRunOnADumbTerminalWritesPlainLines(term: String) async throws {
        try await withNewFleet(count: 3) { bench in
            let screen = [
                ConsoleFixture.repository + "/Tests/Peers/screen.py", "--cols", "200", "--rows", "60", "--timeout",
                "300",
                "--term", term, "--unset", "NO_COLOR", "--",
                builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory", bench.inventoryPath, "run",
                bench.batch("provision-new.batch"),
            ]
            let run = try await runTool(
                "/usr/bin/env", ["python3"] + screen, environment: bench.environment, timeout: 400)
            let report = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
            let raw = try #require(report["raw"] as? [String: Int])
            let effects = try #require(report["effects"] as? [String: Int])
            let shown = (report["scrollback"] as? [String] ?? []) + (report["display"] as? [String] ?? [])
            #expect(shown.contains { $0.hasPrefix("RECAP") }, "\(shown)")
            #expect(shown.contains { $0.hasPrefix("C0:FE:00:00:00:01  ") }, "a line per device: \(shown)")
            if term == "dumb" {
                #expect(raw["esc"] == 0, "\(report["escape_sequences"] ?? "")")
                #expect(effects["erase_in_line"] == 0 && effects["sgr"] == 0)
            } else {
                #expect(effects["sgr"] ?? 0 > 0, "colour on xterm")
                #expect(effects["erase_in_line"] ?? 0 > 0, "a progress line on xterm")
            }
        }
    }

    /// On a terminal that can be redrawn the progress line shows the time
    /// elapsed and, once a device has finished, an estimate of the rest.
    @Test func progressShowsElapsedTimeAndAnEstimate() async throws {
        try await withNewFleet(count: 4) { bench in
            let session = try await Self.drive(
                bench,
                [
                    ["expect": "]> "],
                    ["send": "scan 120s --until 4\n"], ["expect": "scan: 4 SBeacons seen"], ["expect": "]> "],
                    ["send": "select all\n"], ["expect": "selected 4 devices"], ["expect": "]> "],
                    ["send": "info\n"], ["expect": "RECAP"], ["expect": "4 devices:"], ["expect": "]> "],
                    ["eof": true],
                ])
            #expect(session.ok, "stopped at step \(session.step): \(session.transcript)")
            let statusLines = session.transcript.components(separatedBy: "\r\u{1B}[K").filter { $0.hasPrefix("[") }
            #expect(statusLines.contains { $0.hasPrefix("[0/4 done · ") && $0.contains(" elapsed]") }, "\(statusLines)")
            #expect(
                statusLines.contains {
                    $0.wholeMatch(of: #/\[[123]/4 done · .* · \d+:\d\d elapsed · ~\d+:\d\d left\].*/#) != nil
                },
                "\(statusLines)")
            // Cleared at the end: not on the screen.
            #expect(!session.display.contains { $0.contains("elapsed") }, "\(session.display)")
        }
    }
}
