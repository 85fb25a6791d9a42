/// Where one D-Bus message ends, from its 16-byte fixed header, and the one
/// header field the reader itself must see (`UNIX_FDS`, to hand a message's
/// descriptors out in order). Everything else about a message is read by
/// libdbus (`dbus_message_demarshal`) as before.
///
/// The fixed header: byte order (`l` or `B`), type, flags, protocol version
/// (1), body length, serial, length of the header-field array; the fields
/// follow from byte 16 and the body starts at the next multiple of 8.
struct FixedHeader: Equatable {
    static let size = 16
    /// `DBUS_MAXIMUM_MESSAGE_LENGTH`: 128 MiB.
    static let maximumMessageLength = 134_217_728

    var littleEndian: Bool
    var type: UInt8
    var flags: UInt8
    var version: UInt8
    var bodyLength: Int
    var serial: UInt32
    var fieldsLength: Int

    /// Offset of the body: the fields, padded to 8.
    var bodyOffset: Int { (Self.size + fieldsLength + 7) & ~7 }
    /// The whole message's length.
    var totalLength: Int { bodyOffset + bodyLength }

    enum Violation: Error, Equatable, CustomStringConvertible {
        case byteOrder(UInt8)
        case version(UInt8)
        case fieldsLength(Int)
        case bodyLength(Int)
        case tooLong(Int)

        var description: String {
            switch self {
            case .byteOrder(let byte): "byte order mark \(byte) is neither 'l' nor 'B'"
            case .version(let version): "protocol version \(version), not 1"
            case .fieldsLength(let length): "a header-field array of \(length) bytes"
            case .bodyLength(let length): "a body of \(length) bytes"
            case .tooLong(let length): "a message of \(length) bytes (at most 128 MiB)"
            }
        }
    }

    /// Reads the fixed header at the start of `bytes` (at least 16 of them).
    /// The limits are libdbus' (`_dbus_header_have_message_untrusted`),
    /// plus the protocol version: past a violation the next message's start
    /// is unknown, so the caller closes the connection, as libdbus does.
    init(_ bytes: UnsafeRawBufferPointer) throws(Violation) {
        precondition(bytes.count >= Self.size)
        let little: Bool
        switch bytes[0] {
        case UInt8(ascii: "l"): little = true
        case UInt8(ascii: "B"): little = false
        default: throw .byteOrder(bytes[0])
        }
        func word(_ offset: Int) -> UInt32 {
            let raw = bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
            return little ? UInt32(littleEndian: raw) : UInt32(bigEndian: raw)
        }
        littleEndian = little
        type = bytes[1]
        flags = bytes[2]
        version = bytes[3]
        bodyLength = Int(word(4))
        serial = word(8)
        fieldsLength = Int(word(12))
        guard version == 1 else { throw .version(version) }
        guard fieldsLength <= Self.maximumMessageLength else { throw .fieldsLength(fieldsLength) }
        guard bodyLength <= Self.maximumMessageLength else { throw .bodyLength(bodyLength) }
        guard totalLength <= Self.maximumMessageLength else { throw .tooLong(totalLength) }
    }
}

enum Framing {
    /// Header field code of `UNIX_FDS` (a `u`).
    static let unixFDsCode: UInt8 = 9

    /// The number of descriptors a complete message says it carries (its
    /// `UNIX_FDS` header field, 0 when absent), after setting that field to
    /// 0 in place when `clear` is true — libdbus' `dbus_message_demarshal`
    /// refuses a message that claims descriptors its bytes cannot carry, and
    /// the binding passes none on. Nil when the header fields cannot be
    /// walked (a corrupt message).
    static func unixFDs(in message: UnsafeMutableRawBufferPointer, clear: Bool) -> UInt32? {
        guard message.count >= FixedHeader.size,
            let header = try? FixedHeader(UnsafeRawBufferPointer(message)),
            header.totalLength <= message.count
        else { return nil }
        let end = FixedHeader.size + header.fieldsLength
        var reader = FieldReader(
            bytes: UnsafeRawBufferPointer(message), littleEndian: header.littleEndian, offset: FixedHeader.size,
            end: end)
        var found: UInt32 = 0
        while reader.offset < end {
            reader.align(8)
            guard let code = reader.byte(), let signature = reader.readSignature() else { return nil }
            if code == unixFDsCode, signature.count == 1, signature[0] == UInt8(ascii: "u") {
                reader.align(4)
                let at = reader.offset
                guard let value = reader.word() else { return nil }
                found = value
                if clear { message.storeBytes(of: 0, toByteOffset: at, as: UInt32.self) }
            } else {
                guard reader.skip(signature, depth: 0) else { return nil }
            }
            guard reader.offset <= end else { return nil }
        }
        return found
    }
}

