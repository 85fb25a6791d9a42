/// A name read from a message (a property, interface or object path), as
/// its interned id and its bytes. Borrowed: valid only during the sink call
/// that received it.
public struct WireName {
    /// Nil when the table was full or the name too long: keep `bytes`.
    public let id: InternTable.ID?
    public let bytes: UnsafeRawBufferPointer

    /// The name as text (allocates).
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    /// Byte comparison, no allocation.
    public func equals(_ text: StaticString) -> Bool {
        bytes.count == text.utf8CodeUnitCount
            && bytes.elementsEqual(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }
}

/// One property's value as it sits in the message: the variant's signature,
/// the byte order and the value's bytes. Nothing is decoded or allocated
/// until an accessor is called; the accessors for the table's kinds
/// (`SignatureTable.Kind`) read the bytes directly, and `busValue()` decodes
/// any other type the way `MessageCodec.decodeBody` would. Borrowed: valid
/// only during the sink call that received it (copy what you keep).
///
/// The message it points into has been validated whole before any sink
/// call, so the accessors only re-derive offsets.
public struct WireValue {
    let message: UnsafeRawBufferPointer
    public let isBigEndian: Bool
    /// The variant's signature (one complete type).
    public let signature: UnsafeRawBufferPointer
    public let kind: SignatureTable.Kind
    /// The value's bytes: `message[start..<end]`.
    let start: Int
    let end: Int
    /// Container depth of the value in its message (for `busValue()`'s
    /// nesting limit, as `decodeBody` counts it).
    let depth: Int

