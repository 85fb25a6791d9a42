import Foundation
import SBeaconProtocol

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
}

extension Inventory {
    /// Every device, by address.
    public func devices() throws -> [DeviceRecord] {
        try deviceRows(nil)
    }

    public func devicesByAddress() throws -> [String: DeviceRecord] {
        Dictionary(try devices().map { ($0.address, $0) }) { first, _ in first }
    }

    /// One device, by address or MAC ending.
    public func device(_ addressOrEnding: String) throws -> DeviceRecord? {
        try deviceRows(addressOrEnding).first
    }

    /// Every device, or those whose address or MAC ending is `name`.
    private func deviceRows(_ name: String?) throws -> [DeviceRecord] {
        try database.rows(
            """
            SELECT address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
                   calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                   config_cornering, config_braking, config_acceleration, config_duration, config_enable
            FROM devices WHERE ?1 IS NULL OR address = upper(?1) OR mac_ending = lower(?1) ORDER BY address
            """, [SQLiteValue(name)]
        ).map { row in
            var record = DeviceRecord(
                address: row[0].text ?? "",
                seenAt: row[1].text.flatMap(Self.parseTimestamp) ?? Date(timeIntervalSince1970: 0))
            if let major = row[2].integer, let minor = row[3].integer {
                record.identity = BeaconIdentity(major: UInt16(clamping: major), minor: UInt16(clamping: minor))
            }
            record.model = row[4].text
            record.serial = row[5].text
            record.hardwareRevision = row[6].text
            record.firmware = row[7].text.flatMap { try? FirmwareVersion($0) }
            record.battery = row[8].integer.map { UInt8(clamping: $0) }
            if let calibrated = row[9].integer {
                record.calibration = CalibrationState(
                    calibrated: calibrated != 0, calibratedAt: 0,
                    vector: Vector(
                        x: Int16(clamping: row[11].integer ?? 0), y: Int16(clamping: row[12].integer ?? 0),
                        z: Int16(clamping: row[13].integer ?? 0)))
            }
            record.calibratedAt = row[10].text.flatMap(Self.parseTimestamp)
            record.timeOffset = row[14].integer
            record.profile = row[15].text
            record.config = Self.config(row[16...20])
            return record
        }
    }

    /// The five `config_*` columns, in their order, when all are set.
    static func config(_ columns: ArraySlice<SQLiteValue>) -> DrivingBehaviourConfig? {
        let values = columns.compactMap(\.integer).map { UInt16(clamping: $0) }
        guard values.count == 5 else { return nil }
        return DrivingBehaviourConfig(
            cornering: values[0], braking: values[1], acceleration: values[2], duration: values[3],
            enable: .init(rawValue: values[4]))
    }

    /// Devices whose provisioning began on this bench but did not finish:
    /// a write step was attempted, and no profile is recorded. With the
    /// factory-default advert bit they make the `new` selector, so that a
    /// rerun picks up what a failure left half done.
    public func unfinishedProvisioning() throws -> Set<String> {
        Set(
            try database.rows(
                """
                SELECT DISTINCT d.address FROM devices d JOIN outcomes o ON o.device = d.address
                WHERE d.profile IS NULL
                  AND (o.step IN ('sync-time', 'calibrate', 'identity') OR o.step LIKE 'apply %')
                  AND o.status IN ('changed', 'failed', 'running', 'interrupted')
                """
            ).compactMap { $0.first?.text })
    }

    /// Step outcomes, newest first: of one device (address or MAC ending)
    /// or of all.
    public func outcomes(device: String? = nil, limit: Int = 50) throws -> [OutcomeRecord] {
        let rows = try database.rows(
            """
            SELECT o.id, o.run_id, o.device, o.step, o.status, o.detail, o.error, o.started_at, o.duration_ms
            FROM outcomes o LEFT JOIN devices d ON d.address = o.device
            WHERE ?1 IS NULL OR d.address = upper(?1) OR d.mac_ending = lower(?1)
            ORDER BY o.id DESC LIMIT ?2
            """, [SQLiteValue(device), .integer(Int64(limit))])
        return rows.map { row in
            OutcomeRecord(
                id: row[0].integer ?? 0, run: row[1].integer ?? 0, device: row[2].text, step: row[3].text ?? "",
                status: row[4].text ?? "", detail: row[5].text, error: row[6].text, startedAt: row[7].text ?? "",
                durationMilliseconds: row[8].integer)
        }
    }
}
