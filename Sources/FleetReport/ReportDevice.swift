import FoundationEssentials
import Inventory
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Which devices a report covers: the offline selectors of `select`
/// (those that need the radio, `new` and `in-range`, are refused by the
/// console before they get here). No filter: every device.
public enum DeviceFilter: Sendable, Equatable {
    case all
    /// No profile assigned.
    case unprovisioned
    case profile(String)
    case batteryBelow(Int)
    case firmwareBelow(FirmwareVersion)
    case minorRange(UInt16, UInt16)
    case address(String)
    case macEnding(String)

    func matches(_ device: ReportDevice) -> Bool {
        switch self {
        case .all: true
        case .unprovisioned: device.profile == nil
        case .profile(let name): device.profile == name
        case .batteryBelow(let limit): device.battery.map { $0 < limit } ?? false
        case .firmwareBelow(let version):
            device.firmware.flatMap { try? FirmwareVersion($0) }.map { $0 < version } ?? false
        case .minorRange(let low, let high): device.minor.map { Int(low) <= $0 && $0 <= Int(high) } ?? false
        case .address(let address): device.address == address.uppercased()
        case .macEnding(let ending): device.macEnding == ending.lowercased()
        }
    }

    /// The devices `filters` choose, as `select` combines its selectors:
    /// addresses and MAC endings name devices (any of them), every other
    /// filter must hold (`profile=van battery<30` is the vans with a low
    /// battery). No filter: every device.
    public static func chosen(_ devices: [ReportDevice], by filters: [DeviceFilter]) -> [ReportDevice] {
        let naming = filters.filter {
            switch $0 {
            case .address, .macEnding: true
            default: false
            }
        }
        let conditions = filters.filter { filter in !naming.contains(filter) }
        return devices.filter { device in
            (naming.isEmpty || naming.contains { $0.matches(device) }) && conditions.allSatisfy { $0.matches(device) }
        }
    }

    /// Whether `filters` choose `device` (as `chosen` does).
    public static func chooses(_ filters: [DeviceFilter], _ device: ReportDevice) -> Bool {
        chosen([device], by: filters).count == 1
    }
}

/// One device as the report shows it: the columns of `devices` it uses,
/// exactly as stored (text from a device is made safe when rendered).
public struct ReportDevice: Sendable, Equatable {
    public var address: String
    public var macEnding: String
    public var major: Int?
    public var minor: Int?
    public var model: String?
    public var serial: String?
    public var firmware: String?
    public var battery: Int?
    public var calibrated: Bool?
    public var calibratedAt: Date?
    public var calibrationVector: (x: Int, y: Int, z: Int)?
    public var profile: String?
    public var lastSeen: Date?
    public var benches: String?

    public init(address: String) {
        self.address = address
        macEnding = ""
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.address == b.address && a.macEnding == b.macEnding && a.major == b.major && a.minor == b.minor
            && a.model == b.model && a.serial == b.serial && a.firmware == b.firmware && a.battery == b.battery
            && a.calibrated == b.calibrated && a.calibratedAt == b.calibratedAt && a.profile == b.profile
            && a.lastSeen == b.lastSeen && a.benches == b.benches
            && a.calibrationVector.map { [$0.x, $0.y, $0.z] } == b.calibrationVector.map { [$0.x, $0.y, $0.z] }
    }

    /// The magnitude of the calibration vector in mG, when calibrated.
    public var magnitude: Double? {
        guard calibrated == true, let vector = calibrationVector else { return nil }
        // In Double: a vector built by hand (not read through the checks,
        // which keep each part within Int16) cannot overflow it.
        let (x, y, z) = (Double(vector.x), Double(vector.y), Double(vector.z))
        return (x * x + y * y + z * z).squareRoot()
    }

    /// The devices of an `inventory export` table (a bench's or the
    /// server's: columns are found by name). Each value is checked as the
    /// inventory's readers check it (`RowCheck`, the `devices` rules): one
    /// that fails is unknown here, a row whose address fails is left out
    /// (the reader that made the table reported them).
    public static func rows(of table: DeviceTable) -> [ReportDevice] {
        let columns = Columns(table.columns)
        return table.rows.compactMap { device($0, columns) }
    }

    /// Where each column of a device table is.
    public struct Columns: Sendable {
        var index: [String: Int] = [:]
        public init(_ names: [String]) {
            for (position, name) in names.enumerated() { index[name] = position }
        }
    }

    /// One row of a device table (`rows(of:)`), or nil when its address fails.
    public static func device(_ row: [SQLiteValue], _ columns: Columns) -> ReportDevice? {
        let index = columns.index
        func value(_ row: [SQLiteValue], _ name: String) -> SQLiteValue {
            guard let position = index[name], position < row.count else { return .null }
            return row[position]
        }
        do {
            var check = RowCheck("devices", key: [value(row, "address")])
            func text(_ name: String) -> String? { check.text(value(row, name), name) }
            func integer(_ name: String) -> Int? { check.integer(value(row, name), name, as: Int.self) }
            func date(_ name: String) -> Date? { check.date(value(row, name), name) }
            guard let address = check.text(value(row, "address"), "address", required: true) else { return nil }
            var device = ReportDevice(address: address)
            device.macEnding = text("mac_ending") ?? ""
            device.major = integer("major")
            device.minor = integer("minor")
            device.model = text("model")
            device.serial = text("serial")
            device.firmware = text("firmware")
            device.battery = integer("battery")
            device.calibrated = integer("calibrated").map { $0 != 0 }
            device.calibratedAt = date("calibrated_at")
            let x = integer("calibration_x")
            let y = integer("calibration_y")
            let z = integer("calibration_z")
            if let x, let y, let z { device.calibrationVector = (x, y, z) }
            device.profile = text("profile")
            device.lastSeen = date("last_seen")
            // The benches that know it (a server): their ids' first 8 characters, as elsewhere.
            device.benches = text("benches").map { text in
                text.split { $0 == "{" || $0 == "}" || $0 == "," || $0 == " " }.map { String($0.prefix(8)) }
                    .joined(separator: " ")
            }
            return device
        }
    }
}
