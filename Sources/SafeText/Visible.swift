/// Text that came from outside — a device in radio range, a file, an error
/// from another program — on its way to a person's screen.
///
/// A device chooses its own name and Device Information strings, and a
/// batch or profile file can hold any bytes. Written raw to a terminal,
/// such text can set the window title, clear the screen, move the cursor,
/// recolour what follows or reverse the order of what is shown. Everything
/// the console writes for people goes through `Visible.text` (the console's
/// `Terminal` does it for every line), which
///
/// - shows every control character (C0, DEL, C1) as `\xNN`, so ESC is
///   `\x1b`, BEL `\x07`, NUL `\x00`, a newline `\x0a`;
/// - shows every invisible formatting character — bidirectional overrides
///   and isolates (U+202A–U+202E, U+2066–U+2069, U+200E/F, U+061C), zero
///   widths, tags, line and paragraph separators — and private-use and
///   non-character code points as `\uNNNN` (`\UNNNNNNNN` beyond the BMP);
/// - shows each byte that is not UTF-8 as `\xNN` (`Visible.bytes`);
/// - bounds the length: past `limit` characters the rest is replaced by
///   `…[+N]`, N being how many characters were left out.
///
/// A backslash is left as it is, so the function is idempotent: text made
/// visible once is unchanged by a second pass. The exact value is in the
/// inventory and in `--json` output.
public enum Visible {
    /// The bound used when none is given: far above any real name, version
    /// string or error, far below what could flood a screen.
    public static let defaultLimit = 1024

    /// `text` with every control, formatting and invisible character shown
    /// as an escape, cut after `limit` characters (nil: no bound).
    public static func text(_ text: some StringProtocol, limit: Int? = defaultLimit) -> String {
        var output = ""
        var shown = 0
        var left = 0
        for scalar in text.unicodeScalars {
            if let limit, shown >= limit {
                left += 1
                continue
            }
            if isShownAsIs(scalar) {
                output.unicodeScalars.append(scalar)
            } else {
                output += escape(scalar)
            }
            shown += 1
        }
        if left > 0 { output += "…[+\(left)]" }
        return output
    }

    /// Bytes that should be UTF-8 text: what is UTF-8 as `text` shows it,
    /// each byte that is not as `\xNN`.
    public static func bytes(_ bytes: some Collection<UInt8>, limit: Int? = defaultLimit) -> String {
        var decoded = ""
        let all = Array(limit.map { bytes.prefix(4 * ($0 + 1)) } ?? bytes[...])
        var iterator = all.makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                offset += encoded.count
                decoded.unicodeScalars.append(Unicode.UTF8.decode(encoded))
            case .error(let length):
                for byte in all[offset..<offset + length] { decoded += hexByte(byte) }
                offset += length
            case .emptyInput:
                let shown = text(decoded, limit: limit)
                let unread = bytes.count - all.count
                return unread > 0 && !shown.hasSuffix("]") ? shown + "…[+\(unread) bytes]" : shown
            }
        }
    }

    /// Whether `scalar` can reach a terminal as it is.
    public static func isShownAsIs(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        if value < 0x20 || (0x7F...0x9F).contains(value) { return false }
        if value < 0x7F { return true }
        let properties = scalar.properties
        if properties.isNoncharacterCodePoint { return false }
        switch properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned:
            return false
        default:
            return true
        }
    }

    static func escape(_ scalar: Unicode.Scalar) -> String {
        let value = scalar.value
        if value <= 0xFF { return hexByte(UInt8(value)) }
        let hex = String(value, radix: 16)
        if value <= 0xFFFF { return "\\u" + String(repeating: "0", count: 4 - hex.count) + hex }
        return "\\U" + String(repeating: "0", count: 8 - hex.count) + hex
    }

    static func hexByte(_ byte: UInt8) -> String {
        let hex = String(byte, radix: 16)
        return "\\x" + (hex.count == 1 ? "0" : "") + hex
    }

    /// A short window of `line` around `column` (1-based, in characters),
    /// made visible: what an error message quotes of a long line.
    public static func window(_ line: some StringProtocol, column: Int, radius: Int = 40) -> String {
        let characters = Array(line.unicodeScalars.prefix(column + radius))
        let start = max(0, min(column - 1, characters.count) - radius)
        var text = String(String.UnicodeScalarView(characters[start...]))
        let cut = line.unicodeScalars.count > characters.count
        text = Visible.text(text, limit: nil)
        return (start > 0 ? "…" : "") + text + (cut ? "…" : "")
    }
}
