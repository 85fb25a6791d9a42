/// Signatures on the wire: libdbus' validator, a strict walker of complete
/// types, alignments, and the table of the value types BlueZ sends, each
/// with a reader of its own (`WireValue`'s typed accessors).
public enum SignatureTable {
    /// The shapes of a property's value the fast path reads without the
    /// generic walker (a variant's signature, matched by its bytes).
    public enum Kind: UInt8, Sendable {
        case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
        case string, objectPath, signature
        /// `ay`
        case bytes
        /// `as`
        case strings
        /// `ao`
        case objectPaths
        /// `a{qv}`: ManufacturerData (each value is a variant, BlueZ puts `ay`).
        case uint16Variants
        /// `a{sv}`: ServiceData, and nested property maps.
        case stringVariants
        /// `a{yv}`: AdvertisingData.
        case byteVariants
        /// `v`: a variant inside the variant.
        case variant
        /// Anything else: a valid single complete type outside the table.
        case other
    }

    /// The kind of one complete type given by its signature bytes.
    @inline(__always)
    public static func kind(of signature: UnsafeRawBufferPointer) -> Kind {
        switch signature.count {
        case 1:
            switch signature[0] {
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
            case UInt8(ascii: "v"): return .variant
            default: return .other
            }
        case 2 where signature[0] == UInt8(ascii: "a"):
            switch signature[1] {
            case UInt8(ascii: "y"): return .bytes
            case UInt8(ascii: "s"): return .strings
            case UInt8(ascii: "o"): return .objectPaths
            default: return .other
            }
        case 5
        where signature[0] == UInt8(ascii: "a") && signature[1] == UInt8(ascii: "{")
            && signature[3] == UInt8(ascii: "v") && signature[4] == UInt8(ascii: "}"):
            switch signature[2] {
            case UInt8(ascii: "q"): return .uint16Variants
            case UInt8(ascii: "s"): return .stringVariants
            case UInt8(ascii: "y"): return .byteVariants
            default: return .other
            }
        default: return .other
        }
    }

