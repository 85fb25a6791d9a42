import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Provisioning activity per bench, and step failures and skips by reason
/// (Analyses/Activity.swift, Analyses/Problems.swift).
struct ActivitySection: ReportSection {
    let id = "activity"
    let title = "Benches at work"
    let navLabel = "Activity"

    func body(_ report: FleetReport) -> [String] {
        [activity(report), failures(report)]
    }

    /// Devices worked on per day (or week) and bench, and how fast each bench works.
    func activity(_ report: FleetReport) -> String {
        let periods = Array(Set(report.activity.map(\.day))).sorted()
        let benchNames = report.benches.map(\.bench)
        let series = benchNames.map { bench in
            Chart.Series(
                name: "bench \(bench)",
                values: periods.map { period in
                    report.activity.first { $0.day == period && $0.bench == bench }?.devices ?? 0
                })
        }
        return Chart.figure(
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
    }

    /// Failed and skipped steps by reason.
    func failures(_ report: FleetReport) -> String {
        // The chart: one bar per reason (a skipped device skips each step
        // for one reason); the table: each step with its reason.
        var byReason: [String: (status: String, reason: String, count: Int)] = [:]
        for problem in report.problems {
            byReason[problem.status + "\u{1F}" + problem.reason, default: (problem.status, problem.reason, 0)].count +=
                problem.count
        }
        let shown = byReason.values.sorted { ($1.count, $0.reason) < ($0.count, $1.reason) }.prefix(15)
        return Chart.figure(
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
    }
}
