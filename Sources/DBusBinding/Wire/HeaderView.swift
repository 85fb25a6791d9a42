/// A message's fixed header and header fields, as offsets into its bytes:
/// nothing copied, nothing allocated. Built only by `HeaderView.parse`,
/// which applies every rule libdbus 1.14's loader applies to a header
/// (`_dbus_header_have_message_untrusted`, `_dbus_header_load`,
/// `load_and_validate_field`, `check_mandatory_fields`).
///
/// A view borrows the message's bytes: it is valid only while they are.
public struct HeaderView {
    /// The first 16 bytes.
    public struct Fixed: Sendable, Equatable {
        public let isBigEndian: Bool
        /// 1 call, 2 return, 3 error, 4 signal; others are valid and ignored.
        public let type: UInt8
        public let flags: UInt8
        public let bodyLength: Int
        public let serial: UInt32
        public let fieldsLength: Int
        /// 16 + the fields' length, rounded up to 8: where the body starts.
        public let headerLength: Int
        /// The whole message's length.
        public var totalLength: Int { headerLength + bodyLength }

        /// Reads the fixed header from the first 16 bytes. Needs only those
        /// (a framer can call it before the rest has arrived).
        /// - Throws: `WireRefusal` (invalid) when there are fewer than 16
        ///   bytes, the byte order is not `l`/`B`, the type is 0, the version
        ///   not 1, the serial 0, or a length is beyond D-Bus' limits.
        public static func parse(_ bytes: UnsafeRawBufferPointer) throws(WireRefusal) -> Fixed {
            guard bytes.count >= 16 else { throw .invalid("shorter than a fixed header", at: 0) }
            let bigEndian: Bool
            switch bytes[0] {
            case UInt8(ascii: "l"): bigEndian = false
            case UInt8(ascii: "B"): bigEndian = true
            default: throw .invalid("bad byte order", at: 0)
            }
            let fields = Int(DynamicOrder.u32(bytes, 12, bigEndian: bigEndian))
            let body = Int(DynamicOrder.u32(bytes, 4, bigEndian: bigEndian))
            guard fields <= WireLimits.messageBytes else { throw .invalid("insane fields array length", at: 12) }
            guard body <= WireLimits.messageBytes else { throw .invalid("insane body length", at: 4) }
            let header = (16 + fields + 7) & ~7
            guard header + body <= WireLimits.messageBytes else { throw .invalid("message too long", at: 4) }
            guard bytes[1] != 0 else { throw .invalid("bad message type", at: 1) }
            guard bytes[3] == 1 else { throw .invalid("bad protocol version", at: 3) }
            let serial = DynamicOrder.u32(bytes, 8, bigEndian: bigEndian)
            guard serial != 0 else { throw .invalid("bad serial", at: 8) }
            return Fixed(
                isBigEndian: bigEndian, type: bytes[1], flags: bytes[2], bodyLength: body, serial: serial,
                fieldsLength: fields, headerLength: header)
        }
    }

    /// Header field codes.
    public enum Field: UInt8, CaseIterable, Sendable {
        case path = 1, interface, member, errorName, replySerial, destination, sender, signature, unixFDs
        case containerInstance

        /// The type libdbus requires of the field's variant.
        var expectedType: UInt8 {
            switch self {
            case .path, .containerInstance: UInt8(ascii: "o")
            case .interface, .member, .errorName, .destination, .sender: UInt8(ascii: "s")
            case .replySerial, .unixFDs: UInt8(ascii: "u")
            case .signature: UInt8(ascii: "g")
            }
        }
    }

    /// The message: exactly `fixed.totalLength` bytes.
    public let bytes: UnsafeRawBufferPointer
    public let fixed: Fixed
    /// Per field code (index 1…10), the range of a string field's bytes
    /// (without the NUL), or for `u` fields the offset of the value.
    private var ranges: FieldRanges

    public var isBigEndian: Bool { fixed.isBigEndian }
    public var type: UInt8 { fixed.type }
    public var serial: UInt32 { fixed.serial }
    public var bodyRange: Range<Int> { fixed.headerLength..<fixed.totalLength }

    /// The bytes of a string-valued field (path, interface, member, error
    /// name, destination, sender, signature, container instance), or nil.
    public func field(_ field: Field) -> UnsafeRawBufferPointer? {
        guard let range = ranges[Int(field.rawValue)] else { return nil }
        return UnsafeRawBufferPointer(rebasing: bytes[range])
    }

