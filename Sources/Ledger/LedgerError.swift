import SafeText

/// Why a checkpoint, a signed note or a proof file was refused, or why
/// signing failed: one sentence naming what failed. Text taken from the
/// file is never in it raw: it is bounded and its control characters are
/// escaped (`LedgerError.quoted`).
public struct LedgerError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }

    /// `text` for a message: at most `limit` characters (then `…`) as a
    /// JSON string literal, the project's one safe quoting
    /// (`JSONText.string`: `"` and `\` escaped, every character not shown
    /// as itself as `\uXXXX`), so no byte of a hostile file reaches a
    /// terminal as itself.
    public static func quoted(_ text: some StringProtocol, limit: Int = 80) -> String {
        let scalars = text.unicodeScalars
        guard scalars.count > limit else { return JSONText.string(String(text)) }
        var kept = String.UnicodeScalarView()
        kept.append(contentsOf: scalars.prefix(limit))
        return String(JSONText.string(String(kept)).dropLast()) + "…\""
    }

    /// Bytes that may not be UTF-8 (a process's output): decoded with
    /// replacement characters, then quoted.
    static func quoted(bytes: [UInt8], limit: Int = 200) -> String {
        quoted(String(decoding: bytes.prefix(limit * 4), as: UTF8.self), limit: limit)
    }
}
