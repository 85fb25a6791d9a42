import FoundationEssentials
import Profiles
import SBeaconProtocol
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// Values read back from storage are input: a bench's SQLite file can be
/// edited by anyone who can write it, and the shared server holds what
/// every bench (and anyone with its password) sent. Every value the read
/// commands use passes through a `RowCheck`, against one rule per column
/// (`StoredRule.columns`): the ranges of the wire contract
/// (SBeaconProtocol: `DrivingBehaviourConfig.thresholdRange`, …), the
/// profile name grammar, the inventory's timestamp form. A value that
/// fails is not used: the field reads as unknown, or (a key, a time a
/// listing sorts by) the row is left out, and a `StoredFinding` names the
/// table, the row and the field. docs/inventory.md ("Values read back").

/// A stored value that failed its check.
public struct StoredFinding: Sendable, Hashable, CustomStringConvertible {
    /// The table (`devices`, `outcomes`, …) as the schema names it.
    public var table: String
    /// The row's key (an address, an id, …), made visible and bounded.
    public var row: String
    /// The column.
    public var field: String
    /// The value, made visible and bounded (`'text'`, `12`, `1.5 (real)`,
    /// `x'00ff' (blob)`, `NULL`).
    public var value: String
    /// What is wrong with it.
    public var reason: String

    public init(table: String, row: String, field: String, value: String, reason: String) {
        self.table = table
        self.row = row
        self.field = field
        self.value = value
        self.reason = reason
    }

    /// `devices row C0:FE:00:00:00:01, calibration_x: 40000 is outside -32768–32767`.
    public var description: String { "\(table) row \(row), \(field): \(value) \(reason)" }
}

/// What a column may hold.
public enum StoredRule: Sendable {
    /// An SQLite integer in the range.
    case integer(ClosedRange<Int64>)
    /// Text of at most this many UTF-8 bytes, any characters (shown
    /// visibly wherever it is shown: text from a device, an error).
    case text(Int)
    /// Text of 1 to this many bytes without control characters (a step
    /// name, a status, a bench id).
    case label(Int)
    /// `C0:FE:00:00:00:01`: six uppercase hex pairs.
    case address
    /// The inventory's timestamp form, a real date (`Inventory.parseTimestamp`).
    case timestamp
    /// `MAJOR.MINOR.PATCH` (`FirmwareVersion`).
    case firmware
    /// A profile name (`Profile.isValidName`).
    case profile
    /// One of these words.
    case oneOf([String])

    static let identityPart: StoredRule = .integer(0...Int64(UInt16.max))
    static let vectorPart: StoredRule = .integer(Int64(Int16.min)...Int64(Int16.max))
    static let threshold: StoredRule = .integer(
        Int64(
            DrivingBehaviourConfig.thresholdRange.lowerBound)...Int64(DrivingBehaviourConfig.thresholdRange.upperBound))
    static let duration: StoredRule = .integer(
        Int64(DrivingBehaviourConfig.durationRange.lowerBound)...Int64(DrivingBehaviourConfig.durationRange.upperBound))
    static let unsigned16: StoredRule = .integer(0...Int64(UInt16.max))
    /// Epoch milliseconds up to 9999-12-31 (a pulled record's time, a
    /// time offset): a product or sum of two of them cannot overflow.
    static let milliseconds: StoredRule = .integer(0...253_402_300_799_999)
    /// A step's duration: at most a day.
    static let stepMilliseconds: StoredRule = .integer(0...FleetHistory.stepMillisecondsLimit)
    /// A row id: positive, and exact in a JSON reader's doubles (2^53).
    static let id: StoredRule = .integer(1...(1 << 53))
    /// A Device Information string: an attribute's 512 bytes, each byte
    /// that is no UTF-8 kept as a character (up to 4 bytes of UTF-8).
    static let deviceText: StoredRule = .text(2048)
    static let message: StoredRule = .text(16 * 1024)