    /// A field's value as a `String` (allocates: the slow path only).
    public func string(_ field: Field) -> String? {
        self.field(field).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The body's signature (empty when the field is absent).
    public var signature: UnsafeRawBufferPointer {
        field(.signature) ?? UnsafeRawBufferPointer(start: nil, count: 0)
    }

    public var replySerial: UInt32? { uint32(.replySerial) }
    public var unixFDs: UInt32? { uint32(.unixFDs) }
    /// Where the `UNIX_FDS` value sits (to patch it to 0 once the
    /// descriptors are taken).
    public var unixFDsOffset: Int? { ranges[Int(Field.unixFDs.rawValue)]?.lowerBound }

    private func uint32(_ field: Field) -> UInt32? {
        guard let range = ranges[Int(field.rawValue)] else { return nil }
        return DynamicOrder.u32(bytes, range.lowerBound, bigEndian: isBigEndian)
    }

    /// True when a field's bytes are exactly `text`'s (no allocation).
    public func field(_ field: Field, is text: StaticString) -> Bool {
        guard let value = self.field(field), value.count == text.utf8CodeUnitCount else { return false }
        return value.elementsEqual(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Parses and checks a whole message's header.
    /// - Parameter bytes: at least one whole message (bytes after it are
    ///   ignored).
    /// - Throws: `WireRefusal`: `invalid` for anything libdbus' loader
    ///   refuses, `unsupported` for a shape this parser leaves to libdbus.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(WireRefusal) -> HeaderView {
        let fixed = try Fixed.parse(bytes)
        guard bytes.count >= fixed.totalLength else { throw .invalid("message incomplete", at: bytes.count) }
        let message = UnsafeRawBufferPointer(rebasing: bytes[0..<fixed.totalLength])
        if fixed.isBigEndian {
            return try parseFields(message, fixed, WireBigEndian.self)
        }
        return try parseFields(message, fixed, WireLittleEndian.self)
    }

    private static let fieldSignature: StaticString = "(yv)"

    @inline(__always)
    private static func parseFields<Order: WireByteOrder>(
        _ bytes: UnsafeRawBufferPointer, _ fixed: Fixed, _: Order.Type
    ) throws(WireRefusal) -> HeaderView {
        var ranges = FieldRanges()
        let fieldsEnd = 16 + fixed.fieldsLength
        if fixed.fieldsLength > 0 {
            guard fixed.fieldsLength <= WireLimits.arrayBytes else {
                throw .invalid("array longer than 64 MiB", at: 12)
            }
            var cursor = WireCursor<Order>(bytes, at: 16)
            var flags = WireFlags()
            let structType = UnsafeRawBufferPointer(
                start: fieldSignature.utf8Start, count: fieldSignature.utf8CodeUnitCount)
            while cursor.position < fieldsEnd {
                // Each field: a (yv) struct, validated as libdbus validates
                // the header (a body of signature yyyyuua(yv)), then read.
                try cursor.pad(to: 8, limit: fieldsEnd)
                let start = cursor.position
                cursor.position = start
                _ = try WireWalker<Order>.validate(structType, 0, &cursor, limit: fieldsEnd, depth: 1, &flags)
                let code = bytes[start]
                guard code != 0 else { throw .invalid("header field code 0", at: start) }
                guard let field = Field(rawValue: code) else { continue }
                // The variant: signature length, signature, NUL, value.
                let signatureLength = Int(bytes[start + 1])
                let valueType = signatureLength > 0 ? bytes[start + 2] : 0
                guard valueType == field.expectedType else {
                    throw .invalid("header field has the wrong type", at: start)
                }
                guard ranges[Int(code)] == nil else { throw .invalid("header field appears twice", at: start) }
                var value = WireCursor<Order>(bytes, at: start + 2 + signatureLength + 1)
                let range: Range<Int>
                switch field.expectedType {
                case UInt8(ascii: "u"):
                    let number = try value.u32(limit: fieldsEnd)
                    range = (value.position - 4)..<value.position
                    if field == .replySerial, number == 0 { throw .invalid("reply serial 0", at: range.lowerBound) }
                case UInt8(ascii: "g"):
                    range = try value.signature(limit: fieldsEnd)
                default:
                    range = try value.text(field.expectedType == UInt8(ascii: "o") ? .path : .string, limit: fieldsEnd)
                }
                ranges[Int(code)] = range
                let text = UnsafeRawBufferPointer(rebasing: bytes[range])
                switch field {
                case .destination: guard WireText.isBusName(text) else { throw .invalid("bad destination", at: start) }
                case .sender: guard WireText.isBusName(text) else { throw .invalid("bad sender", at: start) }
                case .member: guard WireText.isMember(text) else { throw .invalid("bad member", at: start) }
                case .errorName: guard WireText.isInterface(text) else { throw .invalid("bad error name", at: start) }
                case .interface:
                    guard WireText.isInterface(text) else { throw .invalid("bad interface", at: start) }
                    guard !startsWith(bytes, range.lowerBound, "org.freedesktop.DBus.Local") else {
                        throw .invalid("uses the local interface", at: start)
                    }
                case .path:
                    guard !startsWith(bytes, range.lowerBound, "/org/freedesktop/DBus/Local") else {
                        throw .invalid("uses the local path", at: start)
                    }
                default: break
                }
            }
            guard cursor.position == fieldsEnd else { throw .invalid("array length incorrect", at: cursor.position) }
        }
        for index in fieldsEnd..<fixed.headerLength where bytes[index] != 0 {
            throw .invalid("header padding not zero", at: index)
        }
        func has(_ field: Field) -> Bool { ranges[Int(field.rawValue)] != nil }
        switch fixed.type {
        case 1:
            guard has(.path), has(.member) else { throw .invalid("method call without path or member", at: 0) }
        case 2:
            guard has(.replySerial) else { throw .invalid("method return without reply serial", at: 0) }
        case 3:
            guard has(.errorName), has(.replySerial) else {
                throw .invalid("error without name or reply serial", at: 0)
            }
        case 4:
            guard has(.path), has(.interface), has(.member) else {
                throw .invalid("signal without path, interface or member", at: 0)
            }
        default: break
        }
        return HeaderView(bytes: bytes, fixed: fixed, ranges: ranges)
    }

    /// libdbus compares the local path and interface as a prefix of the
    /// field's bytes (`_dbus_string_equal_substring`): a path that starts
    /// with `/org/freedesktop/DBus/Local` is refused too.
    private static func startsWith(_ bytes: UnsafeRawBufferPointer, _ offset: Int, _ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard offset + count <= bytes.count else { return false }
        let prefix = UnsafeRawBufferPointer(start: text.utf8Start, count: count)
        for index in 0..<count where bytes[offset + index] != prefix[index] { return false }
        return true
    }
}

/// Eleven optional ranges (field codes 0…10) inline: parsing a header
/// allocates nothing. A message is at most 128 MiB, so 32 bits per bound.
struct FieldRanges {
    private var storage = (
        UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0),
        UInt64(0), UInt64(0)
    )

    subscript(index: Int) -> Range<Int>? {
        get {
            let packed = withUnsafeBytes(of: storage) { $0.load(fromByteOffset: index * 8, as: UInt64.self) }
            guard packed != 0 else { return nil }
            return Int(packed >> 32)..<Int(packed & 0xFFFF_FFFF)
        }
        set {
            // A field's value is never at offset 0 (the fixed header is), so
            // 0 means absent.
            let packed = newValue.map { UInt64($0.lowerBound) << 32 | UInt64($0.upperBound) } ?? 0
            withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: packed, toByteOffset: index * 8, as: UInt64.self) }
        }
    }
}

