import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The kinds of records a pull step stores: trips (`trips`),
/// driving-behaviour events (`events`) and incidents (`incidents`).
public enum RecordKind: String, CaseIterable, Sendable, Codable {
    case trip, event, incident
}

/// When a pulled record happened, in real time.
///
/// A pull stores each beacon time `t` (seconds since power-on) as
/// `time_offset_ms + t * 1000`, with the Time Offset the beacon held then
/// (docs/sbeacon-gatt: epoch milliseconds of power-on, 0 = never set). A
/// beacon whose offset no client had set gives `t * 1000`: milliseconds
/// since power-on, not a time of day. Such a value is below
/// `wallClockFloor` (2001-09-09T01:46:40Z, 10^12 ms: a beacon would have to
/// run 31 years without a client setting its clock to reach it), so a
/// stored time at or above it is a real time and one below it is not: its
/// `at` is nil, and a time filter uses the record's `pulled_at` instead.
public enum RecordTime {
    public static let wallClockFloor: Int64 = 1_000_000_000_000

    /// The real time of a stored `start_ms` / `at_ms`, or nil.
    public static func date(milliseconds: Int64) -> Date? {
        milliseconds >= wallClockFloor ? Date(timeIntervalSince1970: Double(milliseconds) / 1000) : nil
    }
}

/// A trip as stored (`trips`).
public struct PulledTrip: Sendable, Equatable, Codable {
    public var device: String
    /// `start_ms`, `end_ms`: epoch milliseconds, or milliseconds since
    /// power-on when the beacon's clock was not set (see `RecordTime`).
    public var startMilliseconds: Int64
    public var endMilliseconds: Int64
    /// `beacon_index`: the slot in the beacon's ring (0–99).
    public var beaconIndex: Int64
    public var pulledAt: Date
    /// The start and end in real time, when known (see `RecordTime`).
    public var at: Date?
    public var endAt: Date?
    /// The bench that pulled it (a server inventory); nil for a bench's own.
    public var bench: String?

    public init(
        device: String, startMilliseconds: Int64, endMilliseconds: Int64, beaconIndex: Int64, pulledAt: Date,
        bench: String? = nil
    ) {
        self.device = device
        self.startMilliseconds = startMilliseconds
        self.endMilliseconds = endMilliseconds
        self.beaconIndex = beaconIndex
        self.pulledAt = pulledAt
        self.at = RecordTime.date(milliseconds: startMilliseconds)
        self.endAt = RecordTime.date(milliseconds: endMilliseconds)
        self.bench = bench
    }

    public var durationMilliseconds: Int64 { endMilliseconds - startMilliseconds }
}

/// A driving-behaviour event as stored (`events`).
public struct PulledEvent: Sendable, Equatable, Codable {
    public var device: String
    /// `at_ms` (see `RecordTime`).
    public var atMilliseconds: Int64
    /// `type`: acceleration, braking, cornering or accident.
    public var type: String
    public var durationMilliseconds: Int64
    /// `average_mg`, `maximum_mg`: magnitudes in mG.
    public var averageMilliG: Int64
    public var maximumMilliG: Int64
    /// `x_mg`, `y_mg`, `z_mg`: the average vector in mG.
    public var x: Int64
    public var y: Int64
    public var z: Int64
    /// `beacon_index`: the slot in the beacon's ring (0–79).
    public var beaconIndex: Int64
    public var pulledAt: Date
    public var at: Date?
    public var bench: String?

    public init(
        device: String, atMilliseconds: Int64, type: String, durationMilliseconds: Int64, averageMilliG: Int64,
        maximumMilliG: Int64, x: Int64, y: Int64, z: Int64, beaconIndex: Int64, pulledAt: Date, bench: String? = nil
    ) {
        self.device = device
        self.atMilliseconds = atMilliseconds
        self.type = type
        self.durationMilliseconds = durationMilliseconds
        self.averageMilliG = averageMilliG
        self.maximumMilliG = maximumMilliG
        self.x = x
        self.y = y
        self.z = z
        self.beaconIndex = beaconIndex
        self.pulledAt = pulledAt
        self.at = RecordTime.date(milliseconds: atMilliseconds)
        self.bench = bench
    }
}

/// An incident as stored (`incidents`).
public struct PulledIncident: Sendable, Equatable, Codable {
    public var device: String
    /// `incident_id`: the beacon's id for it.
    public var incidentID: Int64
    /// `at_ms` (see `RecordTime`).
    public var atMilliseconds: Int64
    /// `max_resultant`, `avg_resultant` in mG.
    public var maximumResultant: Int64
    public var averageResultant: Int64
    /// `x_mg`, `y_mg`, `z_mg`: the average vector in mG.
    public var x: Int64
    public var y: Int64
    public var z: Int64
    /// `samples`, as stored: a JSON array of `[x, y, z]` mG.
    public var samples: String
    public var pulledAt: Date
    public var at: Date?
    public var bench: String?

