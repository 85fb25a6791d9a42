import Foundation
import Inventory
import SafeText

/// The filters `records list` and `records export` share.
struct RecordFilters {
    static let options: [OptionSpec] = [
        .value("--kind", "KIND", .choice(RecordKind.allCases.map(\.rawValue)), "only trips, events or incidents"),
        .value("--device", "DEVICE", .device, "only this device (address or MAC ending)"),
        .value("--since", "TIME", .time, "only records at or after TIME (2026-11-30, an ISO 8601 time, or 7d)"),
        .value("--until", "TIME", .time, "only records before TIME"),
    ]

    static func query(_ arguments: ParsedArguments, limit: Int?) -> RecordQuery {
        RecordQuery(
            kinds: arguments.text("--kind").flatMap(RecordKind.init(rawValue:)).map { [$0] }
                ?? Set(RecordKind.allCases),
            device: arguments.text("--device"), since: arguments.time("--since"), until: arguments.time("--until"),
            limit: limit)
    }
}

/// `records list`: trips, events and incidents pulled, newest first.
public struct RecordsListCommand: ConsoleCommand {
    public var query: RecordQuery
    public init(query: RecordQuery) { self.query = query }
    public static let spec = CommandSpec(
        name: "records list", summary: "the trips, events and incidents pulled into the inventory, newest first",
        example: "records list --kind event --since 7d",
        options: RecordFilters.options + [
            .value("--limit", "N", .integer(1...1_000_000), "at most N records (default 100)")
        ], onlyReadsTheInventory: true, isFamilyDefault: true,
        detail:
            "A record's time is real when the beacon's clock was set (sync-time) before it was pulled; otherwise it is shown as time since power-on, and --since and --until use when it was pulled.",
        emits: [.trip, .event, .incident])
    public init(_ arguments: inout ParsedArguments) {
        query = RecordFilters.query(arguments, limit: arguments.integer("--limit") ?? 100)
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.showRecords(query, document: false)
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(query.limit) }
}

/// `records export --csv|--json`: every record that matches, for a spreadsheet or a program.
public struct RecordsExportCommand: ConsoleCommand {
    public var query: RecordQuery
    public var csv: Bool
    public init(query: RecordQuery, csv: Bool) {
        self.query = query
        self.csv = csv
    }
    public static let spec = CommandSpec(
        name: "records export", summary: "every matching record as CSV (RFC 4180, formula-safe) or JSON lines",
        example: "records export --csv --since 2026-11-01 > records.csv",
        options: RecordFilters.options + [.flag("--csv", "CSV instead of JSON lines")], onlyReadsTheInventory: true,
        emits: [.trip, .event, .incident]
    ).json(example: "records export --kind event")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        if arguments.flag("--csv"), arguments.flag("--json") {
            throw arguments.fail(at: 0, "records export takes --csv or --json, not both")
        }
        self.init(query: RecordFilters.query(arguments, limit: nil), csv: arguments.flag("--csv"))
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.showRecords(query, document: true, csv: csv)
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(csv) }
}

extension Session {
    /// Records from the inventory (or the server): a table, JSON lines, or CSV.
    func showRecords(_ query: RecordQuery, document: Bool, csv: Bool = false) async throws(ConsoleFailure) {
        let page: RecordPage
        do {
            page = try await reader().records(query)
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "records: \(error)")
        }
        if csv {
            terminal.document(CSV.document(header: RecordRows.csvHeader, rows: page.all.map(RecordRows.csvRow)))
        } else {
            write(page.all, json: json || document)
            if !(json || document) { terminal.message("\(page.count) record\(page.count == 1 ? "" : "s")") }
        }
        if page.truncated {
            terminal.message(
                "showing the newest \(page.count): there are more (--limit N for more, or records export)")
        }
    }
}

