/// A JSON value, typed, and its one writer: `text` puts every string
/// through `JSONText` (escaped so the line is safe on a terminal) and
/// sorts an object's keys, so the same value is always the same bytes.
/// The console's JSON lines and the fleet report's data block are written
/// with it.
public enum JSONValue: Sendable, Equatable {
    case string(String)
    case integer(Int)
    case number(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([String: JSONValue])

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