    public init(
        device: String, incidentID: Int64, atMilliseconds: Int64, maximumResultant: Int64, averageResultant: Int64,
        x: Int64, y: Int64, z: Int64, samples: String, pulledAt: Date, bench: String? = nil
    ) {
        self.device = device
        self.incidentID = incidentID
        self.atMilliseconds = atMilliseconds
        self.maximumResultant = maximumResultant
        self.averageResultant = averageResultant
        self.x = x
        self.y = y
        self.z = z
        self.samples = samples
        self.pulledAt = pulledAt
        self.at = RecordTime.date(milliseconds: atMilliseconds)
        self.bench = bench
    }

    /// `samples` parsed: each `[x, y, z]` in mG (empty when unreadable).
    public var sampleVectors: [[Int]] { Self.vectors(samples) ?? [] }

    /// A stored `samples` array: each `[x, y, z]` within Int16, or nil.
    static func vectors(_ text: String) -> [[Int]]? {
        guard let vectors = try? JSONDecoder().decode([[Int]].self, from: Data(text.utf8)),
            vectors.allSatisfy({ $0.count == 3 && $0.allSatisfy { Int(Int16.min)...Int(Int16.max) ~= $0 } })
        else { return nil }
        return vectors
    }
}

/// One pulled record of any kind.
public enum PulledRecord: Sendable, Equatable {
    case trip(PulledTrip)
    case event(PulledEvent)
    case incident(PulledIncident)

    public var kind: RecordKind {
        switch self {
        case .trip: .trip
        case .event: .event
        case .incident: .incident
        }
    }

    public var device: String {
        switch self {
        case .trip(let trip): trip.device
        case .event(let event): event.device
        case .incident(let incident): incident.device
        }
    }

    public var pulledAt: Date {
        switch self {
        case .trip(let trip): trip.pulledAt
        case .event(let event): event.pulledAt
        case .incident(let incident): incident.pulledAt
        }
    }

    /// The real time, when known (a trip's start).
    public var at: Date? {
        switch self {
        case .trip(let trip): trip.at
        case .event(let event): event.at
        case .incident(let incident): incident.at
        }
    }

    /// The time a listing sorts and filters by: the real time when known,
    /// else when it was pulled.
    public var sortDate: Date { at ?? pulledAt }
}

/// Which pulled records to list.
public struct RecordQuery: Sendable, Equatable {
    public var kinds: Set<RecordKind>
    /// An address or MAC ending (a forgotten device's records included).
    public var device: String?
    /// `since <= time < until`, on the record's real time when known, else
    /// on its `pulled_at` (see `RecordTime`).
    public var since: Date?
    public var until: Date?
    /// Only records stored at or after this (`pulled_at`): with a run's start
    /// time, what that run's pulls brought (a record pulled again is not
    /// stored again and keeps its first `pulled_at`).
    public var pulledSince: Date?
    /// At most this many rows over all kinds, newest first; nil: all.
    public var limit: Int?

    public init(
        kinds: Set<RecordKind> = Set(RecordKind.allCases), device: String? = nil, since: Date? = nil,
        until: Date? = nil, pulledSince: Date? = nil, limit: Int? = nil
    ) {
        self.kinds = kinds
        self.device = device
        self.since = since
        self.until = until
        self.pulledSince = pulledSince
        self.limit = limit
    }
}

/// The records a query found, each kind newest first.
public struct RecordPage: Sendable, Equatable {
    public var trips: [PulledTrip] = []
    public var events: [PulledEvent] = []
    public var incidents: [PulledIncident] = []
    /// The limit cut the listing: there were more records.
    public var truncated = false

    public init(
        trips: [PulledTrip] = [], events: [PulledEvent] = [], incidents: [PulledIncident] = [], truncated: Bool = false
    ) {
        self.trips = trips
        self.events = events
        self.incidents = incidents
        self.truncated = truncated
    }

    public var count: Int { trips.count + events.count + incidents.count }

    /// Every record, newest first (by `PulledRecord.sortDate`; ties by
    /// device, then kind).
    public var all: [PulledRecord] {
        Self.newestFirst(
            trips.map(PulledRecord.trip) + events.map(PulledRecord.event) + incidents.map(PulledRecord.incident))
    }

