/// How many columns text takes on a terminal: the one measure of the
/// console's tables, padding, progress and status lines.
///
/// - Escape sequences take no column: CSI (`ESC [` … final byte, as the
///   console's own colour codes `ESC [ 1 ; 34 m`), OSC, DCS, SOS, PM and
///   APC strings (up to BEL or ST), and the short `ESC X` forms; so do the
///   C1 introducers CSI (U+009B) and OSC (U+009D) with what they introduce.
/// - Other control characters (C0, DEL, C1) take none either: readline's
///   `\u{1}`…`\u{2}` markers around invisible prompt text, a stray tab.
/// - East Asian Wide and Fullwidth characters take two.
/// - Combining marks, zero-width and format characters take none.
/// - Every other character takes one.
///
/// Widths are those of wcwidth (`TextWidthTables.swift`), code point by
/// code point as a terminal draws them (wcswidth, not grapheme clusters).
/// Text from outside is made visible (`Visible.text`) before it is shown,
/// so its escapes are measured as the `\x1b` it becomes.
public enum TextWidth {
    /// Columns `scalar` takes alone (no escape sequence around it).
    public static func columns(of scalar: Unicode.Scalar) -> Int {
        let value = scalar.value
        if value >= 0x20 && value < 0x7F { return 1 }
        if value < 0x20 || (0x7F...0x9F).contains(value) { return 0 }
        if contains(zero, value) { return 0 }
        if contains(wide, value) { return 2 }
        return 1
    }

    /// Columns `text` takes on a terminal, its escape sequences skipped.
    public static func columns(of text: some StringProtocol) -> Int {
        var total = 0
        forEachScalar(in: text) { scalar, width in
            total += width
            return true
        }
        return total
    }

    /// The longest start of `text` that fits in `limit` columns, escape
    /// sequences kept whole. When something was cut, `marker` (say "…")
    /// ends the result in the room left for it, and a colour the text had
    /// turned on is turned off (`ESC [ 0 m`) so nothing after it is tinted.
    public static func truncated(_ text: some StringProtocol, toColumns limit: Int, marker: String = "") -> String {
        guard columns(of: text) > limit else { return String(text) }
        let markerWidth = columns(of: marker)
        let room = max(0, limit - markerWidth)
        var kept = String.UnicodeScalarView()
        var used = 0
        var sawEscape = false
        forEachScalar(in: text) { scalar, width in
            if scalar.value == 0x1B || scalar.value == 0x9B { sawEscape = true }
            guard used + width <= room else { return false }
            used += width
            kept.append(scalar)
            return true
        }
        var result = String(kept)
        if sawEscape { result += "\u{1B}[0m" }
        if markerWidth <= limit { result += marker }
        return result
    }

    /// Calls `body` with each scalar of `text` and the columns it takes
    /// (0 inside an escape sequence), until `body` returns false.
    static func forEachScalar(in text: some StringProtocol, _ body: (Unicode.Scalar, Int) -> Bool) {
        var state = Escape.none
        for scalar in text.unicodeScalars {
            let value = scalar.value
            var width = 0
            switch state {
            case .none:
                if value == 0x1B {
                    state = .escape
                } else if value == 0x9B {
                    state = .csi
                } else if value == 0x9D || value == 0x90 || value == 0x98 || value == 0x9E || value == 0x9F {
                    state = .string
                } else {
                    width = columns(of: scalar)
                }
            case .escape:
                switch value {
                case 0x5B: state = .csi  // [
                case 0x5D, 0x50, 0x58, 0x5E, 0x5F: state = .string  // ] P X ^ _
                case 0x20...0x2F: state = .intermediate  // ESC ( B and the like
                case 0x1B: state = .escape
                default: state = .none  // ESC 7, ESC c, ESC M…: one character
                }
            case .csi:
                // Parameters and intermediates, then a final byte.
                if (0x40...0x7E).contains(value) || !(0x20...0x3F).contains(value) { state = .none }
            case .intermediate:
                if !(0x20...0x2F).contains(value) { state = .none }
            case .string:
                if value == 0x07 || value == 0x9C {
                    state = .none
                } else if value == 0x1B {
                    state = .stringEscape
                }
            case .stringEscape:
                state = value == 0x5C ? .none : .string  // ST is ESC \
            }
            if !body(scalar, width) { return }
        }
    }

    private enum Escape {
        case none, escape, csi, intermediate, string, stringEscape
    }

    static func contains(_ ranges: [ClosedRange<UInt32>], _ value: UInt32) -> Bool {
        var low = 0
        var high = ranges.count - 1
        while low <= high {
            let middle = (low + high) / 2
            let range = ranges[middle]
            if value < range.lowerBound {
                high = middle - 1
            } else if value > range.upperBound {
                low = middle + 1
            } else {
                return true
            }
        }
        return false
    }
}
