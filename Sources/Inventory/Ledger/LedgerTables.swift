import FoundationEssentials
import Ledger

#if canImport(Glibc)
    import Glibc
#endif

/// The tables the ledger covers: what the inventory says about beacons
/// (docs/ledger.md, "Entries"). `meta` and `claims` (a run's hold on a
/// device while it works on it) are not covered: they say nothing about a
/// beacon. Nor is an assignment pulled from the shared server and not
/// converged here (`assignments` with `source` 'server' and no
/// `converged_at`): it is the office's desired state, which the server
/// holds with its history; the bench's ledger says what happened at the
/// bench (`covers`).
struct LedgerTable: Sendable {
    let name: String
    /// The primary key's columns, in order.
    let key: [String]
    /// Every column, in the table's order (without the ledger's own).
    let columns: [String]
    /// Rows that never change once in the ledger: their entry is not
    /// stored but made again from the row, which carries `ledger_seq` and
    /// `ledger_leaf`; triggers refuse to change or delete such a row.
    let sealed: Bool
    /// For a sealed table: the column whose time is the entry's `at`.
    let timeColumn: String?
    /// Where the key's columns and the time column are among `columns`.
    let keyIndices: [Int]
    let timeIndex: Int?
    /// Each column's name as a JSON string and `:` (`"battery":`), written
    /// once: every entry of a sealed row spells all of them.
    let jsonNames: [[UInt8]]