    static func newestFirst(_ records: [PulledRecord]) -> [PulledRecord] {
        let order = Dictionary(uniqueKeysWithValues: RecordKind.allCases.enumerated().map { ($1, $0) })
        return records.enumerated().sorted { left, right in
            let (l, r) = (left.element, right.element)
            if l.sortDate != r.sortDate { return l.sortDate > r.sortDate }
            if l.device != r.device { return l.device < r.device }
            if l.kind != r.kind { return order[l.kind, default: 0] < order[r.kind, default: 0] }
            return left.offset < right.offset
        }.map(\.element)
    }

    /// The page of `candidates` (each kind already newest first and at most
    /// `limit + 1` long): the newest `limit` over all kinds.
    public static func cut(_ candidates: [PulledRecord], limit: Int?) -> RecordPage {
        var all = newestFirst(candidates)
        var page = RecordPage()
        if let limit, all.count > max(0, limit) {
            all.removeSubrange(max(0, limit)...)
            page.truncated = true
        }
        for record in all {
            switch record {
            case .trip(let trip): page.trips.append(trip)
            case .event(let event): page.events.append(event)
            case .incident(let incident): page.incidents.append(incident)
            }
        }
        return page
    }
}

extension Inventory {
    /// Pulled records, newest first (by real time when known, else by
    /// `pulled_at`; see `RecordTime`). Works on a read-only opening.
    public func records(_ query: RecordQuery) throws -> RecordPage {
        // Each kind: at most limit + 1 rows, so the merge can tell a cut.
        let fetch: Int64 = query.limit.map { Int64(max(0, $0)) + 1 } ?? -1
        let parameters: [SQLiteValue] = [
            SQLiteValue(query.device),
            SQLiteValue(query.since.map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.down)) }),
            SQLiteValue(query.until.map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.down)) }),
            SQLiteValue(query.pulledSince.map(Self.timestamp)), .integer(fetch), .integer(RecordTime.wallClockFloor),
        ]
        var candidates: [PulledRecord] = []
        var findings: [StoredFinding] = []
        if query.kinds.contains(.trip) {
            candidates += try database.rows(
                """
                SELECT device, start_ms, end_ms, beacon_index, pulled_at FROM (
                    SELECT *, CASE WHEN start_ms >= ?6 THEN start_ms
                        ELSE CAST(round((julianday(pulled_at) - 2440587.5) * 86400000.0) AS INTEGER) END AS sort_ms
                    FROM trips
                    WHERE ?1 IS NULL OR device = upper(?1)
                       OR device IN (SELECT address FROM devices WHERE mac_ending = lower(?1))
                )
                WHERE (?2 IS NULL OR sort_ms >= ?2) AND (?3 IS NULL OR sort_ms < ?3)
                  AND (?4 IS NULL OR pulled_at >= ?4)
                ORDER BY sort_ms DESC, device, start_ms DESC LIMIT ?5
                """, parameters
            ).compactMap { RecordRows.trip($0, findings: &findings).map(PulledRecord.trip) }
        }
        if query.kinds.contains(.event) {
            candidates += try database.rows(
                """
                SELECT device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg, beacon_index,
                       pulled_at
                FROM (
                    SELECT *, CASE WHEN at_ms >= ?6 THEN at_ms
                        ELSE CAST(round((julianday(pulled_at) - 2440587.5) * 86400000.0) AS INTEGER) END AS sort_ms
                    FROM events
                    WHERE ?1 IS NULL OR device = upper(?1)
                       OR device IN (SELECT address FROM devices WHERE mac_ending = lower(?1))
                )
                WHERE (?2 IS NULL OR sort_ms >= ?2) AND (?3 IS NULL OR sort_ms < ?3)
                  AND (?4 IS NULL OR pulled_at >= ?4)
                ORDER BY sort_ms DESC, device, at_ms DESC, beacon_index DESC LIMIT ?5
                """, parameters
            ).compactMap { RecordRows.event($0, findings: &findings).map(PulledRecord.event) }
        }
        if query.kinds.contains(.incident) {
            candidates += try database.rows(
                """
                SELECT device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg, samples, pulled_at
                FROM (
                    SELECT *, CASE WHEN at_ms >= ?6 THEN at_ms
                        ELSE CAST(round((julianday(pulled_at) - 2440587.5) * 86400000.0) AS INTEGER) END AS sort_ms
                    FROM incidents
                    WHERE ?1 IS NULL OR device = upper(?1)
                       OR device IN (SELECT address FROM devices WHERE mac_ending = lower(?1))
                )
                WHERE (?2 IS NULL OR sort_ms >= ?2) AND (?3 IS NULL OR sort_ms < ?3)
                  AND (?4 IS NULL OR pulled_at >= ?4)
                ORDER BY sort_ms DESC, device, at_ms DESC, incident_id DESC LIMIT ?5
                """, parameters
            ).compactMap { RecordRows.incident($0, findings: &findings).map(PulledRecord.incident) }
        }
        storedFindingLog.add(findings)
        return RecordPage.cut(candidates, limit: query.limit)
    }

    /// A stored time, or the epoch when it is none.
    static func date(_ value: SQLiteValue) -> Date {
        value.text.flatMap(parseTimestamp) ?? Date(timeIntervalSince1970: 0)
    }
}

