/// What validation noticed that is not a refusal (nothing yet: kept so
/// that a quirk found later has a place to go without changing signatures).
struct WireFlags {}

/// The generic walker: validates a value of any signature exactly as
/// libdbus 1.14's `validate_body_helper` does, and builds a `BusValue`
/// exactly as `MessageCodec.decodeBody` does from libdbus' iterators.
enum WireWalker<Order: WireByteOrder> {
    typealias Cursor = WireCursor<Order>

    // MARK: Validation

    /// Validates one value of the complete type at `signature[type]`;
    /// returns the index just past that type in `signature`.
    static func validate(
        _ signature: UnsafeRawBufferPointer, _ type: Int, _ cursor: inout Cursor, limit: Int, depth: Int,
        _ flags: inout WireFlags
    ) throws(WireRefusal) -> Int {
        guard cursor.position < limit else { throw .invalid("not enough data", at: cursor.position) }
        guard type < signature.count else { throw .unsupported("signature ends early", at: cursor.position) }
        let code = signature[type]
        switch code {
        case UInt8(ascii: "y"):
            cursor.position += 1
            return type + 1
        case UInt8(ascii: "b"):
            guard try cursor.u32(limit: limit) <= 1 else {
                throw .invalid("boolean not 0 or 1", at: cursor.position - 4)
            }
            return type + 1
        case UInt8(ascii: "n"), UInt8(ascii: "q"):
            _ = try cursor.u16(limit: limit)
            return type + 1
        case UInt8(ascii: "i"), UInt8(ascii: "u"), UInt8(ascii: "h"):
            _ = try cursor.u32(limit: limit)
            return type + 1
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"):
            _ = try cursor.u64(limit: limit)
            return type + 1
        case UInt8(ascii: "s"):
            _ = try cursor.text(.string, limit: limit)
            return type + 1
        case UInt8(ascii: "o"):
            _ = try cursor.text(.path, limit: limit)
            return type + 1
        case UInt8(ascii: "g"):
            _ = try cursor.signature(limit: limit)
            return type + 1
        case UInt8(ascii: "a"):
            let length = try cursor.u32(limit: limit)
            let element = type + 1
            let next = try SignatureTable.skip(signature, element)
            let elementCode = signature[element]
            try cursor.pad(to: SignatureTable.alignment(elementCode), limit: limit)
            guard UInt64(length) <= UInt64(limit - cursor.position) else {
                throw .invalid("array length out of bounds", at: cursor.position)
            }
            guard length > 0 else { return next }
            guard length <= WireLimits.arrayBytes else {
                throw .invalid("array longer than 64 MiB", at: cursor.position)
            }
            let end = cursor.position + Int(length)
            if let size = SignatureTable.fixedSize(elementCode) {
                // libdbus 1.14.10 refuses a length that is not a multiple
                // of the element's size (measured: WireDecoderTests).
                guard Int(length) % size == 0 else { throw .invalid("array length incorrect", at: cursor.position) }
                if elementCode == UInt8(ascii: "b") {
                    while cursor.position < end {
                        guard Order.u32(cursor.bytes, cursor.position) <= 1 else {
                            throw .invalid("boolean not 0 or 1", at: cursor.position)
                        }
                        cursor.position += 4
                    }
                } else {
                    cursor.position = end
                }
                return next
            }
            guard depth + 1 <= WireLimits.depth else { throw .invalid("nested too deeply", at: cursor.position) }
            while cursor.position < end {
                _ = try validate(signature, element, &cursor, limit: end, depth: depth + 1, &flags)
            }
            return next
        case UInt8(ascii: "v"):
            let range = try cursor.signature(limit: limit)
            guard !range.isEmpty else { throw .invalid("variant signature empty", at: range.lowerBound) }
            let inner = UnsafeRawBufferPointer(rebasing: cursor.bytes[range])
            try cursor.pad(to: SignatureTable.alignment(inner[0]), limit: limit)
            guard depth + 1 <= WireLimits.depth else { throw .invalid("nested too deeply", at: cursor.position) }
            let innerEnd = try SignatureTable.skip(inner, 0)
            _ = try validate(inner, 0, &cursor, limit: limit, depth: depth + 1, &flags)
            guard innerEnd == inner.count else {
                throw .invalid("variant signature holds more than one type", at: range.lowerBound)
            }
            return type + 1
        case UInt8(ascii: "("), UInt8(ascii: "{"):
            let close = code == UInt8(ascii: "(") ? UInt8(ascii: ")") : UInt8(ascii: "}")
            try cursor.pad(to: 8, limit: limit)
            guard depth + 1 <= WireLimits.depth else { throw .invalid("nested too deeply", at: cursor.position) }
            var field = type + 1
            while true {
                guard field < signature.count else { throw .unsupported("signature ends early", at: cursor.position) }
                if signature[field] == close { return field + 1 }
                field = try validate(signature, field, &cursor, limit: limit, depth: depth + 1, &flags)
            }
        default:
            throw .unsupported("unknown type code", at: cursor.position)
        }
    }

    /// Validates a whole body (`signature` may hold several complete types)
    /// between `start` and `end`, which it must fill exactly.
    static func validateBody(
        _ bytes: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer, start: Int, end: Int
    ) throws(WireRefusal) -> WireFlags {
        var flags = WireFlags()
        var cursor = Cursor(bytes, at: start)
        var type = 0
        while type < signature.count {
            type = try validate(signature, type, &cursor, limit: end, depth: 0, &flags)
        }
        guard cursor.position == end else { throw .invalid("body longer than its values", at: cursor.position) }
        return flags
    }

