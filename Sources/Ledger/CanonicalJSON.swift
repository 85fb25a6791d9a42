import SafeText

/// The ledger's one JSON writer (docs/ledger.md, "Entries"): no white
/// space, members in the order given, strings escaped exactly as Python's
/// `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` escapes
/// them, so that any entry parsed and written again by that call gives the
/// same bytes.
public enum CanonicalJSON {
    /// A value an entry may hold. Equal by its bytes (docs/development.md,
    /// "Stored values are compared as bytes"): text and member names by
    /// their UTF-8 bytes, never by canonical equivalence; a real by its bit
    /// pattern.
    public enum Value: Sendable, Equatable {
        case null
        case integer(Int64)
        /// Never in an entry the tool writes: only in one made again from a
        /// row someone else wrote a real number into (written as Python's
        /// `repr` writes it, which Swift's `description` matches for every
        /// finite value).
        case real(Double)
        case text(String)
        case array([Value])
        /// Members in this order (never sorted, never deduplicated).
        case object([(String, Value)])

        public static func == (a: Value, b: Value) -> Bool {
            switch (a, b) {
            case (.null, .null): true
            case (.integer(let x), .integer(let y)): x == y
            case (.real(let x), .real(let y)): x.bitPattern == y.bitPattern
            case (.text(let x), .text(let y)): x.sameBytes(y)
            case (.array(let x), .array(let y)): x == y
            case (.object(let x), .object(let y)):
                x.count == y.count && zip(x, y).allSatisfy { $0.0.sameBytes($1.0) && $0.1 == $1.1 }
            default: false
            }
        }
    }

    /// The value's bytes.
    public static func encode(_ value: Value) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, to: &out)
        return out
    }

    public static func write(_ value: Value, to out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])  // null
        case .integer(let number): writeInteger(number, to: &out)
        case .real(let number): out.append(contentsOf: (number.isFinite ? "\(number)" : "null").utf8)
        case .text(let text): writeString(text, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(item, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, (name, item)) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                writeString(name, to: &out)
                out.append(UInt8(ascii: ":"))
                write(item, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    public static func writeInteger(_ number: Int64, to out: inout [UInt8]) {
        if number == 0 {
            out.append(UInt8(ascii: "0"))
            return
        }
        if number < 0 { out.append(UInt8(ascii: "-")) }
        // Through UInt64: Int64.min's magnitude does not fit an Int64.
        // The digits are appended lowest first, then turned around in place
        // (no array of their own: this runs for every integer of every entry).
        var magnitude = number.magnitude
        let start = out.count
        while magnitude > 0 {
            out.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        }
        out[start...].reverse()
    }

    /// A JSON string, escaped as Python's encoder does with
    /// `ensure_ascii=False`.
    public static func writeString(_ text: String, to out: inout [UInt8]) {
        // Lower-case hex digits, computed (no table to allocate per string).
        func hex(_ nibble: UInt8) -> UInt8 {
            nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
        }
        out.append(UInt8(ascii: "\""))
        // Most strings need no escape: their bytes at once.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(contentsOf: text.utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [0x5C, 0x22])
            case UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, 0x5C])
            case 0x08: out.append(contentsOf: [0x5C, UInt8(ascii: "b")])
            case 0x0C: out.append(contentsOf: [0x5C, UInt8(ascii: "f")])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0x00..<0x20:
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(hex(byte >> 4))
                out.append(hex(byte & 0x0F))
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
