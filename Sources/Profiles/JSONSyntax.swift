/// Finds where a JSON text first goes wrong, for messages that name the
/// line and column (Foundation's parser on Linux does not say where).
enum JSONSyntax {
    struct Failure: Error, Equatable {
        var line: Int
        var column: Int
        var reason: String
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
                while true {
                    skipSpace()
                    guard current == UInt8(ascii: "\"") else {
                        throw failure(
                            current == nil ? "unexpected end, a key expected" : "a key in double quotes expected")
                    }
                    try string()
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
            case .some(let byte) where byte == UInt8(ascii: "-") || (0x30...0x39).contains(byte): number()
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

        mutating func number() {
            while let byte = current, (0x30...0x39).contains(byte) || "+-.eE".utf8.contains(byte) { index += 1 }
        }
    }
}