/// A bounded walk over header-field values: every read is checked against
/// `end`, nesting is capped at 64, as libdbus caps it.
private struct FieldReader {
    let bytes: UnsafeRawBufferPointer
    let littleEndian: Bool
    var offset: Int
    let end: Int

    mutating func align(_ boundary: Int) {
        offset = (offset + boundary - 1) & ~(boundary - 1)
    }

    mutating func byte() -> UInt8? {
        guard offset < end else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func word() -> UInt32? {
        align(4)
        guard offset + 4 <= end else { return nil }
        let raw = bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)
        offset += 4
        return littleEndian ? UInt32(littleEndian: raw) : UInt32(bigEndian: raw)
    }

    /// A `g`: length byte, bytes, NUL.
    mutating func readSignature() -> [UInt8]? {
        guard let length = byte().map(Int.init), offset + length + 1 <= end else { return nil }
        let signature = Array(bytes[offset..<offset + length])
        offset += length + 1
        return signature
    }

    /// Skips one value of each complete type in `signature`.
    mutating func skip(_ signature: [UInt8], depth: Int) -> Bool {
        var index = 0
        while index < signature.count {
            guard let next = skipOne(signature, at: index, depth: depth) else { return false }
            index = next
        }
        return true
    }

    /// Skips one value of the complete type starting at `signature[index]`;
    /// the index after that type.
    private mutating func skipOne(_ signature: [UInt8], at index: Int, depth: Int) -> Int? {
        guard depth < 64, index < signature.count else { return nil }
        switch signature[index] {
        case UInt8(ascii: "y"):
            return fixed(1, index)
        case UInt8(ascii: "n"), UInt8(ascii: "q"):
            return fixed(2, index)
        case UInt8(ascii: "b"), UInt8(ascii: "i"), UInt8(ascii: "u"), UInt8(ascii: "h"):
            return fixed(4, index)
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"):
            return fixed(8, index)
        case UInt8(ascii: "s"), UInt8(ascii: "o"):
            guard let length = word().map(Int.init), offset + length + 1 <= end else { return nil }
            offset += length + 1
            return index + 1
        case UInt8(ascii: "g"):
            return readSignature() == nil ? nil : index + 1
        case UInt8(ascii: "v"):
            guard let inner = readSignature(), skip(inner, depth: depth + 1) else { return nil }
            return index + 1
        case UInt8(ascii: "a"):
            guard let length = word().map(Int.init), let elementEnd = Self.typeEnd(signature, index + 1) else {
                return nil
            }
            align(Self.alignment(of: signature[index + 1]))
            guard offset + length <= end else { return nil }
            offset += length
            return elementEnd
        case UInt8(ascii: "("), UInt8(ascii: "{"):
            guard let close = Self.typeEnd(signature, index) else { return nil }
            align(8)
            var inner = index + 1
            while inner < close - 1 {
                guard let next = skipOne(signature, at: inner, depth: depth + 1) else { return nil }
                inner = next
            }
            return close
        default:
            return nil
        }
    }

    private mutating func fixed(_ size: Int, _ index: Int) -> Int? {
        align(size)
        guard offset + size <= end else { return nil }
        offset += size
        return index + 1
    }

    static func alignment(of code: UInt8) -> Int {
        switch code {
        case UInt8(ascii: "y"), UInt8(ascii: "g"), UInt8(ascii: "v"): 1
        case UInt8(ascii: "n"), UInt8(ascii: "q"): 2
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "("), UInt8(ascii: "{"): 8
        default: 4
        }
    }

    /// The index after the complete type starting at `index`.
    static func typeEnd(_ signature: [UInt8], _ index: Int) -> Int? {
        var index = index
        var depth = 0
        while index < signature.count {
            let code = signature[index]
            index += 1
            switch code {
            case UInt8(ascii: "a"):
                continue
            case UInt8(ascii: "("), UInt8(ascii: "{"):
                depth += 1
                continue
            case UInt8(ascii: ")"), UInt8(ascii: "}"):
                depth -= 1
                guard depth >= 0 else { return nil }
            default:
                break
            }
            if depth == 0 { return index }
        }
        return nil
    }
}
