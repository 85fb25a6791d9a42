/// One complete D-Bus type: what a single-type signature describes.
public indirect enum BusType: Hashable, Sendable, CustomStringConvertible {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature
    /// `h`: recognised in signatures; values of it are refused by the codec.
    case unixFD
    case variant
    case array(BusType)
    /// `a{KV}`: an array of dict entries.
    case dictionary(key: BusType, value: BusType)
    case structure([BusType])

    /// The type's signature, such as `a{sv}`.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .variant: "v"
        case .array(let element): "a" + element.signature
        case .dictionary(let key, let value): "a{" + key.signature + value.signature + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    public var description: String { signature }

    /// True for the types that may be dictionary keys.
    public var isBasic: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// `a{sv}`, the property bag.
    public static let propertyMap = BusType.dictionary(key: .string, value: .variant)

    /// The libdbus type code that an iterator reports for a value of this type.
    var typeCode: Int32 {
        switch self {
        case .byte: LibDBus.TypeCode.byte
        case .boolean: LibDBus.TypeCode.boolean
        case .int16: LibDBus.TypeCode.int16
        case .uint16: LibDBus.TypeCode.uint16
        case .int32: LibDBus.TypeCode.int32
        case .uint32: LibDBus.TypeCode.uint32
        case .int64: LibDBus.TypeCode.int64
        case .uint64: LibDBus.TypeCode.uint64
        case .double: LibDBus.TypeCode.double
        case .string: LibDBus.TypeCode.string
        case .objectPath: LibDBus.TypeCode.objectPath
        case .signature: LibDBus.TypeCode.signature
        case .unixFD: LibDBus.TypeCode.unixFD
        case .variant: LibDBus.TypeCode.variant
        case .array, .dictionary: LibDBus.TypeCode.array
        case .structure: LibDBus.TypeCode.structure
        }
    }

    /// Parses a signature into its complete types.
    ///
    /// This is a strict parser of its own (it never traps, whatever the
    /// input); `Signature.init` runs libdbus' validator first, which also
    /// enforces the length and nesting limits.
    /// - Throws: `BusError` named `InvalidSignature`.
    public static func parse(_ signature: String) throws -> [BusType] {
        if let known = parsed.withLock({ $0[signature] }) { return known }
        var parser = Parser(bytes: Array(signature.utf8))
        var types: [BusType] = []
        while !parser.atEnd {
            types.append(try parser.completeType(arrays: 0, structures: 0))
        }
        // A bus carries few distinct signatures; each message's body, and
        // each variant in it, would otherwise be parsed again.
        if signature.utf8.count <= 64 {
            parsed.withLock { cache in
                if cache.count < 1024 { cache[signature] = types }
            }
        }
        return types
    }

    /// Signatures parsed already (valid ones only; bounded).
    private static let parsed = Locked<[String: [BusType]]>([:])

    private struct Parser {
        let bytes: [UInt8]
        var position = 0
        var atEnd: Bool { position >= bytes.count }

        /// D-Bus' limits: 32 nested arrays and 32 nested structures (dict
        /// entries count as structures).
        static let maximumDepth = 32

        func failure(_ why: String) -> BusError {
            .invalidSignature(
                "Invalid signature '\(String(decoding: bytes, as: UTF8.self).debugEscaped)': \(why) at offset \(position)"
            )
        }

        mutating func completeType(arrays: Int, structures: Int) throws -> BusType {
            guard arrays <= Self.maximumDepth, structures <= Self.maximumDepth else {
                throw failure("nested too deeply")
            }
            guard position < bytes.count else { throw failure("unexpected end") }
            let code = bytes[position]
            position += 1
            switch code {
            case UInt8(ascii: "y"): return .byte
            case UInt8(ascii: "b"): return .boolean
            case UInt8(ascii: "n"): return .int16
            case UInt8(ascii: "q"): return .uint16
            case UInt8(ascii: "i"): return .int32
            case UInt8(ascii: "u"): return .uint32
            case UInt8(ascii: "x"): return .int64
            case UInt8(ascii: "t"): return .uint64
            case UInt8(ascii: "d"): return .double
            case UInt8(ascii: "s"): return .string
            case UInt8(ascii: "o"): return .objectPath
            case UInt8(ascii: "g"): return .signature
            case UInt8(ascii: "h"): return .unixFD
            case UInt8(ascii: "v"): return .variant
            case UInt8(ascii: "a"):
                if position < bytes.count, bytes[position] == UInt8(ascii: "{") {
                    position += 1
                    let key = try completeType(arrays: arrays + 1, structures: structures + 1)
                    guard key.isBasic else { throw failure("dictionary key must be a basic type") }
                    let value = try completeType(arrays: arrays + 1, structures: structures + 1)
                    guard position < bytes.count, bytes[position] == UInt8(ascii: "}") else {
                        throw failure("dictionary entry must hold exactly two types")
                    }
                    position += 1
                    return .dictionary(key: key, value: value)
                }
                return .array(try completeType(arrays: arrays + 1, structures: structures))
            case UInt8(ascii: "("):
                var fields: [BusType] = []
                while true {
                    guard position < bytes.count else { throw failure("unclosed structure") }
                    if bytes[position] == UInt8(ascii: ")") {
                        position += 1
                        break
                    }
                    fields.append(try completeType(arrays: arrays, structures: structures + 1))
                }
                guard !fields.isEmpty else { throw failure("empty structure") }
                return .structure(fields)
            default:
                throw failure("unexpected character '\(Character(Unicode.Scalar(code)))'")
            }
        }
    }
}
