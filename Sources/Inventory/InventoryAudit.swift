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
            subject.config = Self.config(row[9...13])
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

    /// Devices as a JSON array of objects, one key per column (null where unknown).
    public func exportDevicesJSON() throws -> String {
        let statement = try database.prepare("SELECT * FROM devices ORDER BY address")
        var objects: [String] = []
        while try statement.step() {
            let names = statement.columnNames()
            let fields = zip(names, statement.row()).map { name, value -> String in
                let rendered: String =
                    switch value {
                    case .null: "null"
                    case .integer(let v): "\(v)"
                    case .real(let v): "\(v)"
                    case .text(let v): Self.jsonString(v)
                    case .blob(let v): Self.jsonString(v.map { String(format: "%02x", $0) }.joined())
                    }
                return "\(Self.jsonString(name)): \(rendered)"
            }
            objects.append("  {" + fields.joined(separator: ", ") + "}")
        }
        return "[\n" + objects.joined(separator: ",\n") + (objects.isEmpty ? "]\n" : "\n]\n")
    }

    static func jsonString(_ text: String) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: [text], options: [.fragmentsAllowed])) ?? Data()
        let array = String(decoding: data, as: UTF8.self)
        return String(array.dropFirst().dropLast())
    }

    /// Parses the inventory's own timestamps (`2026-11-30T09:41:07.123Z`),
    /// with arithmetic rather than a calendar: audits parse tens of
    /// thousands of them.
    static func parseTimestamp(_ text: String) -> Date? {
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