    // MARK: Building BusValues (MessageCodec.decodeBody's rules)

    /// One value of `type` at the cursor, from bytes already validated.
    /// - Throws: `BusError` as `MessageCodec.decodeBody` throws it
    ///   (`InvalidSignature` when nested deeper than 64 or when `BusType`
    ///   refuses a signature, `NotSupported` for `h`).
    static func build(_ type: BusType, _ cursor: inout Cursor, limit: Int, depth: Int) throws -> BusValue {
        guard depth <= BusValue.maximumNestingDepth else {
            throw BusError.invalidSignature("A value is nested too deeply")
        }
        switch type {
        case .byte: return .byte(try cursor.u8(limit: limit))
        case .boolean: return .boolean(try cursor.u32(limit: limit) != 0)
        case .int16: return .int16(Int16(bitPattern: try cursor.u16(limit: limit)))
        case .uint16: return .uint16(try cursor.u16(limit: limit))
        case .int32: return .int32(Int32(bitPattern: try cursor.u32(limit: limit)))
        case .uint32: return .uint32(try cursor.u32(limit: limit))
        case .int64: return .int64(Int64(bitPattern: try cursor.u64(limit: limit)))
        case .uint64: return .uint64(try cursor.u64(limit: limit))
        case .double: return .double(Double(bitPattern: try cursor.u64(limit: limit)))
        case .string:
            let range = try cursor.text(.string, limit: limit)
            return .string(String(decoding: UnsafeRawBufferPointer(rebasing: cursor.bytes[range]), as: UTF8.self))
        case .objectPath:
            let range = try cursor.text(.path, limit: limit)
            return .objectPath(
                ObjectPath(
                    unchecked: String(decoding: UnsafeRawBufferPointer(rebasing: cursor.bytes[range]), as: UTF8.self)))
        case .signature:
            let range = try cursor.signature(limit: limit)
            let text = String(decoding: UnsafeRawBufferPointer(rebasing: cursor.bytes[range]), as: UTF8.self)
            return .signature(Signature(unchecked: text, types: try BusType.parse(text)))
        case .unixFD:
            throw BusError(.notSupported, "Unix file descriptors ('h') are not supported")
        case .variant:
            let range = try cursor.signature(limit: limit)
            let text = String(decoding: UnsafeRawBufferPointer(rebasing: cursor.bytes[range]), as: UTF8.self)
            let types = try BusType.parse(text)
            guard types.count == 1, let first = cursor.bytes[range].first else {
                throw BusError.invalidSignature("A variant holds '\(text)', not one complete type")
            }
            try cursor.pad(to: SignatureTable.alignment(first), limit: limit)
            return .variant(try build(types[0], &cursor, limit: limit, depth: depth + 1))
        case .array(.byte):
            let length = Int(try cursor.u32(limit: limit))
            let start = cursor.position
            guard length <= limit - start else { throw WireRefusal.invalid("array length out of bounds", at: start) }
            cursor.position = start + length
            return .bytes(Array(UnsafeRawBufferPointer(rebasing: cursor.bytes[start..<(start + length)])))
        case .array(let element):
            let length = Int(try cursor.u32(limit: limit))
            try cursor.pad(to: element.alignment, limit: limit)
            let end = cursor.position + length
            guard end <= limit else { throw WireRefusal.invalid("array length out of bounds", at: cursor.position) }
            var elements: [BusValue] = []
            while cursor.position < end {
                elements.append(try build(element, &cursor, limit: end, depth: depth + 1))
            }
            return .array(element, elements)
        case .dictionary(let keyType, let valueType):
            let length = Int(try cursor.u32(limit: limit))
            try cursor.pad(to: 8, limit: limit)
            let end = cursor.position + length
            guard end <= limit else { throw WireRefusal.invalid("array length out of bounds", at: cursor.position) }
            var entries: [BusValue.DictEntry] = []
            while cursor.position < end {
                try cursor.pad(to: 8, limit: end)
                let key = try build(keyType, &cursor, limit: end, depth: depth + 2)
                let value = try build(valueType, &cursor, limit: end, depth: depth + 2)
                entries.append(.init(key, value))
            }
            return .dictionary(key: keyType, value: valueType, entries)
        case .structure(let fieldTypes):
            try cursor.pad(to: 8, limit: limit)
            var fields: [BusValue] = []
            fields.reserveCapacity(fieldTypes.count)
            for fieldType in fieldTypes {
                fields.append(try build(fieldType, &cursor, limit: limit, depth: depth + 1))
            }
            return .structure(fields)
        }
    }

    /// A whole validated body as `MessageCodec.decodeBody` gives it.
    static func buildBody(
        _ bytes: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer, start: Int, end: Int
    ) throws -> [BusValue] {
        guard !signature.isEmpty else { return [] }
        let types = try BusType.parse(String(decoding: signature, as: UTF8.self))
        var cursor = Cursor(bytes, at: start)
        var values: [BusValue] = []
        values.reserveCapacity(types.count)
        for type in types {
            values.append(try build(type, &cursor, limit: end, depth: 0))
        }
        return values
    }
}

extension BusType {
    /// The alignment of a value of this type on the wire.
    var alignment: Int {
        switch self {
        case .byte, .signature, .variant: 1
        case .int16, .uint16: 2
        case .boolean, .int32, .uint32, .unixFD, .string, .objectPath, .array, .dictionary: 4
        case .int64, .uint64, .double, .structure: 8
        }
    }
}
