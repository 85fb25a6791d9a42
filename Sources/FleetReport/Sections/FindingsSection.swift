import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The offline audit's findings by kind, and duplicate identities (Analyses/Findings.swift).
struct FindingsSection: ReportSection {
    let id = "findings"
    let title = "Audit findings"
    let navLabel = "Findings"

    func body(_ report: FleetReport) -> [String] {
        [findings(report), duplicates(report)]
    }

    /// Devices with each finding of the offline audit.
    func findings(_ report: FleetReport) -> String {
        return Chart.figure(
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
    }

    /// Identities held by more than one beacon in service, the 20 most shared drawn.
    func duplicates(_ report: FleetReport) -> String {
        let shown = Array(report.duplicates.prefix(20))
        return Chart.figure(
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
    }
}
