/// Why bytes could not be read as a value: the value's name, the expected
/// and actual lengths or the offending field. Decoders never trap.
public struct ProtocolError: Error, Sendable, Hashable, CustomStringConvertible {
    public var what: String
    public var reason: String
    public init(_ what: String, _ reason: String) {
        self.what = what
        self.reason = reason
    }
    public var description: String { "\(what): \(reason)" }

    static func length(_ what: String, expected: Int, got: Int) -> ProtocolError {
        ProtocolError(what, "expected \(expected) bytes, got \(got)")
    }
}

/// Reads little-endian integers from a byte array, bounds-checked.
struct ByteReader {
    let bytes: [UInt8]
    let what: String
    private(set) var offset = 0

    init(_ bytes: [UInt8], _ what: String) {
        self.bytes = bytes
        self.what = what
    }

    var remaining: Int { bytes.count - offset }

    mutating func u8() throws -> UInt8 {
        guard remaining >= 1 else { throw ProtocolError(what, "ends at byte \(offset)") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() throws -> UInt16 { UInt16(try u8()) | UInt16(try u8()) << 8 }
    mutating func u16BigEndian() throws -> UInt16 { UInt16(try u8()) << 8 | UInt16(try u8()) }
    mutating func i16() throws -> Int16 { Int16(bitPattern: try u16()) }
    mutating func u32() throws -> UInt32 { UInt32(try u16()) | UInt32(try u16()) << 16 }
    mutating func i64() throws -> Int64 {
        Int64(bitPattern: UInt64(try u32()) | UInt64(try u32()) << 32)
    }
    mutating func take(_ count: Int) throws -> [UInt8] {
        guard remaining >= count else { throw ProtocolError(what, "ends at byte \(offset)") }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }
}

/// Appends little-endian integers.
struct ByteWriter {
    var bytes: [UInt8] = []
    mutating func u8(_ value: UInt8) { bytes.append(value) }
    mutating func u16(_ value: UInt16) { bytes += [UInt8(value & 0xFF), UInt8(value >> 8)] }
    mutating func u16BigEndian(_ value: UInt16) { bytes += [UInt8(value >> 8), UInt8(value & 0xFF)] }
    mutating func i16(_ value: Int16) { u16(UInt16(bitPattern: value)) }
    mutating func u32(_ value: UInt32) {
        u16(UInt16(value & 0xFFFF))
        u16(UInt16(value >> 16))
    }
    mutating func i64(_ value: Int64) {
        let bits = UInt64(bitPattern: value)
        u32(UInt32(bits & 0xFFFF_FFFF))
        u32(UInt32(bits >> 32))
    }
}

/// CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF, no reflection, no final xor.
public func crc16CCITTFalse(_ bytes: [UInt8]) -> UInt16 {
    var crc: UInt16 = 0xFFFF
    for byte in bytes {
        crc ^= UInt16(byte) << 8
        for _ in 0..<8 {
            crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
        }
    }
    return crc
}
