import FoundationEssentials
import Inventory
import Ledger

/// A bench's rows on the server compared with its own (docs/office.md,
/// "What the server holds of a bench, checked"): `sync` runs it before it
/// sends the tables and after. The bench's own rows are what its ledger
/// says (its `ledger verify` passed before the sync began), so a row that
/// differs is the server's doing: named (table, key, column, the server's
/// value and the bench's), never restored without saying so.
///
/// The cost is bounded by blocks: each table's rows of the bench are
/// hashed by block (runs, outcomes and readings by 4,096 local ids, the
/// other tables whole), SHA-256 over each row's values in key order, on
/// the server (`sha256(string_agg(…))`) and here alike; only a block whose
/// hashes differ is read row by row.
enum ServerRowCheck {
    static let blockIDs: Int64 = 4_096

    /// A value as PostgreSQL's `quote_nullable(text)` writes it: `NULL`,
    /// or the text in single quotes (doubled inside), with `E` before and
    /// backslashes doubled when it holds one.
    static func quoted(_ value: String?) -> String {
        guard let value else { return "NULL" }
        var out = value.contains("\\") ? "E'" : "'"
        for character in value.unicodeScalars {
            if character == "'" {
                out += "''"
            } else if character == "\\" {
                out += "\\\\"
            } else {
                out.unicodeScalars.append(character)
            }
        }
        return out + "'"
    }

    struct LocalRow {
        var key: [UInt8]
        var shownKey: String
        var values: [String?]
    }

    /// The bench's rows of `table` as a sync sends them (simulated rows
    /// held back unless `include`), by block, each block's rows in key order.
    static func localBlocks(
        _ inventory: Inventory, _ table: ServerTableCheck.Table, schema: ServerSchema.Table, include: Bool
    ) async throws(SyncError) -> [Int64: [LocalRow]] {
        let offset = schema.cursorIsLocalID ? 0 : 1
        let rows = try await InventorySync.local(
            inventory, schema.select, [.integer(0), .integer(Int64.max), .integer(include ? 1 : 0)])
        let keyIndexes = table.keyColumns.compactMap { table.columns.firstIndex(of: $0) }
        var blocks: [Int64: [LocalRow]] = [:]
        for row in rows {
            let values = (0..<table.columns.count).map { $0 + offset < row.count ? row[$0 + offset].textForm : nil }
            let keyValues = keyIndexes.map { values[$0] }
            let key = ServerTableCheck.keyBytes(keyValues, types: keyIndexes.map { table.types[$0] })
            let block = schema.cursorIsLocalID ? (Int64(values[0] ?? "") ?? 0) / blockIDs : 0
            blocks[block, default: []].append(
                LocalRow(
                    key: key,
                    shownKey: keyValues.map { StoredText.shown($0 ?? "NULL", limit: 40) }.joined(separator: ", "),
                    values: values))
        }
        return blocks
    }

    /// The order of a table's key on the server, the same as `sortKey` here.
    static func order(_ table: ServerTableCheck.Table) -> String {
        table.keyColumns.compactMap { name -> String? in
            guard let index = table.columns.firstIndex(of: name) else { return nil }
            let column = table.serverColumns[index]
            return table.types[index] == .bigint ? column : "\(column) COLLATE \"C\""
        }.joined(separator: ", ")
    }

    static func rowText(_ values: [String?]) -> String { values.map(quoted).joined(separator: ",") }

    /// Rows in the server's key order: bigint keys as numbers, text by bytes.
    static func sorted(_ rows: [LocalRow], _ table: ServerTableCheck.Table) -> [LocalRow] {
        let keyIndexes = table.keyColumns.compactMap { table.columns.firstIndex(of: $0) }
        return rows.sorted { a, b in
            for index in keyIndexes {
                let x = a.values[index]
                let y = b.values[index]
                if x == y { continue }
                guard let x else { return false }
                guard let y else { return true }
                if table.types[index] == .bigint, let p = Int64(x), let q = Int64(y) { return p < q }
                return Array(x.utf8).lexicographicallyPrecedes(Array(y.utf8))
            }
            return false
        }
    }

