/// A message's byte order as a type, so that every reader is compiled twice
/// (once per order) and no load tests the order at run time.
///
/// D-Bus messages carry their sender's byte order (`l` or `B` in byte 0)
/// and the bus forwards them unchanged, so both are read.
public protocol WireByteOrder {
    static var isBigEndian: Bool { get }
}

/// `l`: little-endian (every peer on x86 and ARM Linux in practice).
public enum WireLittleEndian: WireByteOrder {
    @inline(__always) public static var isBigEndian: Bool { false }
}

/// `B`: big-endian.
public enum WireBigEndian: WireByteOrder {
    @inline(__always) public static var isBigEndian: Bool { true }
}

extension WireByteOrder {
    /// The unsigned integer at `offset` (no bounds check: the caller has
    /// checked `offset + 2 <= bytes.count`).
    @inline(__always)
    static func u16(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt16 {
        let raw = bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self)
        return isBigEndian ? UInt16(bigEndian: raw) : UInt16(littleEndian: raw)
    }

    @inline(__always)
    static func u32(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt32 {
        let raw = bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
        return isBigEndian ? UInt32(bigEndian: raw) : UInt32(littleEndian: raw)
    }

    @inline(__always)
    static func u64(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        let raw = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
        return isBigEndian ? UInt64(bigEndian: raw) : UInt64(littleEndian: raw)
    }
}

/// Loads in an order known only at run time (a `WireValue` read after
/// decoding, where one branch per load costs nothing that matters).
enum DynamicOrder {
    @inline(__always)
    static func u16(_ bytes: UnsafeRawBufferPointer, _ offset: Int, bigEndian: Bool) -> UInt16 {
        bigEndian ? WireBigEndian.u16(bytes, offset) : WireLittleEndian.u16(bytes, offset)
    }
    @inline(__always)
    static func u32(_ bytes: UnsafeRawBufferPointer, _ offset: Int, bigEndian: Bool) -> UInt32 {
        bigEndian ? WireBigEndian.u32(bytes, offset) : WireLittleEndian.u32(bytes, offset)
    }
    @inline(__always)
    static func u64(_ bytes: UnsafeRawBufferPointer, _ offset: Int, bigEndian: Bool) -> UInt64 {
        bigEndian ? WireBigEndian.u64(bytes, offset) : WireLittleEndian.u64(bytes, offset)
    }
}
