import FoundationEssentials
import Inventory
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// The shared PostgreSQL inventory that benches sync to, read as one
/// fleet: `--inventory postgresql://…` for `inventory`, `log` and `audit`.
/// A beacon known to several benches is one device (the `fleet_devices`
/// view: each fact from the bench that observed it last); its history is
/// every bench's outcomes, newest first. Read-only: benches write their own
/// SQLite file and sync it here.
public actor ServerInventory: InventoryReader {
    private let url: String
    private var connection: PostgresConnection
    public nonisolated let location: String
    /// Stored values that failed their checks (`takeStoredFindings`).
    private var storedFindingLog = StoredFindingLog()

    public func takeStoredFindings() -> (findings: [StoredFinding], more: Int) { storedFindingLog.take() }

    /// `rows` through a checking row builder (Inventory's, shared with a
    /// bench's inventory): the rows it keeps, its findings logged.
    private func checked<T>(
        _ rows: [[SQLiteValue]], _ build: ([SQLiteValue], inout [StoredFinding]) -> T?
    ) -> [T] {
        storedFindingLog.keep(rows, build)
    }

    /// Connects and checks the schema: a server no bench has synced to is
    /// an error, one an older beaconbench wrote is migrated first (which
    /// needs the right to), one a newer beaconbench wrote is refused.
    public init(url: String) throws(SyncError) {
        self.url = url
        connection = try PostgresConnection(url)
        location = connection.location
        try InventorySync.prepareSchema(connection, creating: false)
    }

    /// Runs `body` on the connection; after a lost connection (the server
    /// restarted, the network dropped while the REPL stood idle) connects
    /// again once and repeats it — a read is safe to repeat.
    private func reading<T>(_ body: (PostgresConnection) throws(SyncError) -> T) throws(SyncError) -> T {
        do {
            return try body(connection)
        } catch  where error.isConnectionFailure {
            connection = try PostgresConnection(url)
            return try body(connection)
        }
    }

    /// Whether `text` names a server rather than a file: a PostgreSQL
    /// URL or a `key=value` connection string (`ServerLocator`).
    public static func isServerURL(_ text: String) -> Bool { ServerLocator.isServer(text) }

    public func devices() throws -> [DeviceRecord] {
        let rows = try reading { server throws(SyncError) in
            try server.query(
                """
                SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                    calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                    config_cornering, config_braking, config_acceleration, config_duration, config_enable, benches
                FROM fleet_devices ORDER BY address
                """
            ).rows
        }
        return checked(rows, Self.record)
    }

    /// One page of the merged fleet in address order: the first `limit`
    /// devices after `after` (nil: from the first), by keyset
    /// (`fleet_device_rows`: an index scan of the page's addresses, each
    /// merged alone), so a page costs the same anywhere in the fleet.
    public func devices(after: String?, limit: Int) throws -> (rows: [DeviceRecord], more: Bool) {
        let limit = max(0, limit)
        let rows = try reading { server throws(SyncError) in
            try server.query(OfficeReads.devicePage, [after, String(limit + 1)]).rows
        }
        return (checked(Array(rows.prefix(limit)), Self.record), rows.count > limit)
    }

    public func device(_ addressOrEnding: String) throws -> DeviceRecord? {
        let rows = try reading { server throws(SyncError) -> [[SQLiteValue]] in
            guard let address = try Self.address(of: addressOrEnding, on: server) else { return [] }
            return try server.query(
                """
                SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                    calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                    config_cornering, config_braking, config_acceleration, config_duration, config_enable, benches
                FROM fleet_devices WHERE address = $1
                """, [address]
            ).rows
        }
        return checked(Array(rows.prefix(1)), Self.record).first
    }

    /// The address a name stands for: itself, or the device with that MAC
    /// ending on any bench (the first by address, as in a bench's own
    /// inventory, when endings repeat).
    private static func address(of name: String, on server: PostgresConnection) throws(SyncError) -> String? {
        let found = try server.exec(
            "SELECT address FROM devices WHERE address = upper($1) OR mac_ending = lower($1) ORDER BY address LIMIT 1",
            [name])
        return found.first?.first ?? nil
    }

    static func record(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> DeviceRecord? {
        guard var record = DeviceRows.record(row, findings: &findings) else { return nil }
        var check = RowCheck("devices", key: [row[0]])
        record.benches = check.text(row[21], "benches")?.split(separator: " ").map { StoredRule.visible($0, limit: 64) }
        findings += check.findings
        return record
    }

    public func outcomes(
        device: String?, since: Date?, limit: Int
    ) throws -> (
        rows: [OutcomeRecord], truncated: Bool
    ) {
        let limit = max(0, limit)
        let rows = try reading { server throws(SyncError) -> [[SQLiteValue]] in
            var address: String?
            if let device {
                guard let found = try Self.address(of: device, on: server) else { return [] }
                address = found
            }
            return try server.query(
                """
                SELECT local_id, run_id, device, step, status, detail, error, started_at, duration_ms, bench_id
                FROM outcomes WHERE ($1::text IS NULL OR device = $1) AND ($2::text IS NULL OR started_at >= $2)
                ORDER BY started_at DESC, bench_id, local_id DESC LIMIT $3
                """, [address, since.map(Self.timestamp), String(limit + 1)]
            ).rows
        }
        return (checked(Array(rows.prefix(limit)), DeviceRows.outcome), rows.count > limit)
    }

    /// The inventory's timestamp form (`2026-11-30T09:41:07.123Z`), which
    /// the benches' rows hold as text.
    static func timestamp(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down) / 1000
        return Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(
            Date(timeIntervalSince1970: milliseconds))
    }

    /// Pulled records of every bench, newest first (as `Inventory.records`):
    /// a record two benches pulled is listed once, as the first pulled it.
    /// A record without a real time sorts by `pulled_at`, computed from its
    /// digits rather than cast: a cast fails the whole query on one row
    /// whose text is no time; this way such a row sorts apart (or near its
    /// date, 2026-02-30) and its check (`RecordRows`) leaves it out. The
    /// sort key is stored (`listed_ms`, `OfficeReads.migration`) and each
    /// table read from its `*_by_sort` index, stopping after the limit.
    public func records(_ query: RecordQuery) throws -> RecordPage {
        let fetch = query.limit.map { String(max(0, $0) + 1) }
        let milliseconds = { (date: Date) in String(Int64((date.timeIntervalSince1970 * 1000).rounded(.down))) }
        let parameters: [String?] = [
            query.device, query.since.map(milliseconds), query.until.map(milliseconds),
            query.pulledSince.map(Self.timestamp), fetch,
        ]
        var candidates: [PulledRecord] = []
        var findings: [StoredFinding] = []
        try reading { server throws(SyncError) in
            candidates = []  // a read repeated after a lost connection starts again
            findings = []
            // While a migration's backfill of the key is under way, the key
            // is computed where it is not yet stored (slower, as correct).
            let backfilled = try ServerMigrations.afterworkDone(server, OfficeReads.backfills)
            if query.kinds.contains(.trip) {
                candidates += try server.query(OfficeReads.trips(backfilled: backfilled), parameters).rows.compactMap {
                    RecordRows.trip($0, findings: &findings).map(PulledRecord.trip)
                }
            }
            if query.kinds.contains(.event) {
                candidates += try server.query(OfficeReads.events(backfilled: backfilled), parameters).rows.compactMap {
                    RecordRows.event($0, findings: &findings).map(PulledRecord.event)
                }
            }
            if query.kinds.contains(.incident) {
                candidates += try server.query(OfficeReads.incidents(backfilled: backfilled), parameters).rows
                    .compactMap {
                        RecordRows.incident($0, findings: &findings).map(PulledRecord.incident)
                    }
            }
        }
        storedFindingLog.add(findings)
        return RecordPage.cut(candidates, limit: query.limit)
    }

    public func auditSubjects() throws -> [AuditSubject] {
        let rows = try reading { server throws(SyncError) in
            try server.query(
                """
                SELECT f.address, f.profile, f.battery, f.firmware, f.calibrated, f.calibrated_at, f.calibration_x,
                    f.calibration_y, f.calibration_z, f.config_cornering, f.config_braking, f.config_acceleration,
                    f.config_duration, f.config_enable, f.config_read_at, f.last_seen, f.major, f.minor,
                    c.major, c.minor, CASE WHEN c.major IS NULL THEN NULL ELSE 'claimed by bench ' || left(c.bench_id, 8) END,
                    f.benches::text
                FROM fleet_devices f LEFT JOIN identity_claims c ON c.address = f.address ORDER BY f.address
                """
            ).rows
        }
        return checked(rows, DeviceRows.auditSubject)
    }

    public func deviceTable() throws -> DeviceTable {
        let table = try reading { server throws(SyncError) in
            let (columns, rows) = try server.query("SELECT * FROM fleet_devices ORDER BY address")
            return DeviceTable(columns: columns, rows: rows)
        }
        for row in table.rows {
            storedFindingLog.add(RowCheck.findings(table: "devices", columns: table.columns, row: row, key: "address"))
        }
        return table
    }

    /// What `report` reads, streamed from cursors in one read-only
    /// snapshot (`PostgresSnapshot`): memory is a batch per stream, not the
    /// fleet. A connection lost mid-stream starts the whole read again
    /// once, from the beginning, on a new connection — `body` must write
    /// nothing that lasts before it returns (the report writes its page to
    /// a file of its own and moves it into place only after) — and a
    /// second loss is the error.
    public func withReportStreams<T: Sendable>(
        since: Date?, _ body: @Sendable (any ReportReading) throws -> T
    ) throws -> T {
        var repeated = false
        while true {
            let log = ServerReportReading.Log()
            do {
                let value = try connection.snapshot { snapshot in
                    try body(ServerReportReading(snapshot: snapshot, log: log))
                }
                storedFindingLog.add(log.kept.findings)
                return value
            } catch let error as SyncError where error.isConnectionFailure && !repeated {
                repeated = true
                connection = try PostgresConnection(url)
            }
        }
    }

    /// The office's whole-fleet reads (`OfficeStreams`: `inventory list`,
    /// `drift`, `audit`), handed to `body` in one read-only snapshot; `body`
    /// must not keep the streams past its return. A connection lost before
    /// `body` wrote anything (`OfficeStreams.started`) starts the whole read
    /// again once, on a new connection; lost after that, or a second time,
    /// it is the error.
    public func withOfficeStreams<T: Sendable>(_ body: @Sendable (OfficeStreams) throws -> T) throws -> T {
        var repeated = false
        while true {
            let log = ServerReportReading.Log()
            var started = false
            defer { storedFindingLog.add(log.kept.findings) }
            do {
                return try connection.snapshot { snapshot in
                    let streams = OfficeStreams(snapshot: snapshot, log: log)
                    defer { started = streams.started }
                    return try body(streams)
                }
            } catch let error as SyncError where error.isConnectionFailure && !repeated && !started {
                repeated = true
                connection = try PostgresConnection(url)
            }
        }
    }

    public func history(since: Date?) throws -> FleetHistory {
        let since = since.map(Self.timestamp)
        let limit = String(FleetHistory.stepMillisecondsLimit)
        let (readings, activity, problems) = try reading { server throws(SyncError) in
            let readings = try server.query(
                """
                SELECT device, at, battery, bench_id, local_id FROM readings
                WHERE battery IS NOT NULL AND ($1::text IS NULL OR at >= $1) ORDER BY device, at
                """, [since]
            ).rows
            let activity = try server.query(
                """
                SELECT substr(started_at, 1, 10), device, count(*)::bigint,
                    (count(*) FILTER (WHERE status = 'failed'))::bigint,
                    coalesce(sum(duration_ms) FILTER (WHERE duration_ms BETWEEN 0 AND $2::bigint), 0)::bigint,
                    left(bench_id, 8) || '/' || min(local_id)::text,
                    (count(*) FILTER (WHERE duration_ms IS NOT NULL AND duration_ms NOT BETWEEN 0 AND $2::bigint))::bigint,
                    left(bench_id, 8)
                FROM outcomes WHERE status <> 'running' AND ($1::text IS NULL OR started_at >= $1)
                GROUP BY 1, 2, left(bench_id, 8) ORDER BY 1, 8, 2
                """, [since, limit]
            ).rows
            let problems = try server.query(
                """
                SELECT device, step, status, coalesce(error, detail, ''), bench_id, local_id FROM outcomes
                WHERE status IN ('failed', 'skipped') AND ($1::text IS NULL OR started_at >= $1)
                """, [since]
            ).rows
            return (readings, activity, problems)
        }
        return FleetHistory(
            readings: checked(readings, Inventory.reading),
            activity: checked(activity) { row, findings in
                Inventory.activity(row, bench: StoredRule.visible(row[7].text ?? "", limit: 8), findings: &findings)
            },
            problems: checked(problems, Inventory.problem))
    }
}
