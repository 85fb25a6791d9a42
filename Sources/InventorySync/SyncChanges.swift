import FoundationEssentials
import Inventory

/// What changed on a bench since a ledger size, read from its ledger
/// (docs/ledger.md: every change to a covered table is an entry naming
/// its table and key): the keys of the rows of some tables, each once.
/// A sync sends those rows instead of whole tables (docs/office.md, "Sync
/// at scale"); the rows are read as they are now, so a row changed again
/// since is sent once, as it is.
struct SyncChanges {
    /// The tables whose changed rows a sync finds this way (runs, outcomes
    /// and readings go by their local ids: the server's highest, and the
    /// rows it holds as `running`).
    static let keyedTables: Set<String> = ["devices", "trips", "events", "incidents", "identities"]

    /// Each table's keys, as the entries write them (JSON arrays), in the
    /// order first met.
    private(set) var keys: [String: [String]] = [:]
    /// The keys met, by their bytes (two keys only canonically equivalent
    /// are two rows: docs/development.md, "Stored values are compared as bytes").
    private var seen: [String: Set<[UInt8]>] = [:]
    /// How many entries were read.
    private(set) var entries = 0

    /// Adds `entry` when it changed a row of one of `tables`.
    mutating func add(_ entry: [UInt8], tables: Set<String>) {
        entries += 1
        guard let (table, key) = Self.tableAndKey(entry), tables.contains(table) else { return }
        if seen[table, default: []].insert(Array(key.utf8)).inserted { keys[table, default: []].append(key) }
    }

    /// The changes among entries `range` of the inventory's ledger, read
    /// in windows of 50,000 (memory: the keys, not the entries).
    static func collect(
        _ inventory: Inventory, _ range: Range<Int>, tables: Set<String>
    ) async throws(SyncError) -> SyncChanges {
        var changes = SyncChanges()
        var start = range.lowerBound
        while start < range.upperBound {
            let end = min(range.upperBound, start + 50_000)
            let window: [[UInt8]]
            do {
                window = try await inventory.ledgerEntries(start..<end)
            } catch {
                throw SyncError("the local inventory's ledger: \(error)")
            }
            guard window.count == end - start else {
                throw SyncError(
                    "the local inventory's ledger: entries \(start) to \(end - 1) are not all there (beaconbench ledger verify)"
                )
            }
            for entry in window { changes.add(entry, tables: tables) }
            start = end
        }
        return changes
    }

    /// An entry's `table` and `key` (the key's JSON text as written), or
    /// nil for a note or bytes not in the entry format. The format is fixed
    /// (docs/ledger.md, "Entries"): `{"v":1,"seq":S,"at":T,"event":E,
    /// "table":N,"op":O,"key":K,"row":R}`, so the first `,"table":"` is the
    /// member (`at` is a time or null, `event` a word), and the key is
    /// a flat array ending at the first `]` outside a string.
    static func tableAndKey(_ entry: [UInt8]) -> (table: String, key: String)? {
        guard let tableAt = find(Array(#","table":""#.utf8), in: entry, from: 0) else { return nil }
        var index = tableAt
        while index < entry.count, entry[index] != UInt8(ascii: "\"") { index += 1 }
        guard index < entry.count, index > tableAt else { return nil }
        let table = String(decoding: entry[tableAt..<index], as: UTF8.self)
        guard let keyAt = find(Array(#","key":["#.utf8), in: entry, from: index) else { return nil }
        let open = keyAt - 1
        var position = keyAt
        var inString = false
        while position < entry.count {
            let byte = entry[position]
            if inString {
                if byte == UInt8(ascii: "\\") {
                    position += 2
                    continue
                }
                if byte == UInt8(ascii: "\"") { inString = false }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if byte == UInt8(ascii: "]") {
                return (table, String(decoding: entry[open...position], as: UTF8.self))
            }
            position += 1
        }
        return nil
    }

    /// The index just after the first occurrence of `needle` in `bytes` at
    /// or after `from`.
    static func find(_ needle: [UInt8], in bytes: [UInt8], from: Int) -> Int? {
        guard !needle.isEmpty, bytes.count >= needle.count else { return nil }
        var index = from
        while index + needle.count <= bytes.count {
            if bytes[index] == needle[0], bytes[index..<(index + needle.count)].elementsEqual(needle) {
                return index + needle.count
            }
            index += 1
        }
        return nil
    }

    /// The local rows of `table` with these keys (`?1`: a JSON array of
    /// key arrays), selected with the columns `select` sends.
    static func keyedSelect(_ table: ServerSchema.Table) -> String? {
        let match: String
        switch table.name {
        case "devices": match = "address IN (SELECT json_extract(value, '$[0]') FROM json_each(?1))"
        case "trips": match = "(device, start_ms, end_ms) IN (\(keyColumns(3)))"
        case "events": match = "(device, at_ms, type, beacon_index) IN (\(keyColumns(4)))"
        case "incidents": match = "(device, incident_id, at_ms) IN (\(keyColumns(3)))"
        case "identities": match = "(major, minor) IN (\(keyColumns(2)))"
        default: return nil
        }
        guard let whereAt = table.select.firstRange(of: "WHERE") else { return nil }
        return String(table.select[..<whereAt.lowerBound]) + "WHERE " + match
    }

    static func keyColumns(_ count: Int) -> String {
        "SELECT " + (0..<count).map { "json_extract(value, '$[\($0)]')" }.joined(separator: ", ")
            + " FROM json_each(?1)"
    }

    /// The address a key `["C0:…"]` of `assignments` or `devices` names.
    static func address(_ key: String) -> String? {
        guard let values = try? JSONDecoder().decode([String].self, from: Data(key.utf8)), values.count == 1 else {
            return nil
        }
        return values[0]
    }
}
