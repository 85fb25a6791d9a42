import Foundation
import Testing

@testable import FleetReport

/// The page's layout rules: every section of `ReportSections.all` is on the
/// page and in the nav bar, in order, and named in docs/report.md; the
/// embedded style sheet and script are those of Assets/; the device table's
/// data block is JSON that says what the table shows.
extension FleetReportTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test func everySectionIsInTheNavAndDocumented() throws {
        let sections = ReportSections.all
        let ids = sections.map(\.id)
        #expect(Set(ids).count == ids.count, "two sections share an id: \(ids)")
        for id in ids {
            #expect(
                !id.isEmpty && id.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || $0 == "-" },
                "section id \(id) is not lower-case letters and -")
        }
        let page = ReportPage.html(GoldenFleet(now: Self.now).report(server: true), nonce: "n")

        // The nav bar: one link per section, in order, with its label.
        let nav = try #require(
            page.components(separatedBy: "<nav aria-label=\"Sections\">").dropFirst().first?
                .components(separatedBy: "</nav>").first)
        let links = sections.map { "<a href=\"#\($0.id)\">\(HTML.escape($0.navLabel))</a>" }
        #expect(nav == links.joined(separator: " "))

        // The sections: each once, in the order of the list, and no other.
        var rest = page[...]
        for section in sections {
            let opening =
                "<section id=\"\(section.id)\" aria-labelledby=\"\(section.id)-h\">\n"
                + "<h2 id=\"\(section.id)-h\">\(HTML.escape(section.title))</h2>\n"
            let found = try #require(
                rest.range(of: opening), "section \(section.id) is not on the page, or not in order")
            rest = rest[found.upperBound...]
        }
        #expect(page.components(separatedBy: "<section ").count - 1 == sections.count)

        // docs/report.md's list of sections: a row per section naming its
        // anchor, its title and its nav label, and no row for a section
        // that is not in the list.
        let docs = try String(
            contentsOf: Self.repository.appendingPathComponent("docs/report.md"), encoding: .utf8)
        let list = try #require(
            docs.components(separatedBy: "\n## Sections of the page\n").dropFirst().first?
                .components(separatedBy: "\n## ").first, "docs/report.md has no \"## Sections of the page\"")
        let rows = list.split(separator: "\n").filter { $0.hasPrefix("| `#") }
        for section in sections {
            let row = rows.first { $0.hasPrefix("| `#\(section.id)` |") }
            #expect(row != nil, "docs/report.md, Sections of the page: no row for `#\(section.id)`")
            if let row {
                #expect(
                    row.contains("| \(section.title) |") && row.contains("| \(section.navLabel) |"),
                    "docs/report.md: the row of `#\(section.id)` does not name \(section.title) / \(section.navLabel)")
            }
        }
        #expect(
            rows.count == sections.count, "docs/report.md lists \(rows.count) sections, the page has \(sections.count)")
    }

    @Test func assetsAreEmbedded() throws {
        let assets = Self.repository.appendingPathComponent("Sources/FleetReport/Assets")
        for (file, embedded) in [("report.css", ReportAssets.style), ("report.js", ReportAssets.script)] {
            let text = try String(contentsOf: assets.appendingPathComponent(file), encoding: .utf8)
            let fresh = text == embedded + "\n"
            #expect(
                fresh,
                "Sources/FleetReport/ReportAssets.swift is stale for Assets/\(file): run scripts/gen-report-assets")
        }
        let page = ReportPage.html(GoldenFleet(now: Self.now).report(server: false), nonce: "n")
        #expect(page.contains("<style nonce=\"n\">" + ReportAssets.style + "</style>"))
        #expect(page.contains("<script nonce=\"n\">" + ReportAssets.script + "</script>"))
    }

    @Test func theDeviceTableDataIsJSONOfEveryRow() throws {
        for server in [false, true] {
            let report = GoldenFleet(now: Self.now).report(server: server)
            let json = DeviceTableSection.tableJSON(report)
            #expect(!json.contains("<") && !json.contains(">") && !json.contains("&"))
            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any], "not a JSON object")
            #expect(object["pageSize"] as? Int == ReportPage.pageSize)
            #expect(object["columns"] as? [String] == DeviceTableSection.columns(server: server))
            let rows = try #require(object["rows"] as? [[Any]])
            #expect(rows.count == report.rows.count)
            // The identity column is two cells, major and minor.
            #expect(rows.allSatisfy { $0.count == DeviceTableSection.columns(server: server).count + 1 })
            // A row's texts read back through their dictionaries.
            let profiles = try #require(object["profiles"] as? [String])
            for (row, cells) in zip(report.rows, rows) {
                #expect(cells[0] as? String == row.device.address)
                #expect((cells[1] as? Int).map { profiles[$0] } == row.device.profile)
                #expect(cells[5] as? Int == row.device.battery)
            }
        }
    }
}

extension FleetReportTests {
    /// What a new analysis reads (docs/report.md, "Adding a section"): the
    /// chosen devices, their findings, and the history cut to them.
    @Test func theInputIsTheChosenDevicesAndTheirHistory() {
        let fleet = GoldenFleet(now: Self.now)
        let all = fleet.report(server: false)
        #expect(all.input.devices == fleet.devices)
        #expect(all.input.readings == fleet.history.readings)
        #expect(all.input.activity == fleet.history.activity && all.input.problems == fleet.history.problems)
        #expect(all.input.now == Self.now && all.input.profiles == GoldenFleet.profiles)
        #expect(all.input.findings.count == fleet.devices.count)

        let vans = fleet.report(server: false, filters: [.profile("van")], selectors: "profile=van")
        let chosen = Set(fleet.devices.filter { $0.profile == "van" }.map(\.address))
        #expect(!chosen.isEmpty && Set(vans.input.devices.map(\.address)) == chosen)
        #expect(Set(vans.input.findings.keys) == chosen)
        #expect(!vans.input.readings.isEmpty && vans.input.readings.allSatisfy { chosen.contains($0.device) })
        #expect(vans.input.problems.allSatisfy { $0.device.map(chosen.contains) ?? false })
        #expect(vans.input.activity.allSatisfy { $0.device.map(chosen.contains) ?? false })
        #expect(vans.rows.map(\.device.address) == vans.input.devices.map(\.address))
    }
}
