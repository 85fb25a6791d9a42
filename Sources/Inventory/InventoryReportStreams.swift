import FoundationEssentials
import Profiles
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

extension Inventory {
    /// What `report` reads, stepped from SQLite statements (one row in
    /// memory at a time each) inside one read transaction, so that every
    /// stream sees the same inventory; the same queries and checks as
    /// `deviceTable`, `auditSubjects` and `history`, ordered by device.
    public func withReportStreams<T: Sendable>(
        since: Date?, _ body: @Sendable (any ReportReading) throws -> T
    ) throws -> T {
        let reading = InventoryReportReading(
            database: database, schema4: try hasSchema4(),
            bench: String(Visible.text(try benchID().prefix(8), limit: 8)))
        try database.execute("BEGIN DEFERRED")
        defer { _ = try? database.execute("ROLLBACK") }
        let value = try body(reading)
        storedFindingLog.add(reading.log.findings)
        return value
    }
}

/// `ReportReading` over a bench's SQLite inventory (`Inventory.withReportStreams`).
final class InventoryReportReading: ReportReading {
    let database: Database
    let schema4: Bool
    let bench: String
    var log = StoredFindingLog()

    init(database: Database, schema4: Bool, bench: String) {
        self.database = database
        self.schema4 = schema4
        self.bench = bench
    }

    private func statement(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> Statement {
        let statement = try database.prepare(sql)
        try statement.bind(parameters)
        return statement
    }

    private func stream<T>(
        _ statement: Statement, _ build: @escaping ([SQLiteValue], inout [StoredFinding]) -> T?
    ) -> RowStream<T> {
        RowStream { [self] in
            while try statement.step() {
                var findings: [StoredFinding] = []
                let built = build(statement.row(), &findings)
                if !findings.isEmpty { log.add(findings) }
                if let built { return built }
            }
            return nil
        }
    }

    func devices() throws -> (columns: [String], rows: RowStream<[SQLiteValue]>) {
        let statement = try statement(
            schema4
                ? "SELECT * FROM devices WHERE forgotten_at IS NULL ORDER BY address"
                : "SELECT * FROM devices ORDER BY address")
        var columns = statement.columnNames()
        let forgotten = columns.firstIndex(of: "forgotten_at")
        if let forgotten { columns.remove(at: forgotten) }
        return (
            columns,
            RowStream { [self] in
                guard try statement.step() else { return nil }
                var row = statement.row()
                if let forgotten { row.remove(at: forgotten) }
                let findings = RowCheck.findings(table: "devices", columns: columns, row: row, key: "address")
                if !findings.isEmpty { log.add(findings) }
                return row
            }
        )
    }

    func subjects() throws -> RowStream<AuditSubject> {
        stream(
            try statement(
                """
                SELECT d.address, d.profile, d.battery, d.firmware, d.calibrated, d.calibrated_at, d.calibration_x,
                       d.calibration_y, d.calibration_z, d.config_cornering, d.config_braking, d.config_acceleration,
                       d.config_duration, d.config_enable, d.config_read_at, d.last_seen, d.major, d.minor,
                       i.major, i.minor, CASE WHEN i.source = 'profile' THEN 'profile ' || i.profile ELSE i.source END
                FROM devices d LEFT JOIN identities i ON i.device = d.address
                \(schema4 ? "WHERE d.forgotten_at IS NULL" : "") ORDER BY d.address
                """), DeviceRows.auditSubject)
    }

    func readings(since: Date?) throws -> RowStream<BatteryReading> {
        stream(
            try statement(
                """
                SELECT device, at, battery, id FROM readings
                WHERE battery IS NOT NULL AND (?1 IS NULL OR at >= ?1) ORDER BY device, at
                """, [since.map { .text(Inventory.timestamp($0)) } ?? .null]), Inventory.reading)
    }

    func activity(since: Date?) throws -> RowStream<ActivityCount> {
        let bench = bench
        return stream(
            try statement(
                """
                SELECT substr(started_at, 1, 10), device, count(*), sum(status = 'failed'),
                       coalesce(sum(CASE WHEN typeof(duration_ms) = 'integer' AND duration_ms BETWEEN 0 AND ?2
                                    THEN duration_ms END), 0),
                       min(id),
                       sum(duration_ms IS NOT NULL
                           AND NOT (typeof(duration_ms) = 'integer' AND duration_ms BETWEEN 0 AND ?2))
                FROM outcomes WHERE status <> 'running' AND (?1 IS NULL OR started_at >= ?1)
                GROUP BY 2, 1 ORDER BY 2, 1
                """,
                [
                    since.map { .text(Inventory.timestamp($0)) } ?? .null,
                    .integer(Int64(FleetHistory.stepMillisecondsLimit)),
                ])
        ) { row, findings in Inventory.activity(row, bench: bench, findings: &findings) }
    }

    func problems(since: Date?) throws -> RowStream<StepProblem> {
        stream(
            try statement(
                """
                SELECT device, step, status, coalesce(error, detail, ''), id FROM outcomes
                WHERE status IN ('failed', 'skipped') AND (?1 IS NULL OR started_at >= ?1) ORDER BY device
                """, [since.map { .text(Inventory.timestamp($0)) } ?? .null]), Inventory.problem)
    }
}
