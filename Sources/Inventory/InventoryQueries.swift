import FoundationEssentials
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A step outcome as recorded, for `log` and `inventory show`.
public struct OutcomeRecord: Sendable, Equatable, Codable {
    public var id: Int64
    public var run: Int64
    public var device: String?
    public var step: String
    public var status: String
    public var detail: String?
    public var error: String?
    public var startedAt: String
    public var durationMilliseconds: Int64?
    /// The bench that recorded it (a server inventory); nil for a bench's own.
    public var bench: String?

    /// `startedAt` parsed (nil when it is not the inventory's timestamp form).
    public var startedDate: Date? { Inventory.parseTimestamp(startedAt) }

    public init(
        id: Int64, run: Int64, device: String?, step: String, status: String, detail: String?, error: String?,
        startedAt: String, durationMilliseconds: Int64?, bench: String? = nil
    ) {
        self.id = id
        self.run = run
        self.device = device
        self.step = step
        self.status = status
        self.detail = detail
        self.error = error
        self.startedAt = startedAt
        self.durationMilliseconds = durationMilliseconds
        self.bench = bench
    }
}

extension Inventory: InventoryReader {
    public nonisolated var location: String { path }
}

extension Inventory {
    /// Whether the file has schema 4's columns (`devices.forgotten_at`,
    /// `runs.simulated`); a read-only opening of an older file has not, and
    /// then no device is forgotten and no run simulated.
    func hasSchema4() throws -> Bool { try database.userVersion >= 4 }

    /// Every device, by address; forgotten ones are left out.
    public func devices() throws -> [DeviceRecord] {
        try deviceRows(nil)
    }

    public func devicesByAddress() throws -> [String: DeviceRecord] {
        Dictionary(try devices().map { ($0.address, $0) }) { first, _ in first }
    }

    /// One device, by address or MAC ending; nil when it is forgotten.
    public func device(_ addressOrEnding: String) throws -> DeviceRecord? {
        try deviceRows(addressOrEnding).first
    }

    /// Every device, or those whose address or MAC ending is `name`; not
    /// the forgotten ones.
    private func deviceRows(_ name: String?) throws -> [DeviceRecord] {
        guard try hasSchema4() else {
            return checked(
                try database.rows(
                    """
                    SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                           calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms,
                           profile, config_cornering, config_braking, config_acceleration, config_duration,
                           config_enable
                    FROM devices WHERE ?1 IS NULL OR address = upper(?1) OR mac_ending = lower(?1) ORDER BY address
                    """, [SQLiteValue(name)]), DeviceRows.record)
        }
        return checked(
            try database.rows(
                """
                SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                       calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                       config_cornering, config_braking, config_acceleration, config_duration, config_enable
                FROM devices
                WHERE forgotten_at IS NULL AND (?1 IS NULL OR address = upper(?1) OR mac_ending = lower(?1))
                ORDER BY address
                """, [SQLiteValue(name)]), DeviceRows.record)
    }

    /// `rows` through a checking row builder: the rows it keeps, its
    /// findings logged (`takeStoredFindings`).
    func checked<T>(
        _ rows: [[SQLiteValue]], _ build: ([SQLiteValue], inout [StoredFinding]) -> T?
    ) -> [T] {
        storedFindingLog.keep(rows, build)
    }

    public func takeStoredFindings() -> (findings: [StoredFinding], more: Int) { storedFindingLog.take() }

    /// Devices whose provisioning began on this bench but did not finish:
    /// a write step was attempted, and no profile is recorded. With the
    /// factory-default advert bit they make the `new` selector, so that a
    /// rerun picks up what a failure left half done.
    public func unfinishedProvisioning() throws -> Set<String> {
        guard try hasSchema4() else {
            return Set(
                try database.rows(
                    """
                    SELECT DISTINCT d.address FROM devices d JOIN outcomes o ON o.device = d.address
                    WHERE d.profile IS NULL
                      AND (o.step IN ('sync-time', 'calibrate', 'identity') OR o.step LIKE 'apply %')
                      AND o.status IN ('changed', 'failed', 'running', 'interrupted')
                    """
                ).compactMap { $0.first?.text })
        }
        return Set(
            try database.rows(
                """
                SELECT DISTINCT d.address FROM devices d JOIN outcomes o ON o.device = d.address
                WHERE d.profile IS NULL AND d.forgotten_at IS NULL
                  AND (o.step IN ('sync-time', 'calibrate', 'identity') OR o.step LIKE 'apply %')
                  AND o.status IN ('changed', 'failed', 'running', 'interrupted')
                """
            ).compactMap { $0.first?.text })
    }

    /// Step outcomes, newest first: of one device (address or MAC ending)
    /// or of all.
    public func outcomes(device: String? = nil, limit: Int = 50) throws -> [OutcomeRecord] {
        try outcomes(device: device, since: nil, limit: limit).rows
    }

    /// Step outcomes, newest first (by id, the order they were recorded):
    /// of one device (address or MAC ending; a forgotten device's history
    /// included) or of all, started at or after `since`, at most `limit`
    /// (at least 0); `truncated` when there were more.
    public func outcomes(
        device: String?, since: Date?, limit: Int
    ) throws -> (
        rows: [OutcomeRecord], truncated: Bool
    ) {
        let limit = max(0, limit)
        let rows = try database.rows(
            """
            SELECT o.id, o.run_id, o.device, o.step, o.status, o.detail, o.error, o.started_at, o.duration_ms
            FROM outcomes o LEFT JOIN devices d ON d.address = o.device
            WHERE (?1 IS NULL OR d.address = upper(?1) OR d.mac_ending = lower(?1))
              AND (?2 IS NULL OR o.started_at >= ?2)
            ORDER BY o.id DESC LIMIT ?3
            """, [SQLiteValue(device), SQLiteValue(since.map(Self.timestamp)), .integer(Int64(limit) + 1)])
        return (checked(Array(rows.prefix(limit)), DeviceRows.outcome), rows.count > limit)
    }

    /// How many runs are marked simulated (`runs.simulated`); 0 in a file
    /// older than schema 4.
    public func simulatedRunCount() throws -> Int {
        guard try hasSchema4() else { return 0 }
        return Int(try database.rows("SELECT count(*) FROM runs WHERE simulated <> 0").first?.first?.integer ?? 0)
    }
}
