import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Calibration age and the calibration vector's magnitude (Analyses/Calibration.swift).
struct CalibrationSection: ReportSection {
    let id = "calibration"
    let title = "Calibration"

    func body(_ report: FleetReport) -> [String] {
        [ages(report), magnitudes(report)]
    }

    /// Calibrated devices by days since their calibration, and those not calibrated.
    func ages(_ report: FleetReport) -> String {
        return Chart.figure(
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
    }

    /// The magnitude of each calibrated device's gravity vector, in 50 mG bins.
    func magnitudes(_ report: FleetReport) -> String {
        return Chart.figure(
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
    }
}
