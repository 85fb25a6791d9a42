import SafeText

/// A JSON value as the console writes it: typed, so that every kind's
/// fields have the types docs/json.md gives them, and written with
/// `JSONText` (every string escaped so the line is safe on a terminal).
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
        case .array(let values): return "[" + values.map(\.text).joined(separator: ",") + "]"
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
    static func optional(_ text: String?) -> JSONValue { text.map(JSONValue.string) ?? .null }
    /// An integer, or null.
    static func optional<I: BinaryInteger>(_ value: I?) -> JSONValue { value.map { .integer(Int($0)) } ?? .null }
    static func int<I: BinaryInteger>(_ value: I) -> JSONValue { .integer(Int(value)) }
}
