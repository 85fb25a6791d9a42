import CSQLite
import FoundationEssentials
import Ledger

#if canImport(Glibc)
    import Glibc
#endif

/// Sees every change the inventory's connection makes to a covered table
/// (SQLite's preupdate hook) and, before the transaction commits, appends
/// the entries that describe them (`flush`), so a change and its entry are
/// committed together or not at all. A commit with changes not yet in the
/// ledger is refused (the connection's commit hook asks `hasPending`): no
/// write can forget its entry.
final class LedgerRecorder {
    private struct RowRef: Hashable {
        /// The table's index in `LedgerTable.all`.
        let table: Int
        let rowid: Int64
    }
    private struct Change {
        let table: LedgerTable
        let rowid: Int64
        /// The row before the transaction first changed it; nil when the
        /// transaction inserted it. (Sealed tables: not needed.)
        let old: [SQLiteValue]?
    }

    private var pending: [Change] = []
    private var seen: Set<RowRef> = []
    /// While the recorder writes the ledger itself (or the schema migrates).
    var suspended = false
    /// Changes were made that `flush` has not appended yet.
    var hasPending: Bool { !pending.isEmpty }

    /// The time an entry is made (`Inventory.timestamp`'s spelling).
    let clock: () -> String

    init(clock: @escaping () -> String) { self.clock = clock }

