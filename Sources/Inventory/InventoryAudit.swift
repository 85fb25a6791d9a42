import CSQLite
import FoundationEssentials
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

extension Inventory {
    /// Every device as the inventory knows it, for an offline audit: one
    /// query over `devices`, however many outcomes there are. Forgotten
    /// devices are left out.
    public func auditSubjects() throws -> [AuditSubject] {
        guard try hasSchema4() else {
            return checked(
                try database.rows(
                    """
                    SELECT d.address, d.profile, d.battery, d.firmware, d.calibrated, d.calibrated_at, d.calibration_x,
                           d.calibration_y, d.calibration_z, d.config_cornering, d.config_braking, d.config_acceleration,
                           d.config_duration, d.config_enable, d.config_read_at, d.last_seen, d.major, d.minor,
                           i.major, i.minor, CASE WHEN i.source = 'profile' THEN 'profile ' || i.profile ELSE i.source END
                    FROM devices d LEFT JOIN identities i ON i.device = d.address ORDER BY d.address
                    """), DeviceRows.auditSubject)
        }
        return checked(
            try database.rows(
                """
                SELECT d.address, d.profile, d.battery, d.firmware, d.calibrated, d.calibrated_at, d.calibration_x,
                       d.calibration_y, d.calibration_z, d.config_cornering, d.config_braking, d.config_acceleration,
                       d.config_duration, d.config_enable, d.config_read_at, d.last_seen, d.major, d.minor,
                       i.major, i.minor, CASE WHEN i.source = 'profile' THEN 'profile ' || i.profile ELSE i.source END
                FROM devices d LEFT JOIN identities i ON i.device = d.address WHERE d.forgotten_at IS NULL
                ORDER BY d.address
                """), DeviceRows.auditSubject)
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
        // Exported as stored (CSV and JSON show every value safely); each
        // value that fails its check is reported.
        for row in rows {
            storedFindingLog.add(RowCheck.findings(table: "devices", columns: columns, row: row, key: "address"))
        }
        return DeviceTable(columns: columns, rows: rows)
    }

    /// Parses the inventory's own timestamps (`2026-11-30T09:41:07.123Z`:
    /// a fraction of 1 to 9 digits or none, UTC), with arithmetic rather
    /// than a calendar (audits parse tens of thousands of them). Strict: a
    /// date that does not exist (`2026-02-30`), a year outside 1970–9999,
    /// any other form or anything around it is nil, never rolled over.
    public static func parseTimestamp(_ text: String) -> Date? {
        let bytes = Array(text.utf8.prefix(31))
        guard bytes.count >= 20, bytes.count <= 30, bytes.last == UInt8(ascii: "Z") else { return nil }
        func digits(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let byte = bytes[index]
                guard byte >= 0x30, byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        func mark(_ index: Int, _ character: Unicode.Scalar) -> Bool { bytes[index] == UInt8(ascii: character) }
        guard mark(4, "-"), mark(7, "-"), mark(10, "T"), mark(13, ":"), mark(16, ":"),
            let year = digits(0..<4), let month = digits(5..<7), let day = digits(8..<10),
            let hour = digits(11..<13), let minute = digits(14..<16), let second = digits(17..<19),
            (1970...9999).contains(year), (1...12).contains(month), hour < 24, minute < 60, second < 60
        else { return nil }
        var milliseconds = 0
        if bytes.count > 20 {
            // `.` then 1 to 9 digits before the `Z`.
            guard mark(19, "."), bytes.count >= 22, let fraction = digits(20..<(bytes.count - 1)) else { return nil }
            var scaled = fraction
            var places = bytes.count - 21
            while places > 3 {
                scaled /= 10
                places -= 1
            }
            while places < 3 {
                scaled *= 10
                places += 1
            }
            milliseconds = scaled
        }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= monthDays[month - 1] else { return nil }
        // Days from 1970-01-01 of a civil date (H. Hinnant's algorithm).
        let y = month <= 2 ? year - 1 : year
        let era = y / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second
        return Date(timeIntervalSince1970: Double(seconds) + Double(milliseconds) / 1000)
    }
}

extension Statement {
    /// The result columns' names.
    func columnNames() -> [String] {
        (0..<sqlite3_column_count(handle)).map { String(cString: sqlite3_column_name(handle, $0)) }
    }
}
