/// The Driving Behaviour Config characteristic (0201): thresholds in mG,
/// minimum duration in ms, and enable bits. 10 bytes, little-endian.
public struct DrivingBehaviourConfig: Hashable, Sendable, Codable, CustomStringConvertible {
    public var cornering: UInt16
    public var braking: UInt16
    public var acceleration: UInt16
    public var duration: UInt16
    public var enable: EnableFlags

    public static let byteCount = 10
    public static let thresholdRange: ClosedRange<UInt16> = 50...5000
    public static let durationRange: ClosedRange<UInt16> = 1...10000
    /// What a factory reset restores.
    public static let factoryDefault = DrivingBehaviourConfig(
        cornering: 300, braking: 300, acceleration: 300, duration: 500, enable: .detection)

    public init(cornering: UInt16, braking: UInt16, acceleration: UInt16, duration: UInt16, enable: EnableFlags) {
        self.cornering = cornering
        self.braking = braking
        self.acceleration = acceleration
        self.duration = duration
        self.enable = enable
    }

    public struct EnableFlags: OptionSet, Hashable, Sendable, Codable {
        public let rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue }
        public static let detection = EnableFlags(rawValue: 0x0001)
        public static let highPassFilter = EnableFlags(rawValue: 0x0002)
        public static let lowPassFilter = EnableFlags(rawValue: 0x0004)
        public static let all: EnableFlags = [.detection, .highPassFilter, .lowPassFilter]
    }

    /// The field that is out of range, with its value and range, or nil
    /// when every field is allowed.
    public var firstInvalidField: String? {
        for (name, value) in [("cornering", cornering), ("braking", braking), ("acceleration", acceleration)]
        where !Self.thresholdRange.contains(value) {
            return "\(name) \(value) mG is outside 50–5000 mG"
        }
        if !Self.durationRange.contains(duration) { return "duration \(duration) ms is outside 1–10000 ms" }
        if enable.rawValue & ~EnableFlags.all.rawValue != 0 {
            return "enable 0x\(String(enable.rawValue, radix: 16)) sets bits other than 0–2"
        }
        return nil
    }

    public var bytes: [UInt8] {
        var writer = ByteWriter()
        for value in [cornering, braking, acceleration, duration, enable.rawValue] { writer.u16(value) }
        return writer.bytes
    }

    /// Reads the 10 bytes; does not check ranges (see `firstInvalidField`).
    public init(bytes: [UInt8]) throws {
        guard bytes.count == Self.byteCount else {
            throw ProtocolError.length("Driving Behaviour Config", expected: 10, got: bytes.count)
        }
        var reader = ByteReader(bytes, "Driving Behaviour Config")
        cornering = try reader.u16()
        braking = try reader.u16()
        acceleration = try reader.u16()
        duration = try reader.u16()
        enable = EnableFlags(rawValue: try reader.u16())
    }

    /// CRC-16/CCITT-FALSE of the 10 bytes, as the bench-summary advert carries it.
    public var crc: UInt16 { crc16CCITTFalse(bytes) }

    public var description: String {
        var flags: [String] = []
        if enable.contains(.detection) { flags.append("DB") }
        if enable.contains(.highPassFilter) { flags.append("HP") }
        if enable.contains(.lowPassFilter) { flags.append("LP") }
        return "cornering \(cornering) mG, braking \(braking) mG, acceleration \(acceleration) mG, "
            + "duration \(duration) ms, enable \(flags.isEmpty ? "none" : flags.joined(separator: "+"))"
    }
}

/// The Identity characteristic (0204): iBeacon major and minor,
/// little-endian here (big-endian in the advert).
public struct BeaconIdentity: Hashable, Sendable, Codable {
    public var major: UInt16
    public var minor: UInt16
    public init(major: UInt16, minor: UInt16) {
        self.major = major
        self.minor = minor
    }
    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.u16(major)
        writer.u16(minor)
        return writer.bytes
    }
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 4 else { throw ProtocolError.length("Identity", expected: 4, got: bytes.count) }
        var reader = ByteReader(bytes, "Identity")
        major = try reader.u16()
        minor = try reader.u16()
    }
}

