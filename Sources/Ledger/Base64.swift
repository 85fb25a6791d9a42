/// Standard base64 (RFC 4648 §4, with `=` padding), as signed notes and
/// checkpoints use it. Decoding is strict: only the canonical encoding of
/// some bytes is accepted (no white space, no missing padding, no stray
/// bits in the last character), so one value has exactly one text.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = bytes[index]
            let b1 = index + 1 < bytes.count ? bytes[index + 1] : 0
            let b2 = index + 2 < bytes.count ? bytes[index + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            out.append(index + 1 < bytes.count ? alphabet[Int((b1 & 0x0f) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(index + 2 < bytes.count ? alphabet[Int(b2 & 0x3f)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes, or nil when `text` is not the canonical encoding of any.
    static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let units = Array(text.utf8)
        guard units.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(units.count / 4 * 3)
        var index = 0
        while index < units.count {
            let last = index + 4 == units.count
            var values: [UInt8] = []
            var padding = 0
            for unit in units[index..<index + 4] {
                if unit == UInt8(ascii: "=") {
                    padding += 1
                    continue
                }
                guard padding == 0, let value = value(of: unit) else { return nil }
                values.append(value)
            }
            guard padding == 0 || (last && padding <= 2) else { return nil }
            out.append(values[0] << 2 | values[1] >> 4)
            if values.count > 2 { out.append(values[1] << 4 | values[2] >> 2) }
            if values.count > 3 { out.append(values[2] << 6 | values[3]) }
            index += 4
        }
        // Stray bits in the last character make a second text for the
        // same bytes: refused.
        guard encode(out) == String(decoding: units, as: UTF8.self) else { return nil }
        return out
    }

    private static func value(of unit: UInt8) -> UInt8? {
        switch unit {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): unit - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): unit - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): unit - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }
}
