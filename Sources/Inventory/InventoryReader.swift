import FoundationEssentials
import Profiles
import SBeaconProtocol
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// What the read commands (`inventory`, `log`, `audit` from the inventory)
/// need of an inventory: a bench's own SQLite file (`Inventory`), or the
/// shared PostgreSQL server that benches sync to (`ServerInventory` in
/// InventorySync), where a beacon seen on several benches is one device.
public protocol InventoryReader: Sendable {
    /// Where it is, for messages: a path, or the server without its password.
    var location: String { get }
    /// Every device, by address.
    func devices() async throws -> [DeviceRecord]
    /// Devices in address order: the first `limit` after `after` (nil:
    /// from the first), and whether more follow.
    func devices(after: String?, limit: Int) async throws -> (rows: [DeviceRecord], more: Bool)
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
    /// What `report` reads, as streams ordered by device (`ReportReading`),
    /// handed to `body` — which must not keep them past its return. The
    /// server streams each from a cursor (memory: one batch); the default
    /// reads the arrays above and streams those.
    func withReportStreams<T: Sendable>(
        since: Date?, _ body: @Sendable (any ReportReading) throws -> T
    ) async throws -> T
    /// The stored values that failed their checks in what was read since
    /// the last call, each once (at most `StoredFindingLog.limit`, then how
    /// many more), and forgets them (docs/inventory.md, "Values read back").
    func takeStoredFindings() async -> (findings: [StoredFinding], more: Int)
}

