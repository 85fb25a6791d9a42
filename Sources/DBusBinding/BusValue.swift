/// Any D-Bus value, nested to any depth.
///
/// Byte arrays (`ay`) have their own case, `bytes`, because BlueZ moves
/// characteristic values and advert payloads as `ay` and they should not
/// cost an enum per byte. Decoding always produces `bytes` for `ay`;
/// encoding also accepts `array(.byte, …)`.
public indirect enum BusValue: Hashable, Sendable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(Signature)
    /// `ay`.
    case bytes([UInt8])
    /// `aT`: the element type is kept so that an empty array has a type.
    case array(BusType, [BusValue])
    /// `a{KV}`.
    case dictionary(key: BusType, value: BusType, [DictEntry])
    /// `(…)`: at least one field.
    case structure([BusValue])
    /// `v`.
    case variant(BusValue)

    /// One entry of a `dictionary`.
    public struct DictEntry: Hashable, Sendable {
        public var key: BusValue
        public var value: BusValue
        public init(_ key: BusValue, _ value: BusValue) {
            self.key = key
            self.value = value
        }
    }

    /// The value's type; for a variant, `v` (not the type of its contents).
    public var type: BusType {
        switch self {
        case .byte: .byte
        case .boolean: .boolean
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .bytes: .array(.byte)
        case .array(let element, _): .array(element)
        case .dictionary(let key, let value, _): .dictionary(key: key, value: value)
        case .structure(let fields): .structure(fields.map(\.type))
        case .variant: .variant
        }
    }
}

// MARK: - Building values

extension BusValue {
    /// `a{sv}` from a Swift dictionary, each value wrapped in a variant,
    /// keys in sorted order so that messages are reproducible.
    public static func propertyMap(_ properties: [String: BusValue]) -> BusValue {
        .dictionary(
            key: .string, value: .variant,
            properties.sorted { $0.key < $1.key }.map { DictEntry(.string($0.key), .variant($0.value)) }
        )
    }

    /// `as`.
    public static func strings(_ strings: [String]) -> BusValue {
        .array(.string, strings.map(BusValue.string))
    }

    /// `ao`.
    public static func objectPaths(_ paths: [ObjectPath]) -> BusValue {
        .array(.objectPath, paths.map(BusValue.objectPath))
    }
}

extension BusValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
}

// MARK: - Reading values

extension BusValue {
    /// The value inside any number of variants.
    public var unwrapped: BusValue {
        var value = self
        while case .variant(let inner) = value { value = inner }
        return value
    }

    public var byte: UInt8? { if case .byte(let v) = unwrapped { v } else { nil } }
    public var bool: Bool? { if case .boolean(let v) = unwrapped { v } else { nil } }
    public var int16: Int16? { if case .int16(let v) = unwrapped { v } else { nil } }
    public var uint16: UInt16? { if case .uint16(let v) = unwrapped { v } else { nil } }
    public var int32: Int32? { if case .int32(let v) = unwrapped { v } else { nil } }
    public var uint32: UInt32? { if case .uint32(let v) = unwrapped { v } else { nil } }
    public var int64: Int64? { if case .int64(let v) = unwrapped { v } else { nil } }
    public var uint64: UInt64? { if case .uint64(let v) = unwrapped { v } else { nil } }
    public var double: Double? { if case .double(let v) = unwrapped { v } else { nil } }
    public var string: String? { if case .string(let v) = unwrapped { v } else { nil } }
    public var objectPath: ObjectPath? { if case .objectPath(let v) = unwrapped { v } else { nil } }

    /// The bytes of an `ay`, whichever case carries them.
    public var bytes: [UInt8]? {
        switch unwrapped {
        case .bytes(let bytes): return bytes
        case .array(.byte, let elements):
            var out: [UInt8] = []
            out.reserveCapacity(elements.count)
            for element in elements {
                guard case .byte(let b) = element else { return nil }
                out.append(b)
            }
            return out
        default: return nil
        }
    }

    /// The elements of any array (for `ay`, one `.byte` per element).
    public var elements: [BusValue]? {
        switch unwrapped {
        case .array(_, let elements): elements
        case .bytes(let bytes): bytes.map(BusValue.byte)
        case .dictionary(_, _, let entries): entries.map { .structure([$0.key, $0.value]) }
        default: nil
        }
    }

    /// The fields of a structure.
    public var fields: [BusValue]? { if case .structure(let f) = unwrapped { f } else { nil } }

    /// The entries of a dictionary.
    public var entries: [DictEntry]? {
        if case .dictionary(_, _, let e) = unwrapped { e } else { nil }
    }

    /// `as` as Swift strings.
    public var stringArray: [String]? {
        guard case .array(.string, let elements) = unwrapped else { return nil }
        return elements.compactMap(\.string)
    }

    /// `ao` as paths.
    public var objectPathArray: [ObjectPath]? {
        guard case .array(.objectPath, let elements) = unwrapped else { return nil }
        return elements.compactMap(\.objectPath)
    }

