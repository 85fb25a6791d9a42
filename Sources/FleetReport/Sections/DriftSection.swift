import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Config drift: thresholds read back that differ from the profile's (Analyses/Findings.swift).
struct DriftSection: ReportSection {
    let id = "drift"
    let title = "Config drift"

    func body(_ report: FleetReport) -> [String] {
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
        return [figure]
    }
}