    /// The value's encoded bytes (aligned as in the message: a copy of them
    /// decodes the same only at the same alignment modulo 8).
    public var encoded: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: message[start..<end]) }

    @inline(__always) private func u16() -> UInt16 { DynamicOrder.u16(message, start, bigEndian: isBigEndian) }
    @inline(__always) private func u32() -> UInt32 { DynamicOrder.u32(message, start, bigEndian: isBigEndian) }
    @inline(__always) private func u64() -> UInt64 { DynamicOrder.u64(message, start, bigEndian: isBigEndian) }

    public var byte: UInt8? { kind == .byte ? message[start] : nil }
    public var bool: Bool? { kind == .boolean ? u32() != 0 : nil }
    public var int16: Int16? { kind == .int16 ? Int16(bitPattern: u16()) : nil }
    public var uint16: UInt16? { kind == .uint16 ? u16() : nil }
    public var int32: Int32? { kind == .int32 ? Int32(bitPattern: u32()) : nil }
    public var uint32: UInt32? { kind == .uint32 ? u32() : nil }
    public var int64: Int64? { kind == .int64 ? Int64(bitPattern: u64()) : nil }
    public var uint64: UInt64? { kind == .uint64 ? u64() : nil }
    public var double: Double? { kind == .double ? Double(bitPattern: u64()) : nil }

    /// The text of an `s`, `o` or `g` value, without copying.
    public var textBytes: UnsafeRawBufferPointer? {
        switch kind {
        case .string, .objectPath:
            let count = Int(u32())
            return UnsafeRawBufferPointer(rebasing: message[(start + 4)..<(start + 4 + count)])
        case .signature:
            let count = Int(message[start])
            return UnsafeRawBufferPointer(rebasing: message[(start + 1)..<(start + 1 + count)])
        default: return nil
        }
    }

    /// `s`, `o` or `g` as a `String` (allocates).
    public var string: String? { textBytes.map { String(decoding: $0, as: UTF8.self) } }

    /// True when the value is an `s`/`o`/`g` equal to `stored` (compares
    /// bytes: nothing allocated).
    public func textEquals(_ stored: String) -> Bool {
        guard let bytes = textBytes else { return false }
        var stored = stored
        return stored.withUTF8 { $0.count == bytes.count && UnsafeRawBufferPointer($0).elementsEqual(bytes) }
    }

    /// The elements of an `ay`, without copying.
    public var bytes: UnsafeRawBufferPointer? {
        guard kind == .bytes else { return nil }
        let count = Int(u32())
        return UnsafeRawBufferPointer(rebasing: message[(start + 4)..<(start + 4 + count)])
    }

    /// True when the value is an `ay` equal to `stored`.
    public func bytesEqual(_ stored: [UInt8]) -> Bool {
        guard let bytes else { return false }
        return bytes.count == stored.count && bytes.elementsEqual(stored)
    }

    /// Calls `body` with each element of an `as` or `ao`; false if the value
    /// is neither.
    @discardableResult
    public func forEachText(_ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard kind == .strings || kind == .objectPaths else { return false }
        let length = Int(u32())
        var position = start + 4
        let end = position + length
        while position < end {
            position = (position + 3) & ~3
            let count = Int(DynamicOrder.u32(message, position, bigEndian: isBigEndian))
            body(UnsafeRawBufferPointer(rebasing: message[(position + 4)..<(position + 4 + count)]))
            position += 4 + count + 1
        }
        return true
    }

    /// Calls `body` with each entry of an `a{qv}`, `a{sv}` or `a{yv}`: the
    /// key (a `q`, `s` or `y` value) and the variant's contents. False if
    /// the value is none of these.
    @discardableResult
    public func forEachEntry(_ body: (_ key: WireValue, _ value: WireValue) -> Void) -> Bool {
        let keyKind: SignatureTable.Kind
        let keySignature: StaticString
        switch kind {
        case .uint16Variants: (keyKind, keySignature) = (.uint16, "q")
        case .stringVariants: (keyKind, keySignature) = (.string, "s")
        case .byteVariants: (keyKind, keySignature) = (.byte, "y")
        default: return false
        }
        let keyType = UnsafeRawBufferPointer(start: keySignature.utf8Start, count: 1)
        let length = Int(u32())
        var position = (start + 4 + 7) & ~7
        let end = position + length
        while position < end {
            position = (position + 7) & ~7
            let keyStart = position
            switch keyKind {
            case .uint16: position += 2
            case .byte: position += 1
            default: position += 4 + Int(DynamicOrder.u32(message, position, bigEndian: isBigEndian)) + 1
            }
            let key = WireValue(
                message: message, isBigEndian: isBigEndian, signature: keyType, kind: keyKind, start: keyStart,
                end: position, depth: depth + 2)
            let signatureLength = Int(message[position])
            let signature = UnsafeRawBufferPointer(rebasing: message[(position + 1)..<(position + 1 + signatureLength)])
            position += signatureLength + 2
            let alignment = SignatureTable.alignment(signature[0])
            position = (position + alignment - 1) & ~(alignment - 1)
            let valueEnd = WireValue.end(
                of: signature, at: position, in: message, bigEndian: isBigEndian, limit: end)
            body(
                key,
                WireValue(
                    message: message, isBigEndian: isBigEndian, signature: signature,
                    kind: SignatureTable.kind(of: signature), start: position, end: valueEnd, depth: depth + 3))
            position = valueEnd
        }
        return true
    }

    /// The value as `MessageCodec.decodeBody` would give the variant's
    /// contents (allocates; for values outside the table, or kept lazily).
    /// - Throws: `BusError` as `decodeBody` throws it.
    public func busValue() throws -> BusValue {
        let text = String(decoding: signature, as: UTF8.self)
        let types = try BusType.parse(text)
        guard types.count == 1 else {
            throw BusError.invalidSignature("A variant holds '\(text)', not one complete type")
        }
        if isBigEndian {
            var cursor = WireCursor<WireBigEndian>(message, at: start)
            return try WireWalker<WireBigEndian>.build(types[0], &cursor, limit: end, depth: depth)
        }
        var cursor = WireCursor<WireLittleEndian>(message, at: start)
        return try WireWalker<WireLittleEndian>.build(types[0], &cursor, limit: end, depth: depth)
    }

    /// Where a validated value of the one complete type `signature` that
    /// starts (aligned) at `start` ends.
    static func end(
        of signature: UnsafeRawBufferPointer, at start: Int, in message: UnsafeRawBufferPointer, bigEndian: Bool,
        limit: Int
    ) -> Int {
        let code = signature[0]
        if let size = SignatureTable.fixedSize(code) { return start + size }
        switch code {
        case UInt8(ascii: "s"), UInt8(ascii: "o"):
            return start + 4 + Int(DynamicOrder.u32(message, start, bigEndian: bigEndian)) + 1
        case UInt8(ascii: "g"):
            return start + 1 + Int(message[start]) + 1
        case UInt8(ascii: "a"):
            let length = Int(DynamicOrder.u32(message, start, bigEndian: bigEndian))
            let alignment = SignatureTable.alignment(signature[1])
            return ((start + 4 + alignment - 1) & ~(alignment - 1)) + length
        default:
            // A variant or a struct: walk it (validated already, so this
            // cannot fail; if it did, the value would end at the limit).
            var flags = WireFlags()
            if bigEndian {
                var cursor = WireCursor<WireBigEndian>(message, at: start)
                _ = try? WireWalker<WireBigEndian>.validate(signature, 0, &cursor, limit: limit, depth: 0, &flags)
                return cursor.position
            }
            var cursor = WireCursor<WireLittleEndian>(message, at: start)
            _ = try? WireWalker<WireLittleEndian>.validate(signature, 0, &cursor, limit: limit, depth: 0, &flags)
            return cursor.position
        }
    }
}