extension Session {
    /// The records of `kinds` pulled from these devices since `since`: what
    /// a pull brought.
    func showPulled(_ kinds: Set<RecordKind>, from devices: Set<String>, since: Date) async throws(ConsoleFailure) {
        let page: RecordPage
        do {
            page = try await inventory().records(RecordQuery(kinds: kinds, pulledSince: since))
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "the inventory: \(error)")
        }
        let records = page.all.filter { devices.contains($0.device) }
        if !json {
            terminal.result("")
            terminal.result(
                terminal.styled("PULLED", .bold) + " \(records.count) record\(records.count == 1 ? "" : "s")"
                    + " (records list shows them again)")
        }
        write(records, json: json)
    }

    /// Records as JSON lines of their kinds, or a table (none when empty).
    func write(_ records: [PulledRecord], json: Bool) {
        if json {
            for record in records { terminal.emit(record.resultKind, Shapes.record(record)) }
        } else if !records.isEmpty {
            for line in table(RecordRows.tableHeader, records.map(RecordRows.tableRow)) { terminal.result(line) }
        }
    }
}

extension PulledRecord {
    var resultKind: ResultKind {
        switch self {
        case .trip: .trip
        case .event: .event
        case .incident: .incident
        }
    }
}

/// Records as table rows and CSV records.
enum RecordRows {
    static let tableHeader = ["kind", "device", "at", "what", "pulled"]

    /// When it happened: the real time, or time since the beacon's power-on.
    static func when(_ milliseconds: Int64, _ date: Date?) -> String {
        date.map(Format.timestamp) ?? "+\(Session.seconds(Double(milliseconds) / 1000)) since power-on"
    }

    static func tableRow(_ record: PulledRecord) -> [String] {
        switch record {
        case .trip(let trip):
            [
                "trip", trip.device, when(trip.startMilliseconds, trip.at),
                "\(Session.seconds(Double(trip.durationMilliseconds) / 1000)) long", Format.timestamp(trip.pulledAt),
            ]
        case .event(let event):
            [
                "event", event.device, when(event.atMilliseconds, event.at),
                "\(event.type), \(event.durationMilliseconds) ms, peak \(event.maximumMilliG) mG",
                Format.timestamp(event.pulledAt),
            ]
        case .incident(let incident):
            [
                "incident", incident.device, when(incident.atMilliseconds, incident.at),
                "#\(incident.incidentID), peak \(incident.maximumResultant) mG, \(incident.sampleVectors.count) samples",
                Format.timestamp(incident.pulledAt),
            ]
        }
    }

    static let csvHeader = [
        "kind", "device", "at", "beacon_ms", "end_ms", "duration_ms", "type", "average_mg", "maximum_mg", "x_mg",
        "y_mg", "z_mg", "incident_id", "pulled_at", "bench",
    ]

    static func csvRow(_ record: PulledRecord) -> [String] {
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

extension Shapes {
    static func record(_ record: PulledRecord) -> [String: JSONValue] {
        switch record {
        case .trip(let trip):
            return [
                "device": .string(trip.device), "start_ms": .int(trip.startMilliseconds),
                "end_ms": .int(trip.endMilliseconds), "duration_ms": .int(trip.durationMilliseconds),
                "at": .optional(trip.at.map(Format.timestamp)), "end_at": .optional(trip.endAt.map(Format.timestamp)),
                "beacon_index": .int(trip.beaconIndex), "pulled_at": .string(Format.timestamp(trip.pulledAt)),
                "bench": .optional(trip.bench),
            ]
        case .event(let event):
            return [
                "device": .string(event.device), "at_ms": .int(event.atMilliseconds), "type": .string(event.type),
                "duration_ms": .int(event.durationMilliseconds), "average_mg": .int(event.averageMilliG),
                "maximum_mg": .int(event.maximumMilliG), "x_mg": .int(event.x), "y_mg": .int(event.y),
                "z_mg": .int(event.z), "beacon_index": .int(event.beaconIndex),
                "at": .optional(event.at.map(Format.timestamp)), "pulled_at": .string(Format.timestamp(event.pulledAt)),
                "bench": .optional(event.bench),
            ]
        case .incident(let incident):
            return [
                "device": .string(incident.device), "incident_id": .int(incident.incidentID),
                "at_ms": .int(incident.atMilliseconds), "max_resultant_mg": .int(incident.maximumResultant),
                "avg_resultant_mg": .int(incident.averageResultant), "x_mg": .int(incident.x),
                "y_mg": .int(incident.y), "z_mg": .int(incident.z),
                "samples": .array(incident.sampleVectors.map { .array($0.map { .integer($0) }) }),
                "at": .optional(incident.at.map(Format.timestamp)),
                "pulled_at": .string(Format.timestamp(incident.pulledAt)), "bench": .optional(incident.bench),
            ]
        }
    }
}
