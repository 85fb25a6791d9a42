import Testing

@testable import SafeText

/// `sameBytes` and the console's `JSONValue` compare text by its UTF-8
/// bytes, where Swift's `String` compares by canonical equivalence
/// (docs/development.md, "Stored values are compared as bytes").
@Suite(.timeLimit(.minutes(2))) struct SameBytesTests {
    /// Pairs Swift's `==` calls equal whose bytes differ.
    static let equivalent: [(String, String)] = [
        ("Caf\u{E9}", "Cafe\u{301}"), ("\u{C5}", "\u{212B}"), ("K", "\u{212A}"), (";", "\u{37E}"),
        ("\u{1E69}", "s\u{323}\u{307}"),
    ]

    @Test func canonicallyEquivalentTextIsNotTheSameBytes() {
        for (a, b) in Self.equivalent {
            #expect(a == b, "the premise: Swift calls \(Array(a.utf8)) and \(Array(b.utf8)) equal")
            #expect(!a.sameBytes(b) && !b.sameBytes(a))
            #expect(a.sameBytes(String(decoding: Array(a.utf8), as: UTF8.self)))
            #expect(![a].containsSameBytes(b) && [a].containsSameBytes(a))
            #expect(![a, "x"].sameBytes([b, "x"]) && [a, "x"].sameBytes([a, "x"]))
            #expect(!Optional(a).sameBytes(b) && Optional<String>.none.sameBytes(nil) && !Optional(a).sameBytes(nil))
            #expect(a.otherBytesNote(b) != nil && a.otherBytesNote(a) == nil && a.otherBytesNote("other") == nil)
        }
        #expect(
            "Caf\u{E9}".otherBytesNote("Cafe\u{301}")
                == "the same text in another Unicode form: bytes 43 61 66 c3 a9 against 43 61 66 65 cc 81")
        #expect("ab"[...].sameBytes("ab") && !"ab".sameBytes("abc"))
    }

    @Test func jsonValuesCompareTheirTextAsBytes() {
        for (a, b) in Self.equivalent {
            #expect(JSONValue.string(a) != JSONValue.string(b))
            #expect(JSONValue.object([a: 1]) != JSONValue.object([b: 1]))
            #expect(JSONValue.object(["k": .string(a)]) != JSONValue.object(["k": .string(b)]))
            #expect(JSONValue.array([.string(a)]) != JSONValue.array([.string(b)]))
            #expect(
                JSONValue.object([a: .array([.string(b)]), "z": .null])
                    == .object(["z": .null, a: .array([.string(b)])]))
        }
        #expect(JSONValue.number(0.0) != JSONValue.number(-0.0))
        #expect(JSONValue.number(1.5) == JSONValue.number(1.5) && JSONValue.integer(1) != JSONValue.number(1))
    }
}
