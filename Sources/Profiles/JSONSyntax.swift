import SafeText

/// Finds where a JSON text first goes wrong, for messages that name the
/// line and column (Foundation's parser on Linux does not say where).
/// Stricter than JSON in two ways that matter to a profile: a key written
/// twice in one object (at any depth) is an error — Foundation keeps the
/// later one silently — and so is a number with an exponent (`1e3`): the
/// tool's numbers are written in decimal digits (docs/profiles.md).
enum JSONSyntax {
    struct Failure: Error, Equatable {
        var line: Int
        var column: Int
        var reason: String
        /// A rule beyond JSON's was broken (a duplicate key, an exponent):
        /// the text is JSON, but not a profile's.
        var isStrictRule = false
    }

    static func firstError(in bytes: [UInt8]) -> Failure? {
        var scanner = Scanner(bytes: bytes)
        do {
            scanner.skipSpace()
            try scanner.value(depth: 0)
            scanner.skipSpace()
            if scanner.index < bytes.count { throw scanner.failure("text after the end of the JSON value") }
            return nil
        } catch let failure as Failure {
            return failure
        } catch {
            return nil
        }
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0

        func failure(_ reason: String) -> Failure {
            let prefix = bytes[..<min(index, bytes.count)]
            let line = prefix.filter { $0 == 0x0A }.count + 1
            let lineStart = prefix.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
            return Failure(line: line, column: index - lineStart + 1, reason: reason)
        }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipSpace() {
            while let byte = current, [0x20, 0x09, 0x0A, 0x0D].contains(byte) { index += 1 }
        }

        mutating func expect(_ byte: UInt8, _ what: String) throws {
            guard current == byte else {
                throw failure(current == nil ? "unexpected end, \(what) expected" : "\(what) expected")
            }
            index += 1
        }

        mutating func value(depth: Int) throws {
            guard depth < 200 else { throw failure("nested too deeply") }
            switch current {
            case UInt8(ascii: "{"):
                index += 1
                skipSpace()
                if current == UInt8(ascii: "}") { index += 1; return }
                // Each key of this object (decoded) and where it was first written.
                var keys: [[UInt8]: Int] = [:]
                while true {
                    skipSpace()
                    guard current == UInt8(ascii: "\"") else {
                        throw failure(
                            current == nil ? "unexpected end, a key expected" : "a key in double quotes expected")
                    }
                    let keyStart = index
                    try string()
                    let key = Self.decoded(bytes[(keyStart + 1)..<(index - 1)])
                    if let first = keys[key] {
                        let here = index
                        index = first
                        let earlier = failure("")
                        index = keyStart
                        var duplicate = failure(
                            "duplicate key \(Self.quotedKey(key)) (first at line \(earlier.line), column \(earlier.column)): each key once"
                        )
                        duplicate.isStrictRule = true
                        index = here
                        throw duplicate
                    }
                    keys[key] = keyStart
                    skipSpace()
                    try expect(UInt8(ascii: ":"), "':'")
                    skipSpace()
                    try value(depth: depth + 1)
                    skipSpace()
                    if current == UInt8(ascii: ",") { index += 1; continue }
                    try expect(UInt8(ascii: "}"), "',' or '}'")
                    return
                }
            case UInt8(ascii: "["):
                index += 1
                skipSpace()
                if current == UInt8(ascii: "]") { index += 1; return }
                while true {
                    skipSpace()
                    try value(depth: depth + 1)
                    skipSpace()
                    if current == UInt8(ascii: ",") { index += 1; continue }
                    try expect(UInt8(ascii: "]"), "',' or ']'")
                    return
                }
            case UInt8(ascii: "\""): try string()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            case .some(let byte) where byte == UInt8(ascii: "-") || (0x30...0x39).contains(byte): try number()
            case nil: throw failure("unexpected end, a value expected")
            default: throw failure("a value expected")
            }
        }

        mutating func string() throws {
            index += 1
            while let byte = current {
                index += 1
                if byte == UInt8(ascii: "\"") { return }
                if byte == UInt8(ascii: "\\") { index += 1 }
                if byte < 0x20 { index -= 1; throw failure("a control character inside a string") }
            }
            throw failure("unexpected end inside a string")
        }

        mutating func literal(_ word: String) throws {
            for byte in word.utf8 {
                guard current == byte else { throw failure("'\(word)' expected") }
                index += 1
            }
        }

        /// `-?(0|[1-9][0-9]*)(.[0-9]+)?`: JSON's numbers without the exponent.
        mutating func number() throws {
            let start = index
            func digits() -> Int {
                let first = index
                while let byte = current, (0x30...0x39).contains(byte) { index += 1 }
                return index - first
            }
            if current == UInt8(ascii: "-") { index += 1 }
            let leading = index
            guard digits() > 0 else { throw failure("a digit expected") }
            if bytes[leading] == UInt8(ascii: "0"), index - leading > 1 {
                index = leading
                throw failure("a number does not start with 0 (write 7, not 07)")
            }
            if current == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { throw failure("a digit expected after '.'") }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                let exponent = index
                index = start
                var refused = failure(
                    "an exponent ('\(String(decoding: bytes[start..<exponent + 1], as: UTF8.self))…'): write numbers in decimal digits"
                )
                refused.isStrictRule = true
                index = exponent
                throw refused
            }
        }

        /// A key's characters, its escapes decoded (`"\u0061"` is `"a"`), as
        /// UTF-8 bytes; what cannot be decoded is kept as written.
        static func decoded(_ raw: ArraySlice<UInt8>) -> [UInt8] {
            guard raw.contains(UInt8(ascii: "\\")) else { return Array(raw) }
            var scalars: [UInt32] = []
            var bytes: [UInt8] = []
            var index = raw.startIndex
            func flush() {
                for scalar in scalars {
                    bytes += Array(String(Unicode.Scalar(scalar).map(Character.init) ?? "\u{FFFD}").utf8)
                }
                scalars = []
            }
            func hex(_ at: Int) -> UInt32? {
                guard at + 4 <= raw.endIndex else { return nil }
                return UInt32(String(decoding: raw[at..<at + 4], as: UTF8.self), radix: 16)
            }
            while index < raw.endIndex {
                let byte = raw[index]
                guard byte == UInt8(ascii: "\\"), index + 1 < raw.endIndex else {
                    flush()
                    bytes.append(byte)
                    index += 1
                    continue
                }
                let escaped = raw[index + 1]
                index += 2
                switch escaped {
                case UInt8(ascii: "u"):
                    guard var unit = hex(index) else {
                        flush()
                        bytes += [UInt8(ascii: "\\"), escaped]
                        continue
                    }
                    index += 4
                    // A surrogate pair is one character.
                    if (0xD800...0xDBFF).contains(unit), index + 6 <= raw.endIndex, raw[index] == UInt8(ascii: "\\"),
                        raw[index + 1] == UInt8(ascii: "u"), let low = hex(index + 2), (0xDC00...0xDFFF).contains(low)
                    {
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                        index += 6
                    }
                    scalars.append(unit)
                default:
                    flush()
                    let simple: [UInt8: UInt8] = [
                        UInt8(ascii: "n"): 0x0A, UInt8(ascii: "t"): 0x09, UInt8(ascii: "r"): 0x0D,
                        UInt8(ascii: "b"): 0x08, UInt8(ascii: "f"): 0x0C,
                    ]
                    bytes.append(simple[escaped] ?? escaped)
                }
            }
            flush()
            return bytes
        }

        static func quotedKey(_ key: [UInt8]) -> String {
            "'" + Visible.text(String(decoding: key, as: UTF8.self), limit: 60) + "'"
        }
    }
}
