import Ledger
import SafeText

/// One way the inventory disagrees with its ledger.
public struct LedgerFinding: Sendable, Equatable {
    /// The entry it concerns, when there is one (findings are ordered by it).
    public let seq: Int?
    public let message: String
    /// A finding about the tables (what the entries imply) rather than the
    /// ledger itself: listed after those, which it may only follow from.
    var aboutTables = false

    public init(seq: Int?, message: String) {
        self.seq = seq
        self.message = message
    }

    init(seq: Int?, message: String, aboutTables: Bool) {
        self.seq = seq
        self.message = message
        self.aboutTables = aboutTables
    }
}

/// What `ledger verify` found (docs/ledger.md, "What verify checks").
public struct LedgerVerification: Sendable {
    public var size = 0
    /// The tree's root, recomputed from the entries (hex).
    public var root = ""
    public var checkpoints = 0
    /// Entries by table (`""`: notes), for the report.
    public var entries: [String: Int] = [:]
    /// Rows of running steps, not in the ledger until they end.
    public var inFlight = 0
    /// Every disagreement found, the first first (bounded: `truncated`
    /// says how many more there were).
    public var findings: [LedgerFinding] = []
    public var truncated = 0
    public var ok: Bool { findings.isEmpty }

    public init() {}
}

extension Inventory {
    /// Recomputes the ledger's tree from its entries and checks it against
    /// what is stored (each entry's leaf check, every stored node, the
    /// head, every checkpoint), then replays the entries and checks that
    /// the tables hold exactly what they imply, row by row and column by
    /// column. Reads only.
    public func verifyLedger(limit: Int = 50) throws -> LedgerVerification {
        var verifier = LedgerVerifier(database: database, limit: limit)
        return try verifier.run()
    }
}

struct LedgerVerifier {
    let database: Database
    let limit: Int
    var result = LedgerVerification()
    var all: [LedgerFinding] = []
    /// Replayed rows of the tables whose entries are kept in `ledger`, by
    /// table and key (the key's entry bytes: two keys only canonically
    /// equivalent are two rows), with the last entry that changed each.
    var state: [String: [[UInt8]: (row: [String: SQLiteValue], seq: Int)]] = [:]

    init(database: Database, limit: Int) {
        self.database = database
        self.limit = limit
    }

    mutating func find(_ seq: Int?, _ message: String) {
        all.append(LedgerFinding(seq: seq, message: message, aboutTables: comparingTables))
    }
    var comparingTables = false

    /// Each trigger's text as the migration that made it wrote it (SQLite
    /// keeps a trigger's `CREATE TRIGGER … END` as it was given).
    static let triggerText: [String: String] = {
        var found: [String: String] = [:]
        for migration in Schema.migrations {
            var rest = Substring(migration.sql)
            while let start = rest.firstRange(of: "CREATE TRIGGER ") {
                guard let end = rest[start.upperBound...].firstRange(of: " END;") else { break }
                let text = rest[start.lowerBound..<rest.index(end.upperBound, offsetBy: -1)]
                let name = text.dropFirst("CREATE TRIGGER ".count).prefix { !$0.isWhitespace }
                found[String(name)] = String(text)
                rest = rest[end.upperBound...]
            }
        }
        return found
    }()

