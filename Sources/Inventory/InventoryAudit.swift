import CSQLite
import Foundation
import Profiles
import SBeaconProtocol

extension Inventory {
    /// Every device as the inventory knows it, for an offline audit: one
    /// query over `devices`, however many outcomes there are.
    public func auditSubjects() throws -> [AuditSubject] {
        try database.rows(
            """
            SELECT address, profile, battery, firmware, calibrated, calibrated_at, calibration_x, calibration_y,
                   calibration_z, config_cornering, config_braking, config_acceleration, config_duration,
                   config_enable, config_read_at, last_seen
            FROM devices ORDER BY address
            """
        ).map { row in
            var subject = AuditSubject(address: row[0].text ?? "")
            subject.assignedProfile = row[1].text
            subject.battery = row[2].integer.map { UInt8(clamping: $0) }
            subject.firmware = row[3].text.flatMap { try? FirmwareVersion($0) }
            subject.calibrated = row[4].integer.map { $0 != 0 }
            subject.calibratedAt = row[5].text.flatMap(Self.parseTimestamp)
            if let x = row[6].integer, let y = row[7].integer, let z = row[8].integer {
                subject.calibrationVector = Vector(x: Int16(clamping: x), y: Int16(clamping: y), z: Int16(clamping: z))
            }
            if let cornering = row[9].integer, let braking = row[10].integer, let acceleration = row[11].integer,
                let duration = row[12].integer, let enable = row[13].integer
            {
                subject.config = DrivingBehaviourConfig(
                    cornering: UInt16(clamping: cornering), braking: UInt16(clamping: braking),
                    acceleration: UInt16(clamping: acceleration), duration: UInt16(clamping: duration),
                    enable: .init(rawValue: UInt16(clamping: enable)))
            }
            subject.configReadAt = row[14].text.flatMap(Self.parseTimestamp)
            subject.lastSeen = row[15].text.flatMap(Self.parseTimestamp)
            return subject
        }
    }

    /// Assigns a profile to a device.
    public func assignProfile(_ profile: String, to address: String) throws {
        try database.run(
            "UPDATE devices SET profile = ? WHERE address = ?", [.text(profile), .text(address.uppercased())])
    }

    /// Devices as CSV: every column of `devices`, RFC 4180 quoting.
    public func exportDevicesCSV() throws -> String {
        let statement = try database.prepare("SELECT * FROM devices ORDER BY address")
        var lines: [String] = []
        var header: [String] = []
        while try statement.step() {
            if header.isEmpty { header = statement.columnNames() }
            lines.append(
                statement.row().map { value in
                    switch value {
                    case .null: ""
                    case .integer(let v): "\(v)"
                    case .real(let v): "\(v)"
                    case .text(let v): AuditExport.csvField(v)
                    case .blob(let v): v.map { String(format: "%02x", $0) }.joined()
                    }
                }.joined(separator: ","))
        }
        if header.isEmpty {
            header = try database.rows("SELECT name FROM pragma_table_info('devices')").compactMap { $0.first?.text }
        }
        return ([header.joined(separator: ",")] + lines).joined(separator: "\n") + "\n"
    }

    /// Parses the inventory's own timestamps.
    static func parseTimestamp(_ text: String) -> Date? {
        // 2026-11-30T09:41:07.123Z
        let parts = text.split(whereSeparator: { "-T:.Z".contains($0) }).compactMap { Int($0) }
        guard parts.count >= 6 else { return nil }
        var components = DateComponents()
        components.timeZone = TimeZone(identifier: "UTC")
        (components.year, components.month, components.day) = (parts[0], parts[1], parts[2])
        (components.hour, components.minute, components.second) = (parts[3], parts[4], parts[5])
        components.nanosecond = parts.count > 6 ? parts[6] * 1_000_000 : 0
        return Calendar(identifier: .gregorian).date(from: components)
    }
}

extension Statement {
    /// The result columns' names.
    func columnNames() -> [String] {
        (0..<sqlite3_column_count(handle)).map { String(cString: sqlite3_column_name(handle, $0)) }
    }
}
