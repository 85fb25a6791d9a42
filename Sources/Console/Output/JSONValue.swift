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

/// The kinds of JSON lines, each documented field by field in
/// docs/json.md. Every line is `{"kind": …, "v": 1, …fields}`.
public enum ResultKind: String, Sendable, CaseIterable {
    case beacon, scan, selection, step, note, recap, summary
    case watchEvent = "watch_event", watchSummary = "watch_summary"
    case audit, device, deviceRow = "device_row", outcome
    case profile, profileCheck = "profile_check", sync, command
    case trip, event, incident, forgotten, check, report
    case assignment, drift, station, stationSummary = "station_summary"
    case storedValue = "stored_value"
    case recovery
}

/// The version of the JSON output: raised when a field changes meaning or
/// goes away (new fields and kinds do not raise it).
public let jsonVersion = 1

extension Terminal {
    /// One JSON line of `kind` on standard output.
    func emit(_ kind: ResultKind, _ fields: [String: JSONValue]) {
        var object = fields
        object["kind"] = .string(kind.rawValue)
        object["v"] = .integer(jsonVersion)
        document(JSONValue.object(object).text)
    }
}