    /// Installs the hooks on `database`'s connection.
    func install(on database: Database) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        sqlite3_preupdate_hook(
            database.handle,
            { context, db, op, schema, table, key1, key2 in
                guard let context, let db, let schema, let table else { return }
                let recorder = Unmanaged<LedgerRecorder>.fromOpaque(context).takeUnretainedValue()
                recorder.noteChange(db, op, schema, table, key1, key2)
            }, context)
        sqlite3_rollback_hook(
            database.handle,
            { context in
                guard let context else { return }
                Unmanaged<LedgerRecorder>.fromOpaque(context).takeUnretainedValue().discard()
            }, context)
        // The commit hook is the connection's (Database.installCommitHook):
        // it refuses a commit while `hasPending`.
    }

    private func noteChange(
        _ db: OpaquePointer, _ op: Int32, _ schema: UnsafePointer<CChar>, _ tableName: UnsafePointer<CChar>,
        _ key1: Int64, _ key2: Int64
    ) {
        // (Every row change of the connection comes here: no allocation
        // for the tables the ledger does not cover.)
        guard !suspended, strcmp(schema, "main") == 0,
            let index = LedgerTable.cNames.firstIndex(where: { strcmp($0, tableName) == 0 })
        else { return }
        let table = LedgerTable.all[index]
        // A change from a row the ledger does not cover to another (a pull
        // writing the office's desired state) makes no entry: not noted.
        // Should the row later enter the cover in this transaction, that
        // change is noted, from a state that is as good as absent.
        if table.name == "assignments", !Self.coversAssignment(db, op, old: true),
            !Self.coversAssignment(db, op, old: false)
        {
            return
        }
        func old() -> [SQLiteValue]? {
            guard !table.sealed else { return nil }
            return table.entryValues(
                (0..<Int32(table.columns.count)).map { index in
                    var value: OpaquePointer?
                    guard sqlite3_preupdate_old(db, index, &value) == SQLITE_OK, let value else { return .null }
                    return Self.value(value)
                })
        }
        switch op {
        case SQLITE_INSERT: note(index, table, key2, nil)
        case SQLITE_DELETE: note(index, table, key1, old())
        default:
            note(index, table, key1, old())
            if key2 != key1 { note(index, table, key2, nil) }
        }
    }

    private func note(_ index: Int, _ table: LedgerTable, _ rowid: Int64, _ old: @autoclosure () -> [SQLiteValue]?) {
        let reference = RowRef(table: index, rowid: rowid)
        guard !seen.contains(reference) else { return }
        seen.insert(reference)
        pending.append(Change(table: table, rowid: rowid, old: old()))
    }

    /// Whether the assignment before the change (`old`) or after it is
    /// one the ledger covers (`LedgerTable.covers`); false when there is
    /// none (the old row of an insert, the new one of a delete).
    private static func coversAssignment(_ db: OpaquePointer, _ op: Int32, old: Bool) -> Bool {
        if old ? op == SQLITE_INSERT : op == SQLITE_DELETE { return false }
        func value(_ column: Int32) -> SQLiteValue {
            var value: OpaquePointer?
            let status =
                old ? sqlite3_preupdate_old(db, column, &value) : sqlite3_preupdate_new(db, column, &value)
            guard status == SQLITE_OK, let value else { return .null }
            return Self.value(value)
        }
        return value(LedgerTable.assignmentSource) != .text("server")
            || value(LedgerTable.assignmentConverged) != .null
    }

    func discard() {
        pending = []
        seen = []
    }

    static func value(_ value: OpaquePointer) -> SQLiteValue {
        switch sqlite3_value_type(value) {
        case SQLITE_INTEGER: return .integer(sqlite3_value_int64(value))
        case SQLITE_FLOAT: return .real(sqlite3_value_double(value))
        case SQLITE_TEXT:
            let count = Int(sqlite3_value_bytes(value))
            guard let text = sqlite3_value_text(value) else { return .text("") }
            return .text(String(decoding: UnsafeRawBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_value_bytes(value))
            guard count > 0, let bytes = sqlite3_value_blob(value) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default: return .null
        }
    }

    /// Appends the entries of the changes made since the last flush, in the
    /// order they were first made (in the caller's transaction).
    func flush(_ database: Database) throws {
        guard !pending.isEmpty else { return }
        suspended = true
        // The caller may ask for the row it inserted after this (beginRun, beginStep).
        let inserted = sqlite3_last_insert_rowid(database.handle)
        defer {
            sqlite3_set_last_insert_rowid(database.handle, inserted)
            suspended = false
        }
        var head = try LedgerHead.read(database)
        let sizeBefore = head.size
        let now = clock()
        for change in pending {
            let table = change.table
            let current = try database.rows(
                table.selectByRowid,
                [.integer(change.rowid)]
            ).first
            if table.sealed {
                try seal(table, change.rowid, current, &head, database)
            } else {
                // A row outside the ledger's cover is as good as absent.
                let old = change.old.flatMap { table.covers(row: $0) ? $0 : nil }
                let new = current.flatMap { table.covers(row: $0) ? $0 : nil }
                // A row with a time of its own (a checkpoint's `made_at`)
                // gives its entry's `at`; others the time of the change.
                let at = table.timeIndex.flatMap { index in new.map { $0[index] } } ?? .text(now)
                for (op, key, row) in Self.entries(table, old: old, new: new) {
                    let event = table.event(op: op, changed: row, after: current)
                    try Self.append(
                        LedgerStorage.Stored(table: table, op: op, event: event, at: at, key: key, row: row),
                        to: &head, database)
                }
            }
        }
        // Changes that made no entry (a step still running, a retry noted)
        // leave the head as it was: not rewritten, no page written for it.
        if head.size != sizeBefore { try head.write(database) }
        discard()
    }

    /// Appends an entry kept in `ledger` (not a sealed row's).
    static func append(_ entry: LedgerStorage.Stored, to head: inout LedgerHead, _ database: Database) throws {
        let seq = head.size
        let leaf = try head.append(LedgerEntry.encode(seq: seq, entry))
        try database.run(
            "INSERT INTO ledger(seq, leaf, entry) VALUES (?, ?, ?)",
            [.integer(Int64(seq)), .integer(leaf), .blob(LedgerStorage.encode(entry))])
    }

    /// A sealed row enters the ledger once, when it is final (an outcome
    /// still `running` waits for its end).
    private func seal(
        _ table: LedgerTable, _ rowid: Int64, _ current: [SQLiteValue]?, _ head: inout LedgerHead,
        _ database: Database
    ) throws {
        guard let current, current[table.columns.count] == .null else { return }
        if table.name == "outcomes", current[4] == .text("running") { return }
        let values = Array(current.prefix(table.columns.count))
        let seq = head.size
        let leaf = try head.append(LedgerEntry.sealed(table, seq: seq, values: values))
        try database.run(
            table.sealRow,
            [.integer(Int64(seq)), .integer(leaf), .integer(rowid)])
    }

    /// The entries that take a row from `old` to `new` (either nil: absent).
    static func entries(
        _ table: LedgerTable, old: [SQLiteValue]?, new: [SQLiteValue]?
    ) -> [(LedgerOp, [SQLiteValue], [(String, SQLiteValue)])] {
        let keys = table.keyIndices
        switch (old, new) {
        case (nil, nil): return []
        case (nil, let new?): return [(.insert, keys.map { new[$0] }, Array(zip(table.columns, new)))]
        case (let old?, nil): return [(.delete, keys.map { old[$0] }, Array(zip(table.columns, old)))]
        case (let old?, let new?):
            if keys.map({ old[$0] }) != keys.map({ new[$0] }) {
                return entries(table, old: old, new: nil) + entries(table, old: nil, new: new)
            }
            let changed = table.columns.indices.filter { old[$0] != new[$0] }.map { (table.columns[$0], new[$0]) }
            return changed.isEmpty ? [] : [(.update, keys.map { new[$0] }, changed)]
        }
    }
}

