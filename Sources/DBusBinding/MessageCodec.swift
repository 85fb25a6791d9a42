import Glibc

// The only place that reads and writes message bodies: BusValue to and from
// DBusMessageIter.

enum MessageCodec {
    /// Appends `values` to a message being built.
    ///
    /// The values are checked in full first (`checkEncodable`), so the
    /// append itself cannot fail half-way and no libdbus precondition can be
    /// violated.
    /// - Throws: `BusError` (`InvalidArgs`, `InvalidSignature`, `NoMemory`).
    static func append(_ values: [BusValue], to message: OpaquePointer) throws {
        guard !values.isEmpty else { return }
        for value in values { try value.checkEncodable() }
        let signature = values.map(\.type.signature).joined()
        guard LibDBus.signatureValidate(signature) else {
            throw BusError.invalidSignature(
                "The body's signature '\(signature.prefix(80))' is beyond D-Bus' limits")
        }
        var iter = LibDBus.MessageIter()
        LibDBus.messageIterInitAppend(message, &iter)
        for value in values {
            guard append(value, to: &iter) else {
                throw BusError(.noMemory, "Out of memory while encoding a message")
            }
        }
    }

    private static func appendBasic<T>(_ value: T, _ code: Int32, _ iter: inout LibDBus.MessageIter) -> Bool {
        withUnsafePointer(to: value) { LibDBus.messageIterAppendBasic(&iter, code, $0) }
    }

    private static func appendString(_ string: String, _ code: Int32, _ iter: inout LibDBus.MessageIter) -> Bool {
        string.withCString { chars in
            let pointer: UnsafePointer<CChar>? = chars
            return withUnsafePointer(to: pointer) { LibDBus.messageIterAppendBasic(&iter, code, $0) }
        }
    }

    private static func container(
        _ code: Int32, _ contained: String?, _ iter: inout LibDBus.MessageIter,
        _ body: (inout LibDBus.MessageIter) -> Bool
    ) -> Bool {
        var sub = LibDBus.MessageIter()
        let opened: Bool
        if let contained {
            opened = contained.withCString { LibDBus.messageIterOpenContainer(&iter, code, $0, &sub) }
        } else {
            opened = LibDBus.messageIterOpenContainer(&iter, code, nil, &sub)
        }
        guard opened else { return false }
        guard body(&sub) else {
            LibDBus.messageIterAbandonContainer(&iter, &sub)
            return false
        }
        return LibDBus.messageIterCloseContainer(&iter, &sub)
    }

    private static func append(_ value: BusValue, to iter: inout LibDBus.MessageIter) -> Bool {
        typealias Code = LibDBus.TypeCode
        switch value {
        case .byte(let v): return appendBasic(v, Code.byte, &iter)
        case .boolean(let v): return appendBasic(LibDBus.Boolean(v ? 1 : 0), Code.boolean, &iter)
        case .int16(let v): return appendBasic(v, Code.int16, &iter)
        case .uint16(let v): return appendBasic(v, Code.uint16, &iter)
        case .int32(let v): return appendBasic(v, Code.int32, &iter)
        case .uint32(let v): return appendBasic(v, Code.uint32, &iter)
        case .int64(let v): return appendBasic(v, Code.int64, &iter)
        case .uint64(let v): return appendBasic(v, Code.uint64, &iter)
        case .double(let v): return appendBasic(v, Code.double, &iter)
        case .string(let v): return appendString(v, Code.string, &iter)
        case .objectPath(let v): return appendString(v.rawValue, Code.objectPath, &iter)
        case .signature(let v): return appendString(v.rawValue, Code.signature, &iter)
        case .bytes(let bytes):
            return container(Code.array, "y", &iter) { sub in
                bytes.withUnsafeBufferPointer { buffer in
                    // libdbus wants a pointer to a pointer to the elements,
                    // and a non-NULL one even for zero elements.
                    let base = UnsafeRawPointer(buffer.baseAddress) ?? UnsafeRawPointer(bitPattern: 1)!
                    return withUnsafePointer(to: base) {
                        LibDBus.messageIterAppendFixedArray(&sub, Code.byte, $0, Int32(buffer.count))
                    }
                }
            }
        case .array(let element, let elements):
            return container(Code.array, element.signature, &iter) { sub in
                elements.allSatisfy { append($0, to: &sub) }
            }
        case .dictionary(let key, let valueType, let entries):
            return container(Code.array, "{" + key.signature + valueType.signature + "}", &iter) { sub in
                entries.allSatisfy { entry in
                    container(Code.dictEntry, nil, &sub) { pair in
                        append(entry.key, to: &pair) && append(entry.value, to: &pair)
                    }
                }
            }
        case .structure(let fields):
            return container(Code.structure, nil, &iter) { sub in
                fields.allSatisfy { append($0, to: &sub) }
            }
        case .variant(let inner):
            return container(Code.variant, inner.type.signature, &iter) { sub in
                append(inner, to: &sub)
            }
        }
    }