    /// A dictionary with string keys (`a{sv}`, `a{ss}`, `a{sa{sv}}` …); the
    /// values are kept as they are (variants unwrapped), the last duplicate
    /// key wins.
    public var stringKeyedDictionary: [String: BusValue]? {
        guard case .dictionary(.string, _, let entries) = unwrapped else { return nil }
        var out: [String: BusValue] = [:]
        out.reserveCapacity(entries.count)
        for entry in entries {
            guard case .string(let key) = entry.key else { return nil }
            out[key] = entry.value.unwrapped
        }
        return out
    }

    /// A dictionary with object-path keys (`a{oa{sa{sv}}}` …).
    public var pathKeyedDictionary: [ObjectPath: BusValue]? {
        guard case .dictionary(.objectPath, _, let entries) = unwrapped else { return nil }
        var out: [ObjectPath: BusValue] = [:]
        for entry in entries {
            guard case .objectPath(let key) = entry.key else { return nil }
            out[key] = entry.value.unwrapped
        }
        return out
    }

    /// A dictionary with `u16` keys (`a{qv}`: BlueZ' ManufacturerData).
    public var uint16KeyedDictionary: [UInt16: BusValue]? {
        guard case .dictionary(.uint16, _, let entries) = unwrapped else { return nil }
        var out: [UInt16: BusValue] = [:]
        for entry in entries {
            guard case .uint16(let key) = entry.key else { return nil }
            out[key] = entry.value.unwrapped
        }
        return out
    }
}

// MARK: - Checking a value before it reaches libdbus

extension BusValue {
    /// D-Bus' limit on container nesting in a message (arrays, structures,
    /// dict entries and variants together), as libdbus' validator counts it.
    static let maximumNestingDepth = 64
    /// D-Bus' limit on the byte length of one array.
    static let maximumArrayBytes = 64 * 1024 * 1024

    /// Checks that the value can be encoded as it claims: every element of
    /// an array has the array's element type, strings hold no NUL byte,
    /// structures are not empty, nesting stays within D-Bus' limits. libdbus
    /// aborts the process on some of these, so this runs first, in full,
    /// before the first byte is appended.
    /// - Throws: `BusError` named `InvalidArgs`.
    func checkEncodable(depth: Int = 0) throws {
        switch self {
        case .string(let string):
            guard !string.utf8.contains(0) else {
                throw BusError.invalidArgs("A string value contains a NUL byte")
            }
        case .bytes(let bytes):
            guard depth < Self.maximumNestingDepth else { throw Self.tooDeep }
            guard bytes.count <= Self.maximumArrayBytes else {
                throw BusError.invalidArgs("A byte array is longer than D-Bus allows (64 MiB)")
            }
        case .array(let element, let elements):
            guard depth < Self.maximumNestingDepth else { throw Self.tooDeep }
            try element.checkSignatureOfContainer()
            for value in elements {
                guard value.type == element else {
                    throw BusError.invalidArgs(
                        "An array of '\(element.signature)' holds a '\(value.type.signature)'")
                }
                try value.checkEncodable(depth: depth + 1)
            }
        case .dictionary(let key, let valueType, let entries):
            guard depth + 1 < Self.maximumNestingDepth else { throw Self.tooDeep }
            guard key.isBasic else {
                throw BusError.invalidArgs("Dictionary key type '\(key.signature)' is not basic")
            }
            for entry in entries {
                guard entry.key.type == key, entry.value.type == valueType else {
                    throw BusError.invalidArgs(
                        "A dictionary of '{\(key.signature)\(valueType.signature)}' holds '{\(entry.key.type.signature)\(entry.value.type.signature)}'"
                    )
                }
                try entry.key.checkEncodable(depth: depth + 2)
                try entry.value.checkEncodable(depth: depth + 2)
            }
        case .structure(let fields):
            guard depth < Self.maximumNestingDepth else { throw Self.tooDeep }
            guard !fields.isEmpty else { throw BusError.invalidArgs("A structure has no fields") }
            for field in fields { try field.checkEncodable(depth: depth + 1) }
        case .variant(let inner):
            guard depth < Self.maximumNestingDepth else { throw Self.tooDeep }
            try inner.type.checkSignatureOfContainer()
            try inner.checkEncodable(depth: depth + 1)
        default:
            break
        }
    }

    private static let tooDeep = BusError.invalidArgs(
        "A value is nested deeper than D-Bus allows (\(maximumNestingDepth) containers)")
}

extension BusType {
    /// Checks a type's own signature against libdbus' limits (length 255,
    /// 32 nested arrays, 32 nested structures).
    func checkSignatureOfContainer() throws {
        let signature = self.signature
        guard LibDBus.signatureValidateSingle(signature) else {
            throw BusError.invalidSignature(
                "Type '\(signature.prefix(80))' is beyond D-Bus' limits (length 255, 32 nested arrays or structures)"
            )
        }
    }
}