    mutating func run() throws -> LedgerVerification {
        var present: [String: String] = [:]
        for row in try database.rows("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'") {
            if let name = row[0].text { present[name] = row[1].text ?? "" }
        }
        // Every trigger the migrations make is the ledger's (none other is).
        for trigger in Self.triggerText.keys.sorted() {
            guard let text = present[trigger] else {
                find(nil, "trigger \(trigger) is gone: the ledger's tables were opened to changes outside beaconbench")
                continue
            }
            if !Self.triggerText[trigger].sameBytes(text) {
                find(nil, "trigger \(trigger) is not the one beaconbench made: it was replaced outside beaconbench")
            }
        }
        // A table without the columns the ledger reads cannot be read:
        // said (naming the column), and the rest not tried.
        guard try checkColumns() else { return finish() }
        try checkBench()
        let head = try? LedgerHead.read(database)
        if head == nil { find(nil, "ledger_head holds no valid tree edge: the ledger's head was edited") }
        var checkpoints: [(size: Int, root: [UInt8])] = []
        for row in try database.rows("SELECT size, root FROM ledger_checkpoints ORDER BY size") {
            guard let size = row[0].integer.flatMap(Int.init(exactly:)), case .blob(let root) = row[1] else {
                find(nil, "a checkpoint row holds no size or root")
                continue
            }
            checkpoints.append((size, root))
        }
        result.checkpoints = checkpoints.count
        var nodes: [Int64: [UInt8]] = [:]
        for row in try database.rows("SELECT node, hash FROM ledger_nodes") {
            if let key = row[0].integer, case .blob(let hash) = row[1] { nodes[key] = hash }
        }

        var frontier = Frontier()
        var nextCheckpoint = 0
        // A checkpoint of no entries: the empty tree's root (no append reaches it).
        while nextCheckpoint < checkpoints.count, checkpoints[nextCheckpoint].size <= 0 {
            if checkpoints[nextCheckpoint].size == 0, checkpoints[nextCheckpoint].root != (try frontier.root()).bytes {
                find(
                    nil,
                    "the checkpoint at size 0 does not match the empty ledger's root: it was made outside beaconbench")
            }
            nextCheckpoint += 1
        }
        var cursors = try LedgerTable.sealedTables.map { try SealedCursor(database, $0) }
        var explicit = try ExplicitCursor(database)
        while true {
            // The next entry by seq, from the ledger table or a sealed row.
            // (Without allocating: this runs once per entry.)
            var lowestSeq = explicit.seq ?? Int64.max
            var lowestSource = explicit.seq == nil ? Int.min : -1
            var shared = false
            for index in cursors.indices {
                guard let seq = cursors[index].seq else { continue }
                if seq < lowestSeq || lowestSource == Int.min {
                    (lowestSeq, lowestSource, shared) = (seq, index, false)
                } else if seq == lowestSeq {
                    shared = true
                }
            }
            guard lowestSource != Int.min else { break }
            let lowest = (seq: lowestSeq, source: lowestSource)
            var holders = [lowest]
            if shared {
                holders =
                    ([explicit.seq.map { ($0, -1) }]
                    + cursors.indices.map { index in
                        cursors[index].seq.map { ($0, index) }
                    }).compactMap { $0 }.filter { $0.0 == lowestSeq }.map { (seq: $0.0, source: $0.1) }
            }
            guard lowest.seq >= 0, lowest.seq < Int64(Int32.max) * 1024 else {
                for holder in holders {
                    find(
                        nil,
                        "\(describe(holder.source, cursors, explicit)) holds ledger place \(lowest.seq), which no entry can have"
                    )
                }
                try advance(holders, &cursors, &explicit)
                continue
            }
            let seq = Int(lowest.seq)
            if holders.count > 1 {
                find(
                    seq,
                    "entry \(seq) is held twice (\(holders.map { describe($0.source, cursors, explicit) }.joined(separator: " and "))): a row was given a place in the ledger outside beaconbench"
                )
            }
            if seq < frontier.size {
                // A duplicate already counted.
                try advance(holders, &cursors, &explicit)
                continue
            }
            while frontier.size < seq {
                find(frontier.size, "entry \(frontier.size) is missing: no row holds it (deleted outside beaconbench?)")
                // Stand a hash of nothing in for it so later entries keep their places.
                try append(try MerkleTree.leafHash([]), &frontier, &nodes, &nextCheckpoint, checkpoints)
            }
            let source = holders[0].source
            let (bytes, check, what) = try entry(seq, source, cursors, explicit)
            let leaf = try MerkleTree.leafHash(bytes)
            if let check, check != LedgerHead.check(leaf) {
                find(seq, "entry \(seq) (\(what())) is not what was recorded: it was changed outside beaconbench")
            }
            try append(leaf, &frontier, &nodes, &nextCheckpoint, checkpoints)
            try advance(holders, &cursors, &explicit)
        }
        result.size = frontier.size
        result.root = try frontier.root().hex
        if let head {
            if head.size != frontier.size {
                find(
                    min(head.size, frontier.size),
                    "the ledger's head says \(head.size) entries, the rows hold \(frontier.size)")
            } else if head.frontier != frontier {
                find(nil, "the ledger's head does not match its entries: the head was rewritten")
            } else if let stored = try database.rows("SELECT root FROM ledger_head").first?.first,
                stored != .blob([]), stored != .blob(try frontier.root().bytes)
            {
                find(nil, "the ledger's stored root does not match its entries")
            }
        }
        for checkpoint in checkpoints[nextCheckpoint...] {
            find(
                nil,
                "a checkpoint at size \(checkpoint.size) is beyond the ledger's \(frontier.size) entries: entries were removed"
            )
        }
        let leftover = nodes.keys.filter { $0 & 63 >= LedgerHead.storedLevel }.count
        if leftover > 0 {
            find(
                nil,
                "ledger_nodes holds \(leftover) node\(leftover == 1 ? "" : "s") of no entries: entries were removed")
        }
        comparingTables = true
        try compareTables()
        return finish()
    }

