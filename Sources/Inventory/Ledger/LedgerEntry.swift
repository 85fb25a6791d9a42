import Ledger

/// An entry's bytes (docs/ledger.md, "Entries"), made from a change to a
/// row or a note; the same function makes a sealed row's entry again.
enum LedgerEntry {
    static func encode(
        seq: Int, at: SQLiteValue, event: String, table: String, op: LedgerOp, key: [SQLiteValue],
        row: [(String, SQLiteValue)]
    ) -> [UInt8] {
        CanonicalJSON.encode(
            .object([
                ("v", .integer(1)), ("seq", .integer(Int64(seq))), ("at", json(at)), ("event", .text(event)),
                ("table", .text(table)), ("op", .text(op.rawValue)), ("key", .array(key.map(json))),
                ("row", .object(row.map { ($0.0, json($0.1)) })),
            ]))
    }

    /// The entry of a sealed row (`values` in the table's column order).
    static func sealed(_ table: LedgerTable, seq: Int, values: [SQLiteValue]) -> [UInt8] {
        let row = Array(zip(table.columns, values))
        let at = table.timeColumn.flatMap { column in table.columns.firstIndex(of: column).map { values[$0] } }
        // A sealed table's event is its table's alone (none has the
        // `source` or `forgotten_at` columns `event` looks at): no
        // dictionary of the row is made for it, once per entry verified.
        return encode(
            seq: seq, at: at ?? .null, event: table.event(op: .insert, changed: [:]),
            table: table.name, op: .insert, key: table.keyIndices.map { values[$0] }, row: row)
    }

    /// A note: where the ledger began, and what came before it.
    static func note(seq: Int, at: String, bench: String, text: String) -> LedgerStorage.Stored {
        LedgerStorage.Stored(
            table: nil, op: .note, event: "genesis", at: .text(at), key: [],
            row: [("bench", .text(bench)), ("text", .text(text))])
    }

    /// A stored entry's JSON.
    static func encode(seq: Int, _ entry: LedgerStorage.Stored) -> [UInt8] {
        encode(
            seq: seq, at: entry.at, event: entry.event, table: entry.table?.name ?? "", op: entry.op, key: entry.key,
            row: entry.row)
    }

    static func json(_ value: SQLiteValue) -> CanonicalJSON.Value {
        switch value {
        case .null: .null
        case .integer(let number): .integer(number)
        case .real(let number): .real(number)
        case .text(let text): .text(text)
        case .blob(let bytes):
            // Never written by the tool: a blob someone else stored.
            .object([("blob", .text(bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()))])
        }
    }
}
