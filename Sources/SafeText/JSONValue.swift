/// A JSON value, typed, and its one writer: `text` puts every string
/// through `JSONText` (escaped so the line is safe on a terminal) and
/// sorts an object's keys, so the same value is always the same bytes.
/// The console's JSON lines and the fleet report's data block are written
/// with it. Equal by its bytes (`sameBytes`; docs/development.md, "Stored
/// values are compared as bytes"): strings and keys by their UTF-8 bytes,
/// never by canonical equivalence, a number by its bit pattern.
public enum JSONValue: Sendable, Equatable {
    case string(String)
    case integer(Int)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): x.sameBytes(y)
        case (.integer(let x), .integer(let y)): x == y
        case (.number(let x), .number(let y)): x.bitPattern == y.bitPattern
        case (.bool(let x), .bool(let y)): x == y
        case (.null, .null): true
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)): sameMembers(x, y)
        default: false
        }
    }

    /// The same keys (by their bytes) with equal values.
    static func sameMembers(_ x: [String: JSONValue], _ y: [String: JSONValue]) -> Bool {
        func byBytes(_ members: [String: JSONValue]) -> [(key: [UInt8], value: JSONValue)] {
            members.map { (Array($0.key.utf8), $0.value) }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        }
        return x.count == y.count && zip(byBytes(x), byBytes(y)).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    /// The value as one line of JSON, keys sorted.
    public var text: String {
        switch self {
        case .string(let text): return JSONText.string(text)
        case .integer(let value): return String(value)
        case .number(let value): return value.isFinite ? String(value) : "null"
        case .bool(let value): return value ? "true" : "false"
        case .null: return "null"
        case .array(let values): return "[" + values.map { $0.text }.joined(separator: ",") + "]"
        case .object(let fields):
            return "{"
                + fields.sorted { $0.key < $1.key }.map { JSONText.string($0.key) + ":" + $0.value.text }
                .joined(separator: ",") + "}"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSONValue {
    /// A string, or null.
    public static func optional(_ text: String?) -> JSONValue { text.map(JSONValue.string) ?? .null }
    /// An integer, or null.
    public static func optional<I: BinaryInteger>(_ value: I?) -> JSONValue { value.map { .integer(Int($0)) } ?? .null }
    /// An integer of any width.
    public static func int<I: BinaryInteger>(_ value: I) -> JSONValue { .integer(Int(value)) }
}