    init(name: String, key: [String], columns: [String], sealed: Bool, timeColumn: String?) {
        self.name = name
        self.key = key
        self.columns = columns
        self.sealed = sealed
        self.timeColumn = timeColumn
        keyIndices = key.map { name in columns.firstIndex(of: name)! }
        timeIndex = timeColumn.flatMap { columns.firstIndex(of: $0) }
        jsonNames = columns.map { column in
            var bytes: [UInt8] = []
            CanonicalJSON.writeString(column, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            return bytes
        }
    }

    /// The columns, as a select list: each as its entry writes it (a
    /// checkpoint's `root` as lower-case hex, `entryValues`).
    var selectList: String {
        columns.map { name == "ledger_checkpoints" && $0 == "root" ? "lower(hex(root))" : $0 }.joined(separator: ", ")
    }

    /// Whether the ledger covers a row of this table, its values given by
    /// column name. Every row but an assignment pulled from the server and
    /// not converged here: one made at this bench (`source` not 'server'),
    /// or one this bench brought a beacon to (`converged_at` set). A row
    /// that enters this set is an `insert` entry, one that leaves it a
    /// `delete` (docs/ledger.md, "What is covered").
    func covers(_ value: (String) -> SQLiteValue?) -> Bool {
        guard name == "assignments" else { return true }
        return value("source") != .text("server") || (value("converged_at") ?? .null) != .null
    }

    /// `covers`, of a row in the table's column order.
    func covers(row: [SQLiteValue]) -> Bool {
        guard name == "assignments" else { return true }
        return covers { column in columns.firstIndex(of: column).map { row[$0] } }
    }

    /// `covers` as SQL: the condition (with its `WHERE`) of the rows
    /// covered, empty for a table whose rows all are.
    var coveredWhere: String {
        name == "assignments" ? " WHERE (source IS NOT 'server' OR converged_at IS NOT NULL)" : ""
    }

    /// Where `source` and `converged_at` are among the columns, for the
    /// preupdate hook (which reads them before anything else of the row).
    static let assignmentSource = Int32(assignments.columns.firstIndex(of: "source")!)
    static let assignmentConverged = Int32(assignments.columns.firstIndex(of: "converged_at")!)

    static let runs = LedgerTable(
        name: "runs", key: ["id"],
        columns: [
            "id", "started_at", "ended_at", "command", "sha256", "operator", "host", "pid", "adapter", "options",
            "status", "simulated",
        ], sealed: false, timeColumn: nil)
    static let outcomes = LedgerTable(
        name: "outcomes", key: ["id"],
        columns: [
            "id", "run_id", "device", "step", "status", "detail", "error", "before", "after", "started_at",
            "ended_at", "duration_ms", "retries",
        ], sealed: true, timeColumn: "ended_at")
    static let devices = LedgerTable(
        name: "devices", key: ["address"],
        columns: [
            "address", "mac_ending", "major", "minor", "model", "serial", "hardware_revision", "firmware",
            "first_seen", "last_seen", "battery", "battery_at", "calibrated", "calibrated_at", "calibration_x",
            "calibration_y", "calibration_z", "time_offset_ms", "profile", "config_cornering", "config_braking",
            "config_acceleration", "config_duration", "config_enable", "config_read_at", "identity_at",
            "description_at", "firmware_at", "calibration_read_at", "time_offset_at", "forgotten_at",
        ], sealed: false, timeColumn: nil)
    static let readings = LedgerTable(
        name: "readings", key: ["id"], columns: ["id", "device", "at", "battery", "rssi", "firmware"], sealed: true,
        timeColumn: "at")
    static let trips = LedgerTable(
        name: "trips", key: ["device", "start_ms", "end_ms"],
        columns: ["device", "start_ms", "end_ms", "beacon_index", "pulled_at"], sealed: true, timeColumn: "pulled_at")
    static let events = LedgerTable(
        name: "events", key: ["device", "at_ms", "type", "beacon_index"],
        columns: [
            "device", "at_ms", "type", "duration_ms", "average_mg", "maximum_mg", "x_mg", "y_mg", "z_mg",
            "beacon_index", "pulled_at",
        ], sealed: true, timeColumn: "pulled_at")
    static let incidents = LedgerTable(
        name: "incidents", key: ["device", "incident_id", "at_ms"],
        columns: [
            "device", "incident_id", "at_ms", "max_resultant", "avg_resultant", "x_mg", "y_mg", "z_mg", "samples",
            "pulled_at",
        ], sealed: true, timeColumn: "pulled_at")
    static let identities = LedgerTable(
        name: "identities", key: ["major", "minor"],
        columns: ["major", "minor", "device", "source", "profile", "run_id", "reserved_at"], sealed: false,
        timeColumn: nil)
    static let assignments = LedgerTable(
        name: "assignments", key: ["address"],
        columns: [
            "address", "profile", "major", "minor_policy", "minor", "overrides", "assigned_at", "assigned_by",
            "source", "converged_at", "converged_run",
        ], sealed: false, timeColumn: nil)

    /// The checkpoints kept (docs/ledger.md, "Checkpoints"): each one is
    /// an entry, made in the transaction that keeps it, so one slipped in,
    /// taken out or back-dated outside beaconbench is found. Its entry's
    /// `at` is its `made_at`; its `root` is written in the entry as 64
    /// lower-case hex digits (`entryValues`), not as the stored 32 bytes.
    static let checkpoints = LedgerTable(
        name: "ledger_checkpoints", key: ["size"], columns: ["size", "root", "note", "made_at"], sealed: false,
        timeColumn: "made_at")

    /// In the order `ledger verify` and the genesis go through them. (A new
    /// table goes at the end: a stored entry names its table by its place
    /// here, LedgerStorage.swift.)
    static let all: [LedgerTable] = [
        runs, devices, identities, assignments, outcomes, readings, trips, events, incidents, checkpoints,
    ]

    /// A row's values as its entry writes them: a checkpoint's `root`, kept
    /// as 32 bytes, is 64 lower-case hex digits in its entry. (The select
    /// lists do this in SQL, `selectList`; this is for values the
    /// preupdate hook reads.)
    func entryValues(_ values: [SQLiteValue]) -> [SQLiteValue] {
        guard name == "ledger_checkpoints", values.count > 1, case .blob(let bytes) = values[1] else { return values }
        var converted = values
        converted[1] = .text(bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined())
        return converted
    }
    /// The names as C strings, in `all`'s order, for the preupdate hook
    /// (made once, never freed).
    nonisolated(unsafe) static let cNames: [UnsafeMutablePointer<CChar>] = all.map { strdup($0.name)! }
    static var sealedTables: [LedgerTable] { all.filter(\.sealed) }

    /// What happened, for people (docs/ledger.md): decided by the change
    /// alone, so that an entry made again from a sealed row says the same;
    /// `after`, the row as it is now, tells a covered assignment that a
    /// pull replaced (the row left the ledger's cover: `sync`) from one
    /// deleted.
    func event(op: LedgerOp, changed: [(String, SQLiteValue)], after: [SQLiteValue]? = nil) -> String {
        func value(_ column: String) -> SQLiteValue? { changed.first { $0.0 == column }?.1 }
        if name == "assignments" {
            if op == .delete, let after, !covers(row: after) { return "sync" }
            // A pulled assignment converged here enters the ledger whole.
            if op == .insert, value("source") == .text("server"), (value("converged_at") ?? .null) != .null {
                return "converged"
            }
        }
        if value("source") == .text("server") { return "sync" }
        switch name {
        case "runs": return "run"
        case "outcomes": return "step"
        case "readings": return "reading"
        case "trips", "events", "incidents": return "pull"
        case "identities": return "identity"
        case "ledger_checkpoints": return "checkpoint"
        case "devices":
            if let forgotten = value("forgotten_at"), forgotten != .null { return "forget" }
            return "device"
        case "assignments":
            if op == .update, changed.allSatisfy({ ["converged_at", "converged_run"].contains($0.0) }) {
                return "converged"
            }
            return "assignment"
        default: return name
        }
    }

    /// The device an entry about this row is about, if any.
    func device(of row: [String: SQLiteValue], key: [SQLiteValue]) -> String? {
        switch name {
        case "devices", "assignments": key.first?.text
        default: row["device"]?.text
        }
    }
}

enum LedgerOp: String, Sendable {
    case insert, update, delete, note
}

/// The statements the ledger runs on a covered table. They are made from
/// the table's constant name and columns above, never from a value (every
/// value is a bound parameter); this is the one file whose SQL holds an
/// interpolation (SQLSourceTests allows it here alone).
extension LedgerTable {
    var selectByRowid: String {
        "SELECT \(selectList)\(sealed ? ", ledger_seq" : "") FROM \(name) WHERE rowid = ?"
    }
    var sealRow: String { "UPDATE \(name) SET ledger_seq = ?, ledger_leaf = ? WHERE rowid = ?" }
    /// The rows covered (`coveredWhere`), counted.
    var countRows: String { "SELECT count(*) FROM \(name)\(coveredWhere)" }
    /// Every row covered with its rowid, in the order it was made.
    var selectAllByRowid: String {
        "SELECT rowid, \(selectList) FROM \(name)\(coveredWhere) ORDER BY \(key == ["id"] ? "id" : "rowid")"
    }
    var selectAll: String { "SELECT \(selectList) FROM \(name)" }
    var selectSealedAboutDevice: String {
        "SELECT \(selectList), ledger_seq FROM \(name) WHERE device = ? AND ledger_seq < ?"
    }
    var selectSealedInRange: String {
        "SELECT \(selectList), ledger_seq FROM \(name) WHERE ledger_seq >= ? AND ledger_seq < ?"
    }
    var selectSealedInOrder: String {
        "SELECT \(selectList), ledger_seq, ledger_leaf FROM \(name) WHERE ledger_seq IS NOT NULL ORDER BY ledger_seq"
    }
    /// The key (and for outcomes, status and run) of rows not in the ledger.
    var selectUnsealed: String {
        "SELECT \(key.joined(separator: ", "))\(name == "outcomes" ? ", status, run_id" : "") FROM \(name) WHERE ledger_seq IS NULL"
    }
}
