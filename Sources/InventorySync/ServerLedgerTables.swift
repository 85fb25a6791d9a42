import FoundationEssentials
import Inventory
import Ledger

/// The server's tables checked against a bench's entries, row by row and
/// column by column, as the local `ledger verify` checks its own tables
/// (docs/ledger.md, "What the office sees"): the entries the server holds
/// for the bench are replayed (inserts, updates, deletes), and every row
/// the server holds for the bench must be what they say; every row they
/// say the server's tables hold (a change before `benches.tables_seq`,
/// the ledger size a sync's tables were sent up to) must be there.
struct ServerTableCheck {
    /// A table of the server that holds a bench's rows: its name, its
    /// columns as the server names them (the entries' `id` is `local_id`),
    /// their types, and how its rows are keyed there (the entries' key,
    /// or for `identities` the device).
    struct Table {
        var name: String
        var columns: [String]
        var serverColumns: [String]
        var types: [ServerSchema.ColumnType]
        var keyColumns: [String]
    }

    static let keys: [String: [String]] = [
        "devices": ["address"], "runs": ["id"], "outcomes": ["id"], "readings": ["id"],
        "trips": ["device", "start_ms", "end_ms"], "events": ["device", "at_ms", "type", "beacon_index"],
        "incidents": ["device", "incident_id", "at_ms"], "identities": ["device"],
    ]

    /// The tables a sync sends, their columns read from the upsert itself.
    static let tables: [Table] = ServerSchema.tables.compactMap { (table: ServerSchema.Table) -> Table? in
        guard let open = table.upsert.firstIndex(of: "("), let close = table.upsert.firstIndex(of: ")"),
            let key = keys[table.name]
        else { return nil }
        let names = table.upsert[table.upsert.index(after: open)..<close].split(separator: ",").map {
            String($0.filter { !$0.isWhitespace })
        }.dropFirst()  // bench_id
        let server = Array(names)
        let columns = server.map { $0 == "local_id" ? "id" : $0 }
        guard columns.count == table.types.count else { return nil }
        return Table(name: table.name, columns: columns, serverColumns: server, types: table.types, keyColumns: key)
    }

    /// A replayed row: its columns' values as text (nil: NULL), and the
    /// entry that last changed it.
    struct Row {
        var values: [String: String?]
        var seq: Int
    }

    var state: [String: [[UInt8]: Row]] = [:]
    var findings: [String] = []
    var limit = 50

    /// Findings past `limit`, counted.
    var more = 0

    mutating func find(_ text: String) {
        if findings.count < limit { findings.append(text) } else { more += 1 }
    }

    static func text(_ value: CanonicalJSON.Value) -> String? {
        switch value {
        case .null: nil
        case .integer(let number): String(number)
        case .text(let text): text
        case .real(let number): "\(number)"
        default: String(decoding: CanonicalJSON.encode(value), as: UTF8.self)
        }
    }

    static func keyBytes(_ values: [String?], types: [ServerSchema.ColumnType]) -> [UInt8] {
        CanonicalJSON.encode(
            .array(
                zip(values, types).map { value, type in
                    guard let value else { return .null }
                    if type == .bigint, let number = Int64(value) { return .integer(number) }
                    return .text(value)
                }))
    }

    /// Takes one entry (its bytes) into the replay; what is wrong with it
    /// as an entry (not one, another version, another place), or nil.
    @discardableResult
    mutating func replay(_ bytes: [UInt8], seq: Int) -> String? {
        guard case .object(let members) = try? StrictJSON.parse(bytes) else {
            return "entry \(seq) is not an entry (not the JSON object of docs/ledger.md, \"Entries\")"
        }
        func member(_ name: String) -> CanonicalJSON.Value? { members.first { $0.0 == name }?.1 }
        guard member("v") == .integer(1), member("seq") == .integer(Int64(seq)) else {
            return "entry \(seq) is not an entry of version 1 at its place (its seq is not \(seq))"
        }
        return replayMembers(members, seq: seq)
    }

