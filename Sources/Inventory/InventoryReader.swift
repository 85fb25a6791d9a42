import Foundation
import Profiles
import SBeaconProtocol
import SafeText

/// What the read commands (`inventory`, `log`, `audit` from the inventory)
/// need of an inventory: a bench's own SQLite file (`Inventory`), or the
/// shared PostgreSQL server that benches sync to (`ServerInventory` in
/// InventorySync), where a beacon seen on several benches is one device.
public protocol InventoryReader: Sendable {
    /// Where it is, for messages: a path, or the server without its password.
    var location: String { get }
    /// Every device, by address.
    func devices() async throws -> [DeviceRecord]
    /// One device, by address or MAC ending.
    func device(_ addressOrEnding: String) async throws -> DeviceRecord?
    /// Step outcomes, newest first: of one device (address or MAC ending)
    /// or of all, started at or after `since`, at most `limit`;
    /// `truncated` when there were more.
    func outcomes(
        device: String?, since: Date?, limit: Int
    ) async throws -> (
        rows: [OutcomeRecord], truncated: Bool
    )
    /// Pulled trips, events and incidents, newest first (`RecordQuery`).
    func records(_ query: RecordQuery) async throws -> RecordPage
    /// Every device as an offline audit sees it.
    func auditSubjects() async throws -> [AuditSubject]
    /// Every column of every device, for `inventory export`.
    func deviceTable() async throws -> DeviceTable
    /// Battery readings, step outcomes counted per day, bench and device,
    /// and failed or skipped steps, from `since` on: what `report` draws.
    func history(since: Date?) async throws -> FleetHistory
}

extension InventoryReader {
    /// Step outcomes, newest first: of one device (address or MAC ending) or of all.
    public func outcomes(device: String?, limit: Int) async throws -> [OutcomeRecord] {
        try await outcomes(device: device, since: nil, limit: limit).rows
    }
}

/// A table of devices with its column names, as `inventory export` writes it.
public struct DeviceTable: Sendable {
    public var columns: [String]
    public var rows: [[SQLiteValue]]

    public init(columns: [String], rows: [[SQLiteValue]]) {
        self.columns = columns
        self.rows = rows
    }

    /// CSV with a header record; NULL is an empty field. RFC 4180 quoting,
    /// CRLF line ends, cells protected against formula injection and control
    /// characters shown (see `CSV`).
    public func csv() -> String {
        CSV.document(header: columns, rows: rows.map { row in row.map { $0.textForm ?? "" } })
    }

}

/// Rows of device columns into records, shared by the SQLite inventory and
/// the server: both select the columns in the orders documented here.
public enum DeviceRows {
    /// Columns: address, last_seen, major, minor, model, serial,
    /// hardware_revision, firmware, battery, calibrated, calibrated_at,
    /// calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
    /// config_cornering, config_braking, config_acceleration,
    /// config_duration, config_enable.
    public static func record(_ row: [SQLiteValue]) -> DeviceRecord {
        var record = DeviceRecord(
            address: row[0].text ?? "",
            seenAt: row[1].text.flatMap(Inventory.parseTimestamp) ?? Date(timeIntervalSince1970: 0))
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
        record.calibratedAt = row[10].text.flatMap(Inventory.parseTimestamp)
        record.timeOffset = row[14].integer
        record.profile = row[15].text
        record.config = config(row[16...20])
        return record
    }

    /// Columns: address, profile, battery, firmware, calibrated,
    /// calibrated_at, calibration_x, calibration_y, calibration_z,
    /// config_cornering, config_braking, config_acceleration,
    /// config_duration, config_enable, config_read_at, last_seen.
    public static func auditSubject(_ row: [SQLiteValue]) -> AuditSubject {
        var subject = AuditSubject(address: row[0].text ?? "")
        subject.assignedProfile = row[1].text
        subject.battery = row[2].integer.map { UInt8(clamping: $0) }
        subject.firmware = row[3].text.flatMap { try? FirmwareVersion($0) }
        subject.calibrated = row[4].integer.map { $0 != 0 }
        subject.calibratedAt = row[5].text.flatMap(Inventory.parseTimestamp)
        if let x = row[6].integer, let y = row[7].integer, let z = row[8].integer {
            subject.calibrationVector = Vector(x: Int16(clamping: x), y: Int16(clamping: y), z: Int16(clamping: z))
        }
        subject.config = config(row[9...13])
        subject.configReadAt = row[14].text.flatMap(Inventory.parseTimestamp)
        subject.lastSeen = row[15].text.flatMap(Inventory.parseTimestamp)
        // Then, where the query has them: the identity held, the one meant
        // and why, and (a server) the benches that know it.
        if row.count > 17, let major = row[16].integer, let minor = row[17].integer {
            subject.identity = BeaconIdentity(
                major: UInt16(truncatingIfNeeded: major), minor: UInt16(truncatingIfNeeded: minor))
        }
        if row.count > 20, let major = row[18].integer, let minor = row[19].integer {
            subject.meantIdentity = BeaconIdentity(
                major: UInt16(truncatingIfNeeded: major), minor: UInt16(truncatingIfNeeded: minor))
            subject.meantIdentitySource = row[20].text
        }
        if row.count > 21, let benches = row[21].text {
            subject.benches = benches.trimmingCharacters(in: CharacterSet(charactersIn: "{}")).split(separator: ",")
                .map { String($0.prefix(8)) }
        }
        return subject
    }

    /// Columns: id, run_id, device, step, status, detail, error,
    /// started_at, duration_ms, and (the server) bench_id.
    public static func outcome(_ row: [SQLiteValue]) -> OutcomeRecord {
        OutcomeRecord(
            id: row[0].integer ?? 0, run: row[1].integer ?? 0, device: row[2].text, step: row[3].text ?? "",
            status: row[4].text ?? "", detail: row[5].text, error: row[6].text, startedAt: row[7].text ?? "",
            durationMilliseconds: row[8].integer, bench: row.count > 9 ? row[9].text : nil)
    }

    /// The five `config_*` columns, in their order, when all are set.
    static func config(_ columns: ArraySlice<SQLiteValue>) -> DrivingBehaviourConfig? {
        let values = columns.compactMap(\.integer).map { UInt16(clamping: $0) }
        guard values.count == 5 else { return nil }
        return DrivingBehaviourConfig(
            cornering: values[0], braking: values[1], acceleration: values[2], duration: values[3],
            enable: .init(rawValue: values[4]))
    }
}