/// Rows of `trips`, `events` and `incidents` into records, shared by the
/// SQLite inventory and the server (whose rows end with `bench_id`), in
/// the column orders of `Inventory.records`. Every value goes through a
/// `RowCheck`: a row with a value that fails is left out (a record is
/// listed whole or not at all) and each failure added to `findings`.
public enum RecordRows {
    /// Columns: device, start_ms, end_ms, beacon_index, pulled_at (, bench_id).
    public static func trip(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> PulledTrip? {
        var check = RowCheck("trips", key: Array(row[0..<3]) + Array(row[5...]))
        defer { findings += check.findings }
        let device = check.text(row[0], "device", required: true)
        let start = check.integer(row[1], "start_ms", required: true)
        let end = check.integer(row[2], "end_ms", required: true)
        let index = check.integer(row[3], "beacon_index", required: true)
        let pulledAt = check.date(row[4], "pulled_at", required: true)
        let bench = row.count > 5 ? check.text(row[5], "bench_id", required: true) : nil
        guard check.isClean, let device, let start, let end, let index, let pulledAt else { return nil }
        return PulledTrip(
            device: device, startMilliseconds: start, endMilliseconds: end, beaconIndex: index, pulledAt: pulledAt,
            bench: bench)
    }

    /// Columns: device, at_ms, type, duration_ms, average_mg, maximum_mg,
    /// x_mg, y_mg, z_mg, beacon_index, pulled_at (, bench_id).
    public static func event(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> PulledEvent? {
        var check = RowCheck("events", key: [row[0], row[1], row[2], row[9]] + Array(row[11...]))
        defer { findings += check.findings }
        let device = check.text(row[0], "device", required: true)
        let at = check.integer(row[1], "at_ms", required: true)
        let type = check.text(row[2], "type", required: true)
        let names = ["duration_ms", "average_mg", "maximum_mg", "x_mg", "y_mg", "z_mg", "beacon_index"]
        let numbers = zip(row[3...9], names).compactMap { check.integer($0, $1, required: true) }
        let pulledAt = check.date(row[10], "pulled_at", required: true)
        let bench = row.count > 11 ? check.text(row[11], "bench_id", required: true) : nil
        guard check.isClean, let device, let at, let type, numbers.count == 7, let pulledAt else { return nil }
        return PulledEvent(
            device: device, atMilliseconds: at, type: type, durationMilliseconds: numbers[0],
            averageMilliG: numbers[1], maximumMilliG: numbers[2], x: numbers[3], y: numbers[4], z: numbers[5],
            beaconIndex: numbers[6], pulledAt: pulledAt, bench: bench)
    }

    /// Columns: device, incident_id, at_ms, max_resultant, avg_resultant,
    /// x_mg, y_mg, z_mg, samples, pulled_at (, bench_id).
    public static func incident(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> PulledIncident? {
        var check = RowCheck("incidents", key: [row[0], row[1], row[2]] + Array(row[10...]))
        defer { findings += check.findings }
        let device = check.text(row[0], "device", required: true)
        let names = ["incident_id", "at_ms", "max_resultant", "avg_resultant", "x_mg", "y_mg", "z_mg"]
        let numbers = zip(row[1...7], names).compactMap { check.integer($0, $1, required: true) }
        let samples = check.text(row[8], "samples", required: true)
        if let samples, PulledIncident.vectors(samples) == nil {
            check.fail("samples", row[8], "is not a JSON array of [x, y, z] mG (each -32768–32767)")
        }
        let pulledAt = check.date(row[9], "pulled_at", required: true)
        let bench = row.count > 10 ? check.text(row[10], "bench_id", required: true) : nil
        guard check.isClean, let device, numbers.count == 7, let samples, let pulledAt else { return nil }
        return PulledIncident(
            device: device, incidentID: numbers[0], atMilliseconds: numbers[1], maximumResultant: numbers[2],
            averageResultant: numbers[3], x: numbers[4], y: numbers[5], z: numbers[6], samples: samples,
            pulledAt: pulledAt, bench: bench)
    }
}