extension InventoryReader {
    /// One page of devices in address order: the first `limit` after
    /// `after` (nil: from the first), and whether there are more. A bench's
    /// inventory cuts its whole list; the server reads only the page
    /// (`ServerInventory`).
    public func devices(after: String?, limit: Int) async throws -> (rows: [DeviceRecord], more: Bool) {
        let all = try await devices()
        let rest = after.map { after in all.filter { $0.address > after } } ?? all
        return (Array(rest.prefix(max(0, limit))), rest.count > max(0, limit))
    }

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
/// Every value goes through a `RowCheck` (docs/inventory.md, "Values read
/// back"): one that fails reads as unknown, a row whose key fails is left
/// out, and each failure is added to `findings`.
public enum DeviceRows {
    /// Columns: address, last_seen, major, minor, model, serial,
    /// hardware_revision, firmware, battery, calibrated, calibrated_at,
    /// calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
    /// config_cornering, config_braking, config_acceleration,
    /// config_duration, config_enable.
    public static func record(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> DeviceRecord? {
        var check = RowCheck("devices", key: [row[0]])
        defer { findings += check.findings }
        // Without its address or when it was last seen, no record can be
        // shown (a made-up time would be a value the inventory never held).
        let address = check.text(row[0], "address", required: true)
        let seenAt = check.date(row[1], "last_seen", required: true)
        guard let address, let seenAt else { return nil }
        var record = DeviceRecord(address: address, seenAt: seenAt)
        record.identity = identity(row[2], row[3], &check)
        record.model = check.text(row[4], "model")
        record.serial = check.text(row[5], "serial")
        record.hardwareRevision = check.text(row[6], "hardware_revision")
        record.firmware = check.text(row[7], "firmware").flatMap { try? FirmwareVersion($0) }
        record.battery = check.integer(row[8], "battery", as: UInt8.self)
        if let calibrated = check.integer(row[9], "calibrated"), let vector = vector(row[11], row[12], row[13], &check)
        {
            record.calibration = CalibrationState(calibrated: calibrated != 0, calibratedAt: 0, vector: vector)
        }
        record.calibratedAt = check.date(row[10], "calibrated_at")
        record.timeOffset = check.integer(row[14], "time_offset_ms")
        record.profile = check.text(row[15], "profile")
        record.config = config(row[16...20], &check)
        return record
    }

    /// Columns: address, profile, battery, firmware, calibrated,
    /// calibrated_at, calibration_x, calibration_y, calibration_z,
    /// config_cornering, config_braking, config_acceleration,
    /// config_duration, config_enable, config_read_at, last_seen; then,
    /// where the query has them, major and minor held, the major and minor
    /// meant (`identities`, or the server's `identity_claims`) and why, and
    /// the benches that know it.
    ///
    /// The failures of a row kept are the subject's (`storedFindings`: the
    /// audit lists them among the device's findings); those of a row left
    /// out (its address fails) go to `findings`.
    public static func auditSubject(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> AuditSubject? {
        var check = RowCheck("devices", key: [row[0]])
        guard let address = check.text(row[0], "address", required: true) else {
            findings += check.findings
            return nil
        }
        var subject = AuditSubject(address: address)
        subject.assignedProfile = check.text(row[1], "profile")
        subject.battery = check.integer(row[2], "battery", as: UInt8.self)
        subject.firmware = check.text(row[3], "firmware").flatMap { try? FirmwareVersion($0) }
        subject.calibrated = check.integer(row[4], "calibrated").map { $0 != 0 }
        subject.calibratedAt = check.date(row[5], "calibrated_at")
        if row[6] != .null { subject.calibrationVector = vector(row[6], row[7], row[8], &check) }
        subject.config = config(row[9...13], &check)
        subject.configReadAt = check.date(row[14], "config_read_at")
        subject.lastSeen = check.date(row[15], "last_seen", required: true)
        if row.count > 17 { subject.identity = identity(row[16], row[17], &check) }
        if row.count > 20 {
            // The identities table (a bench) or identity_claims (the server).
            var meant = RowCheck(row.count > 21 ? "identity_claims" : "identities", key: [row[0]])
            subject.meantIdentity = identity(row[18], row[19], &meant)
            if subject.meantIdentity != nil {
                if case .text(let why) = row[20], isMeantSource(why) {
                    subject.meantIdentitySource = why
                } else if row[20] != .null {
                    meant.fail("source", row[20], "is not a source (profile NAME, explicit, found, server)")
                }
            }
            check.add(meant.findings)
        }
        if row.count > 21, let benches = check.text(row[21], "benches") {
            subject.benches = String(
                benches.drop { $0 == "{" || $0 == "}" }.reversed().drop { $0 == "{" || $0 == "}" }.reversed()
            ).split(separator: ",")
                .map { Visible.text($0.prefix(8), limit: 8) }
        }
        // The audit names each failure as a finding of the device.
        subject.storedFindings = check.findings.map(\.auditFinding)
        return subject
    }

    /// Columns: id, run_id, device, step, status, detail, error,
    /// started_at, duration_ms, and (the server) bench_id. A row without
    /// a usable id, run, step, status or start is left out.
    public static func outcome(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> OutcomeRecord? {
        let server = row.count > 9
        var check = RowCheck("outcomes", key: server ? [row[9], row[0]] : [row[0]])
        defer { findings += check.findings }
        let id = check.integer(row[0], server ? "local_id" : "id", required: true)
        let run = check.integer(row[1], "run_id", required: true)
        let device = check.text(row[2], "device")
        let step = check.text(row[3], "step", required: true)
        let status = check.text(row[4], "status", required: true)
        let detail = check.text(row[5], "detail")
        let error = check.text(row[6], "error")
        let startedAt = check.text(row[7], "started_at", required: true)
        let duration = check.integer(row[8], "duration_ms")
        let bench = server ? check.text(row[9], "bench_id", required: true) : nil
        guard let id, let run, let step, let status, let startedAt, !server || bench != nil else { return nil }
        return OutcomeRecord(
            id: id, run: run, device: device, step: step, status: status, detail: detail, error: error,
            startedAt: startedAt, durationMilliseconds: duration, bench: bench)
    }

    /// Why an identity is meant, as the audit queries spell it: `explicit`,
    /// `found`, `server`, `profile NAME`, or (the server) `claimed by bench
    /// ID8`.
    static func isMeantSource(_ text: String) -> Bool {
        if ["explicit", "found", "server"].contains(text) { return true }
        if text.hasPrefix("profile ") { return ProfileLoader.isValidName(String(text.dropFirst(8))) }
        if text.hasPrefix("claimed by bench ") {
            let bench = text.dropFirst(17)
            return !bench.isEmpty && bench.count <= 8
                && bench.unicodeScalars.allSatisfy { $0.properties.isASCIIHexDigit || $0 == "-" }
        }
        return false
    }

    /// A major and a minor, when both are set and in range.
    static func identity(_ major: SQLiteValue, _ minor: SQLiteValue, _ check: inout RowCheck) -> BeaconIdentity? {
        let major = check.integer(major, "major", as: UInt16.self)
        let minor = check.integer(minor, "minor", as: UInt16.self)
        guard let major, let minor else { return nil }
        return BeaconIdentity(major: major, minor: minor)
    }

    /// A calibration vector, when all three components are in range.
    static func vector(_ x: SQLiteValue, _ y: SQLiteValue, _ z: SQLiteValue, _ check: inout RowCheck) -> Vector? {
        let x = check.integer(x, "calibration_x", as: Int16.self, required: true)
        let y = check.integer(y, "calibration_y", as: Int16.self, required: true)
        let z = check.integer(z, "calibration_z", as: Int16.self, required: true)
        guard let x, let y, let z else { return nil }
        return Vector(x: x, y: y, z: z)
    }

    static let configColumns = [
        "config_cornering", "config_braking", "config_acceleration", "config_duration", "config_enable",
    ]

    /// The five `config_*` columns, in their order, when all are set and
    /// each is within the wire contract's range.
    static func config(_ columns: ArraySlice<SQLiteValue>, _ check: inout RowCheck) -> DrivingBehaviourConfig? {
        let values = zip(columns, configColumns).map { value, name in check.integer(value, name, as: UInt16.self) }
        let numbers = values.compactMap { $0 }
        guard numbers.count == 5 else { return nil }
        return DrivingBehaviourConfig(
            cornering: numbers[0], braking: numbers[1], acceleration: numbers[2], duration: numbers[3],
            enable: .init(rawValue: numbers[4]))
    }
}

extension StoredFinding {
    /// As an audit lists it, among the device's findings.
    public var auditFinding: AuditFinding {
        .storedValue(table: table, row: row, field: field, value: value, reason: reason)
    }
}
