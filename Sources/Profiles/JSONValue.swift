import SafeText

/// A JSON value as a profile or a set of overrides holds it: the tree the
/// `ProfileLoader.Reader` walks. Built by `JSONValue.parse` from a text
/// `JSONSyntax` has already accepted, with no Foundation (its
/// `JSONSerialization` and the `NSNumber` it answers with cost the start
/// of every run; docs/benchmarks.md, "Start-up"). Equal by its bytes
/// (`sameBytes`; docs/development.md, "Stored values are compared as
/// bytes"): strings and keys by their UTF-8 bytes, never by canonical
/// equivalence; a number by its literal's bytes.
enum JSONValue: Equatable {
    case object([String: JSONValue])
    case array([JSONValue])
    case string(String)
    /// The number as written in the file (`-?digits(.digits)?`: JSONSyntax
    /// refuses exponents).
    case number(String)
    case bool(Bool)
    case null

    static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.object(let x), .object(let y)):
            func byBytes(_ members: [String: JSONValue]) -> [(key: [UInt8], value: JSONValue)] {
                members.map { (Array($0.key.utf8), $0.value) }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
            }
            return x.count == y.count
                && zip(byBytes(x), byBytes(y)).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.array(let x), .array(let y)): return x == y
        case (.string(let x), .string(let y)), (.number(let x), .number(let y)): return x.sameBytes(y)
        case (.bool(let x), .bool(let y)): return x == y
        case (.null, .null): return true
        default: return false
        }
    }

    /// A failure of the text that JSONSyntax lets pass (its scanner skips
    /// over escapes and bytes): worded as Foundation's parser words it,
    /// for the same messages as before.
    struct Failure: Error, Equatable {
        var reason: String
    }

    /// The value of `bytes`, which `JSONSyntax.firstError` found well
    /// formed. Only an array or an object is taken at the top, as
    /// Foundation's parser (without fragments) takes them.
    static func parse(_ bytes: [UInt8]) throws(Failure) -> JSONValue {
        var parser = Parser(bytes: bytes)
        parser.skipSpace()
        guard parser.current == UInt8(ascii: "{") || parser.current == UInt8(ascii: "[") else {
            throw Failure(reason: "JSON text did not start with array or object and option to allow fragments not set.")
        }
        return try parser.value()
    }

    /// The number's value.
    static func double(_ literal: String) -> Double { Double(literal) ?? .nan }

    /// The number as Foundation's `NSNumber` from its parser printed it in
    /// messages: a whole number that fits 64 bits as that integer; a
    /// fraction as Swift prints the `Double`, unless that changes its value
    /// (more digits than a `Double` holds), then its digits as written,
    /// without trailing zeros.
    static func describe(number literal: String) -> String {
        if !literal.contains(".") {
            if let value = Int64(literal) { return String(value) }
            if let value = UInt64(literal) { return String(value) }
        }
        let printed = String(describing: double(literal))
        if let mine = canonical(printed), let written = canonical(literal), mine == written { return printed }
        return canonical(literal) ?? literal
    }

    /// `-?digits(.digits)?` without leading zeros in its whole part and
    /// trailing zeros in its fraction; nil for anything else (an exponent).
    static func canonical(_ text: String) -> String? {
        // Swift prints 1e-06 and 1e+20: as digits.
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            guard let mantissa = canonical(String(text[..<e])), let exponent = Int(text[text.index(after: e)...]),
                abs(exponent) < 400
            else { return nil }
            let negative = mantissa.hasPrefix("-")
            let unsigned = negative ? mantissa.dropFirst() : Substring(mantissa)
            let parts = unsigned.split(separator: ".", omittingEmptySubsequences: false)
            var digits = String(parts[0]) + (parts.count == 2 ? String(parts[1]) : "")
            var point = parts[0].count + exponent
            if point <= 0 {
                digits = String(repeating: "0", count: 1 - point) + digits
                point = 1
            }
            if point > digits.count { digits += String(repeating: "0", count: point - digits.count) }
            let plain = String(digits.prefix(point)) + "." + String(digits.dropFirst(point))
            return canonical((negative ? "-" : "") + plain)
        }
        var rest = Substring(text)
        let negative = rest.first == "-"
        if negative { rest = rest.dropFirst() }
        let parts = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, parts.allSatisfy({ $0.allSatisfy(\.isASCIIDigit) }), !parts[0].isEmpty else {
            return nil
        }
        var whole = String(parts[0].drop { $0 == "0" })
        if whole.isEmpty { whole = "0" }
        var fraction = parts.count == 2 ? String(parts[1]) : ""
        while fraction.last == "0" { fraction.removeLast() }
        let body = fraction.isEmpty ? whole : whole + "." + fraction
        return negative && body != "0" ? "-" + body : body
    }

    /// How a value from the file reads inside a message (`'XX' is not one
    /// of …`): a string as itself, as Foundation's values printed.
    var messageText: String {
        switch self {
        case .string(let text): text
        default: nestedText
        }
    }

    /// Inside a list or object, as Swift printed `[Any]` and `[String: Any]`.
    private var nestedText: String {
        switch self {
        case .string(let text): text.debugDescription
        case .number(let literal): Self.describe(number: literal)
        case .bool(let value): value ? "1" : "0"
        case .null: "<null>"
        case .array(let items): "[" + items.map(\.nestedText).joined(separator: ", ") + "]"
        case .object(let members):
            members.isEmpty
                ? "[:]"
                : "["
                    + members.sorted { $0.key < $1.key }.map { "\($0.key.debugDescription): \($0.value.nestedText)" }
                    .joined(separator: ", ") + "]"
        }
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
        }

        /// A value at `index` (after blanks); JSONSyntax has checked the
        /// structure, so only what it does not check can fail.
        mutating func value() throws(Failure) -> JSONValue {
            skipSpace()
            switch current {
            case UInt8(ascii: "{"):
                index += 1
                var members: [String: JSONValue] = [:]
                skipSpace()
                if current == UInt8(ascii: "}") {
                    index += 1
                    return .object(members)
                }
                while true {
                    skipSpace()
                    let key = try string()
                    skipSpace()
                    index += 1  // ':'
                    members[key] = try value()
                    skipSpace()
                    let separator = current
                    index += 1
                    if separator != UInt8(ascii: ",") { return .object(members) }
                }
            case UInt8(ascii: "["):
                index += 1
                var items: [JSONValue] = []
                skipSpace()
                if current == UInt8(ascii: "]") {
                    index += 1
                    return .array(items)
                }
                while true {
                    items.append(try value())
                    skipSpace()
                    let separator = current
                    index += 1
                    if separator != UInt8(ascii: ",") { return .array(items) }
                }
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                index += 4
                return .bool(true)
            case UInt8(ascii: "f"):
                index += 5
                return .bool(false)
            case UInt8(ascii: "n"):
                index += 4
                return .null
            default:
                let start = index
                while let byte = current,
                    byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || (0x30...0x39).contains(byte)
                {
                    index += 1
                }
                return .number(String(decoding: bytes[start..<index], as: UTF8.self))
            }
        }

        /// A string at `index` (its opening quote), escapes decoded; the
        /// bytes must be UTF-8 and each `\u` escape a character.
        mutating func string() throws(Failure) -> String {
            index += 1
            var text: [UInt8] = []
            var start = index
            while let byte = current, byte != UInt8(ascii: "\"") {
                guard byte == UInt8(ascii: "\\") else {
                    index += 1
                    continue
                }
                try checkUTF8(start..<index)
                text += bytes[start..<index]
                let escapeAt = index
                index += 1
                let escaped = current ?? 0
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escaped)
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                case UInt8(ascii: "u"):
                    guard let unit = hex() else { throw badHex() }
                    var scalar = unit
                    if (0xD800...0xDBFF).contains(unit) {
                        guard current == UInt8(ascii: "\\"), index + 1 < bytes.count,
                            bytes[index + 1] == UInt8(ascii: "u")
                        else {
                            throw Failure(
                                reason:
                                    "Unexpected end of file during string parse (expected low-surrogate code point but did not find one)."
                            )
                        }
                        index += 2
                        guard let low = hex() else { throw badHex() }
                        guard (0xDC00...0xDFFF).contains(low) else {
                            throw Failure(
                                reason:
                                    "Unable to convert hex escape sequence (no low-surrogate code point) to UTF8-encoded character."
                            )
                        }
                        scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(unit) {
                        throw Failure(
                            reason:
                                "Unable to convert hex escape sequence (no high-surrogate code point) to UTF8-encoded character."
                        )
                    }
                    text += Array(String(Unicode.Scalar(scalar).map(Character.init) ?? "\u{FFFD}").utf8)
                default:
                    throw Failure(reason: "Invalid escape sequence around character \(escapeAt).")
                }
                start = index
            }
            try checkUTF8(start..<min(index, bytes.count))
            text += bytes[start..<min(index, bytes.count)]
            index += 1  // the closing quote
            return String(decoding: text, as: UTF8.self)
        }

        /// The bytes of a string between escapes are UTF-8 (counted as
        /// Foundation's parser counted: from the start of the run to the
        /// end of the first bad sequence).
        func checkUTF8(_ range: Range<Int>) throws(Failure) {
            var iterator = bytes[range].makeIterator()
            var parser = Unicode.UTF8.ForwardParser()
            var offset = range.lowerBound
            while true {
                switch parser.parseScalar(from: &iterator) {
                case .valid(let encoded): offset += encoded.count
                case .emptyInput: return
                case .error(let length):
                    throw Failure(
                        reason:
                            "Invalid UTF-8 sequence \(offset + length - range.lowerBound) bytes starting from character \(range.lowerBound)."
                    )
                }
            }
        }

        /// Four bytes at `index` that are not four hex digits.
        func badHex() -> Failure {
            let digits = String(decoding: bytes[index..<min(index + 4, bytes.count)], as: UTF8.self)
            return Failure(reason: "Invalid hex encoded sequence in \"\(digits)\" at \(index).")
        }

        /// Four hex digits at `index`, consumed.
        mutating func hex() -> UInt32? {
            guard index + 4 <= bytes.count else { return nil }
            var value: UInt32 = 0
            for byte in bytes[index..<index + 4] {
                let digit: UInt32
                switch byte {
                case 0x30...0x39: digit = UInt32(byte - 0x30)
                case 0x41...0x46: digit = UInt32(byte - 0x41 + 10)
                case 0x61...0x66: digit = UInt32(byte - 0x61 + 10)
                default: return nil
                }
                value = value << 4 | digit
            }
            index += 4
            return value
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
