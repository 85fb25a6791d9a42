import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// How an entry that is not a sealed row is kept in `ledger.entry`: not
/// its JSON, which repeats every column's name and spells every time out,
/// but a compact encoding that gives the JSON back byte for byte
/// (docs/ledger.md, "How the inventory keeps the ledger"). The entry's
/// hash is always of its JSON.
///
/// Layout: version (1); table (0 a note, else 1 + its index in
/// `LedgerTable.all`); op (0 insert, 1 update, 2 delete, 3 note; 4 and 5:
/// an insert or delete of a whole row, kept without its key, which its
/// columns hold, and without its NULL columns); event (index in `events`);
/// `at`; the key's count and values (not for 4 and 5); the row's count
/// and, per column, its index in the table's columns and its value. A value is a tag and its bytes: 0 NULL,
/// 1 integer (zigzag varint), 2 text (varint length, UTF-8), 3 a time in
/// the inventory's own format (zigzag varint of epoch milliseconds: kept
/// so only when it gives the same text back), 4 real (8 bytes, big-endian
/// IEEE 754), 5 blob (varint length, bytes), 6 the same text as the
/// entry's `at` (a row's times mostly are), 7 a Bluetooth address written
/// as the inventory writes them (`C0:1E:6D:EA:89:86`: its 6 bytes). A
/// note's row is its bench and text, as texts.
///
/// The bytes, as numbers: the table byte is 0 for a note, 1 `runs`,
/// 2 `devices`, 3 `identities`, 4 `assignments`, 5 `outcomes`,
/// 6 `readings`, 7 `trips`, 8 `events`, 9 `incidents`,
/// 10 `ledger_checkpoints`; the event byte 0 `genesis`, 1 `run`, 2 `step`,
/// 3 `device`, 4 `identity`, 5 `assignment`, 6 `forget`, 7 `reading`,
/// 8 `pull`, 9 `sync`, 10 `converged`, 11 `checkpoint`. A kept checkpoint
/// (table 10, event 11) is a whole row inserted (op 4): `at` its
/// `made_at` (tag 3, or 2 when the text is not the inventory's own time
/// format), then 4 columns: 0 `size` (tag 1), 1 `root` as 64 lower-case
/// hex digits (tag 2, length 64: the entry writes the root so, not as the
/// 32 bytes `ledger_checkpoints.root` keeps), 2 `note` (tag 2, the signed
/// note as kept), 3 `made_at` (tag 6: the same text as `at`). The note
/// entry before the checkpoints recorded when an older inventory is first
/// opened (`LedgerRecorder.recordKeptCheckpoints`) is table 0, op 3,
/// event 11.
enum LedgerStorage {
    static let events = [
        "genesis", "run", "step", "device", "identity", "assignment", "forget", "reading", "pull", "sync", "converged",
        "checkpoint",
    ]

    struct Stored {
        var table: LedgerTable?
        var op: LedgerOp
        var event: String
        var at: SQLiteValue
        var key: [SQLiteValue]
        var row: [(String, SQLiteValue)]
    }

    static func encode(_ entry: Stored) -> [UInt8] {
        var out: [UInt8] = [1]
        out.append(
            entry.table.flatMap { table in LedgerTable.all.firstIndex { $0.name == table.name } }.map { UInt8($0 + 1) }
                ?? 0)
        // A whole row (an insert, a delete) is kept without its key (its
        // columns hold it) and without its NULLs: op 4 and 5.
        let whole = entry.table.map { table in entry.row.map(\.0) == table.columns } ?? false
        let op = [LedgerOp.insert, .update, .delete, .note].firstIndex(of: entry.op) ?? 3
        out.append(UInt8(whole && (op == 0 || op == 2) ? op / 2 + 4 : op))
        out.append(UInt8(events.firstIndex(of: entry.event) ?? 0))
        value(entry.at, &out)
        let at = entry.at.text
        let row = whole && (op == 0 || op == 2) ? entry.row.filter { $0.1 != .null } : entry.row
        if !(whole && (op == 0 || op == 2)) {
            varint(UInt64(entry.key.count), &out)
            for item in entry.key { value(item, at: at, &out) }
        }
        varint(UInt64(row.count), &out)
        for (name, item) in row {
            if let table = entry.table {
                varint(UInt64(table.columns.firstIndex(of: name) ?? 0), &out)
            } else {
                value(.text(name), &out)
            }
            value(item, at: at, &out)
        }
        return out
    }

