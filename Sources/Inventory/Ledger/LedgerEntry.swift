import Ledger

/// An entry's bytes (docs/ledger.md, "Entries"), made from a change to a
/// row or a note; the same function makes a sealed row's entry again.
enum LedgerEntry {
    static func encode(
        seq: Int, at: SQLiteValue, event: String, table: String, op: LedgerOp, key: [SQLiteValue],
        row: [(String, SQLiteValue)]
    ) -> [UInt8] {
        // Written straight, member by member (CanonicalJSON's rules).
        var out: [UInt8] = []
        out.reserveCapacity(160 + row.count * 24)
        out.append(contentsOf: #"{"v":1,"seq":"#.utf8)
        CanonicalJSON.writeInteger(Int64(seq), to: &out)
        out.append(contentsOf: #","at":"#.utf8)
        write(at, &out)
        out.append(contentsOf: #","event":"#.utf8)
        CanonicalJSON.writeString(event, to: &out)
        out.append(contentsOf: #","table":"#.utf8)
        CanonicalJSON.writeString(table, to: &out)
        out.append(contentsOf: #","op":"#.utf8)
        CanonicalJSON.writeString(op.rawValue, to: &out)
        out.append(contentsOf: #","key":["#.utf8)
        for (index, value) in key.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            write(value, &out)
        }
        out.append(contentsOf: #"],"row":{"#.utf8)
        for (index, (name, value)) in row.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            CanonicalJSON.writeString(name, to: &out)
            out.append(UInt8(ascii: ":"))
            write(value, &out)
        }
        out.append(contentsOf: "}}".utf8)
        return out
    }

    /// The entry of a sealed row (`values` in the table's column order):
    /// the same bytes as `encode` would make of it, written straight (every
    /// verify and proof makes again each sealed row's entry).
    static func sealed(_ table: LedgerTable, seq: Int, values: [SQLiteValue]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + values.count * 24)
        out.append(contentsOf: #"{"v":1,"seq":"#.utf8)
        CanonicalJSON.writeInteger(Int64(seq), to: &out)
        out.append(contentsOf: #","at":"#.utf8)
        write(table.timeIndex.map { values[$0] } ?? .null, &out)
        out.append(contentsOf: #","event":"#.utf8)
        // A sealed table has no `source`: its event is the table's.
        CanonicalJSON.writeString(table.event(op: .insert, changed: []), to: &out)
        out.append(contentsOf: #","table":"#.utf8)
        CanonicalJSON.writeString(table.name, to: &out)
        out.append(contentsOf: #","op":"insert","key":["#.utf8)
        for (position, index) in table.keyIndices.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            write(values[index], &out)
        }
        out.append(contentsOf: #"],"row":{"#.utf8)
        for (index, value) in values.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: table.jsonNames[index])
            write(value, &out)
        }
        out.append(contentsOf: "}}".utf8)
        return out
    }

    /// One value, as `json(value)` would be written.
    static func write(_ value: SQLiteValue, _ out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .integer(let number): CanonicalJSON.writeInteger(number, to: &out)
        case .text(let text): CanonicalJSON.writeString(text, to: &out)
        case .real, .blob: CanonicalJSON.write(json(value), to: &out)
        }
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
