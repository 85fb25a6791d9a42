/// Why a checkpoint, a signed note or a proof file was refused, or why
/// signing failed: one sentence naming what failed. Text taken from the
/// file is never in it raw: it is bounded and its control characters are
/// escaped (`LedgerError.quoted`).
public struct LedgerError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }

    /// `text` for a message: in double quotes, at most `limit` characters
    /// (then `…`), with `"` and `\` escaped, and every control, format,
    /// separator, private-use or unassigned character as `\u{…}`, so no
    /// byte of a hostile file reaches a terminal as itself.
    public static func quoted(_ text: some StringProtocol, limit: Int = 80) -> String {
        var out = "\""
        var count = 0
        for scalar in text.unicodeScalars {
            if count == limit {
                out += "…"
                break
            }
            count += 1
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                switch scalar.properties.generalCategory {
                case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned:
                    out += "\\u{" + String(scalar.value, radix: 16) + "}"
                default:
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    /// Bytes that may not be UTF-8 (a process's output): decoded with
    /// replacement characters, then quoted.
    static func quoted(bytes: [UInt8], limit: Int = 200) -> String {
        quoted(String(decoding: bytes.prefix(limit * 4), as: UTF8.self), limit: limit)
    }
}