    private mutating func replayMembers(_ members: [(String, CanonicalJSON.Value)], seq: Int) -> String? {
        func member(_ name: String) -> CanonicalJSON.Value? { members.first { $0.0 == name }?.1 }
        guard case .text(let tableName)? = member("table"), case .text(let op)? = member("op"),
            let table = Self.tables.first(where: { $0.name == tableName }),
            case .object(let row)? = member("row")
        else { return nil }
        var values: [String: String?] = [:]
        for (name, value) in row { values[name] = Self.text(value) }
        // The server keys identities by device: the entry's key is (major, minor).
        let keyValues: [String?]
        if table.name == "identities" {
            keyValues = [values["device"] ?? nil]
        } else if case .array(let key)? = member("key") {
            keyValues = key.map(Self.text)
        } else {
            return nil
        }
        let keyTypes = table.keyColumns.map { name in
            table.columns.firstIndex(of: name).map { table.types[$0] } ?? .text
        }
        let key = Self.keyBytes(keyValues, types: keyTypes)
        switch op {
        case "insert":
            state[table.name, default: [:]][key] = Row(values: values, seq: seq)
        case "update":
            if var held = state[table.name]?[key] {
                for (name, value) in values { held.values[name] = value }
                held.seq = seq
                state[table.name]?[key] = held
            }
        case "delete":
            if table.name == "identities", let held = state[table.name]?[key],
                held.values["major"] != values["major"] || held.values["minor"] != values["minor"]
            {
                return nil  // another identity of the device, already replaced
            }
            state[table.name]?[key] = nil
        default: break
        }
        return nil
    }

    /// Compares the server's rows of `bench` with the replay; `tablesSeq`
    /// the ledger size the bench's last complete sync sent its tables up to.
    mutating func compare(_ server: PostgresConnection, bench: String, tablesSeq: Int?) throws(SyncError) {
        for table in Self.tables {
            var expected = state[table.name] ?? [:]
            let keyIndexes = table.keyColumns.compactMap { table.columns.firstIndex(of: $0) }
            let select =
                "SELECT " + table.serverColumns.map { "\($0)::text" }.joined(separator: ", ")
                + " FROM \(table.name) WHERE bench_id = $1"
            for row in try server.exec(select, [bench]) {
                let keyValues = keyIndexes.map { $0 < row.count ? row[$0] : nil }
                let key = Self.keyBytes(keyValues, types: keyIndexes.map { table.types[$0] })
                let shownKey = keyValues.map { StoredText.shown($0 ?? "NULL", limit: 40) }.joined(separator: ", ")
                guard let held = expected.removeValue(forKey: key) else {
                    // A step still running is not an entry yet.
                    if table.name == "outcomes", let status = table.columns.firstIndex(of: "status"),
                        status < row.count, row[status] == "running"
                    {
                        continue
                    }
                    find("\(table.name) \(shownKey) is on the server but not in the bench's ledger")
                    continue
                }
                for (index, column) in table.columns.enumerated() where index < row.count {
                    let there = row[index]
                    let said = held.values[column] ?? nil
                    if there != said {
                        find(
                            "\(table.name) \(shownKey): \(column) is \(Self.shown(there)) on the server but the ledger says \(Self.shown(said)) (entry \(held.seq))"
                        )
                    }
                }
            }
            if let tablesSeq {
                for (_, held) in expected.sorted(by: { $0.value.seq < $1.value.seq }) where held.seq < tablesSeq {
                    let key = table.keyColumns.map { StoredText.shown((held.values[$0] ?? nil) ?? "NULL", limit: 40) }
                    find(
                        "\(table.name) \(key.joined(separator: ", ")) is in the bench's ledger (entry \(held.seq)) but not on the server"
                    )
                }
            }
        }
    }

    static func shown(_ value: String?) -> String {
        value.map { "'" + StoredText.shown($0, limit: 60) + "'" } ?? "NULL"
    }
}
