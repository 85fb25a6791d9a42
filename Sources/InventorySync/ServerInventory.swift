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

    public func outcomes(device: String?, limit: Int) throws -> [OutcomeRecord] {
        try reading { server throws(SyncError) in
            guard let device else {
                return try server.query(
                    """
                    SELECT local_id, run_id, device, step, status, detail, error, started_at, duration_ms, bench_id
                    FROM outcomes ORDER BY started_at DESC, bench_id, local_id DESC LIMIT $1
                    """, [String(limit)]
                ).rows.map(DeviceRows.outcome)
            }
            guard let address = try Self.address(of: device, on: server) else { return [] }
            return try server.query(
                """
                SELECT local_id, run_id, device, step, status, detail, error, started_at, duration_ms, bench_id
                FROM outcomes WHERE device = $1 ORDER BY started_at DESC, bench_id, local_id DESC LIMIT $2
                """, [address, String(limit)]
            ).rows.map(DeviceRows.outcome)
        }
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
}
