import Foundation

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
    public func history(since: Date?) throws -> FleetHistory {
        let since: SQLiteValue = since.map { .text(Self.timestamp($0)) } ?? .null
        let bench = String(try benchID().prefix(8))
        let readings = try database.rows(
            """
            SELECT device, at, battery FROM readings
            WHERE battery IS NOT NULL AND (?1 IS NULL OR at >= ?1) ORDER BY device, at
            """, [since]
        ).compactMap(Self.reading)
        let activity = try database.rows(
            """
            SELECT substr(started_at, 1, 10), device, count(*), sum(status = 'failed'), coalesce(sum(duration_ms), 0)
            FROM outcomes WHERE status <> 'running' AND (?1 IS NULL OR started_at >= ?1)
            GROUP BY 1, 2 ORDER BY 1, 2
            """, [since]
        ).map { row in
            ActivityCount(
                day: row[0].text ?? "", bench: bench, device: row[1].text, steps: Int(row[2].integer ?? 0),
                failed: Int(row[3].integer ?? 0), milliseconds: Int(row[4].integer ?? 0))
        }
        let problems = try database.rows(
            """
            SELECT device, step, status, coalesce(error, detail, '') FROM outcomes
            WHERE status IN ('failed', 'skipped') AND (?1 IS NULL OR started_at >= ?1)
            """, [since]
        ).map(Self.problem)
        return FleetHistory(readings: readings, activity: activity, problems: problems)
    }

    /// Columns: device, at, battery.
    public static func reading(_ row: [SQLiteValue]) -> BatteryReading? {
        guard let device = row[0].text, let at = row[1].text.flatMap(parseTimestamp), let battery = row[2].integer
        else { return nil }
        return BatteryReading(device: device, at: at, battery: Int(battery))
    }

    /// Columns: device, step, status, reason.
    public static func problem(_ row: [SQLiteValue]) -> StepProblem {
        StepProblem(device: row[0].text, step: row[1].text ?? "", status: row[2].text ?? "", reason: row[3].text ?? "")
    }
}
