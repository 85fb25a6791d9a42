import FoundationEssentials
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// Rows one at a time, from whatever holds them (a server's cursor, an
/// array): `next()` until nil.
public struct RowStream<Element> {
    private let pull: () throws -> Element?

    public init(_ pull: @escaping () throws -> Element?) { self.pull = pull }

    /// The rows of `array`, in its order.
    public init(_ array: [Element]) {
        var iterator = array.makeIterator()
        pull = { iterator.next() }
    }

    public func next() throws -> Element? { try pull() }
}

/// What `report` reads, each as a stream ordered by device address (rows
/// without a device first or last), so that a report is folded one device
/// at a time (FleetReport.Builder) rather than held. Each call opens a new
/// stream from the beginning; all of them read the same state of the
/// inventory (the server: one snapshot).
public protocol ReportReading {
    /// The device table's columns and its rows (as `deviceTable()`), by address.
    func devices() throws -> (columns: [String], rows: RowStream<[SQLiteValue]>)
    /// Every device as an offline audit sees it (as `auditSubjects()`), by address.
    func subjects() throws -> RowStream<AuditSubject>
    /// Battery readings since `since`, by device, then time.
    func readings(since: Date?) throws -> RowStream<BatteryReading>
    /// Step outcomes counted per day, bench and device, since `since`, by device.
    func activity(since: Date?) throws -> RowStream<ActivityCount>
    /// Failed and skipped steps since `since`, by device.
    func problems(since: Date?) throws -> RowStream<StepProblem>
}

/// `ReportReading` over arrays already read (a bench's inventory), sorted
/// by device as the streams promise.
public struct ArrayReportReading: ReportReading, Sendable {
    public var table: DeviceTable
    public var auditSubjects: [AuditSubject]
    public var history: FleetHistory

    public init(table: DeviceTable, subjects: [AuditSubject], history: FleetHistory) {
        self.table = table
        auditSubjects = subjects
        self.history = history
    }

    /// Stable: rows of one device keep their order (readings: by time).
    static func byDevice<T>(_ rows: [T], _ device: (T) -> String?) -> [T] {
        rows.enumerated().sorted { a, b in
            let (x, y) = (device(a.element), device(b.element))
            if x != y {
                guard let x else { return true }
                guard let y else { return false }
                return x < y
            }
            return a.offset < b.offset
        }.map(\.element)
    }

    public func devices() -> (columns: [String], rows: RowStream<[SQLiteValue]>) {
        let address = table.columns.firstIndex(of: "address")
        return (
            table.columns,
            RowStream(Self.byDevice(table.rows) { row in address.flatMap { row[$0].text } })
        )
    }
    public func subjects() -> RowStream<AuditSubject> { RowStream(Self.byDevice(auditSubjects) { $0.address }) }
    public func readings(since: Date?) -> RowStream<BatteryReading> {
        RowStream(Self.byDevice(history.readings) { $0.device })
    }
    public func activity(since: Date?) -> RowStream<ActivityCount> {
        RowStream(Self.byDevice(history.activity) { $0.device })
    }
    public func problems(since: Date?) -> RowStream<StepProblem> {
        RowStream(Self.byDevice(history.problems) { $0.device })
    }
}

extension InventoryReader {
    /// The arrays, read whole, as streams: for an inventory small enough
    /// to hold (a bench's); the server overrides it with cursors.
    public func withReportStreams<T: Sendable>(
        since: Date?, _ body: @Sendable (any ReportReading) throws -> T
    ) async throws -> T {
        let table = try await deviceTable()
        let subjects = try await auditSubjects()
        let history = try await history(since: since)
        return try body(ArrayReportReading(table: table, subjects: subjects, history: history))
    }
}