    /// The findings in order (about the ledger first, by place), bounded.
    private mutating func finish() -> LedgerVerification {
        all.sort { ($0.aboutTables ? 1 : 0, $0.seq ?? Int.max) < ($1.aboutTables ? 1 : 0, $1.seq ?? Int.max) }
        result.findings = Array(all.prefix(limit))
        result.truncated = max(0, all.count - limit)
        return result
    }

    private mutating func append(
        _ leaf: Digest, _ frontier: inout Frontier, _ nodes: inout [Int64: [UInt8]], _ nextCheckpoint: inout Int,
        _ checkpoints: [(size: Int, root: [UInt8])]
    ) throws {
        for node in try frontier.append(leaf) where node.level >= LedgerHead.storedLevel {
            let key = LedgerHead.nodeKey(level: node.level, index: node.index)
            let first = node.index << node.level
            let range = "entries \(first) to \(first + (1 << node.level) - 1)"
            switch nodes.removeValue(forKey: key) {
            case nil: find(first, "\(range): their tree node is missing from ledger_nodes")
            case let stored? where stored != node.hash.bytes:
                find(first, "\(range) do not hash to the tree node stored for them: an entry among them was changed")
            default: break
            }
        }
        while nextCheckpoint < checkpoints.count, checkpoints[nextCheckpoint].size <= frontier.size {
            let checkpoint = checkpoints[nextCheckpoint]
            if checkpoint.size == frontier.size, checkpoint.root != (try frontier.root()).bytes {
                find(
                    checkpoint.size - 1,
                    "the checkpoint at size \(checkpoint.size) does not match the ledger: its first \(checkpoint.size) entries were rewritten since it was made"
                )
            }
            nextCheckpoint += 1
        }
    }

    /// An entry's bytes, its stored leaf check and what it is, for messages.
    private mutating func entry(
        _ seq: Int, _ source: Int, _ cursors: [SealedCursor], _ explicit: ExplicitCursor
    ) throws -> ([UInt8], Int64?, () -> String) {
        // What the entry is, for a message: made only when one is said.
        if source >= 0 {
            let cursor = cursors[source]
            let table = cursor.table
            result.entries[table.name, default: 0] += 1
            let what = { "\(table.name) \(Self.keyText(table.keyIndices.map { cursor.values[$0] }))" }
            return (LedgerEntry.sealed(table, seq: seq, values: cursor.values), cursor.check, what)
        }
        do {
            let stored = try LedgerStorage.decode(explicit.bytes)
            result.entries[stored.table?.name ?? "", default: 0] += 1
            if let table = stored.table { replay(seq, table, stored) }
            let what = { stored.table.map { "\($0.name) \(Self.keyText(stored.key))" } ?? "a note" }
            return (LedgerEntry.encode(seq: seq, stored), explicit.check, what)
        } catch let damage as LedgerDamage {
            find(seq, "entry \(seq) cannot be read (\(damage.description)): it was changed outside beaconbench")
            return (explicit.bytes, nil, { "unreadable" })
        }
    }

