import Foundation
import Profiles

/// The report as one self-contained HTML page: charts as SVG, each with
/// its numbers in a table, and a device table that a small inline script
/// sorts, filters and pages from a JSON block. Nothing is fetched: a
/// Content-Security-Policy forbids every load, and allows only the page's
/// own style sheet and script (by a nonce made for this page).
public enum ReportPage {
    /// Rows of the device table per page.
    public static let pageSize = 50
    /// At most this many rows in a chart's table or bar list; the device
    /// table has them all.
    static let tableRows = 50

    public static func html(_ report: FleetReport, nonce: String = ReportPage.nonce()) -> String {
        var sections: [String] = []
        sections.append(batterySection(report))
        sections.append(firmwareSection(report))
        sections.append(calibrationSection(report))
        sections.append(driftSection(report))
        sections.append(findingsSection(report))
        sections.append(activitySection(report))
        sections.append(deviceSection(report))
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
            <style nonce="\(nonce)">\(style)</style>
            </head>
            <body>
            <header>
            <h1>Fleet report</h1>
            <p class="meta">\(HTML.text(report.source, limit: 200)) · generated \(HTML.escape(generated)) UTC\(HTML.text(scope, limit: 300)) · \(HTML.number(report.rows.count)) of \(HTML.number(report.fleetSize)) devices</p>
            \(summary)
            <nav aria-label="Sections"><a href="#battery">Battery</a> <a href="#firmware">Firmware</a> <a href="#calibration">Calibration</a> <a href="#drift">Config drift</a> <a href="#findings">Findings</a> <a href="#activity">Activity</a> <a href="#devices">Devices</a></nav>
            </header>
            <main>
            \(sections.joined(separator: "\n"))
            </main>
            <footer><p>Made by beaconbench from the inventory; how each chart is computed: docs/report.md. Text from devices is shown as text, with control and invisible characters as \\xNN or \\uNNNN.</p></footer>
            \(dataBlock(tableJSON(report)))
            <script nonce="\(nonce)">\(script)</script>
            </body>
            </html>

            """
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
            ("devices", HTML.number(report.rows.count), "devices"),
            ("findings", HTML.number(report.devicesWithFindings), "with audit findings"),
            (
                "quarter", HTML.number(report.crossingThisQuarter.count),
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

    // MARK: Sections

    static func batterySection(_ report: FleetReport) -> String {
        let known = report.battery.reduce(0) { $0 + $1.value }
        let distribution = Chart.figure(
            id: "battery", title: "Battery distribution",
            description:
                "Devices by their last battery level, in 10 % bins (red: below 20 %, amber: below 30 %); \(HTML.number(report.batteryUnknown)) devices have no battery reading.",
            svg: Chart.columns(
                id: "svg-battery", title: "Battery distribution",
                description: "Column chart: devices per battery bin. "
                    + report.battery.map { "\($0.label) %: \($0.value)" }.joined(separator: ", "),
                categories: report.battery.map { $0.label + " %" },
                series: [
                    .init(
                        name: "devices", values: report.battery.map(\.value),
                        classes: report.battery.indices.map { $0 < 2 ? "bad" : $0 < 3 ? "warn" : nil })
                ], yLabel: "devices", emptyText: "No device has a battery reading"),
            table: Chart.table(
                id: "battery", caption: "Devices per battery bin", header: ["battery", "devices"],
                rows: report.battery.map { [$0.label + " %", HTML.number($0.value)] }
                    + [["unknown", HTML.number(report.batteryUnknown)]], numeric: [1]),
            total: known, extra: [("unknown", "\(report.batteryUnknown)")])

        let trendTitle = "Fleet battery over time"
        let trendLine = Chart.Line(
            name: "mean battery of the fleet", points: report.trend.map { ($0.start.timeIntervalSince1970, $0.mean) },
            className: "line0")
        let lowLine = Chart.Line(
            name: "lowest reading", points: report.trend.map { ($0.start.timeIntervalSince1970, Double($0.minimum)) },
            className: "line3")
        let trend = Chart.figure(
            id: "trend", title: trendTitle,
            description:
                "The mean and the lowest of every battery reading per \(report.trendUnit), from the readings table (\(HTML.number(report.readingCount)) readings).",
            svg: Chart.lines(
                id: "svg-trend", title: trendTitle,
                description:
                    "Line chart of the fleet's mean battery per \(report.trendUnit); the table below has each value.",
                lines: [trendLine, lowLine], levels: [], marks: [], yLabel: "battery %",
                emptyText: "No battery readings"),
            table: Chart.table(
                id: "trend", caption: "Battery readings per \(report.trendUnit)",
                header: [report.trendUnit, "readings", "devices", "mean %", "lowest %", "highest %"],
                rows: report.trend.suffix(tableRows).map {
                    [
                        $0.period, HTML.number($0.readings), HTML.number($0.devices), HTML.decimal($0.mean),
                        "\($0.minimum)", "\($0.maximum)",
                    ]
                }, numeric: [1, 2, 3, 4, 5], more: max(0, report.trend.count - tableRows)),
            total: report.trend.count, extra: [("readings", "\(report.readingCount)")])

        let now = report.generatedAt.timeIntervalSince1970
        var deviceLines: [Chart.Line] = []
        var levels: Set<Int> = []
        for (index, line) in report.lines.enumerated() {
            deviceLines.append(
                .init(
                    name: line.device, points: line.points.map { ($0.at.timeIntervalSince1970, Double($0.battery)) },
                    className: "line\(index % 8)"))
            let projection = line.projection
            if let crossing = projection.crossing {
                let start = projection.last.timeIntervalSince1970
                let end = max(start, crossing.timeIntervalSince1970)
                let startY =
                    projection.batteryNow + projection.slopePerDay * (start - now) / 86_400
                deviceLines.append(
                    .init(
                        name: "\(line.device) projected", points: [(start, startY), (end, Double(projection.minimum))],
                        dashed: true, className: "line\(index % 8)"))
            }
            levels.insert(projection.minimum)
        }
        let projectionTitle = "Battery per device, with the projected crossing of the profile's minimum"
        let projectionsChart = Chart.figure(
            id: "projection", title: "Projected battery crossings",
            description:
                "A least-squares line through each device's readings (at least two, a day apart) gives when it falls below its profile's minimum. Drawn: the \(report.lines.count) devices that cross soonest; \(HTML.number(report.projections.count)) devices have a projection, \(HTML.number(report.unprojected)) have too few readings.",
            svg: Chart.lines(
                id: "svg-projection", title: projectionTitle,
                description:
                    "Line chart: battery readings of the devices that cross soonest, dashed lines to the projected crossing.",
                lines: deviceLines, levels: levels.sorted().map { (Double($0), "minimum \($0) %") },
                marks: report.lines.isEmpty
                    ? [] : [(now, "now"), (report.quarterEnd.timeIntervalSince1970, "quarter ends")],
                yLabel: "battery %", emptyText: "No device has two readings a day apart yet"),
            table: Chart.table(
                id: "quarter",
                caption:
                    "Devices below their minimum by the end of the quarter (\(UTC.day(report.quarterEnd.addingTimeInterval(-1))))",
                header: ["device", "profile", "minimum %", "now (fit) %", "% per day", "readings fitted", "crosses"],
                rows: report.crossingThisQuarter.prefix(tableRows).map { projection in
                    [
                        projection.device, projection.profile, "\(projection.minimum)",
                        HTML.decimal(projection.batteryNow), HTML.decimal(projection.slopePerDay, 2),
                        projection.readings == 0 ? "last reading" : "\(projection.readings)",
                        projection.crossing.map { $0.timeIntervalSince1970 <= now ? "already below" : UTC.day($0) }
                            ?? "",
                    ]
                }, numeric: [2, 3, 4, 5], more: max(0, report.crossingThisQuarter.count - tableRows)),
            total: report.crossingThisQuarter.count,
            extra: [("projected", "\(report.projections.count)"), ("lines", "\(report.lines.count)")])
        return section(
            "battery", "Battery", [distribution, trend, projectionsChart])
    }

    static func firmwareSection(_ report: FleetReport) -> String {
        let versions = report.firmwareVersions
        let series = versions.enumerated().map { index, version in
            Chart.Series(name: version, values: report.firmware.map { $0.versions[index].value })
        }
        let total = report.firmware.reduce(0) { $0 + $1.versions.reduce(0) { $0 + $1.value } }
        var rows: [[String]] = []
        for (profile, counts) in report.firmware {
            for count in counts where count.value > 0 { rows.append([profile, count.label, HTML.number(count.value)]) }
        }
        let figure = Chart.figure(
            id: "firmware", title: "Firmware versions per profile",
            description:
                "Devices per profile, split by the firmware they last reported (the 8 commonest versions; the rest as other).",
            svg: Chart.bars(
                id: "svg-firmware", title: "Firmware versions per profile",
                description: "Stacked bar chart: one bar per profile, one segment per firmware version.",
                rows: report.firmware.map(\.profile), series: series, emptyText: "No devices"),
            table: Chart.table(
                id: "firmware", caption: "Devices per profile and firmware version",
                header: ["profile", "firmware", "devices"], rows: Array(rows.prefix(tableRows * 2)), numeric: [2],
                more: max(0, rows.count - tableRows * 2)),
            total: total)
        return section("firmware", "Firmware", [figure])
    }

    static func calibrationSection(_ report: FleetReport) -> String {
        let ages = Chart.figure(
            id: "calibration-age", title: "Calibration age",
            description: "Calibrated devices by days since their calibration, and devices not calibrated.",
            svg: Chart.columns(
                id: "svg-calibration-age", title: "Calibration age",
                description: "Column chart: "
                    + report.calibrationAge.map { "\($0.label): \($0.value)" }.joined(separator: ", "),
                categories: report.calibrationAge.map(\.label),
                series: [
                    .init(
                        name: "devices", values: report.calibrationAge.map(\.value),
                        classes: report.calibrationAge.indices.map { $0 >= 4 ? "warn" : nil })
                ], yLabel: "devices", emptyText: "No calibration known"),
            table: Chart.table(
                id: "calibration-age", caption: "Devices per calibration age", header: ["age", "devices"],
                rows: report.calibrationAge.map { [$0.label, HTML.number($0.value)] }, numeric: [1]),
            total: report.calibrationAge.reduce(0) { $0 + $1.value })
        let magnitude = Chart.figure(
            id: "calibration-vector", title: "Calibration vector magnitude",
            description:
                "|g| of each calibrated device's gravity vector in mG; plausible is 1000 ± 150 mG (850–1150, red bins are outside): \(HTML.number(report.plausible)) plausible, \(HTML.number(report.implausible)) not.",
            svg: Chart.columns(
                id: "svg-calibration-vector", title: "Calibration vector magnitude",
                description: "Column chart of |g| in 50 mG bins. "
                    + report.magnitude.filter { $0.value > 0 }.map { "\($0.label) mG: \($0.value)" }.joined(
                        separator: ", "),
                categories: report.magnitude.map(\.label),
                series: [
                    .init(
                        name: "devices", values: report.magnitude.map(\.value),
                        classes: report.magnitude.indices.map { FleetReport.isImplausibleBin($0) ? "bad" : nil })
                ], yLabel: "devices", emptyText: "No calibration vectors"),
            table: Chart.table(
                id: "calibration-vector", caption: "Devices per |g| bin (mG)",
                header: ["|g| mG", "devices", "plausible"],
                rows: report.magnitude.enumerated().map {
                    [$1.label, HTML.number($1.value), FleetReport.isImplausibleBin($0) ? "no" : "yes"]
                }, numeric: [1]),
            total: report.plausible + report.implausible, extra: [("implausible", "\(report.implausible)")])
        return section("calibration", "Calibration", [ages, magnitude])
    }

    static func driftSection(_ report: FleetReport) -> String {
        let figure = Chart.figure(
            id: "drift", title: "Config drift",
            description:
                "Devices whose read-back thresholds differ from their profile, field by field (\(HTML.number(report.driftDevices)) devices drift in at least one field).",
            svg: Chart.bars(
                id: "svg-drift", title: "Config drift per field",
                description: "Bar chart: "
                    + report.driftFields.map { "\($0.label): \($0.value)" }.joined(separator: ", "),
                rows: report.driftFields.map(\.label),
                series: [.init(name: "devices", values: report.driftFields.map(\.value))],
                emptyText: "No device drifts from its profile", labelWidth: 140),
            table: Chart.table(
                id: "drift", caption: "Values held against the profile's",
                header: ["field", "profile", "profile says", "device holds", "devices"],
                rows: report.drift.prefix(tableRows).map {
                    [$0.field, $0.profile, $0.wants, $0.holds, HTML.number($0.devices)]
                },
                numeric: [4], more: max(0, report.drift.count - tableRows)),
            total: report.driftFields.reduce(0) { $0 + $1.value }, extra: [("devices", "\(report.driftDevices)")])
        return section("drift", "Config drift", [figure])
    }

    static func findingsSection(_ report: FleetReport) -> String {
        let findings = Chart.figure(
            id: "findings", title: "Audit findings by kind",
            description:
                "Devices with each finding of the offline audit (docs/profiles.md); \(HTML.number(report.devicesWithFindings)) devices have at least one.",
            svg: Chart.bars(
                id: "svg-findings", title: "Audit findings by kind",
                description: "Bar chart: " + report.findings.map { "\($0.label): \($0.value)" }.joined(separator: ", "),
                rows: report.findings.map(\.label),
                series: [
                    .init(
                        name: "devices", values: report.findings.map(\.value),
                        classes: report.findings.map { _ in "warn" })
                ], emptyText: "No findings: every device meets its profile", labelWidth: 200),
            table: Chart.table(
                id: "findings", caption: "Devices per finding", header: ["finding", "devices"],
                rows: report.findings.map { [$0.label, HTML.number($0.value)] }, numeric: [1]),
            total: report.findings.reduce(0) { $0 + $1.value },
            extra: [("devices", "\(report.devicesWithFindings)")])
        let shown = Array(report.duplicates.prefix(20))
        let duplicates = Chart.figure(
            id: "duplicates", title: "Duplicate identities",
            description:
                "iBeacon identities (major.minor) held by more than one beacon in service: \(HTML.number(report.duplicates.count)) identities.",
            svg: Chart.bars(
                id: "svg-duplicates", title: "Duplicate identities",
                description: "Bar chart: beacons holding each shared identity (the 20 most shared).",
                rows: shown.map(\.identity),
                series: [
                    .init(name: "beacons", values: shown.map(\.holders.count), classes: shown.map { _ in "bad" })
                ], emptyText: "No identity is held twice", labelWidth: 140),
            table: Chart.table(
                id: "duplicates", caption: "Shared identities and their holders",
                header: ["identity", "beacons", "held by"],
                rows: report.duplicates.prefix(tableRows).map {
                    [$0.identity, "\($0.holders.count)", $0.holders.joined(separator: ", ")]
                }, numeric: [1], more: max(0, report.duplicates.count - tableRows)),
            total: report.duplicates.count)
        return section("findings", "Audit findings", [findings, duplicates])
    }

    static func activitySection(_ report: FleetReport) -> String {
        let periods = Array(Set(report.activity.map(\.day))).sorted()
        let benchNames = report.benches.map(\.bench)
        let series = benchNames.map { bench in
            Chart.Series(
                name: "bench \(bench)",
                values: periods.map { period in
                    report.activity.first { $0.day == period && $0.bench == bench }?.devices ?? 0
                })
        }
        let activity = Chart.figure(
            id: "activity", title: "Provisioning activity per \(report.activityUnit) and bench",
            description: "Devices worked on (any step) per \(report.activityUnit), one colour per bench.",
            svg: Chart.columns(
                id: "svg-activity", title: "Provisioning activity",
                description: "Stacked column chart: devices worked on per \(report.activityUnit) and bench.",
                categories: periods, series: series, yLabel: "devices", emptyText: "No step outcomes recorded"),
            table: Chart.table(
                id: "activity", caption: "Work per \(report.activityUnit) and bench",
                header: [report.activityUnit, "bench", "devices", "steps", "failed"],
                rows: report.activity.suffix(tableRows * 2).map {
                    [$0.day, $0.bench, HTML.number($0.devices), HTML.number($0.steps), HTML.number($0.failed)]
                }, numeric: [2, 3, 4], more: max(0, report.activity.count - tableRows * 2))
                + Chart.table(
                    id: "benches", caption: "How fast each bench works",
                    header: [
                        "bench", "days at work", "devices", "steps", "failed", "mean step (ms)", "devices per day",
                    ],
                    rows: report.benches.map {
                        [
                            $0.bench, HTML.number($0.days), HTML.number($0.devices), HTML.number($0.steps),
                            HTML.number($0.failed), HTML.decimal($0.meanStepMilliseconds, 0),
                            HTML.decimal($0.devicesPerDay),
                        ]
                    }, numeric: [1, 2, 3, 4, 5, 6]),
            total: report.activity.reduce(0) { $0 + $1.devices }, extra: [("benches", "\(report.benches.count)")])
        // The chart: one bar per reason (a skipped device skips each step
        // for one reason); the table: each step with its reason.
        var byReason: [String: (status: String, reason: String, count: Int)] = [:]
        for problem in report.problems {
            byReason[problem.status + "\u{1F}" + problem.reason, default: (problem.status, problem.reason, 0)].count +=
                problem.count
        }
        let shown = byReason.values.sorted { ($1.count, $0.reason) < ($0.count, $1.reason) }.prefix(15)
        let failures = Chart.figure(
            id: "failures", title: "Step failures and skips by reason",
            description:
                "Steps that failed or were skipped, by reason (addresses shown as ADDRESS, numbers as N, firmware versions kept); the table gives the steps.",
            svg: Chart.bars(
                id: "svg-failures", title: "Step failures by reason",
                description: "Bar chart: the 15 commonest reasons; red: failed, amber: skipped.",
                rows: shown.map { "\($0.reason) (\($0.status))" },
                series: [
                    .init(
                        name: "steps", values: shown.map(\.count),
                        classes: shown.map { $0.status == "failed" ? "bad" : "warn" })
                ], emptyText: "No step failed or was skipped", labelWidth: 420),
            table: Chart.table(
                id: "failures", caption: "Failed and skipped steps by reason",
                header: ["step", "status", "reason", "steps"],
                rows: report.problems.prefix(tableRows).map { [$0.step, $0.status, $0.reason, HTML.number($0.count)] },
                numeric: [3], more: max(0, report.problems.count - tableRows)),
            total: report.problems.reduce(0) { $0 + $1.count },
            extra: [("failed", "\(report.problems.filter { $0.status == "failed" }.reduce(0) { $0 + $1.count })")])
        return section("activity", "Benches at work", [activity, failures])
    }

    static func deviceSection(_ report: FleetReport) -> String {
        let codes = Set(report.rows.flatMap(\.findings)).sorted()
        let options = codes.map { "<option value=\"\(HTML.escape($0))\">\(HTML.escape($0))</option>" }.joined()
        let header = deviceColumns(server: report.server).enumerated().map { index, column in
            "<th scope=\"col\" aria-sort=\"none\"><button type=\"button\" data-column=\"\(index)\">\(HTML.escape(column))</button></th>"
        }.joined()
        return """
            <section id="devices" aria-labelledby="devices-h">
            <h2 id="devices-h">Devices</h2>
            <div class="controls" role="search">
            <label>Filter <input id="filter" type="search" placeholder="address, profile, model, firmware, finding…" autocomplete="off"></label>
            <label>Finding <select id="finding"><option value="">any or none</option><option value="*">with findings</option>\(options)</select></label>
            <span id="table-status" aria-live="polite" data-matching="\(report.rows.count)" data-total="\(report.rows.count)">\(HTML.number(report.rows.count)) devices</span>
            </div>
            <div class="scroll"><table id="device-table" data-rows="\(report.rows.count)"><caption>Every device of the report; a column's button sorts it. Battery crossing: days until the projected fall below the profile's minimum.</caption>
            <thead><tr>\(header)</tr></thead><tbody></tbody></table></div>
            <div class="pager"><button type="button" id="prev">Previous</button> <span id="page"></span> <button type="button" id="next">Next</button></div>
            <noscript><p>The device table needs JavaScript; `beaconbench inventory export --csv` has the same rows.</p></noscript>
            </section>
            """
    }

    static func deviceColumns(server: Bool) -> [String] {
        [
            "address", "profile", "identity", "firmware", "battery %", "crosses minimum in (days)",
            "calibrated (days ago)", "|g| mG", "findings", "model", "serial", "last seen (days ago)",
        ] + (server ? ["benches"] : [])
    }

    static func section(_ id: String, _ title: String, _ figures: [String]) -> String {
        """
        <section id="\(id)" aria-labelledby="\(id)-h">
        <h2 id="\(id)-h">\(HTML.escape(title))</h2>
        \(figures.joined(separator: "\n"))
        </section>
        """
    }

    // MARK: The device table's data

    /// The device table as compact JSON: repeated texts (profiles,
    /// firmware, finding sets, models, benches) once in dictionaries, each
    /// row an array of numbers and indexes. Every string is made visible
    /// and escaped for a script block (`HTML.json`).
    static func tableJSON(_ report: FleetReport) -> String {
        var dictionaries: [[String]] = Array(repeating: [], count: 5)
        var indexes: [[String: Int]] = Array(repeating: [:], count: 5)
        func index(_ kind: Int, _ text: String?) -> String {
            guard let text else { return "null" }
            if let found = indexes[kind][text] { return String(found) }
            let next = dictionaries[kind].count
            dictionaries[kind].append(text)
            indexes[kind][text] = next
            return String(next)
        }
        func number(_ value: Int?) -> String { value.map(String.init) ?? "null" }
        let now = report.generatedAt
        var rows: [String] = []
        rows.reserveCapacity(report.rows.count)
        for row in report.rows {
            let device = row.device
            var cells: [String] = [
                HTML.json(device.address, limit: 40), index(0, device.profile), number(device.major),
                number(device.minor), index(1, device.firmware), number(device.battery), number(row.crossingDays),
                number(row.calibrationAgeDays), number(row.magnitude),
                index(2, row.findings.isEmpty ? nil : row.findings.joined(separator: " ")), index(3, device.model),
                device.serial.map { HTML.json($0, limit: 80) } ?? "null",
                number(device.lastSeen.flatMap { Auditor.wholeDays(now.timeIntervalSince($0)).map { max(0, $0) } }),
            ]
            if report.server { cells.append(index(4, device.benches)) }
            rows.append("[" + cells.joined(separator: ",") + "]")
        }
        let names = ["profiles", "firmware", "findings", "models", "benches"]
        let dictionaryJSON = zip(names, dictionaries).map { name, values in
            "\"\(name)\":[" + values.map { HTML.json($0, limit: 120) }.joined(separator: ",") + "]"
        }.joined(separator: ",")
        let columns = deviceColumns(server: report.server).map { HTML.json($0) }.joined(separator: ",")
        return "{\"pageSize\":\(pageSize),\"columns\":[\(columns)],\(dictionaryJSON),\"rows\":[\n"
            + rows.joined(separator: ",\n") + "]}"
    }

    // MARK: Style and script

    static let style = """
        :root{color-scheme:light dark;--bg:#fff;--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--panel:#f6f8fa;\
        --s0:#0969da;--s1:#1a7f37;--s2:#8250df;--s3:#bf3989;--s4:#9a6700;--s5:#0550ae;--s6:#57606a;--s7:#cf222e;\
        --bad:#cf222e;--warn:#bf8700;--ok:#1a7f37}
        @media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--line:#30363d;--panel:#161b22;\
        --s0:#4493f8;--s1:#3fb950;--s2:#a371f7;--s3:#db61a2;--s4:#d29922;--s5:#79c0ff;--s6:#8d96a0;--s7:#f85149;\
        --bad:#f85149;--warn:#d29922;--ok:#3fb950}}
        *{box-sizing:border-box}
        body{margin:0 auto;max-width:1320px;padding:1rem 1.25rem 3rem;background:var(--bg);color:var(--fg);\
        font:15px/1.45 system-ui,-apple-system,"Segoe UI","DejaVu Sans",sans-serif}
        h1{margin:.2rem 0}h2{margin-top:2.2rem;border-bottom:1px solid var(--line);padding-bottom:.3rem}
        h3{margin:0 0 .2rem;font-size:1.05rem}
        .meta,.note,figcaption p{color:var(--muted);margin:.2rem 0}
        .cards{display:flex;flex-wrap:wrap;gap:.6rem;list-style:none;padding:0;margin:1rem 0}
        .cards li{background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:.5rem .8rem;min-width:9.5rem}
        .cards strong{display:block;font-size:1.5rem}
        nav a{margin-right:.8rem;color:var(--s0)}
        figure.chart{margin:1.2rem 0;padding:.8rem;border:1px solid var(--line);border-radius:8px;break-inside:avoid}
        svg.plot{width:100%;height:auto;display:block;margin:.4rem 0;font-size:12px}
        svg text{fill:var(--fg)}svg .tick{fill:var(--muted);font-size:11px}svg .value{font-size:11px}
        svg .axis{fill:var(--muted);font-size:12px}svg .empty{fill:var(--muted);font-size:15px}
        svg .grid{stroke:var(--line);stroke-width:1}svg .level{stroke:var(--bad);stroke-dasharray:6 4}
        svg .mark{stroke:var(--muted);stroke-dasharray:2 3}
        .s0{fill:var(--s0)}.s1{fill:var(--s1)}.s2{fill:var(--s2)}.s3{fill:var(--s3)}\
        .s4{fill:var(--s4)}.s5{fill:var(--s5)}.s6{fill:var(--s6)}.s7{fill:var(--s7)}.bad{fill:var(--bad)}.warn{fill:var(--warn)}
        polyline{fill:none;stroke-width:2}polyline.dashed{stroke-dasharray:5 4;stroke-width:1.5}
        line.line0,polyline.line0{stroke:var(--s0)}line.line1,polyline.line1{stroke:var(--s1)}\
        line.line2,polyline.line2{stroke:var(--s2)}line.line3,polyline.line3{stroke:var(--s7)}\
        line.line4,polyline.line4{stroke:var(--s4)}line.line5,polyline.line5{stroke:var(--s5)}\
        line.line6,polyline.line6{stroke:var(--s3)}line.line7,polyline.line7{stroke:var(--s6)}
        line.line0,line.line1,line.line2,line.line3,line.line4,line.line5,line.line6,line.line7{stroke-width:2}
        circle.dot{stroke:none}circle.line0{fill:var(--s0)}circle.line1{fill:var(--s1)}circle.line2{fill:var(--s2)}\
        circle.line3{fill:var(--s7)}circle.line4{fill:var(--s4)}circle.line5{fill:var(--s5)}circle.line6{fill:var(--s3)}\
        circle.line7{fill:var(--s6)}
        table{border-collapse:collapse;font-size:13px;margin:.4rem 0}
        caption{text-align:left;color:var(--muted);padding:.2rem 0}
        th,td{border-bottom:1px solid var(--line);padding:.2rem .6rem;text-align:left;vertical-align:top}
        td.num{text-align:right;font-variant-numeric:tabular-nums}td.empty{color:var(--muted)}
        .numbers{overflow-x:auto;max-height:30rem;overflow-y:auto}
        @media (min-width:1000px){.chart-body{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1.2rem;\
        align-items:start}}
        td.low{color:var(--bad);font-weight:600}
        .scroll{overflow-x:auto}
        #device-table td{white-space:nowrap;max-width:22rem;overflow:hidden;text-overflow:ellipsis}
        #device-table th button{all:unset;cursor:pointer;font-weight:600}
        #device-table th[aria-sort=ascending] button::after{content:" ▲"}
        #device-table th[aria-sort=descending] button::after{content:" ▼"}
        #device-table th button:focus-visible{outline:2px solid var(--s0)}
        .controls{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;margin:.5rem 0}
        input,select,button{font:inherit;color:inherit;background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:.25rem .5rem}
        input[type=search]{min-width:22rem}
        .pager{margin:.5rem 0}
        footer{margin-top:3rem;color:var(--muted);font-size:13px}
        @media print{:root{--bg:#fff;--fg:#000;--muted:#444;--line:#bbb;--panel:#fff}\
        body{max-width:none;padding:0;font-size:11pt}svg.plot{max-width:17cm}nav,.controls,.pager{display:none}\
        .numbers{max-height:none;overflow:visible}.chart-body{display:block}\
        figure.chart,table{break-inside:avoid}h2{break-after:avoid}a{color:inherit}\
        #device-table td{white-space:normal}}
        """

    /// The device table: rows from the JSON block, shown only through
    /// `textContent` (never as markup), sorted and filtered over every row,
    /// one page at a time.
    static let script = """
        (function () {
          "use strict";
          var block = document.getElementById("report-data");
          function load() {
            if (block.dataset.encoding !== "deflate") return Promise.resolve(block.textContent);
            var binary = atob(block.textContent), bytes = new Uint8Array(binary.length);
            for (var i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
            var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
            return new Response(stream).text();
          }
          load().then(function (json) { start(JSON.parse(json)); });
          function start(data) {
          var rows = data.rows, size = data.pageSize;
          // Columns as shown: address, profile, identity, firmware, battery, crossing,
          // calibration age, |g|, findings, model, serial, last seen, benches.
          var source = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];
          function cell(row, shown) {
            var column = source[shown];
            switch (shown) {
              case 2: return row[2] === null ? "" : row[2] + "." + row[3];
              case 5: var d = row[6]; return d === null ? "" : d < 0 ? "below now" : String(d);
              default: break;
            }
            var v = row[column];
            if (v === null || v === undefined) return "";
            switch (column) {
              case 1: return data.profiles[v];
              case 4: return data.firmware[v];
              case 9: return data.findings[v];
              case 10: return data.models[v];
              case 13: return data.benches[v];
              default: return String(v);
            }
          }
          var haystacks = null;
          function haystack(i) {
            if (haystacks === null) {
              haystacks = new Array(rows.length);
              for (var j = 0; j < rows.length; j++) {
                var r = rows[j], parts = [];
                for (var c = 0; c < data.columns.length; c++) parts.push(cell(r, c));
                haystacks[j] = parts.join(" ").toLowerCase();
              }
            }
            return haystacks[i];
          }
          var sortColumn = -1, descending = false, page = 0, view = null;
          var tbody = document.querySelector("#device-table tbody");
          var status = document.getElementById("table-status");
          var pageLabel = document.getElementById("page");
          var filter = document.getElementById("filter"), finding = document.getElementById("finding");
          function compute() {
            var needle = filter.value.trim().toLowerCase(), code = finding.value;
            var indexes = [];
            for (var i = 0; i < rows.length; i++) {
              if (code !== "") {
                var f = rows[i][9];
                if (f === null) continue;
                if (code !== "*" && (" " + data.findings[f] + " ").indexOf(" " + code + " ") < 0) continue;
              }
              if (needle !== "" && haystack(i).indexOf(needle) < 0) continue;
              indexes.push(i);
            }
            if (sortColumn >= 0) {
              var isNumber = sortColumn === 2 || sortColumn === 4 || sortColumn === 5 || sortColumn === 6 || sortColumn === 7 || sortColumn === 11;
              var keys = new Array(rows.length);
              indexes.forEach(function (i) {
                var r = rows[i];
                keys[i] = sortColumn === 2 ? (r[2] === null ? null : r[2] * 65536 + r[3])
                  : isNumber ? r[source[sortColumn]] : cell(r, sortColumn).toLowerCase();
              });
              indexes.sort(function (a, b) {
                var x = keys[a], y = keys[b];
                if (x === y) return a - b;
                if (x === null || x === "") return 1;
                if (y === null || y === "") return -1;
                var c = x < y ? -1 : 1;
                return descending ? -c : c;
              });
            }
            view = indexes;
          }
          function render() {
            var pages = Math.max(1, Math.ceil(view.length / size));
            if (page >= pages) page = pages - 1;
            var fragment = document.createDocumentFragment();
            var end = Math.min(view.length, (page + 1) * size);
            for (var i = page * size; i < end; i++) {
              var tr = document.createElement("tr");
              var r = rows[view[i]];
              for (var c = 0; c < data.columns.length; c++) {
                var td = document.createElement("td");
                td.textContent = cell(r, c);
                if (c === 4 && r[9] !== null && (" " + data.findings[r[9]] + " ").indexOf(" battery-low ") >= 0) td.className = "low";
                tr.appendChild(td);
              }
              fragment.appendChild(tr);
            }
            tbody.replaceChildren(fragment);
            status.dataset.matching = String(view.length);
            status.textContent = view.length === rows.length
              ? rows.length.toLocaleString("en") + " devices"
              : view.length.toLocaleString("en") + " of " + rows.length.toLocaleString("en") + " devices match";
            pageLabel.textContent = "page " + (page + 1) + " of " + pages;
            document.getElementById("prev").disabled = page === 0;
            document.getElementById("next").disabled = page >= pages - 1;
          }
          var timer = null;
          function refilter() {
            var started = performance.now();
            compute(); page = 0; render();
            status.dataset.ms = String(Math.round(performance.now() - started));
          }
          filter.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(refilter, 120); });
          finding.addEventListener("change", refilter);
          document.getElementById("prev").addEventListener("click", function () { page--; render(); });
          document.getElementById("next").addEventListener("click", function () { page++; render(); });
          document.querySelectorAll("#device-table th button").forEach(function (button) {
            button.addEventListener("click", function () {
              var column = Number(button.dataset.column);
              descending = sortColumn === column ? !descending : false;
              sortColumn = column;
              document.querySelectorAll("#device-table th").forEach(function (th) { th.setAttribute("aria-sort", "none"); });
              button.parentElement.setAttribute("aria-sort", descending ? "descending" : "ascending");
              compute(); render();
            });
          });
          compute(); render();
          document.documentElement.dataset.rendered = String(Math.round(performance.now()));
          }
        })();
        """
}
