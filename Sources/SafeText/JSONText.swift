/// JSON that is safe on a terminal and exact.
///
/// Foundation's serializers escape the C0 controls in strings but write
/// DEL, the C1 controls (U+009B is CSI to many terminals), bidirectional
/// overrides and other invisible characters as they are. `JSONText.safe`
/// replaces each such character — which can only occur inside a string —
/// with its `\uXXXX` escape (a surrogate pair beyond the BMP): the same
/// value to any JSON reader, and nothing a terminal acts on.
public enum JSONText {
    public static func safe(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: { !Visible.isShownAsIs($0) && $0 != "\n" }) else { return json }
        var output = ""
        output.reserveCapacity(json.utf8.count)
        for scalar in json.unicodeScalars {
            if Visible.isShownAsIs(scalar) || scalar == "\n" {
                output.unicodeScalars.append(scalar)
            } else {
                for unit in String(scalar).utf16 { output += "\\u" + hex4(unit) }
            }
        }
        return output
    }

    static func hex4(_ unit: UInt16) -> String {
        let hex = String(unit, radix: 16)
        return String(repeating: "0", count: 4 - hex.count) + hex
    }

    /// `text` as a JSON string literal, quotes included, safe as above.
    public static func string(_ text: String) -> String {
        var output = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            default:
                if Visible.isShownAsIs(scalar) {
                    output.unicodeScalars.append(scalar)
                } else {
                    for unit in String(scalar).utf16 { output += "\\u" + hex4(unit) }
                }
            }
        }
        return output + "\""
    }
}