    /// The rule of every column the read commands use, by table: one
    /// definition for the SQLite inventory and the server (whose tables
    /// have the same columns, and `bench_id`).
    public static let columns: [String: [String: StoredRule]] = [
        "devices": [
            "address": .address, "mac_ending": .label(32), "major": identityPart, "minor": identityPart,
            "model": deviceText, "serial": deviceText, "hardware_revision": deviceText, "firmware": .firmware,
            "first_seen": .timestamp, "last_seen": .timestamp, "battery": .integer(0...100), "battery_at": .timestamp,
            "calibrated": .integer(0...1), "calibrated_at": .timestamp, "calibration_x": vectorPart,
            "calibration_y": vectorPart, "calibration_z": vectorPart, "time_offset_ms": milliseconds,
            "profile": .profile, "config_cornering": threshold, "config_braking": threshold,
            "config_acceleration": threshold, "config_duration": duration,
            "config_enable": .integer(0...Int64(DrivingBehaviourConfig.EnableFlags.all.rawValue)),
            "config_read_at": .timestamp, "identity_at": .timestamp, "description_at": .timestamp,
            "firmware_at": .timestamp, "calibration_read_at": .timestamp, "time_offset_at": .timestamp,
            "forgotten_at": .timestamp, "benches": .text(64 * 1024),
        ],
        "outcomes": [
            "id": id, "local_id": id, "run_id": id, "device": .address, "step": .label(256),
            "status": .oneOf(["running", "ok", "changed", "unchanged", "skipped", "failed", "interrupted"]),
            "detail": message, "error": message, "started_at": .timestamp, "ended_at": .timestamp,
            "duration_ms": stepMilliseconds, "retries": .integer(0...1_000_000), "bench_id": .label(64),
        ],
        "readings": [
            "device": .address, "at": .timestamp, "battery": .integer(0...100),
            "rssi": .integer(Int64(Int16.min)...Int64(Int16.max)), "firmware": deviceText, "bench_id": .label(64),
        ],
        "trips": [
            "device": .address, "start_ms": milliseconds, "end_ms": milliseconds,
            "beacon_index": .integer(0...Int64(UInt8.max)), "pulled_at": .timestamp, "bench_id": .label(64),
        ],
        "events": [
            "device": .address, "at_ms": milliseconds,
            "type": .oneOf(["acceleration", "braking", "cornering", "accident"]), "duration_ms": unsigned16,
            "average_mg": unsigned16, "maximum_mg": unsigned16, "x_mg": vectorPart, "y_mg": vectorPart,
            "z_mg": vectorPart, "beacon_index": .integer(0...Int64(UInt8.max)), "pulled_at": .timestamp,
            "bench_id": .label(64),
        ],
        "incidents": [
            "device": .address, "incident_id": unsigned16, "at_ms": milliseconds, "max_resultant": unsigned16,
            "avg_resultant": unsigned16, "x_mg": vectorPart, "y_mg": vectorPart, "z_mg": vectorPart,
            "samples": .text(64 * 1024), "pulled_at": .timestamp, "bench_id": .label(64),
        ],
        "identities": [
            "major": identityPart, "minor": identityPart, "device": .address,
            "source": .oneOf(["profile", "explicit", "found", "server"]), "profile": .profile,
            "run_id": id, "reserved_at": .timestamp,
        ],
        "identity_claims": [
            "address": .address, "major": identityPart, "minor": identityPart, "bench_id": .label(64),
        ],
        "assignments": [
            "address": .address, "profile": .profile, "major": identityPart,
            "minor_policy": .oneOf(Assignment.MinorPolicy.allCases.map(\.rawValue)), "minor": identityPart,
            "overrides": .text(4096), "assigned_at": .timestamp, "assigned_by": .label(256),
            "source": .oneOf(Assignment.Source.allCases.map(\.rawValue)), "converged_at": .timestamp,
            "converged_run": id,
        ],
    ]