extension LedgerRecorder {
    /// Starts the ledger of an inventory that has none (a new file, or one
    /// made before the ledger): entry 0 is a note saying where the ledger
    /// began, then one entry per row the inventory already held, so the
    /// state it had is recorded; history before it is unproven, and the
    /// note says so. One transaction: it happens whole or not at all.
    static func begin(_ database: Database, bench: String, at: String) throws {
        guard try database.rows("SELECT 1 FROM ledger_head").isEmpty else { return }
        try database.inTransaction {
            guard try database.rows("SELECT 1 FROM ledger_head").isEmpty else { return }
            var counts: [(String, Int64)] = []
            for table in LedgerTable.all {
                let count = try database.rows(table.countRows).first?.first?.integer ?? 0
                if count > 0 { counts.append((table.name, count)) }
            }
            let total = counts.reduce(0) { $0 + $1.1 }
            let text =
                total == 0
                ? "the ledger began with this inventory: it held nothing before"
                : "the ledger began on an inventory that already held "
                    + counts.map { "\($0.1) \($0.0)" }.joined(separator: ", ")
                    + ": entries 1 to \(total) record that state as it was; its history before is unproven"
            var head = LedgerHead(frontier: Frontier())
            try append(LedgerEntry.note(seq: 0, at: at, bench: bench, text: text), to: &head, database)
            for table in LedgerTable.all {
                let rows = try database.rows(
                    table.selectAllByRowid)
                for row in rows {
                    guard let rowid = row[0].integer else { continue }
                    let values = Array(row.dropFirst())
                    let seq = head.size
                    if table.sealed {
                        let leaf = try head.append(LedgerEntry.sealed(table, seq: seq, values: values))
                        try database.run(
                            table.sealRow,
                            [.integer(Int64(seq)), .integer(leaf), .integer(rowid)])
                    } else {
                        let entry = LedgerStorage.Stored(
                            table: table, op: .insert, event: table.timeIndex == nil ? "genesis" : "checkpoint",
                            at: table.timeIndex.map { values[$0] } ?? .text(at),
                            key: table.keyIndices.map { values[$0] }, row: Array(zip(table.columns, values)))
                        try append(entry, to: &head, database)
                    }
                }
            }
            try head.write(database)
        }
    }
}

extension LedgerRecorder {
    /// The meta key saying kept checkpoints are ledger entries in this
    /// inventory: set when its ledger begins, or when the checkpoints an
    /// older beaconbench kept without entries have been recorded.
    static let checkpointEntriesKey = "checkpoint_entries"

    /// Records as entries the checkpoints an older beaconbench kept
    /// without one (docs/ledger.md, "Checkpoints kept before they were
    /// entries"): once per inventory, on its first open for writing by a
    /// beaconbench that keeps them as entries. A note (event `checkpoint`)
    /// says which, then one entry per checkpoint, in the fixed checkpoint
    /// entry format, in one transaction with the meta key that says it was
    /// done. Nothing is recorded when the ledger already holds a
    /// checkpoint entry or that note (the key was deleted outside
    /// beaconbench: the rows without an entry stay findings of `ledger
    /// verify`).
    static func recordKeptCheckpoints(_ database: Database, bench: String, at: String) throws {
        let done = "SELECT 1 FROM meta WHERE key = ?"
        let key: [SQLiteValue] = [.text(checkpointEntriesKey)]
        guard try database.rows(done, key).isEmpty else { return }
        try database.inTransaction {
            guard try database.rows(done, key).isEmpty else { return }
            var head = try LedgerHead.read(database)
            let table = LedgerTable.checkpoints
            let rows = try database.rows(table.selectAllByRowid).map { Array($0.dropFirst()) }
            // Table byte 10 (a checkpoint), or a note (0) of event 11: LedgerStorage.swift.
            let recorded = try !database.rows(
                "SELECT 1 FROM ledger WHERE substr(entry, 2, 1) = x'0A' OR substr(entry, 2, 3) = x'00030B' LIMIT 1"
            ).isEmpty
            if !rows.isEmpty, !recorded {
                let first = head.size + 1
                let sizes = rows.map { LedgerVerifier.text($0[0]) }.joined(separator: ", ")
                try append(
                    LedgerStorage.Stored(
                        table: nil, op: .note, event: "checkpoint", at: .text(at), key: [],
                        row: [
                            ("bench", .text(bench)),
                            (
                                "text",
                                .text(
                                    "checkpoints are ledger entries from here on: entries \(first) to \(first + rows.count - 1) record the \(rows.count) kept before (sizes \(sizes)), as they were"
                                )
                            ),
                        ]), to: &head, database)
                for values in rows {
                    try append(
                        LedgerStorage.Stored(
                            table: table, op: .insert, event: "checkpoint", at: values[3],
                            key: table.keyIndices.map { values[$0] }, row: Array(zip(table.columns, values))),
                        to: &head, database)
                }
                try head.write(database)
            }
            try database.run(
                "INSERT INTO meta(key, value) VALUES (?, ?)", [.text(checkpointEntriesKey), .text(String(head.size))])
        }
    }
}
