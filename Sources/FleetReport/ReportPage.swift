import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The report as one self-contained HTML page: charts as SVG, each with
/// its numbers in a table, and a device table that a small inline script
/// sorts, filters and pages from a JSON block. Nothing is fetched: a
/// Content-Security-Policy forbids every load, and allows only the page's
/// own style sheet and script (by a nonce made for this page).
///
/// This file is the skeleton: head, summary cards, nav bar, the sections
/// of `ReportSections.all` (Sections/), the data block. The style sheet and
/// script are Assets/report.css and report.js (`ReportAssets`, generated).
public enum ReportPage {
    /// Rows of the device table per page.
    public static let pageSize = 50
    /// At most this many rows in a chart's table or bar list; the device
    /// table has them all.
    static let tableRows = 50

    public static func html(_ report: FleetReport, nonce: String = ReportPage.nonce()) -> String {
        top(report, nonce: nonce) + dataBlock(DeviceTableSection.tableJSON(report)) + bottom(nonce: nonce)
    }

    /// The page up to its data block.
    static func top(_ report: FleetReport, nonce: String) -> String {
        let sections = ReportSections.all.map { $0.html(report) }
        let generated = UTC.minute(report.generatedAt)
        let scope =
            (report.selectors.isEmpty ? "" : " · devices: \(report.selectors)")
            + (report.since.map { " · history since \(UTC.day($0))" } ?? "")
        let summary = summaryCards(report)
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'nonce-\(nonce)'; script-src 'nonce-\(nonce)'; img-src 'none'; connect-src 'none'; font-src 'none'; base-uri 'none'; form-action 'none'">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="color-scheme" content="light dark">
            <meta name="generator" content="beaconbench report">
            <title>Fleet report · \(HTML.text(report.source, limit: 80))</title>
            <style nonce="\(nonce)">\(ReportAssets.style)</style>
            </head>
            <body>
            <header>
            <h1>Fleet report</h1>
            <p class="meta">\(HTML.text(report.source, limit: 200)) · generated \(HTML.escape(generated)) UTC\(HTML.text(scope, limit: 300)) · \(HTML.number(report.rowCount)) of \(HTML.number(report.fleetSize)) devices</p>
            \(summary)
            \(ReportSections.nav())
            </header>
            <main>
            \(sections.joined(separator: "\n"))
            </main>
            <footer><p>Made by beaconbench from the inventory; how each chart is computed: docs/report.md. Text from devices is shown as text, with control and invisible characters as \\xNN or \\uNNNN.</p></footer>

            """
    }

    /// The page after its data block.
    static func bottom(nonce: String) -> String {
        "\n<script nonce=\"\(nonce)\">\(ReportAssets.script)</script>\n</body>\n</html>\n"
    }

    /// Above this size the device table's JSON travels deflated (base64).
    public static let deflateAbove = 256 * 1024

    /// The device table's data block: the JSON as it is (escaped for a
    /// script block), or, when large, deflated and in base64 — which holds
    /// no markup character at all.
    static func dataBlock(_ json: String) -> String {
        let bytes = Array(json.utf8)
        if bytes.count > deflateAbove, let deflated = Deflate.zlib(bytes) {
            return "<script type=\"application/octet-stream\" id=\"report-data\" data-encoding=\"deflate\">"
                + Data(deflated).base64EncodedString() + "</script>"
        }
        return "<script type=\"application/json\" id=\"report-data\">" + json + "</script>"
    }

    /// 128 random bits, hex: the nonce of this page's style and script.
    public static func nonce() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in
            let hex = String(generator.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }

    static func summaryCards(_ report: FleetReport) -> String {
        let cards: [(String, String, String)] = [
            ("devices", HTML.number(report.rowCount), "devices"),
            ("findings", HTML.number(report.devicesWithFindings), "with audit findings"),
            (
                "quarter", HTML.number(report.crossingCount),
                "below their minimum by \(UTC.day(report.quarterEnd.addingTimeInterval(-1)))"
            ),
            ("duplicates", HTML.number(report.duplicates.count), "identities held twice"),
            ("readings", HTML.number(report.readingCount), "battery readings"),
            ("benches", HTML.number(report.benches.count), "benches at work"),
        ]
        return "<ul class=\"cards\">"
            + cards.map { "<li data-card=\"\($0.0)\"><strong>\($0.1)</strong> \(HTML.escape($0.2))</li>" }.joined()
            + "</ul>"
    }
}
