import SafeText

/// Text on its way into the report page. Every string the page holds that
/// came from a device, a file or the inventory goes through `text` (in
/// markup) or `json` (in the page's data block): nothing a device says
/// can become markup or script.
public enum HTML {
    /// `text` with `&`, `<`, `>`, `"` and `'` as character references: safe
    /// in element content and in quoted attribute values.
    public static func escape(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": output += "&amp;"
            case "<": output += "&lt;"
            case ">": output += "&gt;"
            case "\"": output += "&quot;"
            case "'": output += "&#39;"
            default: output.unicodeScalars.append(scalar)
            }
        }
        return output
    }

    /// Outside text for markup: control and invisible characters (bidi
    /// overrides, zero widths…) shown as `\xNN` / `\uNNNN` as on a
    /// terminal (`Visible`), cut after `limit` characters, then escaped.
    public static func text(_ text: String, limit: Int = 200) -> String {
        escape(Visible.text(text, limit: limit))
    }

    /// A JSON string literal that is safe inside `<script type="application/json">`:
    /// the text made visible as `text` does, then `"` and `\` escaped,
    /// and `<`, `>`, `&`, U+2028 and U+2029 written as `\u003c` etc., so
    /// that no `</script>` or `<!--` can end or bend the block.
    public static func json(_ text: String, limit: Int = 200) -> String {
        scriptSafe(JSONValue.string(Visible.text(text, limit: limit)).text)
    }

    /// JSON written by `JSONValue` (U+2028/2029 and other invisibles
    /// already as `\u` escapes) made safe inside a script block: the three
    /// characters HTML reads there, `&`, `<` and `>`, as `\u0026`, `\u003c`
    /// and `\u003e`. Outside its strings JSON holds none of them, so this
    /// changes only strings, and each to the same value.
    static func scriptSafe(_ json: String) -> String {
        guard
            json.utf8.contains(where: { $0 == UInt8(ascii: "&") || $0 == UInt8(ascii: "<") || $0 == UInt8(ascii: ">") })
        else { return json }
        return json.replacingEvery("&", with: "\\u0026")
            .replacingEvery("<", with: "\\u003c")
            .replacingEvery(">", with: "\\u003e")
    }

    /// An integer with thousands separators: `100,000`.
    static func number(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var output = ""
        for (index, character) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { output.append(",") }
            output.append(character)
        }
        return (value < 0 ? "-" : "") + output
    }

    /// A decimal with `places` digits after the point.
    static func decimal(_ value: Double, _ places: Int = 1) -> String {
        guard value.isFinite else { return "–" }
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let rounded = (value * scale).rounded() / scale
        var text = "\(rounded)"
        if let dot = text.firstIndex(of: ".") {
            let decimals = text.distance(from: dot, to: text.endIndex) - 1
            if decimals < places { text += String(repeating: "0", count: places - decimals) }
            if places == 0 { text = String(text[..<dot]) }
        }
        return text
    }
}
