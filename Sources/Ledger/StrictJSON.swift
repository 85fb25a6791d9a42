/// A strict reader of the JSON the ledger writes (RFC 8259's grammar,
/// restricted to what `CanonicalJSON.Value` holds): objects (members kept
/// in the order read; a name twice is refused), arrays, strings (valid
/// UTF-8; escapes decoded; a lone surrogate refused), integers that fit 64
/// bits, and null. `true`, `false`, fractions and exponents are refused:
/// no entry or proof file holds them. White space between tokens is
/// allowed; whether a text is canonical is a separate question
/// (`CanonicalJSON.encode` of what was read gives the same bytes).
public enum StrictJSON {
    public static let maxDepth = 16

    /// The value `bytes` hold, or an error saying what is wrong and where
    /// (a byte offset).
    public static func parse(_ bytes: [UInt8]) throws(LedgerError) -> CanonicalJSON.Value {
        var reader = Reader(bytes: bytes)
        reader.skipSpace()
        let value = try reader.value(depth: 0)
        reader.skipSpace()
        guard reader.offset == bytes.count else { throw reader.failure("text after the value") }
        return value
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        func failure(_ what: String) -> LedgerError { LedgerError("\(what) at byte \(offset)") }

        mutating func skipSpace() {
            while offset < bytes.count,
                [UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r")].contains(bytes[offset])
            {
                offset += 1
            }
        }

        mutating func expect(_ byte: UInt8) throws(LedgerError) {
            guard offset < bytes.count, bytes[offset] == byte else {
                throw failure("expected \(LedgerError.quoted(String(UnicodeScalar(byte))))")
            }
            offset += 1
        }

        mutating func value(depth: Int) throws(LedgerError) -> CanonicalJSON.Value {
            guard depth < StrictJSON.maxDepth else { throw failure("nesting deeper than \(StrictJSON.maxDepth)") }
            guard offset < bytes.count else { throw failure("the text ends where a value should be") }
            switch bytes[offset] {
            case UInt8(ascii: "{"):
                offset += 1
                var members: [(String, CanonicalJSON.Value)] = []
                // By their bytes: two names that are only canonically equivalent
                // are two members (docs/development.md, "Stored values are
                // compared as bytes"), as Python's json reads them.
                var names = Set<[UInt8]>()
                skipSpace()
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                    offset += 1
                    return .object([])
                }
                while true {
                    skipSpace()
                    let at = offset
                    guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else {
                        throw failure("expected a member name")
                    }
                    let name = try string()
                    guard names.insert(Array(name.utf8)).inserted else {
                        throw LedgerError("the member \(LedgerError.quoted(name)) occurs twice at byte \(at)")
                    }
                    skipSpace()
                    try expect(UInt8(ascii: ":"))
                    skipSpace()
                    members.append((name, try value(depth: depth + 1)))
                    skipSpace()
                    guard offset < bytes.count else { throw failure("the text ends inside an object") }
                    if bytes[offset] == UInt8(ascii: ",") {
                        offset += 1
                        continue
                    }
                    try expect(UInt8(ascii: "}"))
                    return .object(members)
                }
            case UInt8(ascii: "["):
                offset += 1
                var items: [CanonicalJSON.Value] = []
                skipSpace()
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
                    offset += 1
                    return .array([])
                }
                while true {
                    skipSpace()
                    items.append(try value(depth: depth + 1))
                    skipSpace()
                    guard offset < bytes.count else { throw failure("the text ends inside an array") }
                    if bytes[offset] == UInt8(ascii: ",") {
                        offset += 1
                        continue
                    }
                    try expect(UInt8(ascii: "]"))
                    return .array(items)
                }
            case UInt8(ascii: "\""):
                return .text(try string())
            case UInt8(ascii: "n"):
                guard bytes[offset...].starts(with: Array("null".utf8)) else { throw failure("not a value") }
                offset += 4
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return .integer(try integer())
            default:
                throw failure("not a value this format holds (null, an integer, a string, an array or an object)")
            }
        }

        mutating func integer() throws(LedgerError) -> Int64 {
            let start = offset
            if bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            let digitsStart = offset
            while offset < bytes.count, bytes[offset] >= UInt8(ascii: "0"), bytes[offset] <= UInt8(ascii: "9") {
                offset += 1
            }
            let digits = offset - digitsStart
            guard digits > 0 else { throw failure("a minus sign without digits") }
            guard digits == 1 || bytes[digitsStart] != UInt8(ascii: "0") else {
                throw LedgerError("a number with a leading zero at byte \(start)")
            }
            if offset < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[offset]) {
                throw LedgerError("a number that is not an integer at byte \(start)")
            }
            guard let number = Int64(String(decoding: bytes[start..<offset], as: UTF8.self)) else {
                throw LedgerError("an integer that does not fit 64 bits at byte \(start)")
            }
            return number
        }

        mutating func hex4() throws(LedgerError) -> UInt32 {
            guard offset + 4 <= bytes.count else { throw failure("a \\u escape cut short") }
            var value: UInt32 = 0
            for byte in bytes[offset..<offset + 4] {
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw failure("a \\u escape with a character that is not a hex digit")
                }
                value = value << 4 | UInt32(digit)
            }
            offset += 4
            return value
        }

        mutating func string() throws(LedgerError) -> String {
            let start = offset
            offset += 1
            var out: [UInt8] = []
            while true {
                guard offset < bytes.count else { throw LedgerError("a string that does not end, from byte \(start)") }
                let byte = bytes[offset]
                offset += 1
                switch byte {
                case UInt8(ascii: "\""):
                    guard let text = String(validating: out, as: UTF8.self) else {
                        throw LedgerError("a string that is not valid UTF-8 at byte \(start)")
                    }
                    return text
                case 0x00..<0x20:
                    throw failure("a control character inside a string")
                case UInt8(ascii: "\\"):
                    guard offset < bytes.count else { throw failure("an escape cut short") }
                    let escape = bytes[offset]
                    offset += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0c)
                    case UInt8(ascii: "n"): out.append(0x0a)
                    case UInt8(ascii: "r"): out.append(0x0d)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var code = try hex4()
                        if (0xd800..<0xdc00).contains(code) {
                            guard bytes[offset...].starts(with: [UInt8(ascii: "\\"), UInt8(ascii: "u")]) else {
                                throw failure("a lone surrogate in a \\u escape")
                            }
                            offset += 2
                            let low = try hex4()
                            guard (0xdc00..<0xe000).contains(low) else {
                                throw failure("a lone surrogate in a \\u escape")
                            }
                            code = 0x10000 + (code - 0xd800) << 10 + (low - 0xdc00)
                        } else if (0xdc00..<0xe000).contains(code) {
                            throw failure("a lone surrogate in a \\u escape")
                        }
                        guard let scalar = Unicode.Scalar(code) else { throw failure("an invalid \\u escape") }
                        out.append(contentsOf: Array(String(Character(scalar)).utf8))
                    default:
                        throw failure("an unknown escape")
                    }
                default:
                    out.append(byte)
                }
            }
        }
    }
}
