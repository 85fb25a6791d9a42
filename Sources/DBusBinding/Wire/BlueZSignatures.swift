/// What the fast decoders tell: BlueZ' objects, their interfaces and
/// properties, in message order. The registry implements it; the names and
/// values it receives are borrowed (valid only during the call).
///
/// Call order per message: `beginObject`, then for each interface
/// `interface` followed by its `property` calls (PropertiesChanged:
/// one interface, then its `invalidated` names; InterfacesRemoved:
/// `interfaceRemoved` calls only), then `end`; GetManagedObjects repeats
/// this per object. Nothing is called for a message that fails validation:
/// the whole message is checked before the first call.
public protocol WirePropertySink {
    /// The object: for PropertiesChanged the header's path, else the body's.
    mutating func beginObject(path: WireName)
    mutating func interface(_ name: WireName)
    mutating func property(_ name: WireName, _ value: WireValue)
    /// PropertiesChanged's invalidated properties (of the one interface).
    mutating func invalidated(_ name: WireName)
    /// InterfacesRemoved's interfaces.
    mutating func interfaceRemoved(_ name: WireName)
    /// The end of one object.
    mutating func end()
}

/// The four body shapes the fast path decodes, chosen by exact signature.
public enum BlueZShape: Sendable, Equatable {
    /// `sa{sv}as`: org.freedesktop.DBus.Properties.PropertiesChanged.
    case propertiesChanged
    /// `oa{sa{sv}}`: org.freedesktop.DBus.ObjectManager.InterfacesAdded.
    case interfacesAdded
    /// `oas`: InterfacesRemoved.
    case interfacesRemoved
    /// `a{oa{sa{sv}}}`: the reply to GetManagedObjects.
    case managedObjects

    /// The shape whose signature is exactly `signature`, or nil.
    public init?(signature: UnsafeRawBufferPointer) {
        func equals(_ text: StaticString) -> Bool {
            signature.count == text.utf8CodeUnitCount
                && signature.elementsEqual(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }
        if equals("sa{sv}as") {
            self = .propertiesChanged
        } else if equals("oa{sa{sv}}") {
            self = .interfacesAdded
        } else if equals("oas") {
            self = .interfacesRemoved
        } else if equals("a{oa{sa{sv}}}") {
            self = .managedObjects
        } else {
            return nil
        }
    }
}

/// The fast decoders: a validated message of one of BlueZ' four shapes,
/// straight into a `WirePropertySink`, names interned, values as borrowed
/// `WireValue`s. Nothing is allocated per value (interning a name not seen
/// before appends it to its table, within the table's bound).
public enum BlueZDecoder {
    /// Decodes `message` into `sink` if its body is one of the four shapes.
    ///
    /// Whether the message is a PropertiesChanged of interest (interface,
    /// member, sender) is the caller's question: this only reads the body.
    /// - Parameters:
    ///   - names: property and interface names (`InternTable.blueZ()`).
    ///   - paths: object paths.
    /// - Returns: the shape decoded, or nil (another signature: nothing
    ///   was called on the sink).
    @discardableResult
    public static func decode<Sink: WirePropertySink>(
        _ message: WireMessageView, names: InternTable, paths: InternTable, into sink: inout Sink
    ) -> BlueZShape? {
        guard let shape = BlueZShape(signature: message.header.signature) else { return nil }
        if message.isBigEndian {
            Reader<WireBigEndian, Sink>.decode(shape, message, names, paths, &sink)
        } else {
            Reader<WireLittleEndian, Sink>.decode(shape, message, names, paths, &sink)
        }
        return shape
    }

    /// The readers, compiled once per byte order. They run on a message
    /// validated whole, so every read is in bounds by construction; reads
    /// still go through `WireCursor`'s checks, and a failure (a bug, not
    /// bad input) stops the message where it is.
    enum Reader<Order: WireByteOrder, Sink: WirePropertySink> {
        typealias Cursor = WireCursor<Order>

