/// Why the wire decoder did not take a message.
///
/// `invalid`: the bytes break a rule libdbus 1.14 enforces, so libdbus
/// refuses them too (the differential fuzz target `dbus-wire` holds the
/// decoder to that). `unsupported`: a shape this decoder does not judge
/// (for instance a signature libdbus' validator accepts but which is not
/// properly nested); the message must take the libdbus path. The reason is
/// a string literal: building a refusal allocates nothing.
public struct WireRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable { case invalid, unsupported }
    public let kind: Kind
    public let reason: String
    /// Byte offset in the message where the rule was broken.
    public let offset: Int

    @inline(__always)
    static func invalid(_ reason: String, at offset: Int) -> WireRefusal {
        WireRefusal(kind: .invalid, reason: reason, offset: offset)
    }
    @inline(__always)
    static func unsupported(_ reason: String, at offset: Int) -> WireRefusal {
        WireRefusal(kind: .unsupported, reason: reason, offset: offset)
    }

    public var description: String {
        "\(kind == .invalid ? "invalid" : "unsupported"): \(reason) at byte \(offset)"
    }
}

/// D-Bus' limits, as libdbus 1.14 applies them.
enum WireLimits {
    /// `DBUS_MAXIMUM_MESSAGE_LENGTH`.
    static let messageBytes = 128 * 1024 * 1024
    /// `DBUS_MAXIMUM_ARRAY_LENGTH`.
    static let arrayBytes = 64 * 1024 * 1024
    /// `DBUS_MAXIMUM_TYPE_RECURSION_DEPTH * 2`: containers (arrays, structs,
    /// dict entries, variants) one inside another.
    static let depth = 64
    static let nameBytes = 255
}

/// A position in one whole message, read in `Order`. Every read checks its
/// bounds against a limit the caller gives (the enclosing container's end),
/// so no read can leave the message whatever the bytes say.
struct WireCursor<Order: WireByteOrder> {
    let bytes: UnsafeRawBufferPointer
    var position: Int

    @inline(__always)
    init(_ bytes: UnsafeRawBufferPointer, at position: Int) {
        self.bytes = bytes
        self.position = position
    }

    /// Moves to the next multiple of `alignment` (relative to the message's
    /// start), which must be at most `limit`; the bytes skipped must be zero.
    @inline(__always)
    mutating func pad(to alignment: Int, limit: Int) throws(WireRefusal) {
        let aligned = (position + alignment - 1) & ~(alignment - 1)
        guard aligned <= limit else { throw .invalid("not enough data", at: position) }
        while position < aligned {
            guard bytes[position] == 0 else { throw .invalid("alignment padding not zero", at: position) }
            position += 1
        }
    }

    @inline(__always)
    mutating func u8(limit: Int) throws(WireRefusal) -> UInt8 {
        guard position < limit else { throw .invalid("not enough data", at: position) }
        defer { position += 1 }
        return bytes[position]
    }

    /// A 2-, 4- or 8-byte value, aligned to its size.
    @inline(__always)
    mutating func u16(limit: Int) throws(WireRefusal) -> UInt16 {
        try pad(to: 2, limit: limit)
        guard position + 2 <= limit else { throw .invalid("not enough data", at: position) }
        defer { position += 2 }
        return Order.u16(bytes, position)
    }

    @inline(__always)
    mutating func u32(limit: Int) throws(WireRefusal) -> UInt32 {
        try pad(to: 4, limit: limit)
        guard position + 4 <= limit else { throw .invalid("not enough data", at: position) }
        defer { position += 4 }
        return Order.u32(bytes, position)
    }

    @inline(__always)
    mutating func u64(limit: Int) throws(WireRefusal) -> UInt64 {
        try pad(to: 8, limit: limit)
        guard position + 8 <= limit else { throw .invalid("not enough data", at: position) }
        defer { position += 8 }
        return Order.u64(bytes, position)
    }

    /// A string or object path: its length word, its bytes and their NUL.
    /// Returns the bytes' range (without the NUL) after checking them as
    /// `check` says.
    @inline(__always)
    mutating func text(_ check: WireText.Kind, limit: Int) throws(WireRefusal) -> Range<Int> {
        let length = try u32(limit: limit)
        let start = position
        guard UInt64(length) < UInt64(limit - start) else {
            throw .invalid("string length out of bounds", at: start)
        }
        let end = start + Int(length)
        let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
        switch check {
        case .string: guard WireText.isValidUTF8(slice) else { throw .invalid("bad UTF-8 in string", at: start) }
        case .path: guard WireText.isPath(slice) else { throw .invalid("bad object path", at: start) }
        }
        guard bytes[end] == 0 else { throw .invalid("string missing NUL", at: end) }
        position = end + 1
        return start..<end
    }

    /// A signature: its length byte, its bytes (checked as libdbus' validator
    /// does) and their NUL.
    @inline(__always)
    mutating func signature(limit: Int) throws(WireRefusal) -> Range<Int> {
        let length = Int(try u8(limit: limit))
        let start = position
        guard length + 1 <= limit - start else { throw .invalid("signature length out of bounds", at: start) }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + length)])
        // The table's kinds are valid signatures by construction: only the
        // others go through the validator.
        if SignatureTable.kind(of: slice) == .other { try SignatureTable.validate(slice, at: start) }
        guard bytes[start + length] == 0 else { throw .invalid("signature missing NUL", at: start + length) }
        position = start + length + 1
        return start..<(start + length)
    }
}