    // MARK: Decoding

    /// Reads the whole body of `message`, guided by its signature.
    ///
    /// Never traps: libdbus has validated the message on receipt, and any
    /// disagreement between the signature and the iterator, or a type this
    /// binding does not carry (`h`), is a typed error.
    /// - Throws: `BusError` named `InvalidSignature` or `NotSupported`.
    static func decodeBody(of message: OpaquePointer) throws -> [BusValue] {
        guard let cSignature = LibDBus.messageGetSignature(message) else { return [] }
        let signature = String(cString: cSignature)
        if signature.isEmpty { return [] }
        let types = try BusType.parse(signature)
        var iter = LibDBus.MessageIter()
        guard LibDBus.messageIterInit(message, &iter) else { return [] }
        var values: [BusValue] = []
        values.reserveCapacity(types.count)
        for (index, type) in types.enumerated() {
            if index > 0 { _ = LibDBus.messageIterNext(&iter) }
            values.append(try decode(type, from: &iter, depth: 0))
        }
        return values
    }

    private static func readBasic<T>(_ iter: inout LibDBus.MessageIter, _ zero: T) -> T {
        var value = zero
        withUnsafeMutablePointer(to: &value) { LibDBus.messageIterGetBasic(&iter, $0) }
        return value
    }

    private static func readString(_ iter: inout LibDBus.MessageIter) throws -> String {
        var pointer: UnsafePointer<CChar>? = nil
        withUnsafeMutablePointer(to: &pointer) { LibDBus.messageIterGetBasic(&iter, $0) }
        guard let pointer else { throw BusError.invalidSignature("A string value is missing") }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: strlen(pointer)), as: UTF8.self)
    }

    private static func decode(_ type: BusType, from iter: inout LibDBus.MessageIter, depth: Int) throws -> BusValue {
        let actual = LibDBus.messageIterGetArgType(&iter)
        guard actual == type.typeCode else {
            throw BusError.invalidSignature(
                "Expected a value of type '\(type.signature)', found type code \(actual)")
        }
        guard depth <= BusValue.maximumNestingDepth else {
            throw BusError.invalidSignature("A value is nested too deeply")
        }
        switch type {
        case .byte: return .byte(readBasic(&iter, UInt8(0)))
        case .boolean: return .boolean(readBasic(&iter, LibDBus.Boolean(0)) != 0)
        case .int16: return .int16(readBasic(&iter, Int16(0)))
        case .uint16: return .uint16(readBasic(&iter, UInt16(0)))
        case .int32: return .int32(readBasic(&iter, Int32(0)))
        case .uint32: return .uint32(readBasic(&iter, UInt32(0)))
        case .int64: return .int64(readBasic(&iter, Int64(0)))
        case .uint64: return .uint64(readBasic(&iter, UInt64(0)))
        case .double: return .double(readBasic(&iter, Double(0)))
        case .string: return .string(try readString(&iter))
        case .objectPath: return .objectPath(ObjectPath(unchecked: try readString(&iter)))
        case .signature:
            let text = try readString(&iter)
            return .signature(Signature(unchecked: text, types: try BusType.parse(text)))
        case .unixFD:
            // Reading it would hand us a duplicated descriptor to manage; the
            // message closes its own when it is released.
            throw BusError(.notSupported, "Unix file descriptors ('h') are not supported")
        case .variant:
            var sub = LibDBus.MessageIter()
            LibDBus.messageIterRecurse(&iter, &sub)
            guard let signature = LibDBus.messageIterGetSignature(&sub) else {
                throw BusError(.noMemory, "Out of memory while decoding a variant")
            }
            let types = try BusType.parse(signature)
            guard types.count == 1 else {
                throw BusError.invalidSignature("A variant holds '\(signature)', not one complete type")
            }
            return .variant(try decode(types[0], from: &sub, depth: depth + 1))
        case .array(.byte):
            var sub = LibDBus.MessageIter()
            LibDBus.messageIterRecurse(&iter, &sub)
            var pointer: UnsafeRawPointer? = nil
            var count: Int32 = 0
            withUnsafeMutablePointer(to: &pointer) { LibDBus.messageIterGetFixedArray(&sub, $0, &count) }
            guard count > 0, let pointer else { return .bytes([]) }
            return .bytes(Array(UnsafeRawBufferPointer(start: pointer, count: Int(count))))
        case .array(let element):
            var sub = LibDBus.MessageIter()
            LibDBus.messageIterRecurse(&iter, &sub)
            var elements: [BusValue] = []
            while LibDBus.messageIterGetArgType(&sub) != LibDBus.TypeCode.invalid {
                elements.append(try decode(element, from: &sub, depth: depth + 1))
                _ = LibDBus.messageIterNext(&sub)
            }
            return .array(element, elements)
        case .dictionary(let keyType, let valueType):
            var sub = LibDBus.MessageIter()
            LibDBus.messageIterRecurse(&iter, &sub)
            var entries: [BusValue.DictEntry] = []
            while LibDBus.messageIterGetArgType(&sub) == LibDBus.TypeCode.dictEntry {
                var pair = LibDBus.MessageIter()
                LibDBus.messageIterRecurse(&sub, &pair)
                let key = try decode(keyType, from: &pair, depth: depth + 2)
                guard LibDBus.messageIterNext(&pair) else {
                    throw BusError.invalidSignature("A dictionary entry has no value")
                }
                let value = try decode(valueType, from: &pair, depth: depth + 2)
                entries.append(.init(key, value))
                _ = LibDBus.messageIterNext(&sub)
            }
            return .dictionary(key: keyType, value: valueType, entries)
        case .structure(let fieldTypes):
            var sub = LibDBus.MessageIter()
            LibDBus.messageIterRecurse(&iter, &sub)
            var fields: [BusValue] = []
            fields.reserveCapacity(fieldTypes.count)
            for (index, fieldType) in fieldTypes.enumerated() {
                if index > 0, !LibDBus.messageIterNext(&sub) {
                    throw BusError.invalidSignature("A structure ends before its signature does")
                }
                fields.append(try decode(fieldType, from: &sub, depth: depth + 1))
            }
            return .structure(fields)
        }
    }
}