    /// Why `value` breaks the rule, or nil when it keeps it. NULL keeps
    /// every rule (a column that must not be NULL says so in `RowCheck`).
    public func problem(_ value: SQLiteValue) -> String? {
        if case .null = value { return nil }
        switch self {
        case .integer(let range):
            guard case .integer(let number) = value else { return "is \(Self.kind(value)), not an integer" }
            return range.contains(number) ? nil : "is outside \(range.lowerBound)–\(range.upperBound)"
        case .text(let limit):
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            return text.utf8.count <= limit ? nil : "is \(text.utf8.count) bytes long (at most \(limit))"
        case .label(let limit):
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            if text.isEmpty { return "is empty" }
            if text.utf8.count > limit { return "is \(text.utf8.count) bytes long (at most \(limit))" }
            return text.unicodeScalars.allSatisfy(Visible.isShownAsIs) ? nil : "holds control characters"
        case .address:
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            return Self.isAddress(text) ? nil : "is not an address (C0:FE:00:00:00:01)"
        case .timestamp:
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            return Inventory.parseTimestamp(text) != nil
                ? nil : "is not a time of the form 2026-11-30T09:41:07.123Z (a real date, UTC)"
        case .firmware:
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            return (try? FirmwareVersion(text)) != nil && text.utf8.count <= 11
                ? nil : "is not a firmware version (MAJOR.MINOR.PATCH)"
        case .profile:
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            return ProfileLoader.isValidName(text) ? nil : "is not a profile name (letters, digits, - and _)"
        case .oneOf(let words):
            guard case .text(let text) = value else { return "is \(Self.kind(value)), not text" }
            return words.containsSameBytes(text) ? nil : "is not one of \(words.joined(separator: ", "))"
        }
    }

    static func kind(_ value: SQLiteValue) -> String {
        switch value {
        case .null: "NULL"
        case .integer: "an integer"
        case .real: "a real number"
        case .text: "text"
        case .blob: "a blob"
        }
    }

    /// Six pairs of uppercase hex digits separated by colons.
    public static func isAddress(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 17 else { return false }
        for (index, byte) in bytes.enumerated() {
            if index % 3 == 2 {
                guard byte == UInt8(ascii: ":") else { return false }
            } else {
                guard (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) else { return false }
            }
        }
        return true
    }

    /// Text from storage as it may be shown (`Visible.text`).
    public static func visible(_ text: some StringProtocol, limit: Int) -> String { Visible.text(text, limit: limit) }

    /// A value as a finding shows it: visible, bounded.
    public static func shown(_ value: SQLiteValue) -> String {
        switch value {
        case .null: "NULL"
        case .integer(let number): "\(number)"
        case .real(let number): "\(number) (real)"
        case .text(let text): "'" + Visible.text(text, limit: 48) + "'"
        case .blob(let bytes):
            "x'" + bytes.prefix(16).map { CFormat.string("%02x", $0) }.joined()
                + (bytes.count > 16 ? "…' (blob, \(bytes.count) bytes)" : "' (blob)")
        }
    }
}

/// The check of one row read back: each column through its rule
/// (`StoredRule.columns`), the failures kept as findings. A row builder
/// makes one, reads each value through it, and hands its findings on.
public struct RowCheck: Sendable {
    public let table: String
    /// The row's key as findings name it (visible, bounded).
    public let key: String
    public private(set) var findings: [StoredFinding] = []
    private let rules: [String: StoredRule]

    /// - Parameter key: the key's columns' values (an address; an id; a
    ///   device and a time), shown joined by `/`.
    public init(_ table: String, key: [SQLiteValue]) {
        self.table = table
        rules = StoredRule.columns[table] ?? [:]
        self.key = key.map { value -> String in
            // A plain key as it is (an address, a bench id); any other quoted.
            if case .text(let text) = value, !text.isEmpty, text.utf8.count <= 40,
                text.unicodeScalars.allSatisfy({ Visible.isShownAsIs($0) && $0 != " " && $0 != "'" && $0 != "/" })
            {
                return text
            }
            return StoredRule.shown(value)
        }.joined(separator: "/")
    }