    /// The entry's JSON (its `seq` is the row's).
    static func json(seq: Int, _ bytes: [UInt8]) throws -> [UInt8] { LedgerEntry.encode(seq: seq, try decode(bytes)) }

    static func decode(_ bytes: [UInt8]) throws -> Stored {
        var reader = Reader(bytes: bytes)
        guard try reader.byte() == 1 else { throw LedgerDamage("a stored entry of an unknown encoding") }
        let tableIndex = Int(try reader.byte())
        guard tableIndex <= LedgerTable.all.count else { throw LedgerDamage("a stored entry names no table") }
        let table = tableIndex == 0 ? nil : LedgerTable.all[tableIndex - 1]
        let ops: [LedgerOp] = [.insert, .update, .delete, .note, .insert, .delete]
        let opIndex = Int(try reader.byte())
        let eventIndex = Int(try reader.byte())
        guard opIndex < ops.count, eventIndex < events.count else {
            throw LedgerDamage("a stored entry has no valid operation or event")
        }
        let whole = opIndex >= 4
        if whole && table == nil { throw LedgerDamage("a stored entry of a whole row names no table") }
        let at = try reader.value()
        reader.at = at.text
        var key: [SQLiteValue] = []
        if !whole {
            for _ in 0..<(try reader.count()) { key.append(try reader.value()) }
        }
        var row: [(String, SQLiteValue)] = []
        for _ in 0..<(try reader.count()) {
            let name: String
            if let table {
                let index = try reader.varint()
                guard index < UInt64(table.columns.count) else { throw LedgerDamage("a stored entry names no column") }
                name = table.columns[Int(index)]
            } else {
                guard case .text(let text) = try reader.value() else { throw LedgerDamage("a note without names") }
                name = text
            }
            row.append((name, try reader.value()))
        }
        guard reader.position == bytes.count else { throw LedgerDamage("a stored entry has bytes after its end") }
        if whole, let table {
            // Every column in order, NULL where none was kept; the key from them.
            let kept = Dictionary(row) { first, _ in first }
            guard kept.count == row.count,
                zip(row, row.dropFirst()).allSatisfy({ a, b in
                    table.columns.firstIndex(of: a.0)! < table.columns.firstIndex(of: b.0)!
                })
            else { throw LedgerDamage("a stored entry's columns are out of order") }
            row = table.columns.map { ($0, kept[$0] ?? .null) }
            key = table.keyIndices.map { row[$0].1 }
        }
        return Stored(table: table, op: ops[opIndex], event: events[eventIndex], at: at, key: key, row: row)
    }

