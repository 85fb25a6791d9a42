import Foundation
import SafeText
import Synchronization
import Testing
import Workbench

@testable import Console

/// The terminal's widths, decisions and progress line, without a terminal.
@Suite("the terminal: widths, colour, progress", .timeLimit(.minutes(2)))
struct Terminal16UnitTests {
    static func terminal(
        color: Bool = true, json: Bool = false, term: String? = "xterm-256color", noColor: String? = nil,
        stdout: Bool = true, stderr: Bool = true
    ) -> Terminal {
        var environment: [String: String] = [:]
        environment["TERM"] = term
        environment["NO_COLOR"] = noColor
        return Terminal(
            color: color, json: json, verbose: false, environment: environment, outputIsTerminal: stdout,
            errorIsTerminal: stderr)
    }

    @Test func colourAndRedrawsOnlyWhereTheTerminalAllows() {
        let full = Self.terminal()
        #expect(full.color && full.redraws && !full.isDumb)
        let dumb = Self.terminal(term: "dumb")
        #expect(!dumb.color && !dumb.redraws && dumb.isDumb)
        let unset = Self.terminal(term: nil)
        #expect(!unset.color && !unset.redraws)
        let empty = Self.terminal(term: "")
        #expect(!empty.color && !empty.redraws)
        let noColor = Self.terminal(noColor: "1")
        #expect(!noColor.color && noColor.redraws)
        #expect(Self.terminal(noColor: "").color)  // NO_COLOR set but empty: no effect
        let flag = Self.terminal(color: false)  // --no-color
        #expect(!flag.color && flag.redraws)
        let piped = Self.terminal(stdout: false)
        #expect(!piped.color && piped.redraws)
        let errorPiped = Self.terminal(stderr: false)
        #expect(!errorPiped.color && !errorPiped.redraws)
        #expect(Self.terminal(term: "dumb").styled("x", .red) == "x")
    }

