import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// One battery reading (`readings`), for trends.
public struct BatteryReading: Sendable, Equatable {
    public var device: String
    public var at: Date
    public var battery: Int

    public init(device: String, at: Date, battery: Int) {
        self.device = device
        self.at = at
        self.battery = battery
    }
}

/// The step outcomes of one device on one day at one bench, counted.
public struct ActivityCount: Sendable, Equatable {
    /// The UTC day, `2026-11-30`.
    public var day: String
    /// The bench: its id's first 8 characters.
    public var bench: String
    /// The device's address; nil for steps that concern no device.
    public var device: String?
    /// Steps finished (not `running`).
    public var steps: Int
    public var failed: Int
    /// Their durations added up.
    public var milliseconds: Int

    public init(day: String, bench: String, device: String?, steps: Int, failed: Int, milliseconds: Int) {
        self.day = day
        self.bench = bench
        self.device = device
        self.steps = steps
        self.failed = failed
        self.milliseconds = milliseconds
    }
}

/// A step that failed or was skipped, and why.
public struct StepProblem: Sendable, Equatable {
    public var device: String?
    public var step: String
    /// `failed` or `skipped`.
    public var status: String
    /// The error, else the detail (why it was skipped).
    public var reason: String

    public init(device: String?, step: String, status: String, reason: String) {
        self.device = device
        self.step = step
        self.status = status
        self.reason = reason
    }
}

/// What a fleet report reads of the history: every battery reading, the
/// step outcomes counted per day, bench and device, and each failed or
/// skipped step with its reason — since a time, or all.
public struct FleetHistory: Sendable {
    public var readings: [BatteryReading]
    public var activity: [ActivityCount]
    public var problems: [StepProblem]

    public init(readings: [BatteryReading] = [], activity: [ActivityCount] = [], problems: [StepProblem] = []) {
        self.readings = readings
        self.activity = activity
        self.problems = problems
    }
}

extension Inventory {
    /// The history a fleet report draws (`FleetHistory`), from `since` on.
    /// Rows whose values fail their checks are left out (logged, see
    /// `takeStoredFindings`); step durations outside 0–24 h or not integers
    /// are left out of the sums.
    public func history(since: Date?) throws -> FleetHistory {
        let since: SQLiteValue = since.map { .text(Self.timestamp($0)) } ?? .null
        let bench = String(Visible.text(try benchID().prefix(8), limit: 8))
        let readings = checked(
            try database.rows(
                """
                SELECT device, at, battery, id FROM readings
                WHERE battery IS NOT NULL AND (?1 IS NULL OR at >= ?1) ORDER BY device, at
                """, [since]), Self.reading)
        let limit = FleetHistory.stepMillisecondsLimit
        let activity = checked(
            try database.rows(
                """
                SELECT substr(started_at, 1, 10), device, count(*), sum(status = 'failed'),
                       coalesce(sum(CASE WHEN typeof(duration_ms) = 'integer' AND duration_ms BETWEEN 0 AND ?2
                                    THEN duration_ms END), 0),
                       min(id),
                       sum(duration_ms IS NOT NULL
                           AND NOT (typeof(duration_ms) = 'integer' AND duration_ms BETWEEN 0 AND ?2))
                FROM outcomes WHERE status <> 'running' AND (?1 IS NULL OR started_at >= ?1)
                GROUP BY 1, 2 ORDER BY 1, 2
                """, [since, .integer(limit)])
        ) { row, findings in Self.activity(row, bench: bench, findings: &findings) }
        let problems = checked(
            try database.rows(
                """
                SELECT device, step, status, coalesce(error, detail, ''), id FROM outcomes
                WHERE status IN ('failed', 'skipped') AND (?1 IS NULL OR started_at >= ?1)
                """, [since]), Self.problem)
        return FleetHistory(readings: readings, activity: activity, problems: problems)
    }

    /// Columns: device, at, battery, and the row's key (`id`; the server:
    /// bench and id).
    public static func reading(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> BatteryReading? {
        var check = RowCheck("readings", key: Array(row[3...]))
        defer { findings += check.findings }
        let device = check.text(row[0], "device", required: true)
        let at = check.date(row[1], "at", required: true)
        let battery = check.integer(row[2], "battery", as: Int.self, required: true)
        guard let device, let at, let battery else { return nil }
        return BatteryReading(device: device, at: at, battery: battery)
    }

    /// Columns: day, device, steps, failed, milliseconds, the first row's
    /// key, the rows whose duration was left out. A day that is no date, or
    /// a device that is no address, leaves the group out.
    public static func activity(
        _ row: [SQLiteValue], bench: String, findings: inout [StoredFinding]
    ) -> ActivityCount? {
        var check = RowCheck("outcomes", key: [row[5]])
        defer { findings += check.findings }
        if let bad = row[6].integer, bad > 0 {
            check.fail(
                "duration_ms", .text("\(bad) row\(bad == 1 ? "" : "s") from this one on that day"),
                "outside 0–\(FleetHistory.stepMillisecondsLimit) or not integers: left out of the sums")
        }
        let device = check.text(row[1], "device")
        let day = row[0].text.flatMap { parseTimestamp($0 + "T00:00:00.000Z") != nil ? $0 : nil }
        if day == nil { check.fail("started_at", row[0], "does not begin with a date (2026-11-30)") }
        guard let day, row[1] == .null || device != nil, let steps = row[2].integer.flatMap(Int.init(exactly:)),
            let failed = row[3].integer.flatMap(Int.init(exactly:)),
            let milliseconds = row[4].integer.flatMap(Int.init(exactly:))
        else { return nil }
        return ActivityCount(
            day: day, bench: bench, device: device, steps: steps, failed: failed, milliseconds: milliseconds)
    }

    /// Columns: device, step, status, reason, and the row's key.
    public static func problem(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> StepProblem? {
        var check = RowCheck("outcomes", key: Array(row[4...]))
        defer { findings += check.findings }
        let device = check.text(row[0], "device")
        let step = check.text(row[1], "step", required: true)
        let status = check.text(row[2], "status", required: true)
        let reason = check.text(row[3], "error")
        guard let step, let status, row[0] == .null || device != nil else { return nil }
        return StepProblem(device: device, step: step, status: status, reason: reason ?? "")
    }
}

extension FleetHistory {
    /// The longest step duration summed (`outcomes.duration_ms`): a day.
    public static let stepMillisecondsLimit: Int64 = 86_400_000
}
