/// Beacon time: seconds since power-on, turned into real time with the
/// offset a client stored (epoch milliseconds of power-on).
public enum BeaconTime {
    /// How far a stored offset may drift before a client rewrites it.
    public static let tolerance: Int64 = 2000

    /// The real time, in epoch milliseconds, of a beacon timestamp.
    public static func epochMilliseconds(beaconSeconds: UInt32, offset: Int64) -> Int64 {
        offset + Int64(beaconSeconds) * 1000
    }

    /// The power-on offset implied by `uptime` read at `now` (epoch ms).
    public static func offset(uptime: UInt32, now: Int64) -> Int64 {
        now - Int64(uptime) * 1000
    }

    /// Whether a stored offset must be written: never set, or off by more
    /// than two seconds.
    public static func needsSync(stored: Int64, computed: Int64) -> Bool {
        stored == 0 || abs(stored - computed) > tolerance
    }

    /// Uptime (0106): u32 seconds.
    public static func uptime(bytes: [UInt8]) throws -> UInt32 {
        guard bytes.count == 4 else { throw ProtocolError.length("Uptime", expected: 4, got: bytes.count) }
        var reader = ByteReader(bytes, "Uptime")
        return try reader.u32()
    }

    /// Time Offset (0107): i64 epoch milliseconds.
    public static func offset(bytes: [UInt8]) throws -> Int64 {
        guard bytes.count == 8 else { throw ProtocolError.length("Time Offset", expected: 8, got: bytes.count) }
        var reader = ByteReader(bytes, "Time Offset")
        return try reader.i64()
    }

    public static func offsetBytes(_ offset: Int64) -> [UInt8] {
        var writer = ByteWriter()
        writer.i64(offset)
        return writer.bytes
    }
}

extension TripStatus {
    /// Trip Status (0101): one byte.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 1 else { throw ProtocolError.length("Trip Status", expected: 1, got: bytes.count) }
        guard let status = TripStatus(rawValue: bytes[0]) else {
            throw ProtocolError("Trip Status", "unknown status \(bytes[0])")
        }
        self = status
    }
}

extension DrivingEvent {
    /// The magnitudes and average vector in G (mG / 1000), as the framework shows them.
    public var maximumG: Double { Double(maximumMagnitude) / 1000 }
    public var averageG: Double { Double(averageMagnitude) / 1000 }
}

extension Vector {
    /// Components in G (mG / 1000).
    public var g: (x: Double, y: Double, z: Double) { (Double(x) / 1000, Double(y) / 1000, Double(z) / 1000) }
}