    static func hash(_ text: String) throws(SyncError) -> String {
        do {
            return try Digest.sha256(Array(text.utf8)).hex
        } catch {
            throw SyncError("\(error)")
        }
    }

    /// The differences between the server's rows of `bench` and the
    /// bench's: one sentence each, at most `limit` (then a count). Rows
    /// whose keys are in `skip` (changed here since the last sync: the
    /// server is still to get them) are not compared; with `missing`, a
    /// row the bench has and the server lacks is one.
    static func differences(
        _ inventory: Inventory, _ server: PostgresConnection, bench: String, include: Bool,
        skip: [String: Set<[UInt8]>] = [:], skipTables: Set<String> = [], missing: Bool, limit: Int = 20
    ) async throws(SyncError) -> [String] {
        var found: [String] = []
        var more = 0
        func find(_ text: String) { if found.count < limit { found.append(text) } else { more += 1 } }
        for table in ServerTableCheck.tables where !skipTables.contains(table.name) {
            guard let schema = ServerSchema.tables.first(where: { $0.name == table.name }) else { continue }
            let local = try await localBlocks(inventory, table, schema: schema, include: include)
            let rowSQL =
                "concat_ws(',', " + table.serverColumns.map { "quote_nullable(\($0)::text)" }.joined(separator: ", ")
                + ")"
            let block = schema.cursorIsLocalID ? "(local_id / \(blockIDs))" : "0"
            var serverBlocks: [Int64: String] = [:]
            for row in try server.exec(
                """
                SELECT \(block)::text, encode(sha256(convert_to(string_agg(\(rowSQL), E'\\n' ORDER BY \(order(table))), 'UTF8')), 'hex')
                FROM \(table.name) WHERE bench_id = $1 GROUP BY 1
                """, [bench])
            {
                if row.count > 1, let number = row[0].flatMap({ Int64($0) }) { serverBlocks[number] = row[1] ?? "" }
            }
            for number in Set(serverBlocks.keys).union(local.keys).sorted() {
                // Tables by local id come in id order already (their selects
                // order by it), the server's order too.
                let mine = schema.cursorIsLocalID ? local[number] ?? [] : sorted(local[number] ?? [], table)
                let localHash =
                    mine.isEmpty ? nil : try hash(mine.map { Self.rowText($0.values) }.joined(separator: "\n"))
                if localHash == serverBlocks[number] { continue }
                // This block row by row.
                var theirs: [[UInt8]: [String?]] = [:]
                let keyIndexes = table.keyColumns.compactMap { table.columns.firstIndex(of: $0) }
                for row in try server.exec(
                    "SELECT " + table.serverColumns.map { "\($0)::text" }.joined(separator: ", ")
                        + " FROM \(table.name) WHERE bench_id = $1 AND \(block) = $2::bigint",
                    [bench, String(number)])
                {
                    let keyValues = keyIndexes.map { $0 < row.count ? row[$0] : nil }
                    theirs[ServerTableCheck.keyBytes(keyValues, types: keyIndexes.map { table.types[$0] })] = row
                }
                let skipped = skip[table.name] ?? []
                for row in mine {
                    let there = theirs.removeValue(forKey: row.key)
                    if skipped.contains(row.key) { continue }
                    guard let there else {
                        if missing { find("\(table.name) \(row.shownKey) is not on the server") }
                        continue
                    }
                    for (index, column) in table.columns.enumerated() where index < there.count {
                        if there[index] != row.values[index] {
                            find(
                                "\(table.name) \(row.shownKey): \(column) is \(ServerTableCheck.shown(there[index])) on the server, the bench's ledger says \(ServerTableCheck.shown(row.values[index]))"
                            )
                        }
                    }
                }
                for (key, row) in theirs.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) })
                where !skipped.contains(key) {
                    let shown = keyIndexes.map {
                        StoredText.shown(($0 < row.count ? row[$0] : nil) ?? "NULL", limit: 40)
                    }
                    find("\(table.name) \(shown.joined(separator: ", ")) is on the server but not this bench's")
                }
            }
        }
        if more > 0 { found.append("and \(more) more") }
        return found
    }
}