/// The Calibration State characteristic (0203).
public struct CalibrationState: Hashable, Sendable, Codable {
    public var calibrated: Bool
    /// Beacon seconds since power-on.
    public var calibratedAt: UInt32
    public var vector: Vector
    public static let byteCount = 11

    public init(calibrated: Bool, calibratedAt: UInt32, vector: Vector) {
        self.calibrated = calibrated
        self.calibratedAt = calibratedAt
        self.vector = vector
    }

    public static let uncalibrated = CalibrationState(calibrated: false, calibratedAt: 0, vector: .zero)

    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.u8(calibrated ? 1 : 0)
        writer.u32(calibratedAt)
        vector.write(to: &writer)
        return writer.bytes
    }

    public init(bytes: [UInt8]) throws {
        guard bytes.count == Self.byteCount else {
            throw ProtocolError.length("Calibration State", expected: 11, got: bytes.count)
        }
        var reader = ByteReader(bytes, "Calibration State")
        let flag = try reader.u8()
        guard flag <= 1 else { throw ProtocolError("Calibration State", "calibrated flag is \(flag), not 0 or 1") }
        calibrated = flag == 1
        calibratedAt = try reader.u32()
        vector = try Vector(&reader)
    }
}

/// A vector in mG.
public struct Vector: Hashable, Sendable, Codable {
    public var x: Int16
    public var y: Int16
    public var z: Int16
    public init(x: Int16, y: Int16, z: Int16) {
        self.x = x
        self.y = y
        self.z = z
    }
    public static let zero = Vector(x: 0, y: 0, z: 0)
    /// Length in mG.
    public var magnitude: Double { Double(Int(x) * Int(x) + Int(y) * Int(y) + Int(z) * Int(z)).squareRoot() }

    init(_ reader: inout ByteReader) throws {
        x = try reader.i16()
        y = try reader.i16()
        z = try reader.i16()
    }
    func write(to writer: inout ByteWriter) {
        writer.i16(x)
        writer.i16(y)
        writer.i16(z)
    }
}

/// The answer of the Calibration Control Point (0202): `80 <result> <x> <y> <z>`.
public struct CalibrationResult: Hashable, Sendable {
    public enum Outcome: UInt8, Sendable {
        case success = 0, motionDetected = 1, sensorFault = 2
    }
    public var outcome: Outcome
    public var vector: Vector
    public static let startOpcode: UInt8 = 0x01

    public init(outcome: Outcome, vector: Vector) {
        self.outcome = outcome
        self.vector = vector
    }

    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.u8(0x80)
        writer.u8(outcome.rawValue)
        vector.write(to: &writer)
        return writer.bytes
    }

    public init(bytes: [UInt8]) throws {
        guard bytes.count == 8 else {
            throw ProtocolError.length("Calibration response", expected: 8, got: bytes.count)
        }
        var reader = ByteReader(bytes, "Calibration response")
        guard try reader.u8() == 0x80 else { throw ProtocolError("Calibration response", "does not start with 0x80") }
        let code = try reader.u8()
        guard let outcome = Outcome(rawValue: code) else {
            throw ProtocolError("Calibration response", "unknown result \(code)")
        }
        self.outcome = outcome
        vector = try Vector(&reader)
    }
}

/// Device Control (0205) commands.
public enum DeviceCommand: Hashable, Sendable {
    case reboot
    case factoryReset

    public var bytes: [UInt8] {
        switch self {
        case .reboot: [0x01]
        case .factoryReset: [0x02, 0x5A, 0xA5]
        }
    }

    public init(bytes: [UInt8]) throws {
        switch bytes {
        case [0x01]: self = .reboot
        case [0x02, 0x5A, 0xA5]: self = .factoryReset
        default: throw ProtocolError("Device Control", "unknown command \(bytes.hexString)")
        }
    }
}

extension Array where Element == UInt8 {
    /// Bytes as lower-case hex, space-separated.
    public var hexString: String {
        map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined(separator: " ")
    }
}