/// One whole message, header and body checked as libdbus' loader checks
/// them. The body is not decoded: `BlueZDecoder` reads BlueZ' signals from
/// it into a sink, `WireWalker` into `BusValue`s.
public struct WireMessageView {
    public let header: HeaderView
    let flags: WireFlags

    public var bytes: UnsafeRawBufferPointer { header.bytes }
    public var isBigEndian: Bool { header.isBigEndian }

    /// Checks a whole message (`bytes` may continue after it).
    /// - Throws: `WireRefusal`.
    public init(validating bytes: UnsafeRawBufferPointer) throws(WireRefusal) {
        let header = try HeaderView.parse(bytes)
        let range = header.bodyRange
        if header.isBigEndian {
            flags = try WireWalker<WireBigEndian>.validateBody(
                header.bytes, signature: header.signature, start: range.lowerBound, end: range.upperBound)
        } else {
            flags = try WireWalker<WireLittleEndian>.validateBody(
                header.bytes, signature: header.signature, start: range.lowerBound, end: range.upperBound)
        }
        self.header = header
    }

    /// The body as `MessageCodec.decodeBody` gives it (allocates).
    /// - Throws: `BusError` as `decodeBody` throws it.
    public func busValues() throws -> [BusValue] {
        let range = header.bodyRange
        if isBigEndian {
            return try WireWalker<WireBigEndian>.buildBody(
                bytes, signature: header.signature, start: range.lowerBound, end: range.upperBound)
        }
        return try WireWalker<WireLittleEndian>.buildBody(
            bytes, signature: header.signature, start: range.lowerBound, end: range.upperBound)
    }
}