    /// The audit table with colour and a wide name: every column starts at
    /// the same place on every line (colour codes took columns before).
    @Test func tableColumnsLineUpWithColourAndWideCharacters() {
        let terminal = Self.terminal()
        let header = ["device", "profile", "code", "finding"]
        let rows = [
            ["C0:FE:00:00:00:01", "van", terminal.styled("ok", .green), ""],
            ["C0:FE:00:00:00:02", "東京", terminal.styled("battery-low", .red), "battery 20 %"],
            ["C0:FE:00:00:00:03", "cafe\u{301}", terminal.styled("firmware", .red), "1.0.6 < 1.0.8"],
        ]
        let lines = table(header, rows)
        let plain = lines.map { Terminal.rendered($0, color: false) }
        #expect(
            plain == [
                "device             profile  code         finding",
                "C0:FE:00:00:00:01  van      ok           ",
                "C0:FE:00:00:00:02  東京     battery-low  battery 20 %",
                "C0:FE:00:00:00:03  cafe\u{301}     firmware     1.0.6 < 1.0.8",
            ])
        for (line, shown) in zip(lines, plain) {
            let coloured = Terminal.rendered(line, color: true)
            #expect(TextWidth.columns(of: coloured) == TextWidth.columns(of: shown))
            #expect(Terminal.width(line) == TextWidth.columns(of: shown))
        }
        #expect(Terminal.rendered(lines[1], color: true).contains("\u{1B}[32mok\u{1B}[0m"))
        // Numbers right-aligned by the same measure.
        let numeric = table(["name", "n"], [["東京", "7"], ["x", "12"]], numeric: [1])
        #expect(numeric == ["name   n", "東京   7", "x     12"])
    }

    @Test func paddingCountsColumns() {
        let terminal = Self.terminal()
        #expect(Terminal.padded("東京", toColumns: 6) == "東京  ")
        #expect(Terminal.padded(terminal.styled("ok", .green), toColumns: 4) == terminal.styled("ok", .green) + "  ")
        #expect(Terminal.padded("too wide", toColumns: 3) == "too wide")
        // A row with more cells than the header is shown, not a crash.
        #expect(table(["a"], [["1", "extra"]]) == ["a", "1  extra"])
    }

    @Test func widthOfStyledAndOutsideText() {
        let terminal = Self.terminal()
        #expect(Terminal.width(terminal.styled("failed", .red) + ": x") == 9)
        #expect(Terminal.width("東京 ok") == 7)
        // Outside text is measured as it is shown: ESC as `\x1b`.
        #expect(Terminal.width("a\u{1B}[2Jb") == 9)
    }

    @Test func statusLinesAreCutToTheTerminal() {
        let long = "[3/50 done · 5 active · 0:42 elapsed · ~2:10 left] " + String(repeating: "00:0A 東京 ", count: 20)
        let cut = Terminal.fitted(long, columns: 79)
        #expect(TextWidth.columns(of: cut) <= 79)
        #expect(cut.hasSuffix("…"))
        #expect(cut.hasPrefix("[3/50 done · 5 active · 0:42 elapsed"))
        #expect(Terminal.fitted("short", columns: 79) == "short")
        let coloured = Terminal.rendered(Self.terminal().styled(long, .green), color: true)
        let colouredCut = Terminal.fitted(coloured, columns: 40)
        #expect(TextWidth.columns(of: colouredCut) <= 40)
        #expect(colouredCut.hasSuffix("\u{1B}[0m…"))
    }

    @Test func caretUnderAParseErrorCountsColumns() {
        let prompt = "\u{1}\u{1B}[1;34m\u{2}beaconbench\u{1}\u{1B}[0m\u{2} [hci0 · 3 seen]> "
        #expect(REPL.visibleLength(prompt) == 29)
        // The 8th character of "sel 東京 x" (after two blanks) is the x.
        #expect(REPL.caretColumn(prompt: prompt, line: "  sel 東京 x", column: 8) == 29 + 2 + 9)
        #expect(REPL.caretColumn(prompt: prompt, line: "bad", column: 1) == 29)
    }

    // MARK: Progress

    @Test func estimateIsTheRemainingTimesTheMeanPerFinishedDevice() {
        #expect(ProgressBoard.estimate(elapsed: 42, done: 12, total: 50) == 38 * 42 / 12.0)
        #expect(ProgressBoard.estimate(elapsed: 10, done: 1, total: 4) == 30)
        #expect(ProgressBoard.estimate(elapsed: 10, done: 0, total: 4) == nil)  // nothing to go by yet
        #expect(ProgressBoard.estimate(elapsed: 10, done: 4, total: 4) == nil)  // nothing left
    }

    @Test func clockTextIsMinutesAndSeconds() {
        #expect(ProgressBoard.clockText(0) == "0:00")
        #expect(ProgressBoard.clockText(42) == "0:42")
        #expect(ProgressBoard.clockText(59.6) == "1:00")
        #expect(ProgressBoard.clockText(130) == "2:10")
        #expect(ProgressBoard.clockText(133) == "2:13")
        #expect(ProgressBoard.clockText(3725) == "1:02:05")
        #expect(ProgressBoard.clockText(-3) == "0:00")
    }

    @Test func statusLineShowsCountsElapsedAndEstimate() {
        let now = Mutex(100.0)
        let board = ProgressBoard(
            terminal: Self.terminal(json: true), total: 4, dryRun: false, clock: { now.withLock { $0 } })
        board.begin(["info"])
        #expect(board.statusLine() == "[0/4 done · 0 active · 0:00 elapsed]")
        board.handle(.started(address: "C0:FE:00:00:00:01"))
        board.handle(.started(address: "C0:FE:00:00:00:02"))
        now.withLock { $0 = 105 }
        #expect(board.statusLine() == "[0/4 done · 2 active · 0:05 elapsed] 00:01 connect, 00:02 connect")
        board.handle(.step(address: "C0:FE:00:00:00:02", step: "info", status: .ok, detail: nil))
        now.withLock { $0 = 110 }
        board.handle(.finished(DeviceRecap(address: "C0:FE:00:00:00:01")))
        // One done in 10 s, three left: ~30 s.
        #expect(board.statusLine() == "[1/4 done · 1 active · 0:10 elapsed · ~0:30 left] 00:02 info")
        now.withLock { $0 = 120 }
        var failed = DeviceRecap(address: "C0:FE:00:00:00:02")
        failed.failed = 1
        board.handle(.finished(failed))
        #expect(board.statusLine() == "[2/4 done · 0 active · 1 failed · 0:20 elapsed · ~0:20 left]")
        now.withLock { $0 = 100 + 42 + 60 * 2 }
        board.handle(.finished(DeviceRecap(address: "C0:FE:00:00:00:03")))
        board.handle(.finished(DeviceRecap(address: "C0:FE:00:00:00:04")))
        #expect(board.statusLine() == "[4/4 done · 0 active · 1 failed · 2:42 elapsed]")
        board.end()
    }
}
