import Foundation

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
    public var sampleVectors: [[Int]] {
        (try? JSONDecoder().decode([[Int]].self, from: Data(samples.utf8))) ?? []
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
            ).map { row in
                .trip(
                    PulledTrip(
                        device: row[0].text ?? "", startMilliseconds: row[1].integer ?? 0,
                        endMilliseconds: row[2].integer ?? 0, beaconIndex: row[3].integer ?? 0,
                        pulledAt: Self.date(row[4])))
            }
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
            ).map { row in
                .event(
                    PulledEvent(
                        device: row[0].text ?? "", atMilliseconds: row[1].integer ?? 0, type: row[2].text ?? "",
                        durationMilliseconds: row[3].integer ?? 0, averageMilliG: row[4].integer ?? 0,
                        maximumMilliG: row[5].integer ?? 0, x: row[6].integer ?? 0, y: row[7].integer ?? 0,
                        z: row[8].integer ?? 0, beaconIndex: row[9].integer ?? 0, pulledAt: Self.date(row[10])))
            }
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
            ).map { row in
                .incident(
                    PulledIncident(
                        device: row[0].text ?? "", incidentID: row[1].integer ?? 0, atMilliseconds: row[2].integer ?? 0,
                        maximumResultant: row[3].integer ?? 0, averageResultant: row[4].integer ?? 0,
                        x: row[5].integer ?? 0, y: row[6].integer ?? 0, z: row[7].integer ?? 0,
                        samples: row[8].text ?? "[]", pulledAt: Self.date(row[9])))
            }
        }
        return RecordPage.cut(candidates, limit: query.limit)
    }

    static func date(_ value: SQLiteValue) -> Date {
        value.text.flatMap(parseTimestamp) ?? Date(timeIntervalSince1970: 0)
    }
}