/// D-Bus messages in their wire form, for tools that hold bytes (fuzzing,
/// captures): libdbus checks the framing, this binding decodes the body.
public enum WireMessage {
    /// Decodes a whole marshalled message's body.
    /// - Throws: `BusError` `InvalidArgs` when libdbus rejects the bytes,
    ///   else what `decodeBody` throws for a body this binding cannot carry.
    public static func decodeBody(marshalled bytes: [UInt8]) throws -> [BusValue] {
        guard let message = LibDBus.messageDemarshal(bytes) else { throw BusError(.invalidArgs, "not a D-Bus message") }
        defer { LibDBus.messageUnref(message) }
        return try MessageCodec.decodeBody(of: message)
    }

    /// A message's wire form (to seed corpora).
    public static func marshal(method: String, body: [BusValue]) throws -> [UInt8] {
        guard let message = LibDBus.messageNewMethodCall("org.example.Fuzz", "/", "org.example.Fuzz", method) else {
            throw BusError(.noMemory, "no message")
        }
        defer { LibDBus.messageUnref(message) }
        try MessageCodec.append(body, to: message)
        guard var bytes = LibDBus.messageMarshal(message) else { throw BusError(.noMemory, "cannot marshal") }
        // libdbus gives a message its serial only when it is sent; one with
        // serial 0 is invalid, and libdbus would refuse these bytes before
        // their body is read. Serial 1, in the message's own byte order.
        if bytes.count >= 12 {
            let serial: [UInt8] = bytes[0] == UInt8(ascii: "B") ? [0, 0, 0, 1] : [1, 0, 0, 0]
            bytes.replaceSubrange(8..<12, with: serial)
        }
        return bytes
    }
}
