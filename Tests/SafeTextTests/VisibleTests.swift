import Testing

@testable import SafeText

@Suite(.timeLimit(.minutes(2))) struct VisibleTests {
    @Test func controlCharactersAreShown() {
        #expect(Visible.text("a\u{1B}]0;pwned\u{07}\u{1B}[2Jb") == "a\\x1b]0;pwned\\x07\\x1b[2Jb")
        #expect(Visible.text("nul\u{0}here\n\r\t\u{7F}") == "nul\\x00here\\x0a\\x0d\\x09\\x7f")
        #expect(Visible.text("c1 \u{9B}31m \u{9D}0;x\u{9C}") == "c1 \\x9b31m \\x9d0;x\\x9c")
    }

    @Test func invisibleFormattingIsShown() {
        #expect(Visible.text("abc\u{202E}fed\u{2066}x\u{2069}") == "abc\\u202efed\\u2066x\\u2069")
        #expect(Visible.text("zero\u{200B}width\u{FEFF}") == "zero\\u200bwidth\\ufeff")
        #expect(Visible.text("line\u{2028}sep\u{E000}\u{F0001}") == "line\\u2028sep\\ue000\\U000f0001")
        #expect(Visible.text("tag\u{E0041}") == "tag\\U000e0041")
    }

    @Test func ordinaryTextIsUnchanged() {
        let text = "Beacon münchen 東京 — 1.0.8 ✓ \\x1b (a backslash stays)"
        #expect(Visible.text(text) == text)
        #expect(Visible.text(Visible.text("x\u{1B}y\u{202E}")) == Visible.text("x\u{1B}y\u{202E}"))
    }

    @Test func lengthIsBounded() {
        let long = String(repeating: "\u{1B}", count: 10_000)
        let shown = Visible.text(long, limit: 10)
        #expect(shown == String(repeating: "\\x1b", count: 10) + "…[+9990]")
        #expect(Visible.text("short", limit: 10) == "short")
    }

    @Test func invalidBytesAreShown() {
        #expect(Visible.bytes([0x61, 0xFF, 0x62, 0xC0, 0x80, 0xE2, 0x82]) == "a\\xffb\\xc0\\x80\\xe2\\x82")
        #expect(Visible.bytes(Array("ok ✓".utf8)) == "ok ✓")
        #expect(Visible.bytes([0x1B, 0x00, 0x1B]) == "\\x1b\\x00\\x1b")
    }

    @Test func windowQuotesAroundTheColumn() {
        let line = String(repeating: "a", count: 1000) + "\u{1B}BAD" + String(repeating: "b", count: 1000)
        let window = Visible.window(line, column: 1001, radius: 5)
        #expect(window == "…aaaaa\\x1bBADbb…")
        #expect(Visible.window("short", column: 2) == "short")
    }
}

@Suite(.timeLimit(.minutes(2))) struct CSVTests {
    @Test func quotingFollowsRFC4180() {
        #expect(
            CSV.record(["a", "b,c", "say \"hi\"", "two\nlines"]) == "a,\"b,c\",\"say \"\"hi\"\"\",two\\x0alines\r\n")
    }

    @Test func formulasAreDefused() {
        for cell in ["=HYPERLINK(\"http://x\",\"y\")", "=cmd|' /C calc'!A0", "+1", "-1+2", "@SUM(1)", "\t=1", "\r=1"] {
            let written = CSV.field(cell)
            let unquoted = written.hasPrefix("\"") ? String(written.dropFirst()) : written
            #expect(unquoted.hasPrefix("'"), "\(written)")
        }
        #expect(CSV.field("-12") == "'-12")
        #expect(CSV.field("12") == "12")
        #expect(CSV.field("") == "")
    }
}

@Suite(.timeLimit(.minutes(2))) struct JSONTextTests {
    @Test func terminalControlsAreEscapedExactly() {
        #expect(JSONText.safe("{\"a\":\"x\u{9B}y\u{202E}\u{7F}\"}") == "{\"a\":\"x\\u009by\\u202e\\u007f\"}")
        #expect(JSONText.string("q\"\\\n\u{1B}\u{F0001}") == "\"q\\\"\\\\\\n\\u001b\\udb80\\udc01\"")
        #expect(JSONText.safe("[\"plain ✓\"]") == "[\"plain ✓\"]")
    }
}
