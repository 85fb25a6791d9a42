import Testing

@testable import Ledger

@Suite("The strict JSON reader and base64 the proof files use", .timeLimit(.minutes(2)))
struct StrictJSONTests {
    @Test func readsWhatCanonicalJSONWritesAndKeepsMemberOrder() throws {
        let value = CanonicalJSON.Value.object([
            ("z", .integer(Int64.min)), ("a", .array([.null, .integer(Int64.max), .text("é\u{1}\"\\\n😀")])),
            ("m", .object([])), ("e", .array([])),
        ])
        let bytes = CanonicalJSON.encode(value)
        #expect(try StrictJSON.parse(bytes) == value)
        #expect(
            try StrictJSON.parse(Array(" { \"a\" :\t[ 1 , -2 ]\r\n} ".utf8))
                == .object([("a", .array([.integer(1), .integer(-2)]))]))
        #expect(try StrictJSON.parse(Array("\"\\ud83d\\ude00\\u00e9\\/\"".utf8)) == .text("😀é/"))
    }

    @Test(arguments: [
        ("", "ends"), ("{", "member name"), ("{\"a\":1,}", "member name"), ("[1,]", "not a value"),
        ("01", "leading zero"),
        ("-", "minus"), ("1.0", "not an integer"), ("1e3", "not an integer"), ("true", "not a value"),
        ("9223372036854775808", "64 bits"), ("{\"a\":1,\"a\":2}", "twice"), ("\"\\ud800\"", "lone surrogate"),
        ("\"\\udc00\"", "lone surrogate"), ("\"\\x\"", "unknown escape"), ("\"a\nb\"", "control character"),
        ("1 2", "text after"), ("\u{feff}1", "not a value"),
        (String(repeating: "[", count: 17) + String(repeating: "]", count: 17), "nesting"),
    ])
    func refusesWhatTheFormatDoesNotHold(text: String, named: String) {
        let said = failure { try StrictJSON.parse(Array(text.utf8)) }
        #expect(said?.contains(named) == true, "\(said ?? "accepted")")
    }

    @Test func refusesBytesThatAreNotUTF8InAString() {
        #expect(failure { try StrictJSON.parse([0x22, 0xc3, 0x28, 0x22]) }?.contains("UTF-8") == true)
    }

    @Test func base64IsStandardAndStrict() {
        #expect(Base64.encode([]) == "")
        #expect(Base64.encode(Array("f".utf8)) == "Zg==")
        #expect(Base64.encode(Array("fo".utf8)) == "Zm8=")
        #expect(Base64.encode(Array("foobar".utf8)) == "Zm9vYmFy")
        #expect(Base64.encode([0xfb, 0xff]) == "+/8=")
        for text in ["", "Zg==", "Zm8=", "Zm9vYmFy", "+/8="] {
            #expect(Base64.decode(text).map(Base64.encode) == text)
        }
        for bad in ["Zg", "Zg=", "Zh==", "Zm9=", "Z===", "====", "Zg==Zg==", "Zm 8=", "Zm8_", "-/8="] {
            #expect(Base64.decode(bad) == nil, "\(bad)")
        }
    }

    @Test func armorIsSSHKeygensAndReadsBack() throws {
        let blob = (0..<200).map { UInt8($0) }
        let armor = SSHSignature.armor(blob)
        let lines = armor.split(separator: "\n")
        #expect(lines.first == "-----BEGIN SSH SIGNATURE-----")
        #expect(lines.last == "-----END SSH SIGNATURE-----")
        #expect(lines.dropFirst().dropLast().dropLast().allSatisfy { $0.count == 70 })
        #expect(SSHSignature.unarmor(armor) == blob)
        #expect(SSHSignature.unarmor(armor.replacingOccurrences(of: "\n-----END", with: "\n\n-----END")) == nil)
    }
}

/// The ledger's JSON values compare text and member names by their bytes
/// (docs/development.md, "Stored values are compared as bytes").
@Suite("Ledger JSON values compared as bytes", .timeLimit(.minutes(2)))
struct CanonicalJSONBytesTests {
    @Test func canonicallyEquivalentTextIsADifferentValue() throws {
        let (nfc, nfd) = ("Caf\u{E9}", "Cafe\u{301}")
        #expect(nfc == nfd)  // the premise
        #expect(CanonicalJSON.Value.text(nfc) != .text(nfd))
        #expect(CanonicalJSON.Value.object([(nfc, .null)]) != .object([(nfd, .null)]))
        #expect(CanonicalJSON.Value.array([.text("\u{C5}")]) != .array([.text("\u{212B}")]))
        #expect(CanonicalJSON.Value.real(0.0) != .real(-0.0))
        #expect(CanonicalJSON.Value.object([(nfc, .text(nfd))]) == .object([(nfc, .text(nfd))]))
    }

    @Test func namesOnlyCanonicallyEquivalentAreTwoMembers() throws {
        // Two names Swift's `Set<String>` would take for one: two members,
        // as Python's json reads them; the same bytes twice is refused.
        let value = try StrictJSON.parse(Array("{\"Caf\u{E9}\":1,\"Cafe\u{301}\":2}".utf8))
        guard case .object(let members) = value else {
            Issue.record("not an object: \(value)")
            return
        }
        #expect(members.map { Array($0.0.utf8) } == [Array("Caf\u{E9}".utf8), Array("Cafe\u{301}".utf8)])
        #expect(throws: LedgerError.self) { try StrictJSON.parse(Array("{\"a\":1,\"a\":2}".utf8)) }
    }
}