/// The text rules of libdbus 1.14 (dbus-marshal-validate.c), on bytes.
public enum WireText {
    enum Kind { case string, path }

    /// UTF-8 as `_dbus_string_validate_utf8` judges it: no NUL, no
    /// surrogate, no overlong form, nothing above U+10FFFF; noncharacters
    /// (U+FFFE, U+FDD0) are accepted.
    @inline(__always)
    public static func isValidUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        let count = bytes.count
        // ASCII, 8 bytes a step.
        while index + 8 <= count {
            let word = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            // A byte is non-ASCII (high bit) or zero.
            let zero = (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080
            guard word & 0x8080_8080_8080_8080 == 0, zero == 0 else { break }
            index += 8
        }
        while index < count {
            let lead = bytes[index]
            if lead < 0x80 {
                guard lead != 0 else { return false }
                index += 1
                continue
            }
            let length: Int
            var scalar: UInt32
            switch lead {
            case 0xC0...0xDF:
                length = 2
                scalar = UInt32(lead & 0x1F)
            case 0xE0...0xEF:
                length = 3
                scalar = UInt32(lead & 0x0F)
            case 0xF0...0xF7:
                length = 4
                scalar = UInt32(lead & 0x07)
            default: return false
            }
            guard count - index >= length else { return false }
            for k in 1..<length {
                let next = bytes[index + k]
                guard next & 0xC0 == 0x80 else { return false }
                scalar = scalar << 6 | UInt32(next & 0x3F)
            }
            let shortest = scalar < 0x80 ? 1 : scalar < 0x800 ? 2 : scalar < 0x10000 ? 3 : 4
            guard shortest == length, scalar < 0x11_0000, scalar & 0xFFFF_F800 != 0xD800 else { return false }
            index += length
        }
        return true
    }

    @inline(__always)
    static func isNameCharacter(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F
    }
    @inline(__always)
    static func isInitialNameCharacter(_ c: UInt8) -> Bool {
        (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x5F
    }
    @inline(__always)
    static func isBusNameCharacter(_ c: UInt8) -> Bool { isNameCharacter(c) || c == 0x2D }
    @inline(__always)
    static func isInitialBusNameCharacter(_ c: UInt8) -> Bool { isInitialNameCharacter(c) || c == 0x2D }

    /// `_dbus_validate_path`.
    public static func isPath(_ s: UnsafeRawBufferPointer) -> Bool {
        guard let first = s.first, first == UInt8(ascii: "/") else { return false }
        var lastSlash = 0
        for index in 1..<s.count {
            let c = s[index]
            if c == UInt8(ascii: "/") {
                guard index - lastSlash >= 2 else { return false }
                lastSlash = index
            } else if !isNameCharacter(c) {
                return false
            }
        }
        return !(s.count > 1 && s.count - lastSlash < 2)
    }

    /// `_dbus_validate_interface` (and `_dbus_validate_error_name`).
    public static func isInterface(_ s: UnsafeRawBufferPointer) -> Bool {
        guard !s.isEmpty, s.count <= WireLimits.nameBytes, isInitialNameCharacter(s[0]) else { return false }
        var sawDot = false
        var index = 1
        while index < s.count {
            let c = s[index]
            if c == UInt8(ascii: ".") {
                guard index + 1 < s.count, isInitialNameCharacter(s[index + 1]) else { return false }
                sawDot = true
                index += 1
            } else if !isNameCharacter(c) {
                return false
            }
            index += 1
        }
        return sawDot
    }

    /// `_dbus_validate_member`.
    public static func isMember(_ s: UnsafeRawBufferPointer) -> Bool {
        guard !s.isEmpty, s.count <= WireLimits.nameBytes, isInitialNameCharacter(s[0]) else { return false }
        return s.dropFirst().allSatisfy(isNameCharacter)
    }

    /// `_dbus_validate_bus_name`.
    public static func isBusName(_ s: UnsafeRawBufferPointer) -> Bool {
        guard !s.isEmpty, s.count <= WireLimits.nameBytes else { return false }
        var index = 1
        if s[0] == UInt8(ascii: ":") {
            while index < s.count {
                let c = s[index]
                if c == UInt8(ascii: ".") {
                    guard index + 1 < s.count, isBusNameCharacter(s[index + 1]) else { return false }
                    index += 1
                } else if !isBusNameCharacter(c) {
                    return false
                }
                index += 1
            }
            return true
        }
        guard isInitialBusNameCharacter(s[0]) else { return false }
        var sawDot = false
        while index < s.count {
            let c = s[index]
            if c == UInt8(ascii: ".") {
                guard index + 1 < s.count, isInitialBusNameCharacter(s[index + 1]) else { return false }
                sawDot = true
                index += 1
            } else if !isBusNameCharacter(c) {
                return false
            }
            index += 1
        }
        return sawDot
    }
}
