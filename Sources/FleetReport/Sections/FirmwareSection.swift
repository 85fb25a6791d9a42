import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Firmware versions per profile (Analyses/Firmware.swift).
struct FirmwareSection: ReportSection {
    let id = "firmware"
    let title = "Firmware"

    func body(_ report: FleetReport) -> [String] {
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
        return [figure]
    }
}
