import CSQLite
import Foundation
import Profiles
import SBeaconProtocol

extension Inventory {
    /// Every device as the inventory knows it, for an offline audit: one
    /// query over `devices`, however many outcomes there are. Forgotten
    /// devices are left out.
    public func auditSubjects() throws -> [AuditSubject] {
        guard try hasSchema4() else {
            return try database.rows(
                """
                SELECT d.address, d.profile, d.battery, d.firmware, d.calibrated, d.calibrated_at, d.calibration_x,
                       d.calibration_y, d.calibration_z, d.config_cornering, d.config_braking, d.config_acceleration,
                       d.config_duration, d.config_enable, d.config_read_at, d.last_seen, d.major, d.minor,
                       i.major, i.minor, CASE WHEN i.source = 'profile' THEN 'profile ' || i.profile ELSE i.source END
                FROM devices d LEFT JOIN identities i ON i.device = d.address ORDER BY d.address
                """
            ).map(DeviceRows.auditSubject)
        }
        return try database.rows(
            """
            SELECT d.address, d.profile, d.battery, d.firmware, d.calibrated, d.calibrated_at, d.calibration_x,
                   d.calibration_y, d.calibration_z, d.config_cornering, d.config_braking, d.config_acceleration,
                   d.config_duration, d.config_enable, d.config_read_at, d.last_seen, d.major, d.minor,
                   i.major, i.minor, CASE WHEN i.source = 'profile' THEN 'profile ' || i.profile ELSE i.source END
            FROM devices d LEFT JOIN identities i ON i.device = d.address WHERE d.forgotten_at IS NULL
            ORDER BY d.address
            """
        ).map(DeviceRows.auditSubject)
    }

    /// Assigns a profile to a device.
    public func assignProfile(_ profile: String, to address: String) throws {
        try database.run(
            "UPDATE devices SET profile = ? WHERE address = ?", [.text(profile), .text(address.uppercased())])
    }

    /// Every column of every device that is not forgotten, by address
    /// (but `forgotten_at`, which is NULL in every row of it).
    public func deviceTable() throws -> DeviceTable {
        let statement = try database.prepare(
            try hasSchema4()
                ? "SELECT * FROM devices WHERE forgotten_at IS NULL ORDER BY address"
                : "SELECT * FROM devices ORDER BY address")
        var rows: [[SQLiteValue]] = []
        while try statement.step() { rows.append(statement.row()) }
        var columns = statement.columnNames()
        if let forgotten = columns.firstIndex(of: "forgotten_at") {
            columns.remove(at: forgotten)
            for index in rows.indices { rows[index].remove(at: forgotten) }
        }
        return DeviceTable(columns: columns, rows: rows)
    }

    /// Parses the inventory's own timestamps (`2026-11-30T09:41:07.123Z`),
    /// with arithmetic rather than a calendar: audits parse tens of
    /// thousands of them.
    public static func parseTimestamp(_ text: String) -> Date? {
        var numbers: [Int] = []
        numbers.reserveCapacity(7)
        var current = 0
        var digits = 0
        for byte in text.utf8 {
            if byte >= 0x30 && byte <= 0x39 {
                current = current * 10 + Int(byte - 0x30)
                digits += 1
            } else if digits > 0 {
                numbers.append(current)
                current = 0
                digits = 0
            }
        }
        if digits > 0 { numbers.append(current) }
        guard numbers.count >= 6, (1...12).contains(numbers[1]), (1...31).contains(numbers[2]) else { return nil }
        // Days from 1970-01-01 of a civil date (H. Hinnant's algorithm).
        let (year, month, day) = (numbers[0], numbers[1], numbers[2])
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + numbers[3] * 3_600 + numbers[4] * 60 + numbers[5]
        let milliseconds = numbers.count > 6 ? numbers[6] : 0
        return Date(timeIntervalSince1970: Double(seconds) + Double(milliseconds) / 1000)
    }
}

extension Statement {
    /// The result columns' names.
    func columnNames() -> [String] {
        (0..<sqlite3_column_count(handle)).map { String(cString: sqlite3_column_name(handle, $0)) }
    }
}