    private func describe(_ source: Int, _ cursors: [SealedCursor], _ explicit: ExplicitCursor) -> String {
        guard source >= 0 else { return "the ledger table" }
        let cursor = cursors[source]
        return "\(cursor.table.name) \(Self.keyText(cursor.table.keyIndices.map { cursor.values[$0] }))"
    }

    private func advance(
        _ holders: [(seq: Int64, source: Int)], _ cursors: inout [SealedCursor], _ explicit: inout ExplicitCursor
    ) throws {
        for holder in holders {
            if holder.source < 0 { try explicit.next() } else { try cursors[holder.source].next() }
        }
    }

    static func keyText(_ key: [SQLiteValue]) -> String {
        key.count == 1 ? text(key[0]) : "(" + key.map(text).joined(separator: ", ") + ")"
    }

    static func text(_ value: SQLiteValue) -> String {
        String(decoding: CanonicalJSON.encode(LedgerEntry.json(value)), as: UTF8.self)
    }

    /// ` (the same text in another Unicode form: …)` when two text values
    /// differ only in their bytes, not to Swift's `==`; empty otherwise.
    static func formNote(_ a: SQLiteValue, _ b: SQLiteValue) -> String {
        guard case .text(let x) = a, case .text(let y) = b, let note = x.otherBytesNote(y) else { return "" }
        return " (\(note))"
    }

    /// A key as the replay holds it: its bytes, never a `String`
    /// (docs/development.md, "Stored values are compared as bytes").
    private static func keyString(_ key: [SQLiteValue]) -> [UInt8] {
        CanonicalJSON.encode(.array(key.map(LedgerEntry.json)))
    }

    // MARK: Replaying the entries kept in `ledger`

    private mutating func replay(_ seq: Int, _ table: LedgerTable, _ entry: LedgerStorage.Stored) {
        let key = Self.keyString(entry.key)
        // A checkpoint is kept once and never changed; its entry comes
        // after the entries it signs (docs/ledger.md, "Checkpoints are
        // entries").
        if table.name == LedgerTable.checkpoints.name {
            if entry.op != .insert {
                find(seq, "entry \(seq) \(entry.op.rawValue)s a kept checkpoint: a checkpoint is only ever added")
            } else if let size = entry.key.first?.integer, size > Int64(seq) {
                find(
                    seq,
                    "entry \(seq) records a checkpoint of \(size) entries before the entries it signs: a checkpoint's entry comes after them"
                )
            }
        }
        switch entry.op {
        case .insert:
            // A row the ledger holds but no longer covers (an assignment
            // pulled from the server, recorded before pulled ones were left
            // out) may be inserted over: it enters the cover.
            if let held = state[table.name]?[key], table.covers({ held.row[$0] }) {
                find(
                    seq, "entry \(seq) inserts \(table.name) \(Self.keyText(entry.key)), which the ledger already holds"
                )
            }
            state[table.name, default: [:]][key] = (Dictionary(entry.row) { a, _ in a }, seq)
        case .update:
            guard var current = state[table.name]?[key] else {
                find(
                    seq, "entry \(seq) updates \(table.name) \(Self.keyText(entry.key)), which the ledger does not hold"
                )
                return
            }
            for (column, value) in entry.row { current.row[column] = value }
            current.seq = seq
            state[table.name]?[key] = current
        case .delete:
            if state[table.name]?.removeValue(forKey: key) == nil {
                find(
                    seq, "entry \(seq) deletes \(table.name) \(Self.keyText(entry.key)), which the ledger does not hold"
                )
            }
        case .note: break
        }
    }

