import Foundation
import Inventory
import Profiles

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

    /// Whether `text` names a server rather than a file.
    public static func isServerURL(_ text: String) -> Bool {
        text.hasPrefix("postgresql://") || text.hasPrefix("postgres://")
    }

    public func devices() throws -> [DeviceRecord] {
        try reading { server throws(SyncError) in
            try server.query(
                """
                SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                    calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                    config_cornering, config_braking, config_acceleration, config_duration, config_enable, benches
                FROM fleet_devices ORDER BY address
                """
            ).rows.map(Self.record)
        }
    }

    public func device(_ addressOrEnding: String) throws -> DeviceRecord? {
        try reading { server throws(SyncError) in
            guard let address = try Self.address(of: addressOrEnding, on: server) else { return nil }
            return try server.query(
                """
                SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                    calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                    config_cornering, config_braking, config_acceleration, config_duration, config_enable, benches
                FROM fleet_devices WHERE address = $1
                """, [address]
            ).rows.first.map(Self.record)
        }
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

    static func record(_ row: [SQLiteValue]) -> DeviceRecord {
        var record = DeviceRows.record(row)
        record.benches = row[21].text?.split(separator: " ").map(String.init)
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
        return (rows.prefix(limit).map(DeviceRows.outcome), rows.count > limit)
    }

    /// The inventory's timestamp form (`2026-11-30T09:41:07.123Z`), which
    /// the benches' rows hold as text.
    static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down) / 1000
        return formatter.string(from: Date(timeIntervalSince1970: milliseconds))
    }

    /// Pulled records of every bench, newest first (as `Inventory.records`):
    /// a record two benches pulled is listed once, as the first pulled it.
    public func records(_ query: RecordQuery) throws -> RecordPage {
        let fetch = query.limit.map { String(max(0, $0) + 1) }
        let milliseconds = { (date: Date) in String(Int64((date.timeIntervalSince1970 * 1000).rounded(.down))) }
        let parameters: [String?] = [
            query.device, query.since.map(milliseconds), query.until.map(milliseconds),
            query.pulledSince.map(Self.timestamp), fetch, String(RecordTime.wallClockFloor),
        ]
        var candidates: [PulledRecord] = []
        try reading { server throws(SyncError) in
            candidates = []  // a read repeated after a lost connection starts again
            if query.kinds.contains(.trip) {
                candidates += try server.query(
                    """
                    SELECT device, start_ms, end_ms, beacon_index, pulled_at, bench_id FROM (
                        SELECT DISTINCT ON (device, start_ms, end_ms) *,
                            CASE WHEN start_ms >= $6::bigint THEN start_ms
                                ELSE (extract(epoch FROM pulled_at::timestamptz) * 1000)::bigint END AS sort_ms
                        FROM trips
                        WHERE $1::text IS NULL OR device = upper($1)
                           OR device IN (SELECT address FROM devices WHERE mac_ending = lower($1))
                        ORDER BY device, start_ms, end_ms, pulled_at, bench_id
                    ) AS t
                    WHERE ($2::bigint IS NULL OR sort_ms >= $2::bigint) AND ($3::bigint IS NULL OR sort_ms < $3::bigint)
                      AND ($4::text IS NULL OR pulled_at >= $4)
                    ORDER BY sort_ms DESC, device, start_ms DESC LIMIT $5::bigint
                    """, parameters
                ).rows.map { row in
                    .trip(
                        PulledTrip(
                            device: row[0].text ?? "", startMilliseconds: row[1].integer ?? 0,
                            endMilliseconds: row[2].integer ?? 0, beaconIndex: row[3].integer ?? 0,
                            pulledAt: Self.date(row[4]), bench: row[5].text))
                }
            }
            if query.kinds.contains(.event) {
                candidates += try server.query(
                    """
                    SELECT device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg, beacon_index,
                        pulled_at, bench_id
                    FROM (
                        SELECT DISTINCT ON (device, at_ms, type, beacon_index) *,
                            CASE WHEN at_ms >= $6::bigint THEN at_ms
                                ELSE (extract(epoch FROM pulled_at::timestamptz) * 1000)::bigint END AS sort_ms
                        FROM events
                        WHERE $1::text IS NULL OR device = upper($1)
                           OR device IN (SELECT address FROM devices WHERE mac_ending = lower($1))
                        ORDER BY device, at_ms, type, beacon_index, pulled_at, bench_id
                    ) AS e
                    WHERE ($2::bigint IS NULL OR sort_ms >= $2::bigint) AND ($3::bigint IS NULL OR sort_ms < $3::bigint)
                      AND ($4::text IS NULL OR pulled_at >= $4)
                    ORDER BY sort_ms DESC, device, at_ms DESC, beacon_index DESC LIMIT $5::bigint
                    """, parameters
                ).rows.map { row in
                    .event(
                        PulledEvent(
                            device: row[0].text ?? "", atMilliseconds: row[1].integer ?? 0, type: row[2].text ?? "",
                            durationMilliseconds: row[3].integer ?? 0, averageMilliG: row[4].integer ?? 0,
                            maximumMilliG: row[5].integer ?? 0, x: row[6].integer ?? 0, y: row[7].integer ?? 0,
                            z: row[8].integer ?? 0, beaconIndex: row[9].integer ?? 0, pulledAt: Self.date(row[10]),
                            bench: row[11].text))
                }
            }
            if query.kinds.contains(.incident) {
                candidates += try server.query(
                    """
                    SELECT device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg, samples,
                        pulled_at, bench_id
                    FROM (
                        SELECT DISTINCT ON (device, incident_id, at_ms) *,
                            CASE WHEN at_ms >= $6::bigint THEN at_ms
                                ELSE (extract(epoch FROM pulled_at::timestamptz) * 1000)::bigint END AS sort_ms
                        FROM incidents
                        WHERE $1::text IS NULL OR device = upper($1)
                           OR device IN (SELECT address FROM devices WHERE mac_ending = lower($1))
                        ORDER BY device, incident_id, at_ms, pulled_at, bench_id
                    ) AS i
                    WHERE ($2::bigint IS NULL OR sort_ms >= $2::bigint) AND ($3::bigint IS NULL OR sort_ms < $3::bigint)
                      AND ($4::text IS NULL OR pulled_at >= $4)
                    ORDER BY sort_ms DESC, device, at_ms DESC, incident_id DESC LIMIT $5::bigint
                    """, parameters
                ).rows.map { row in
                    .incident(
                        PulledIncident(
                            device: row[0].text ?? "", incidentID: row[1].integer ?? 0,
                            atMilliseconds: row[2].integer ?? 0, maximumResultant: row[3].integer ?? 0,
                            averageResultant: row[4].integer ?? 0, x: row[5].integer ?? 0, y: row[6].integer ?? 0,
                            z: row[7].integer ?? 0, samples: row[8].text ?? "[]", pulledAt: Self.date(row[9]),
                            bench: row[10].text))
                }
            }
        }
        return RecordPage.cut(candidates, limit: query.limit)
    }

    static func date(_ value: SQLiteValue) -> Date {
        value.text.flatMap(Inventory.parseTimestamp) ?? Date(timeIntervalSince1970: 0)
    }

    public func auditSubjects() throws -> [AuditSubject] {
        try reading { server throws(SyncError) in
            try server.query(
                """
                SELECT f.address, f.profile, f.battery, f.firmware, f.calibrated, f.calibrated_at, f.calibration_x,
                    f.calibration_y, f.calibration_z, f.config_cornering, f.config_braking, f.config_acceleration,
                    f.config_duration, f.config_enable, f.config_read_at, f.last_seen, f.major, f.minor,
                    c.major, c.minor, CASE WHEN c.major IS NULL THEN NULL ELSE 'claimed by bench ' || left(c.bench_id, 8) END,
                    f.benches::text
                FROM fleet_devices f LEFT JOIN identity_claims c ON c.address = f.address ORDER BY f.address
                """
            ).rows.map(DeviceRows.auditSubject)
        }
    }

    public func deviceTable() throws -> DeviceTable {
        try reading { server throws(SyncError) in
            let (columns, rows) = try server.query("SELECT * FROM fleet_devices ORDER BY address")
            return DeviceTable(columns: columns, rows: rows)
        }
    }

    public func history(since: Date?) throws -> FleetHistory {
        let since = since.map(Self.timestamp)
        return try reading { server throws(SyncError) in
            let readings = try server.query(
                """
                SELECT device, at, battery FROM readings
                WHERE battery IS NOT NULL AND ($1::text IS NULL OR at >= $1) ORDER BY device, at
                """, [since]
            ).rows.compactMap(Inventory.reading)
            let activity = try server.query(
                """
                SELECT substr(started_at, 1, 10), left(bench_id, 8), device, count(*)::bigint,
                    (count(*) FILTER (WHERE status = 'failed'))::bigint, coalesce(sum(duration_ms), 0)::bigint
                FROM outcomes WHERE status <> 'running' AND ($1::text IS NULL OR started_at >= $1)
                GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
                """, [since]
            ).rows.map { row in
                ActivityCount(
                    day: row[0].text ?? "", bench: row[1].text ?? "", device: row[2].text,
                    steps: Int(row[3].integer ?? 0), failed: Int(row[4].integer ?? 0),
                    milliseconds: Int(row[5].integer ?? 0))
            }
            let problems = try server.query(
                """
                SELECT device, step, status, coalesce(error, detail, '') FROM outcomes
                WHERE status IN ('failed', 'skipped') AND ($1::text IS NULL OR started_at >= $1)
                """, [since]
            ).rows.map(Inventory.problem)
            return FleetHistory(readings: readings, activity: activity, problems: problems)
        }
    }
}
