import FoundationEssentials
import Inventory
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// A fleet report's numbers, computed from an inventory: what the HTML
/// page draws (`ReportPage`). Everything is an aggregate, except the
/// device table and a bounded selection of battery lines.
public struct FleetReport: Sendable {
    public struct Count: Sendable, Equatable {
        public var label: String
        public var value: Int
        public init(_ label: String, _ value: Int) {
            self.label = label
            self.value = value
        }
    }

    /// What the report is computed from: the chosen devices, the audit's
    /// findings on them, the history cut to them. Each analysis
    /// (Analyses/) reads it; a new one can be a computed property over it
    /// that its section (Sections/) reads, with no stored field here.
    public struct Input: Sendable {
        /// The devices the filters chose.
        public var devices: [ReportDevice]
        /// Each chosen device's findings (the audit saw the whole fleet).
        public var findings: [String: [AuditFinding]]
        public var readings: [BatteryReading]
        public var activity: [ActivityCount]
        public var problems: [StepProblem]
        public var profiles: [String: Profile]
        public var now: Date
    }

    public var source: String
    public var generatedAt: Date
    public var since: Date?
    public var selectors: String
    public var fleetSize: Int
    public var server: Bool
    public var input: Input
    public var rows: [Row] = []

    public var battery: [Count] = []
    public var batteryUnknown = 0
    public var trendUnit = "day"
    public var trend: [TrendPoint] = []
    public var readingCount = 0
    public var projections: [BatteryProjection] = []
    /// Devices with readings but too few, or too close together, to fit.
    public var unprojected = 0
    public var quarterEnd = Date()
    public var crossingThisQuarter: [BatteryProjection] = []
    public var lines: [DeviceLine] = []
    /// Profile → firmware version → devices.
    public var firmware: [(profile: String, versions: [Count])] = []
    public var firmwareVersions: [String] = []
    public var calibrationAge: [Count] = []
    public var magnitude: [Count] = []
    public var plausible = 0
    public var implausible = 0
    public var driftFields: [Count] = []
    public var drift: [Drift] = []
    public var driftDevices = 0
    public var findings: [Count] = []
    public var devicesWithFindings = 0
    public var duplicates: [Duplicate] = []
    public var activityUnit = "day"
    public var activity: [BenchDay] = []
    public var benches: [BenchSummary] = []
    public var problems: [Problem] = []

    /// A report folded from streams (`Builder`) keeps of its lists only
    /// what the page shows (the first `ReportPage.tableRows` crossings, the
    /// lines) and no rows (they went to the page's data as they came): these
    /// are their counts. nil: the lists are whole.
    public struct Streamed: Sendable {
        public var rows: Int
        public var projected: Int
        public var crossing: Int
        /// The finding codes of the rows, sorted.
        public var findingCodes: [String]
    }
    public var streamed: Streamed?
    /// Devices in the device table.
    public var rowCount: Int { streamed?.rows ?? rows.count }
    /// Devices with a battery projection.
    public var projectedCount: Int { streamed?.projected ?? projections.count }
    /// Devices below their minimum by the quarter's end.
    public var crossingCount: Int { streamed?.crossing ?? crossingThisQuarter.count }
    /// The finding codes of the device table's rows, sorted.
    var findingCodes: [String] { streamed?.findingCodes ?? Set(rows.flatMap(\.findings)).sorted() }

    /// An empty report that `Builder` fills.
    init(source: String, server: Bool, selectors: String, since: Date?, profiles: [String: Profile], now: Date) {
        self.source = source
        self.server = server
        generatedAt = now
        self.since = since
        self.selectors = selectors
        fleetSize = 0
        input = Input(
            devices: [], findings: [:], readings: [], activity: [], problems: [], profiles: profiles, now: now)
    }

    /// Computes the report.
    /// - Parameters:
    ///   - devices: every device of the inventory (`ReportDevice.rows`).
    ///   - subjects: every device as an audit sees it (`auditSubjects()`).
    ///   - history: readings and outcomes since `since`.
    ///   - filters: which devices (none: all); history is cut to them.
    public init(
        source: String, server: Bool, devices allDevices: [ReportDevice], subjects: [AuditSubject],
        history: FleetHistory, profiles: [String: Profile], filters: [DeviceFilter] = [], selectors: String = "",
        since: Date? = nil, now: Date = Date()
    ) {
        self.source = source
        self.server = server
        generatedAt = now
        self.since = since
        self.selectors = selectors
        fleetSize = allDevices.count
        let devices =
            filters.isEmpty ? allDevices : DeviceFilter.chosen(allDevices, by: filters)
        let chosen = Set(devices.map(\.address))
        let everyone = filters.isEmpty

        // The audit sees the whole fleet (a duplicate may be outside the selection).
        let reports = Auditor.auditFleet(subjects, profiles: profiles, now: now)
        var findingsOf: [String: [AuditFinding]] = [:]
        for report in reports where chosen.contains(report.address) { findingsOf[report.address] = report.findings }

        let readings = everyone ? history.readings : history.readings.filter { chosen.contains($0.device) }
        let activity = everyone ? history.activity : history.activity.filter { $0.device.map(chosen.contains) ?? false }
        let problems = everyone ? history.problems : history.problems.filter { $0.device.map(chosen.contains) ?? false }
        input = Input(
            devices: devices, findings: findingsOf, readings: readings, activity: activity, problems: problems,
            profiles: profiles, now: now)

        computeBattery(devices)
        computeTrend(readings, devices: devices, profiles: profiles, now: now)
        addBelowNow(devices, profiles: profiles, now: now)
        computeFirmware(devices)
        computeCalibration(devices, now: now)
        computeFindings(findingsOf, profiles: profiles, devices: devices)
        computeActivity(activity)
        computeProblems(problems)
        computeRows(devices, findingsOf: findingsOf, now: now)
    }
}
