/// CSV for spreadsheets (RFC 4180), safe to open.
///
/// - Each record ends with CRLF; a field holding a comma, a double quote,
///   CR or LF is enclosed in double quotes, a quote inside doubled.
/// - Formula injection: a spreadsheet runs a cell that begins with `=`,
///   `+`, `-` or `@` (and some with tab or CR) as a formula —
///   `=HYPERLINK(…)`, `=cmd|' /C calc'!A0`. Such a cell is written with a
///   `'` in front, which spreadsheets take as "this is text" and do not
///   show. This applies to every cell, numbers included: `-12` is written
///   `'-12`. Programs should read the JSON export instead.
/// - Control and invisible characters in a cell are shown as `Visible.text`
///   shows them (`\x1b`), so the file is also safe to print on a terminal;
///   the exact values are in the JSON export.
public enum CSV {
    /// The largest cell: what a spreadsheet holds (Excel: 32,767
    /// characters); longer text is cut as `Visible.text` cuts it.
    public static let cellLimit = 32_000

    /// One field, protected and quoted.
    public static func field(_ value: String) -> String {
        var text = Visible.text(value, limit: cellLimit)
        if let first = value.unicodeScalars.first, "=+-@\t\r".unicodeScalars.contains(first) {
            text = "'" + text
        }
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        var quoted = "\""
        for character in text { quoted += character == "\"" ? "\"\"" : String(character) }
        return quoted + "\""
    }

    /// One record: its fields, protected, quoted and joined, then CRLF.
    public static func record(_ fields: [String]) -> String {
        fields.map(field).joined(separator: ",") + "\r\n"
    }

    /// A whole document: a header record, then the rows.
    public static func document(header: [String], rows: [[String]]) -> String {
        var text = record(header)
        for row in rows { text += record(row) }
        return text
    }
}