    static func varint(_ number: UInt64, _ out: inout [UInt8]) {
        var rest = number
        while rest >= 0x80 {
            out.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        out.append(UInt8(rest))
    }

    static func value(_ item: SQLiteValue, at: String? = nil, _ out: inout [UInt8]) {
        func zigzag(_ number: Int64) -> UInt64 { UInt64(bitPattern: (number << 1) ^ (number >> 63)) }
        if case .text(let text) = item {
            if let at, text == at {
                out.append(6)
                return
            }
            if let address = Self.address(text) {
                out.append(7)
                out.append(contentsOf: address)
                return
            }
        }
        switch item {
        case .null: out.append(0)
        case .integer(let number):
            out.append(1)
            varint(zigzag(number), &out)
        case .text(let text):
            if let milliseconds = Self.milliseconds(text) {
                out.append(3)
                varint(zigzag(milliseconds), &out)
            } else {
                out.append(2)
                varint(UInt64(text.utf8.count), &out)
                out.append(contentsOf: text.utf8)
            }
        case .real(let number):
            out.append(4)
            withUnsafeBytes(of: number.bitPattern.bigEndian) { out.append(contentsOf: $0) }
        case .blob(let bytes):
            out.append(5)
            varint(UInt64(bytes.count), &out)
            out.append(contentsOf: bytes)
        }
    }

    /// The epoch milliseconds of a time written as `Inventory.timestamp`
    /// writes it, when writing them again gives exactly `text`.
    static func milliseconds(_ text: String) -> Int64? {
        let utf8 = Array(text.utf8)
        guard utf8.count == 24, utf8[4] == 0x2D, utf8[10] == 0x54, utf8[19] == 0x2E, utf8[23] == 0x5A else {
            return nil
        }
        func number(_ range: Range<Int>) -> Int? {
            var result = 0
            for index in range {
                let digit = Int(utf8[index]) - 48
                guard (0...9).contains(digit) else { return nil }
                result = result * 10 + digit
            }
            return result
        }
        guard utf8[7] == 0x2D, utf8[13] == 0x3A, utf8[16] == 0x3A, let year = number(0..<4), let month = number(5..<7),
            let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            let millisecond = number(20..<23)
        else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        let result = Int64(seconds) * 1000 + Int64(millisecond)
        // Only a time that comes back as the same text (no 25th hour, no 31 February).
        return timestamp(result) == text ? result : nil
    }

    /// The 6 bytes of an address written `C0:1E:6D:EA:89:86` (upper case).
    static func address(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count == 17 else { return nil }
        var bytes: [UInt8] = []
        for index in 0..<6 {
            if index > 0 && utf8[index * 3 - 1] != UInt8(ascii: ":") { return nil }
            var byte: UInt8 = 0
            for unit in utf8[index * 3..<index * 3 + 2] {
                switch unit {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): byte = byte << 4 | (unit - UInt8(ascii: "0"))
                case UInt8(ascii: "A")...UInt8(ascii: "F"): byte = byte << 4 | (unit - UInt8(ascii: "A") + 10)
                default: return nil
                }
            }
            bytes.append(byte)
        }
        return bytes
    }

    static func addressText(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789ABCDEF")
        return bytes.map { String([digits[Int($0 >> 4)], digits[Int($0 & 0xF)]]) }.joined(separator: ":")
    }

    static func timestamp(_ milliseconds: Int64) -> String { Inventory.timestamp(milliseconds: milliseconds) }

    struct Reader {
        let bytes: [UInt8]
        var position = 0
        /// The entry's `at`, once read (tag 6).
        var at: String?

        mutating func byte() throws -> UInt8 {
            guard position < bytes.count else { throw LedgerDamage("a stored entry ends early") }
            defer { position += 1 }
            return bytes[position]
        }

        mutating func varint() throws -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let next = try byte()
                guard shift < 64 else { throw LedgerDamage("a stored entry has a number too long") }
                result |= UInt64(next & 0x7F) << shift
                if next & 0x80 == 0 { return result }
                shift += 7
            }
        }

        mutating func count() throws -> Int {
            let number = try varint()
            guard number <= UInt64(bytes.count) else { throw LedgerDamage("a stored entry has a count too large") }
            return Int(number)
        }

        mutating func take(_ count: Int) throws -> [UInt8] {
            guard count <= bytes.count - position else { throw LedgerDamage("a stored entry ends early") }
            defer { position += count }
            return Array(bytes[position..<position + count])
        }

        mutating func value() throws -> SQLiteValue {
            func unzigzag(_ number: UInt64) -> Int64 { Int64(bitPattern: number >> 1) ^ -Int64(bitPattern: number & 1) }
            switch try byte() {
            case 0: return .null
            case 1: return .integer(unzigzag(try varint()))
            case 2: return .text(String(decoding: try take(try count()), as: UTF8.self))
            case 3: return .text(LedgerStorage.timestamp(unzigzag(try varint())))
            case 4:
                let raw = try take(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                return .real(Double(bitPattern: raw))
            case 5: return .blob(try take(try count()))
            case 6:
                guard let at else { throw LedgerDamage("a stored entry refers to a time it does not have") }
                return .text(at)
            case 7: return .text(LedgerStorage.addressText(try take(6)))
            default: throw LedgerDamage("a stored entry has a value of no known kind")
            }
        }
    }
}
