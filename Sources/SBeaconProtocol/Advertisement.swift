/// The iBeacon advert (`ManufacturerData[0x004C]`, 23 bytes).
public struct IBeaconAdvert: Hashable, Sendable {
    public var identity: BeaconIdentity
    public var measuredPower: Int8

    public init(identity: BeaconIdentity, measuredPower: Int8) {
        self.identity = identity
        self.measuredPower = measuredPower
    }

    /// `02 15 <uuid> <major BE> <minor BE> <power>`.
    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.bytes = [0x02, 0x15] + SBeaconUUID.proximity
        writer.u16BigEndian(identity.major)
        writer.u16BigEndian(identity.minor)
        writer.u8(UInt8(bitPattern: measuredPower))
        return writer.bytes
    }

    /// Reads an iBeacon payload.
    /// - Throws: when it is not an iBeacon of the SBeacon proximity UUID.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 23 else { throw ProtocolError.length("iBeacon advert", expected: 23, got: bytes.count) }
        var reader = ByteReader(bytes, "iBeacon advert")
        guard try reader.take(2) == [0x02, 0x15] else {
            throw ProtocolError("iBeacon advert", "not an iBeacon (02 15)")
        }
        guard try reader.take(16) == SBeaconUUID.proximity else {
            throw ProtocolError("iBeacon advert", "proximity UUID is not SBeacon's")
        }
        identity = BeaconIdentity(major: try reader.u16BigEndian(), minor: try reader.u16BigEndian())
        measuredPower = Int8(bitPattern: try reader.u8())
    }
}

/// The Nordic bench-summary advert (`ManufacturerData[0x0059]`, 13 bytes).
public struct BenchSummary: Hashable, Sendable {
    public var macEnding: MACEnding
    public var battery: UInt8
    public var status: Status
    public var firmware: FirmwareVersion
    public var configCRC: UInt16

    public init(macEnding: MACEnding, battery: UInt8, status: Status, firmware: FirmwareVersion, configCRC: UInt16) {
        self.macEnding = macEnding
        self.battery = battery
        self.status = status
        self.firmware = firmware
        self.configCRC = configCRC
    }

    public struct Status: OptionSet, Hashable, Sendable, Codable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let calibrated = Status(rawValue: 1 << 0)
        public static let detectionEnabled = Status(rawValue: 1 << 1)
        public static let tripInProgress = Status(rawValue: 1 << 2)
        public static let unsyncedRecords = Status(rawValue: 1 << 3)
        public static let factoryDefault = Status(rawValue: 1 << 4)
    }

    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.bytes = [0x53, 0x01] + macEnding.bytes
        writer.u8(battery)
        writer.u8(status.rawValue)
        writer.u8(firmware.major)
        writer.u8(firmware.minor)
        writer.u8(firmware.patch)
        writer.u16(configCRC)
        return writer.bytes
    }

    public init(bytes: [UInt8]) throws {
        guard bytes.count == 13 else { throw ProtocolError.length("bench summary", expected: 13, got: bytes.count) }
        var reader = ByteReader(bytes, "bench summary")
        guard try reader.take(2) == [0x53, 0x01] else {
            throw ProtocolError("bench summary", "marker is not 53 01 (format 1)")
        }
        macEnding = MACEnding(bytes: try reader.take(4))
        battery = try reader.u8()
        guard battery <= 100 else { throw ProtocolError("bench summary", "battery \(battery) % is over 100") }
        status = Status(rawValue: try reader.u8())
        firmware = FirmwareVersion(major: try reader.u8(), minor: try reader.u8(), patch: try reader.u8())
        configCRC = try reader.u16()
    }
}

/// The last 4 bytes of a MAC, in display order (`a3b5c7d9`).
public struct MACEnding: Hashable, Sendable, Codable, CustomStringConvertible {
    public let bytes: [UInt8]
    init(bytes: [UInt8]) { self.bytes = bytes }

    /// The ending of a MAC written `A1:B2:A3:B5:C7:D9`.
    public init(address: String) throws {
        let parts = address.split(separator: ":")
        guard parts.count == 6, let octets = Optional(parts.compactMap { UInt8($0, radix: 16) }), octets.count == 6
        else {
            throw ProtocolError("MAC address", "'\(DeviceInformationText.excerpt(address))' is not six hex octets")
        }
        bytes = Array(octets.suffix(4))
    }

    public var description: String { bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }

    /// A device's address as a line names it and the inventory stores it:
    /// exactly six two-digit hex octets joined by `:` (`a1:b2:a3:b5:c7:d9`
    /// too), returned in capitals; nil for anything else (a sign, a third
    /// digit, a missing octet, a control character). The one rule for an
    /// address written by a person or read back from the shared server.
    public static func address(_ text: some StringProtocol) -> String? {
        let bytes = Array(text.utf8.prefix(18))
        guard bytes.count == 17 else { return nil }
        var canonical: [UInt8] = []
        canonical.reserveCapacity(17)
        for (index, byte) in bytes.enumerated() {
            if index % 3 == 2 {
                guard byte == UInt8(ascii: ":") else { return nil }
                canonical.append(byte)
            } else if (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) {
                canonical.append(byte)
            } else if (0x61...0x66).contains(byte) {
                canonical.append(byte - 0x20)
            } else {
                return nil
            }
        }
        return String(decoding: canonical, as: UTF8.self)
    }
}

/// A semantic firmware version, as the Firmware Revision string (`1.0.8`)
/// and the bench summary (three bytes) carry it.
public struct FirmwareVersion: Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    public var major: UInt8
    public var minor: UInt8
    public var patch: UInt8
    public init(major: UInt8, minor: UInt8, patch: UInt8) {
        self.major = major
        self.minor = minor
        self.patch = patch
    }

    /// Parses `1.0.8`.
    public init(_ text: String) throws {
        // Decimal digits only (`UInt8("+1")` would take a sign).
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map {
            $0.utf8.allSatisfy { (0x30...0x39).contains($0) } ? UInt8($0) : nil
        }
        guard parts.count == 3, let major = parts[0], let minor = parts[1], let patch = parts[2] else {
            throw ProtocolError(
                "firmware revision", "'\(DeviceInformationText.excerpt(text))' is not MAJOR.MINOR.PATCH")
        }
        self.init(major: major, minor: minor, patch: patch)
    }

    public var description: String { "\(major).\(minor).\(patch)" }
    public static func < (a: Self, b: Self) -> Bool { (a.major, a.minor, a.patch) < (b.major, b.minor, b.patch) }
}