    /// The alignment of a value whose type starts with `code`.
    @inline(__always)
    static func alignment(_ code: UInt8) -> Int {
        switch code {
        case UInt8(ascii: "n"), UInt8(ascii: "q"): 2
        case UInt8(ascii: "b"), UInt8(ascii: "i"), UInt8(ascii: "u"), UInt8(ascii: "h"), UInt8(ascii: "s"),
            UInt8(ascii: "o"), UInt8(ascii: "a"):
            4
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "("), UInt8(ascii: "{"): 8
        default: 1
        }
    }

    /// Fixed-size types (`dbus_type_is_fixed`) and their size.
    @inline(__always)
    static func fixedSize(_ code: UInt8) -> Int? {
        switch code {
        case UInt8(ascii: "y"): 1
        case UInt8(ascii: "n"), UInt8(ascii: "q"): 2
        case UInt8(ascii: "b"), UInt8(ascii: "i"), UInt8(ascii: "u"), UInt8(ascii: "h"): 4
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"): 8
        default: nil
        }
    }

    @inline(__always)
    static func isBasic(_ code: UInt8) -> Bool {
        fixedSize(code) != nil || code == UInt8(ascii: "s") || code == UInt8(ascii: "o") || code == UInt8(ascii: "g")
    }

    /// `_dbus_validate_signature_with_reason` of libdbus 1.14, rule for
    /// rule (including its counting: consecutive `a`s, struct and dict-entry
    /// nesting counted apart, each at most 32). `offset` is only for the
    /// refusal's position.
    public static func validate(_ s: UnsafeRawBufferPointer, at offset: Int = 0) throws(WireRefusal) {
        guard s.count <= 255 else { throw .invalid("signature too long", at: offset) }
        // Element counts per open struct or dict entry (and the top level).
        var stack = ElementCounts()
        var structDepth = 0
        var arrayDepth = 0
        var dictDepth = 0
        var last: UInt8 = 0
        var index = 0
        while index < s.count {
            let c = s[index]
            switch c {
            case UInt8(ascii: "y"), UInt8(ascii: "b"), UInt8(ascii: "n"), UInt8(ascii: "q"), UInt8(ascii: "i"),
                UInt8(ascii: "u"), UInt8(ascii: "h"), UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"),
                UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"), UInt8(ascii: "v"):
                break
            case UInt8(ascii: "a"):
                arrayDepth += 1
                guard arrayDepth <= 32 else { throw .invalid("signature: too many nested arrays", at: offset + index) }
            case UInt8(ascii: "("):
                structDepth += 1
                guard structDepth <= 32 else {
                    throw .invalid("signature: structs nested too deeply", at: offset + index)
                }
                stack.push(kind: 1)
            case UInt8(ascii: ")"):
                // 1.14.10 also refuses a `)` that closes a dict entry (the
                // copy of the validator this was first written from did
                // not: the fuzzer found `ia{s(adb}v)ab`, which 1.14.10
                // refuses as "Dict entry ended but not started").
                guard structDepth > 0, stack.topKind == 1 else {
                    throw .invalid("signature: struct ended but not started", at: offset + index)
                }
                guard last != UInt8(ascii: "(") else { throw .invalid("signature: empty struct", at: offset + index) }
                _ = stack.pop()
                structDepth -= 1
            case UInt8(ascii: "{"):
                guard last == UInt8(ascii: "a") else {
                    throw .invalid("signature: dict entry not inside an array", at: offset + index)
                }
                dictDepth += 1
                guard dictDepth <= 32 else {
                    throw .invalid("signature: dict entries nested too deeply", at: offset + index)
                }
                stack.push(kind: 2)
            case UInt8(ascii: "}"):
                guard dictDepth > 0, stack.topKind == 2 else {
                    throw .invalid("signature: dict entry ended but not started", at: offset + index)
                }
                dictDepth -= 1
                guard stack.pop() == 2 else {
                    throw .invalid("signature: dict entry without two fields", at: offset + index)
                }
            default:
                throw .invalid("signature: unknown type code", at: offset + index)
            }
            if c != UInt8(ascii: "a") && c != UInt8(ascii: "{") && c != UInt8(ascii: "(") {
                stack.increment()
            }
            if arrayDepth > 0 {
                if c == UInt8(ascii: "a") {
                    // libdbus looks at the byte after an `a` (the NUL after
                    // the last one).
                    let next = index + 1 < s.count ? s[index + 1] : 0
                    if next == UInt8(ascii: ")") || next == UInt8(ascii: "}") {
                        throw .invalid("signature: array without element type", at: offset + index)
                    }
                } else {
                    arrayDepth = 0
                }
            }
            if last == UInt8(ascii: "{") && !isBasic(c) {
                throw .invalid("signature: dict key must be a basic type", at: offset + index)
            }
            last = c
            index += 1
        }
        guard arrayDepth == 0 else { throw .invalid("signature: array without element type", at: offset + index) }
        guard structDepth == 0 else { throw .invalid("signature: struct started but not ended", at: offset + index) }
        guard dictDepth == 0 else { throw .invalid("signature: dict entry started but not ended", at: offset + index) }
    }

    /// The element counts of open structs and dict entries (at most 64 + 1
    /// levels, so a fixed array: nothing allocated).
    private struct ElementCounts {
        var depth = 0
        var inline = InlineCounts()
        /// Per level: 1 for a struct, 2 for a dict entry (0 the top).
        var kinds = InlineCounts()

        var topKind: UInt8 { kinds[depth] }

        mutating func push(kind: UInt8) {
            depth += 1
            inline[depth] = 0
            kinds[depth] = kind
        }
        mutating func pop() -> Int {
            let value = Int(inline[depth])
            if depth > 0 { depth -= 1 }
            return value
        }
        mutating func increment() { inline[depth] &+= 1 }
    }

    /// 66 small counters (dict entries only need to tell 0, 1, 2 and more).
    private struct InlineCounts {
        var words = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        subscript(index: Int) -> UInt8 {
            get {
                withUnsafeBytes(of: words) { $0[index] }
            }
            set {
                withUnsafeMutableBytes(of: &words) { $0[index] = min(newValue, 3) }
            }
        }
    }

    /// The index just past the complete type that starts at `index`, read
    /// strictly (brackets properly nested). libdbus' validator accepts a
    /// few improperly nested signatures (such as `a{i(ii})`); those end here
    /// as `unsupported`, for libdbus to judge.
    static func skip(_ s: UnsafeRawBufferPointer, _ index: Int, depth: Int = 0) throws(WireRefusal) -> Int {
        guard index < s.count, depth <= 128 else { throw .unsupported("signature not nested as a tree", at: index) }
        switch s[index] {
        case UInt8(ascii: "a"):
            return try skip(s, index + 1, depth: depth + 1)
        case UInt8(ascii: "("):
            var next = index + 1
            while true {
                guard next < s.count else { throw .unsupported("signature not nested as a tree", at: next) }
                if s[next] == UInt8(ascii: ")") { return next + 1 }
                next = try skip(s, next, depth: depth + 1)
            }
        case UInt8(ascii: "{"):
            let key = try skip(s, index + 1, depth: depth + 1)
            let value = try skip(s, key, depth: depth + 1)
            guard value < s.count, s[value] == UInt8(ascii: "}"), key == index + 2 else {
                throw .unsupported("signature not nested as a tree", at: value)
            }
            return value + 1
        case UInt8(ascii: ")"), UInt8(ascii: "}"):
            throw .unsupported("signature not nested as a tree", at: index)
        default:
            return index + 1
        }
    }
}
