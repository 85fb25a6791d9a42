import Foundation
import TestSupport
import Testing

@testable import SafeText

@Suite(.timeLimit(.minutes(2))) struct TextWidthTests {
    @Test func asciiTakesAColumnEach() {
        #expect(TextWidth.columns(of: "") == 0)
        #expect(TextWidth.columns(of: "device  profile") == 15)
        #expect(TextWidth.columns(of: "C0:FE:00:00:00:01") == 17)
    }

    @Test func wideAndFullwidthTakeTwo() {
        #expect(TextWidth.columns(of: "東京") == 4)
        #expect(TextWidth.columns(of: "ＡＢ") == 4)  // fullwidth Latin
        #expect(TextWidth.columns(of: "한국어") == 6)
        #expect(TextWidth.columns(of: "😀") == 2)
        #expect(TextWidth.columns(of: "van 東京 1") == 10)
        #expect(TextWidth.columns(of: "ｶ") == 1)  // halfwidth katakana stays narrow
    }

    @Test func combiningAndZeroWidthTakeNone() {
        #expect(TextWidth.columns(of: "e\u{301}") == 1)
        #expect(TextWidth.columns(of: "a\u{200B}b") == 2)  // zero width space
        #expect(TextWidth.columns(of: "a\u{200D}b") == 2)  // zero width joiner
        #expect(TextWidth.columns(of: "x\u{FE0F}") == 1)  // variation selector
        #expect(TextWidth.columns(of: "\u{1100}\u{1161}\u{11A8}") == 2)  // conjoining jamo: one syllable
        #expect(TextWidth.columns(of: "मि") == 1)  // a vowel sign on its consonant
    }

    @Test func escapeSequencesTakeNone() {
        #expect(TextWidth.columns(of: "\u{1B}[1;34mbeaconbench\u{1B}[0m") == 11)
        #expect(TextWidth.columns(of: "\u{1B}[31mfailed\u{1B}[0m: x") == 9)
        #expect(TextWidth.columns(of: "\u{1B}]0;a title\u{07}ab") == 2)  // OSC ended by BEL
        #expect(TextWidth.columns(of: "\u{1B}]8;;http://x\u{1B}\\link\u{1B}]8;;\u{1B}\\") == 4)  // OSC ended by ST
        #expect(TextWidth.columns(of: "\u{1B}(Bab\u{1B}7c\u{1B}8") == 3)  // charset, save/restore cursor
        #expect(TextWidth.columns(of: "\u{9B}1mab") == 2)  // C1 CSI
        #expect(TextWidth.columns(of: "\r\u{1B}[K12/50 done") == 10)
        // readline's markers around the invisible part of a prompt.
        #expect(TextWidth.columns(of: "\u{1}\u{1B}[1;34m\u{2}bb\u{1}\u{1B}[0m\u{2} [hci0 · 3 seen]> ") == 20)
    }

    @Test func controlsTakeNone() {
        #expect(TextWidth.columns(of: "a\u{0}b\u{7}c\u{7F}d\u{85}") == 4)
    }

    @Test func visibleTextIsMeasuredAsShown() {
        // A device's name with an escape: shown as `\x1b[2J`, six columns.
        #expect(TextWidth.columns(of: Visible.text("\u{1B}[2J")) == 7)
    }

    @Test func truncationKeepsWholeCharactersAndEscapes() {
        #expect(TextWidth.truncated("abcdef", toColumns: 10) == "abcdef")
        #expect(TextWidth.truncated("abcdef", toColumns: 4, marker: "…") == "abc…")
        #expect(TextWidth.truncated("東京東京", toColumns: 5) == "東京")
        #expect(TextWidth.truncated("東京東京", toColumns: 5, marker: "…") == "東京…")
        #expect(TextWidth.truncated("ae\u{301}bc", toColumns: 2) == "ae\u{301}")
        // Colour is closed after a cut; escape sequences are never split.
        let coloured = "\u{1B}[31mfailed\u{1B}[0m because"
        #expect(TextWidth.truncated(coloured, toColumns: 4) == "\u{1B}[31mfail\u{1B}[0m")
        #expect(TextWidth.truncated(coloured, toColumns: 9, marker: "…") == "\u{1B}[31mfailed\u{1B}[0m b\u{1B}[0m…")
        for limit in 0...12 {
            let cut = TextWidth.truncated("漢a\u{1B}[1mb字c\u{1B}[0md", toColumns: limit, marker: "…")
            #expect(TextWidth.columns(of: cut) <= max(limit, 0))
        }
    }

    /// Random mixes of narrow, wide, combining and escape sequences (a fixed
    /// seed): a cut never exceeds its columns, keeps a start of the text,
    /// and leaves text that fits alone.
    @Test func truncationHoldsForMixedText() {
        var generator = SplitMix(seed: 16)
        let pieces = [
            "a", "Z", " ", "東", "ｶ", "😀", "e\u{301}", "\u{200B}", "\u{1B}[31m", "\u{1B}[0m", "\u{1B}]0;t\u{7}", "·",
        ]
        for _ in 0..<2000 {
            let count = Int(generator.next() % 24)
            let text = (0..<count).map { _ in pieces[Int(generator.next() % UInt64(pieces.count))] }.joined()
            let limit = Int(generator.next() % 20)
            let cut = TextWidth.truncated(text, toColumns: limit, marker: "…")
            #expect(TextWidth.columns(of: cut) <= limit, "\(text.debugDescription) at \(limit)")
            if TextWidth.columns(of: text) <= limit {
                #expect(cut == text)
            } else {
                var kept = cut
                if kept.hasSuffix("…") { kept.removeLast() }
                if kept.hasSuffix("\u{1B}[0m") { kept.removeLast(4) }
                #expect(text.unicodeScalars.starts(with: kept.unicodeScalars), "\(text.debugDescription) at \(limit)")
            }
        }
    }

    struct SplitMix {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// The tables agree with the wcwidth that pyte (the screen tests'
    /// terminal) measures with, code point by code point.
    @Test func agreesWithWcwidth() async throws {
        let script = """
            import json, sys, wcwidth
            points = [p for p in range(0xA0, 0x40000) if not 0xD800 <= p <= 0xDFFF]
            json.dump([[p, wcwidth.wcwidth(chr(p))] for p in points], sys.stdout)
            """
        // On a thread of its own (runTool): a synchronous test runs on one
        // of Swift's cooperative threads, and blocking it on a pipe starved
        // every other test of the process on 2 cores.
        let python = try await runTool("python3", ["-c", script], timeout: 300)
        try #require(python.status == 0, "python3 with wcwidth (scripts/install-deps): \(python.stderr)")
        let pairs = try #require(try JSONSerialization.jsonObject(with: Data(python.stdout.utf8)) as? [[Int]])
        #expect(pairs.count > 200_000)
        var differing: [String] = []
        for pair in pairs {
            let scalar = try #require(Unicode.Scalar(UInt32(pair[0])))
            let expected = max(0, pair[1])  // wcwidth: -1 for controls
            if TextWidth.columns(of: scalar) != expected {
                differing.append(String(pair[0], radix: 16) + ": \(TextWidth.columns(of: scalar)) not \(expected)")
            }
        }
        #expect(differing.isEmpty, "\(differing.prefix(20))")
    }
}
