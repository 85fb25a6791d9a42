import FoundationEssentials
import Inventory
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

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
    ).shapeChecked(by: "records export --kind event")
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
            terminal.document(
                CSV.document(
                    header: PulledRecordRow.csvHeader, rows: page.all.map { PulledRecordRow(record: $0).csvRow }))
        } else {
            // `records export`: JSON lines without --json too, the export's own format.
            (document ? output.jsonLines : output).render(
                PulledRecordRow.table(
                    page.all, after: [.message("\(page.count) record\(page.count == 1 ? "" : "s")")]))
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
        output.render(
            PulledRecordRow.table(
                records,
                before: [
                    .result(""),
                    .result(
                        terminal.styled("PULLED", .bold) + " \(records.count) record\(records.count == 1 ? "" : "s")"
                            + " (records list shows them again)"),
                ]))
    }
}