    /// Every row of the tables kept by `ledger` that the ledger covers
    /// (`LedgerTable.covers`) must be what the entries imply, and every
    /// row the entries imply and cover must be there; a row not covered
    /// is compared only with what the entries imply of it when that is
    /// covered (a row of this bench's made to look pulled is found).
    /// Every row of a sealed table must be in the ledger, but for the
    /// steps of a run still running.
    private mutating func compareTables() throws {
        for table in LedgerTable.all where !table.sealed {
            var expected = state[table.name] ?? [:]
            for values in try database.rows(table.selectAll) {
                let keyValues = table.keyIndices.map { values[$0] }
                let key = Self.keyString(keyValues)
                let name = "\(table.name) \(Self.keyText(keyValues))"
                if !table.covers(row: values) {
                    guard let implied = expected.removeValue(forKey: key), table.covers({ implied.row[$0] }) else {
                        continue
                    }
                    for (index, column) in table.columns.enumerated()
                    where values[index] != implied.row[column] ?? .null {
                        find(
                            implied.seq,
                            "\(name): \(column) is \(Self.text(values[index])) but the ledger says \(Self.text(implied.row[column] ?? .null))\(Self.formNote(values[index], implied.row[column] ?? .null)) (entry \(implied.seq)): it was changed outside beaconbench"
                        )
                    }
                    continue
                }
                guard let implied = expected.removeValue(forKey: key), table.covers({ implied.row[$0] }) else {
                    if table.name == LedgerTable.checkpoints.name {
                        find(
                            nil,
                            "the checkpoint kept at size \(Self.text(keyValues[0])) has no ledger entry: it was added outside beaconbench (one an older beaconbench kept is recorded when the inventory is next opened for writing: docs/ledger.md)"
                        )
                        continue
                    }
                    find(nil, "\(name) is in the table but not in the ledger: it was added outside beaconbench")
                    continue
                }
                for (index, column) in table.columns.enumerated() {
                    let want = implied.row[column] ?? .null
                    if values[index] != want {
                        find(
                            implied.seq,
                            "\(name): \(column) is \(Self.text(values[index])) but the ledger says \(Self.text(want))\(Self.formNote(values[index], want)) (entry \(implied.seq)): it was changed outside beaconbench"
                        )
                    }
                }
            }
            for (_, implied) in expected where table.covers({ implied.row[$0] }) {
                let keyValues = table.keyIndices.map { implied.row[table.columns[$0]] ?? .null }
                find(
                    implied.seq,
                    "\(table.name) \(Self.keyText(keyValues)) is in the ledger (entry \(implied.seq)) but not in the table: it was deleted outside beaconbench"
                )
            }
        }
        let running = Set(
            (state["runs"] ?? [:]).values.filter { $0.row["status"] == .text("running") }.compactMap {
                $0.row["id"]?.integer
            })
        for table in LedgerTable.sealedTables {
            for values in try database.rows(
                table.selectUnsealed)
            {
                if table.name == "outcomes", values[1] == .text("running"), let run = values[2].integer,
                    running.contains(run)
                {
                    result.inFlight += 1
                    continue
                }
                find(
                    nil,
                    "\(table.name) \(Self.keyText(Array(values.prefix(table.key.count)))) is not in the ledger: it was added or changed outside beaconbench"
                )
            }
        }
    }

    /// The bench's id is the one the ledger began with (entry 0's note), and
    /// each checkpoint's signed note says the size and root kept beside it.
    private mutating func checkBench() throws {
        let bench = try database.rows("SELECT value FROM meta WHERE key = 'bench_id'").first?.first?.text
        if let first = try database.rows("SELECT entry FROM ledger WHERE seq = 0").first?.first,
            case .blob(let bytes) = first, let note = try? LedgerStorage.decode(bytes), note.op == .note,
            let began = note.row.first(where: { $0.0.sameBytes("bench") })?.1.text, !bench.sameBytes(began)
        {
            find(
                0,
                "the bench id in meta (\(bench.map { Self.text(.text($0)) } ?? "none")) is not the one the ledger began with (\(Self.text(.text(began)))): it was changed outside beaconbench"
            )
        }
        for row in try database.rows("SELECT size, root, note FROM ledger_checkpoints ORDER BY size") {
            guard case .blob(let root) = row[1], let text = row[2].text else { continue }
            let said = try? Checkpoint.parse(try SignedNote.parse(text).text)
            if said?.size != row[0].integer.flatMap(Int.init(exactly:)) || said?.root.bytes != root {
                find(
                    nil,
                    "the checkpoint kept at size \(row[0].integer ?? -1) does not match its own signed note: it was changed outside beaconbench"
                )
            }
        }
    }

