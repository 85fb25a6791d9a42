/// What Foundation's `trimmingCharacters(in:)` and `padding(toLength:…)`
/// gave, without Foundation (docs/benchmarks.md, "Start-up").
extension StringProtocol {
    /// Without white space or line ends at either end (Foundation's
    /// `.whitespacesAndNewlines`).
    public func trimmingWhitespace() -> String {
        String(drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }

    /// Without spaces and tabs at either end, line ends kept (Foundation's
    /// `.whitespaces`).
    public func trimmingBlanks() -> String {
        let blank = { (character: Character) in character.isWhitespace && !character.isNewline }
        return String(drop(while: blank).reversed().drop(while: blank).reversed())
    }

    /// Cut or filled with spaces to `length` characters.
    public func padded(to length: Int) -> String {
        count >= length ? String(prefix(length)) : String(self) + String(repeating: " ", count: length - count)
    }
}

extension String {
    /// Every occurrence of `target` replaced by `replacement`, compared as
    /// Foundation's `replacingOccurrences(of:with:)` compared them: code
    /// point by code point (here UTF-8 byte by byte), not by grapheme, so
    /// that a combining mark after a match does not hide it.
    public func replacingEvery(_ target: String, with replacement: String) -> String {
        let bytes = Array(utf8)
        let pattern = Array(target.utf8)
        guard !pattern.isEmpty, bytes.count >= pattern.count else { return self }
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == pattern[0], index + pattern.count <= bytes.count,
                bytes[index..<index + pattern.count].elementsEqual(pattern)
            {
                result += replacement.utf8
                index += pattern.count
            } else {
                result.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }
}
