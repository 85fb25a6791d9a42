/// One section of the report page: its heading, what is under it, and its
/// link in the page's nav bar (generated from `ReportSections.all`).
///
/// A new section is an analysis (`Analyses/<X>.swift`: an extension of
/// `FleetReport` that computes from `FleetReport.input`), a type here
/// (`Sections/<X>Section.swift`), one line in `ReportSections.all` and a
/// row in docs/report.md's list of sections
/// (`FleetReportTests.everySectionIsInTheNavAndDocumented` fails without it).
protocol ReportSection: Sendable {
    /// The `<section>`'s id: the nav link's anchor (`#battery`).
    var id: String { get }
    /// The section's heading (`<h2>`).
    var title: String { get }
    /// Its link's text in the nav bar; the title when not given.
    var navLabel: String { get }
    /// What is under the heading, in order: figures (`Chart.figure`), controls, tables.
    func body(_ report: FleetReport) -> [String]
}

extension ReportSection {
    var navLabel: String { title }

    /// At most this many rows in a chart's table or bar list.
    var tableRows: Int { ReportPage.tableRows }

    /// The section as markup: `<section>`, its heading, its body one part a line.
    func html(_ report: FleetReport) -> String {
        """
        <section id="\(id)" aria-labelledby="\(id)-h">
        <h2 id="\(id)-h">\(HTML.escape(title))</h2>
        \(body(report).joined(separator: "\n"))
        </section>
        """
    }
}

/// The page's sections, in page (and nav bar) order.
enum ReportSections {
    static let all: [any ReportSection] = [
        BatterySection(),
        FirmwareSection(),
        CalibrationSection(),
        DriftSection(),
        FindingsSection(),
        ActivitySection(),
        DeviceTableSection(),
    ]

    /// The nav bar: a link to each section.
    static func nav(_ sections: [any ReportSection] = all) -> String {
        "<nav aria-label=\"Sections\">"
            + sections.map { "<a href=\"#\($0.id)\">\(HTML.escape($0.navLabel))</a>" }.joined(separator: " ")
            + "</nav>"
    }
}