    /// Whether every value read so far kept its rule.
    public var isClean: Bool { findings.isEmpty }

    /// Records a finding for `field` (a rule the column alone cannot say).
    public mutating func fail(_ field: String, _ value: SQLiteValue, _ reason: String) {
        findings.append(
            StoredFinding(table: table, row: key, field: field, value: StoredRule.shown(value), reason: reason))
    }

    /// Adds the findings of another check (a joined table's).
    public mutating func add(_ other: [StoredFinding]) { findings += other }

    /// `value` when it keeps `field`'s rule, else nil (and a finding).
    /// With `required`, NULL is a failure too.
    public mutating func value(_ value: SQLiteValue, _ field: String, required: Bool = false) -> SQLiteValue? {
        if case .null = value {
            if required { fail(field, value, "is NULL where a value is required") }
            return nil
        }
        if let problem = rules[field]?.problem(value) {
            fail(field, value, problem)
            return nil
        }
        return value
    }

    /// The integer, when it keeps the rule and fits `T` (the rules keep
    /// every integer within its Swift type; `exactly` refuses the rest).
    public mutating func integer<T: FixedWidthInteger>(
        _ value: SQLiteValue, _ field: String, as type: T.Type = Int64.self, required: Bool = false
    ) -> T? {
        guard let checked = self.value(value, field, required: required), let number = checked.integer else {
            return nil
        }
        guard let exact = T(exactly: number) else {
            fail(field, value, "does not fit \(T.self)")
            return nil
        }
        return exact
    }

    /// The text, when it keeps the rule.
    public mutating func text(_ value: SQLiteValue, _ field: String, required: Bool = false) -> String? {
        self.value(value, field, required: required)?.text
    }

    /// The time, when it is one in the inventory's form.
    public mutating func date(_ value: SQLiteValue, _ field: String, required: Bool = false) -> Date? {
        self.value(value, field, required: required)?.text.flatMap(Inventory.parseTimestamp)
    }

    /// Every column of a row by name (`inventory export`, the report's
    /// device table): the findings, the row as stored.
    public static func findings(table: String, columns: [String], row: [SQLiteValue], key: String) -> [StoredFinding] {
        let keyValue = columns.firstIndex(of: key).map { row[$0] } ?? .null
        var check = RowCheck(table, key: [keyValue])
        for (name, value) in zip(columns, row) { _ = check.value(value, name, required: name == key) }
        return check.findings
    }
}

/// The findings of one reader, each once and in the order met, at most
/// `limit` (then how many more): read commands report them after their
/// output (docs/inventory.md).
public struct StoredFindingLog: Sendable {
    public static let limit = 200
    private var seen: Set<String> = []
    public private(set) var findings: [StoredFinding] = []
    /// Findings beyond `limit`, counted.
    public private(set) var more = 0

    public init() {}

    public mutating func add(_ new: [StoredFinding]) {
        for finding in new {
            let key = "\(finding.table)\u{1F}\(finding.row)\u{1F}\(finding.field)"
            guard seen.insert(key).inserted else { continue }
            if findings.count < Self.limit { findings.append(finding) } else { more += 1 }
        }
    }

    /// The rows `build` makes of `rows` (it leaves out those it cannot
    /// make), its findings logged.
    public mutating func keep<T>(
        _ rows: [[SQLiteValue]], _ build: ([SQLiteValue], inout [StoredFinding]) -> T?
    ) -> [T] {
        var new: [StoredFinding] = []
        let kept = rows.compactMap { build($0, &new) }
        add(new)
        return kept
    }

    /// The findings so far, and the log emptied.
    public mutating func take() -> (findings: [StoredFinding], more: Int) {
        defer { self = StoredFindingLog() }
        return (findings, more)
    }
}
