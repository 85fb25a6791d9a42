import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The battery: the distribution of last levels, the fleet over time, and the
/// devices projected to fall below their profile's minimum (Analyses/Battery*.swift).
struct BatterySection: ReportSection {
    let id = "battery"
    let title = "Battery"

    func body(_ report: FleetReport) -> [String] {
        [distribution(report), trend(report), projections(report)]
    }

    /// Devices per 10 % bin of their last battery level.
    func distribution(_ report: FleetReport) -> String {
        let known = report.battery.reduce(0) { $0 + $1.value }
        return Chart.figure(
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
    }

    /// The mean and the lowest reading of the fleet per hour, day or week.
    func trend(_ report: FleetReport) -> String {
        let trendTitle = "Fleet battery over time"
        let trendLine = Chart.Line(
            name: "mean battery of the fleet", points: report.trend.map { ($0.start.timeIntervalSince1970, $0.mean) },
            className: "line0")
        let lowLine = Chart.Line(
            name: "lowest reading", points: report.trend.map { ($0.start.timeIntervalSince1970, Double($0.minimum)) },
            className: "line3")
        return Chart.figure(
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
    }

    /// The devices that cross their profile's minimum soonest, and the quarter's list.
    func projections(_ report: FleetReport) -> String {
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
        return Chart.figure(
            id: "projection", title: "Projected battery crossings",
            description:
                "A least-squares line through each device's readings (at least two, a day apart) gives when it falls below its profile's minimum. Drawn: the \(report.lines.count) devices that cross soonest; \(HTML.number(report.projectedCount)) devices have a projection, \(HTML.number(report.unprojected)) have too few readings.",
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
                }, numeric: [2, 3, 4, 5], more: max(0, report.crossingCount - tableRows)),
            total: report.crossingCount,
            extra: [("projected", "\(report.projectedCount)"), ("lines", "\(report.lines.count)")])
    }
}
