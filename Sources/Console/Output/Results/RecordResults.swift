import FoundationEssentials
import Inventory
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

// Pulled records: `records list|export`, and what a pull brought.

/// A pulled record: a `trip`, `event` or `incident` line, a row of the
/// records table, or a CSV record (`records export --csv`).
struct PulledRecordRow: TableRow {
    var record: PulledRecord

    var kind: ResultKind {
        switch record {
        case .trip: .trip
        case .event: .event
        case .incident: .incident
        }
    }

    var fields: [(String, JSONValue)] {
        switch record {
        case .trip(let trip):
            [
                ("device", .string(trip.device)), ("start_ms", .int(trip.startMilliseconds)),
                ("end_ms", .int(trip.endMilliseconds)), ("duration_ms", .int(trip.durationMilliseconds)),
                ("at", .optional(trip.at.map(Format.timestamp))),
                ("end_at", .optional(trip.endAt.map(Format.timestamp))),
                ("beacon_index", .int(trip.beaconIndex)), ("pulled_at", .string(Format.timestamp(trip.pulledAt))),
                ("bench", .optional(trip.bench)),
            ]
        case .event(let event):
            [
                ("device", .string(event.device)), ("at_ms", .int(event.atMilliseconds)), ("type", .string(event.type)),
                ("duration_ms", .int(event.durationMilliseconds)), ("average_mg", .int(event.averageMilliG)),
                ("maximum_mg", .int(event.maximumMilliG)), ("x_mg", .int(event.x)), ("y_mg", .int(event.y)),
                ("z_mg", .int(event.z)), ("beacon_index", .int(event.beaconIndex)),
                ("at", .optional(event.at.map(Format.timestamp))),
                ("pulled_at", .string(Format.timestamp(event.pulledAt))), ("bench", .optional(event.bench)),
            ]
        case .incident(let incident):
            [
                ("device", .string(incident.device)), ("incident_id", .int(incident.incidentID)),
                ("at_ms", .int(incident.atMilliseconds)), ("max_resultant_mg", .int(incident.maximumResultant)),
                ("avg_resultant_mg", .int(incident.averageResultant)), ("x_mg", .int(incident.x)),
                ("y_mg", .int(incident.y)), ("z_mg", .int(incident.z)),
                ("samples", .array(incident.sampleVectors.map { .array($0.map { .integer($0) }) })),
                ("at", .optional(incident.at.map(Format.timestamp))),
                ("pulled_at", .string(Format.timestamp(incident.pulledAt))), ("bench", .optional(incident.bench)),
            ]
        }
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        [
            Column("kind") { $0.kind.rawValue }, Column("device") { $0.cells.device },
            Column("at") { $0.cells.at }, Column("what") { $0.cells.what }, Column("pulled") { $0.cells.pulled },
        ]
    }

    /// The table's cells but the kind.
    var cells: (device: String, at: String, what: String, pulled: String) {
        switch record {
        case .trip(let trip):
            (
                trip.device, Self.when(trip.startMilliseconds, trip.at),
                "\(Session.seconds(Double(trip.durationMilliseconds) / 1000)) long", Format.timestamp(trip.pulledAt)
            )
        case .event(let event):
            (
                event.device, Self.when(event.atMilliseconds, event.at),
                "\(event.type), \(event.durationMilliseconds) ms, peak \(event.maximumMilliG) mG",
                Format.timestamp(event.pulledAt)
            )
        case .incident(let incident):
            (
                incident.device, Self.when(incident.atMilliseconds, incident.at),
                "#\(incident.incidentID), peak \(incident.maximumResultant) mG, \(incident.sampleVectors.count) samples",
                Format.timestamp(incident.pulledAt)
            )
        }
    }

    /// When it happened: the real time, or time since the beacon's power-on.
    static func when(_ milliseconds: Int64, _ date: Date?) -> String {
        date.map(Format.timestamp) ?? "+\(Session.seconds(Double(milliseconds) / 1000)) since power-on"
    }

    /// Records: JSON lines of their kinds, or a table (none when empty)
    /// and the lines people get after it.
    static func table(_ records: [PulledRecord], before: [PeopleLine] = [], after: [PeopleLine] = []) -> Table<Self> {
        Table(rows: records.map(Self.init), emptyShowsNothing: true, before: before, after: after)
    }

    static let csvHeader = [
        "kind", "device", "at", "beacon_ms", "end_ms", "duration_ms", "type", "average_mg", "maximum_mg", "x_mg",
        "y_mg", "z_mg", "incident_id", "pulled_at", "bench",
    ]

    var csvRow: [String] {
        let time = { (date: Date?) in date.map(Format.timestamp) ?? "" }
        switch record {
        case .trip(let trip):
            return [
                "trip", trip.device, time(trip.at), String(trip.startMilliseconds), String(trip.endMilliseconds),
                String(trip.durationMilliseconds), "", "", "", "", "", "", "", Format.timestamp(trip.pulledAt),
                trip.bench ?? "",
            ]
        case .event(let event):
            return [
                "event", event.device, time(event.at), String(event.atMilliseconds), "",
                String(event.durationMilliseconds), event.type, String(event.averageMilliG),
                String(event.maximumMilliG), String(event.x), String(event.y), String(event.z), "",
                Format.timestamp(event.pulledAt), event.bench ?? "",
            ]
        case .incident(let incident):
            return [
                "incident", incident.device, time(incident.at), String(incident.atMilliseconds), "", "", "",
                String(incident.averageResultant), String(incident.maximumResultant), String(incident.x),
                String(incident.y), String(incident.z), String(incident.incidentID),
                Format.timestamp(incident.pulledAt), incident.bench ?? "",
            ]
        }
    }
}
