import Foundation

/// Bytes a beacon chooses for itself — a Device Information string, its
/// advertised name — which need not be text at all: control characters,
/// NUL, invalid UTF-8, any length.
///
/// In a fleet or state file it is one of
/// - a JSON string: its UTF-8 bytes (JSON escapes reach every code point:
///   `"\u001b]0;pwned\u0007"`, `"\u0000"`, `"\u009b"`);
/// - `{"text": "…"}`, `{"hex": "1b5d30…"}` or `{"base64": "G10w…"}` (hex
///   digits in either case; white space between them is ignored);
/// - any of these objects with `"repeat": N`: its bytes N times
///   (`{"text": "A", "repeat": 4000}`);
/// - an array of any of these: their concatenation
///   (`["SB-1", {"hex": "ff"}, "\u001b[2J"]`).
///
/// It is written back as a JSON string when the bytes are valid UTF-8, and
/// as `{"hex": …}` otherwise, so a state file keeps every byte.
public struct ByteString: Hashable, Sendable, Codable, ExpressibleByStringLiteral, CustomStringConvertible {
    public var bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public init(stringLiteral text: String) { bytes = Array(text.utf8) }
    public init(_ text: String) { bytes = Array(text.utf8) }

    /// The bytes as text, invalid UTF-8 replaced by U+FFFD (for reports).
    public var lossyText: String { String(decoding: bytes, as: UTF8.self) }

    /// The bytes in lower-case hexadecimal.
    public var hex: String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// Whether the bytes are valid UTF-8 (a NUL is valid UTF-8).
    public var isUTF8: Bool { String(validating: bytes, as: UTF8.self) != nil }

    public var description: String { isUTF8 ? lossyText.debugDescription : "hex " + hex }

    /// The most a `repeat` may ask for, so a typo cannot eat the memory.
    static let maximumRepeat = 1 << 20

    private enum Key: String, CodingKey, CaseIterable {
        case text, hex, base64
        case `repeat`
    }

    public init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer(), let text = try? single.decode(String.self) {
            bytes = Array(text.utf8)
            return
        }
        if var parts = try? decoder.unkeyedContainer() {
            var bytes: [UInt8] = []
            while !parts.isAtEnd { bytes += try parts.decode(ByteString.self).bytes }
            self.bytes = bytes
            return
        }
        let object: KeyedDecodingContainer<Key>
        do {
            object = try decoder.container(keyedBy: Key.self)
        } catch {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "a byte string is a JSON string, {\"hex\": …}, {\"base64\": …}, {\"text\": …} or an array of them"
                ))
        }
        let forms = [Key.text, .hex, .base64].filter { object.contains($0) }
        guard forms.count == 1, let form = forms.first else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "a byte string object has exactly one of \"text\", \"hex\" or \"base64\""))
        }
        let value = try object.decode(String.self, forKey: form)
        var bytes: [UInt8]
        switch form {
        case .hex:
            guard let parsed = Self.parseHex(value) else {
                throw DecodingError.dataCorruptedError(
                    forKey: .hex, in: object, debugDescription: "'\(value)' is not an even number of hex digits")
            }
            bytes = parsed
        case .base64:
            guard let data = Data(base64Encoded: value, options: .ignoreUnknownCharacters) else {
                throw DecodingError.dataCorruptedError(forKey: .base64, in: object, debugDescription: "not base64")
            }
            bytes = Array(data)
        default:
            bytes = Array(value.utf8)
        }
        if let times = try object.decodeIfPresent(Int.self, forKey: .repeat) {
            guard times >= 0, times <= Self.maximumRepeat, bytes.count * times <= Self.maximumRepeat else {
                throw DecodingError.dataCorruptedError(
                    forKey: .repeat, in: object,
                    debugDescription: "repeat \(times) is outside 0–\(Self.maximumRepeat) bytes in all")
            }
            bytes = Array([[UInt8]](repeating: bytes, count: times).joined())
        }
        self.bytes = bytes
    }

    public func encode(to encoder: any Encoder) throws {
        if let text = String(validating: bytes, as: UTF8.self) {
            var single = encoder.singleValueContainer()
            try single.encode(text)
        } else {
            var object = encoder.container(keyedBy: Key.self)
            try object.encode(hex, forKey: .hex)
        }
    }

    static func parseHex(_ text: String) -> [UInt8]? {
        let digits = text.unicodeScalars.filter { !$0.properties.isWhitespace }.map { Character($0) }
        guard digits.count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = digits[index].hexDigitValue, let low = digits[index + 1].hexDigitValue else { return nil }
            bytes.append(UInt8(high << 4 | low))
            index += 2
        }
        return bytes
    }
}

/// What bluetoothd does with the name a device advertises before it shows
/// it as `Name` (and, unless a client set one, `Alias`) on D-Bus — BlueZ
/// 5.66, src/eir.c (`eir_parse`, `name2utf8`) and src/device.c
/// (`btd_device_device_set_name`, `dev_property_get_alias`):
///
/// 1. trailing NUL bytes are dropped ("some vendors put a NUL byte
///    terminator into the name");
/// 2. a name that is then valid UTF-8 with no NUL (`g_utf8_validate`) is
///    kept as it is — control characters, escape sequences, bidi overrides
///    and all;
/// 3. any other name ends at its first NUL, every byte that is not ASCII
///    becomes a space, and leading and trailing white space
///    (`g_strstrip`: tab, line feed, form feed, carriage return, space) is
///    removed — ESC, BEL and the other ASCII controls stay;
/// 4. the name is cut to 248 bytes (`MAX_NAME_LENGTH`); bluetoothd's
///    `strncpy` may split a character there, which D-Bus could not carry,
///    so the simulator cuts before the split character;
/// 5. an empty name is no name: `Name` is absent and `Alias` is the address
///    with dashes (`C1-67-5E-0B-B9-80`).
///
/// BlueZ 5.84 and later (commit "eir: Use strtoutf8 for device names")
/// differ at step 3: they cut the name at its first byte that does not
/// start or continue a UTF-8 sequence, instead of replacing non-ASCII bytes.
public enum BlueZName {
    public static let maximumLength = 248

    /// The `Name` bluetoothd shows for `advertised`, or nil for none.
    public static func name(advertised: [UInt8]) -> String? {
        var bytes = advertised[...]
        while bytes.last == 0 { bytes = bytes.dropLast() }
        var name: String
        if !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self) {
            name = text
        } else {
            let ascii = bytes.prefix { $0 != 0 }.map { $0 < 0x80 ? $0 : 0x20 }
            let isSpace: (UInt8) -> Bool = { [0x09, 0x0A, 0x0C, 0x0D, 0x20].contains($0) }
            let start = ascii.firstIndex { !isSpace($0) } ?? ascii.endIndex
            let end = ascii.lastIndex { !isSpace($0) }.map { $0 + 1 } ?? start
            name = String(decoding: ascii[start..<max(start, end)], as: UTF8.self)
        }
        if name.utf8.count > maximumLength {
            var cut = String.UnicodeScalarView()
            var length = 0
            for scalar in name.unicodeScalars {
                length += UTF8.width(scalar)
                guard length <= maximumLength else { break }
                cut.append(scalar)
            }
            name = String(cut)
        }
        return name.isEmpty ? nil : name
    }

    /// `Alias` when no client has set one: the name, else the address with dashes.
    public static func alias(advertised: [UInt8], address: String) -> String {
        name(advertised: advertised) ?? address.replacingOccurrences(of: ":", with: "-")
    }
}