    /// The ledger's own tables, with the columns verify reads.
    static let ledgerTables: [(String, [String])] = [
        ("ledger", ["seq", "leaf", "entry"]), ("ledger_head", ["one", "size", "frontier", "root"]),
        ("ledger_nodes", ["node", "hash"]),
    ]

    /// The covered tables still have the columns the entries are made of,
    /// and the ledger's own tables theirs; each one gone is named.
    /// - Returns: whether all are there (else the tables cannot be read).
    private mutating func checkColumns() throws -> Bool {
        var readable = true
        let tables =
            LedgerTable.all.map { ($0.name, $0.columns + ($0.sealed ? ["ledger_seq", "ledger_leaf"] : [])) }
            + Self.ledgerTables
        for (name, expected) in tables {
            let columns = try database.rows("SELECT name FROM pragma_table_info(?)", [.text(name)]).compactMap {
                $0.first?.text
            }
            guard !columns.sameBytes(expected) else { continue }
            if columns.isEmpty {
                find(nil, "table \(name) is gone: it was dropped outside beaconbench")
                readable = false
                continue
            }
            let missing = expected.filter { !columns.containsSameBytes($0) }
            let extra = columns.filter { !expected.containsSameBytes($0) }
            if !missing.isEmpty {
                readable = false
                find(
                    nil,
                    "table \(name) has lost column\(missing.count == 1 ? "" : "s") \(missing.joined(separator: ", ")), which its entries are made of: it was changed outside beaconbench"
                )
            }
            if !extra.isEmpty {
                find(
                    nil,
                    "table \(name) has column\(extra.count == 1 ? "" : "s") \(extra.joined(separator: ", ")) that its entries are not made of: it was changed outside beaconbench"
                )
            }
            if missing.isEmpty, extra.isEmpty {
                find(
                    nil,
                    "table \(name) has its columns in another order (\(columns.joined(separator: ", "))) than its entries: it was changed outside beaconbench"
                )
            }
        }
        return readable
    }
}

/// The sealed rows of one table, by `ledger_seq`.
struct SealedCursor {
    let table: LedgerTable
    let statement: Statement
    var seq: Int64?
    var values: [SQLiteValue] = []
    var check: Int64?

    init(_ database: Database, _ table: LedgerTable) throws {
        self.table = table
        statement = try database.prepare(
            table.selectSealedInOrder)
        try next()
    }

    mutating func next() throws {
        guard try statement.step() else {
            seq = nil
            return
        }
        let row = statement.row()
        values = Array(row.prefix(table.columns.count))
        seq = row[table.columns.count].integer ?? -1
        // A leaf check that is not an integer matches no entry (Int64.min is no check's value).
        check = row[table.columns.count + 1].integer ?? Int64.min
    }
}

/// The entries kept in `ledger`, by seq.
struct ExplicitCursor {
    let statement: Statement
    var seq: Int64?
    var bytes: [UInt8] = []
    var check: Int64?

    init(_ database: Database) throws {
        statement = try database.prepare("SELECT seq, leaf, entry FROM ledger ORDER BY seq")
        try next()
    }

    mutating func next() throws {
        guard try statement.step() else {
            seq = nil
            return
        }
        let row = statement.row()
        seq = row[0].integer
        check = row[1].integer ?? Int64.min
        switch row[2] {
        case .blob(let data): bytes = data
        case .text(let text): bytes = Array(text.utf8)
        default: bytes = []
        }
    }
}