        static func decode(
            _ shape: BlueZShape, _ message: WireMessageView, _ names: InternTable, _ paths: InternTable,
            _ sink: inout Sink
        ) {
            let bytes = message.bytes
            let body = message.header.bodyRange
            var cursor = Cursor(bytes, at: body.lowerBound)
            let end = body.upperBound
            do {
                switch shape {
                case .propertiesChanged:
                    let path = message.header.field(.path) ?? UnsafeRawBufferPointer(start: nil, count: 0)
                    sink.beginObject(path: WireName(id: paths.id(path), bytes: path))
                    let interface = try name(&cursor, end, names)
                    sink.interface(interface)
                    try properties(&cursor, end, depth: 0, names, &sink)
                    try strings(&cursor, end, names) { sink.invalidated($0) }
                    sink.end()
                case .interfacesAdded:
                    let path = try name(&cursor, end, paths, path: true)
                    sink.beginObject(path: path)
                    try interfaces(&cursor, end, depth: 0, names, &sink)
                    sink.end()
                case .interfacesRemoved:
                    let path = try name(&cursor, end, paths, path: true)
                    sink.beginObject(path: path)
                    try strings(&cursor, end, names) { sink.interfaceRemoved($0) }
                    sink.end()
                case .managedObjects:
                    let length = Int(try cursor.u32(limit: end))
                    try cursor.pad(to: 8, limit: end)
                    let arrayEnd = cursor.position + length
                    while cursor.position < arrayEnd {
                        try cursor.pad(to: 8, limit: arrayEnd)
                        let path = try name(&cursor, arrayEnd, paths, path: true)
                        sink.beginObject(path: path)
                        try interfaces(&cursor, arrayEnd, depth: 2, names, &sink)
                        sink.end()
                    }
                }
            } catch {
                // Unreachable on a validated message.
                assertionFailure("fast decoder failed on a validated message: \(error)")
            }
        }

        @inline(__always)
        static func name(
            _ cursor: inout Cursor, _ limit: Int, _ table: InternTable, path: Bool = false
        ) throws(WireRefusal) -> WireName {
            let range = try cursor.textRange(limit: limit)
            let bytes = UnsafeRawBufferPointer(rebasing: cursor.bytes[range])
            return WireName(id: table.id(bytes), bytes: bytes)
        }

        /// An `as`, each element to `body`.
        @inline(__always)
        static func strings(
            _ cursor: inout Cursor, _ limit: Int, _ table: InternTable, _ body: (WireName) -> Void
        ) throws(WireRefusal) {
            let length = Int(try cursor.u32(limit: limit))
            let end = cursor.position + length
            while cursor.position < end {
                body(try name(&cursor, end, table))
            }
        }

        /// An `a{sa{sv}}` whose array starts at `depth`.
        static func interfaces(
            _ cursor: inout Cursor, _ limit: Int, depth: Int, _ names: InternTable, _ sink: inout Sink
        ) throws(WireRefusal) {
            let length = Int(try cursor.u32(limit: limit))
            try cursor.pad(to: 8, limit: limit)
            let end = cursor.position + length
            while cursor.position < end {
                try cursor.pad(to: 8, limit: end)
                sink.interface(try name(&cursor, end, names))
                try properties(&cursor, end, depth: depth + 2, names, &sink)
            }
        }

        /// An `a{sv}` whose array is at `depth`: each entry to the sink.
        static func properties(
            _ cursor: inout Cursor, _ limit: Int, depth: Int, _ names: InternTable, _ sink: inout Sink
        ) throws(WireRefusal) {
            let length = Int(try cursor.u32(limit: limit))
            try cursor.pad(to: 8, limit: limit)
            let end = cursor.position + length
            let bytes = cursor.bytes
            while cursor.position < end {
                try cursor.pad(to: 8, limit: end)
                let key = try name(&cursor, end, names)
                let signatureLength = Int(try cursor.u8(limit: end))
                let signatureStart = cursor.position
                guard signatureLength > 0, signatureStart + signatureLength < end else {
                    throw .invalid("bad variant", at: signatureStart)
                }
                let signature = UnsafeRawBufferPointer(
                    rebasing: bytes[signatureStart..<(signatureStart + signatureLength)])
                cursor.position = signatureStart + signatureLength + 1
                try cursor.pad(to: SignatureTable.alignment(signature[0]), limit: end)
                let start = cursor.position
                let valueEnd = WireValue.end(
                    of: signature, at: start, in: bytes, bigEndian: Order.isBigEndian, limit: end)
                guard valueEnd <= end else { throw .invalid("value out of bounds", at: start) }
                sink.property(
                    key,
                    WireValue(
                        message: bytes, isBigEndian: Order.isBigEndian, signature: signature,
                        kind: SignatureTable.kind(of: signature), start: start, end: valueEnd, depth: depth + 3))
                cursor.position = valueEnd
            }
        }
    }
}

extension WireCursor {
    /// A validated string's bytes (no text check: the message was checked).
    @inline(__always)
    mutating func textRange(limit: Int) throws(WireRefusal) -> Range<Int> {
        let length = Int(try u32(limit: limit))
        let start = position
        guard length < limit - start else { throw .invalid("string length out of bounds", at: start) }
        position = start + length + 1
        return start..<(start + length)
    }
}
