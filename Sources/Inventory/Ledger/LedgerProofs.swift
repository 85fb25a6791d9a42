import FoundationEssentials
import Ledger

#if canImport(Glibc)
    import Glibc
#endif

/// The tree as the inventory keeps it: its size and root.
public struct LedgerTreeHead: Sendable, Equatable {
    public let size: Int
    public let root: Digest
}

/// A checkpoint kept in the inventory (`ledger_checkpoints`).
public struct StoredCheckpoint: Sendable {
    public let size: Int
    public let root: Digest
    /// The signed note, as written (docs/ledger.md, "Checkpoints").
    public let note: String
    public let madeAt: String
}

extension Inventory {
    /// A time as entries write it: `2026-12-03T11:44:24.598Z`.
    public static func ledgerTime(_ date: Date) -> String { timestamp(date) }

    /// The tree's size and root as stored (`ledger verify` checks them).
    /// - Throws: `LedgerDamage` when the inventory has no ledger.
    public func ledgerTreeHead() throws -> LedgerTreeHead {
        guard try hasLedger() else { throw LedgerDamage(Self.noLedger(path)) }
        let head = try LedgerHead.read(database)
        return LedgerTreeHead(size: head.size, root: try head.frontier.root())
    }

    /// Whether the file has the ledger's tables (an older schema opened
    /// read-only has not).
    public func hasLedger() throws -> Bool {
        try !database.rows("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'ledger_head'").isEmpty
    }

    static func noLedger(_ path: String) -> String {
        "\(path) has no ledger yet: it was made by an older beaconbench; any command that writes to it (beaconbench ledger checkpoint, a run) starts one"
    }

    /// Keeps a signed checkpoint; the same size twice is refused by the table.
    public func recordCheckpoint(size: Int, root: Digest, note: String) throws {
        try database.run(
            "INSERT INTO ledger_checkpoints(size, root, note, made_at) VALUES (?, ?, ?, ?)",
            [.integer(Int64(size)), .blob(root.bytes), .text(note), .text(Self.timestamp(clock()))])
    }

    /// Every checkpoint kept, oldest first.
    public func checkpoints() throws -> [StoredCheckpoint] {
        guard try hasLedger() else { return [] }
        return try database.rows("SELECT size, root, note, made_at FROM ledger_checkpoints ORDER BY size").compactMap {
            row in
            guard let size = row[0].integer.flatMap(Int.init(exactly:)), case .blob(let bytes) = row[1],
                let root = Digest(bytes: bytes), let note = row[2].text
            else { return nil }
            return StoredCheckpoint(size: size, root: root, note: note, madeAt: row[3].text ?? "")
        }
    }

    /// The entries about `device` (docs/ledger.md: its own rows, and rows
    /// naming it) among the first `size`, each with its inclusion proof in
    /// the tree of that size; only those made at or before `at` when given.
    public func ledgerEntries(
        about device: String, size: Int, at: String? = nil
    ) throws -> [(index: Int, entry: [UInt8], proof: [Digest])] {
        let address = device.uppercased()
        var found: [(Int, [UInt8])] = []
        for row in try database.rows(
            "SELECT seq, entry FROM ledger WHERE seq < ? ORDER BY seq", [.integer(Int64(size))])
        {
            guard let seq = row[0].integer.flatMap(Int.init(exactly:)), case .blob(let bytes) = row[1],
                let stored = try? LedgerStorage.decode(bytes), let table = stored.table,
                table.device(of: Dictionary(stored.row) { a, _ in a }, key: stored.key) == address
            else { continue }
            if let at, let when = stored.at.text, when > at { continue }
            found.append((seq, LedgerEntry.encode(seq: seq, stored)))
        }
        for table in LedgerTable.sealedTables {
            for row in try database.rows(
                table.selectSealedAboutDevice,
                [.text(address), .integer(Int64(size))])
            {
                let values = Array(row.prefix(table.columns.count))
                guard let seq = row[table.columns.count].integer.flatMap(Int.init(exactly:)) else { continue }
                if let at, let column = table.timeColumn, let index = table.columns.firstIndex(of: column),
                    let when = values[index].text, when > at
                {
                    continue
                }
                found.append((seq, LedgerEntry.sealed(table, seq: seq, values: values)))
            }
        }
        found.sort { $0.0 < $1.0 }
        var subtrees = try LedgerSubtrees(database)
        try subtrees.load(
            blocks: Set(found.map { $0.0 >> LedgerHead.storedLevel } + [max(0, size - 1) >> LedgerHead.storedLevel]))
        return try found.map { (index, entry) in
            (index, entry, try MerkleTree.inclusionProof(index: index, size: size, in: subtrees))
        }
    }

    /// The consistency proof from the tree of `oldSize` entries to the one
    /// of `newSize` (RFC 9162 §2.1.4).
    public func ledgerConsistencyProof(from oldSize: Int, to newSize: Int) throws -> [Digest] {
        var subtrees = try LedgerSubtrees(database)
        try subtrees.load(blocks: [
            max(0, oldSize - 1) >> LedgerHead.storedLevel, max(0, newSize - 1) >> LedgerHead.storedLevel,
        ])
        return try MerkleTree.consistencyProof(oldSize: oldSize, newSize: newSize, in: subtrees)
    }

    /// The root of the tree of the first `size` entries.
    public func ledgerRoot(size: Int) throws -> Digest {
        guard size > 0 else { return try MerkleTree.emptyRoot() }
        var subtrees = try LedgerSubtrees(database)
        try subtrees.load(blocks: [(size - 1) >> LedgerHead.storedLevel])
        return try MerkleTree.hash(0..<size, in: subtrees)
    }

    /// Entries `range` (for a sync), in order.
    public func ledgerEntries(_ range: Range<Int>) throws -> [[UInt8]] {
        try LedgerSubtrees.entries(database, range).map(\.1)
    }
}

/// The perfect subtrees of the inventory's tree: those of 64 leaves and
/// more from `ledger_nodes`, smaller ones hashed again from the entries of
/// their block of 64 (loaded once per block).
struct LedgerSubtrees: PerfectSubtrees {
    let database: Database
    var nodes: [Int64: Digest] = [:]
    var blocks: [Int: [Digest]] = [:]

    init(_ database: Database) throws {
        self.database = database
        for row in try database.rows("SELECT node, hash FROM ledger_nodes") {
            if let key = row[0].integer, case .blob(let bytes) = row[1], let hash = Digest(bytes: bytes) {
                nodes[key] = hash
            }
        }
    }

    /// Hashes the leaves of `blocks` (one pass over each table).
    mutating func load(blocks wanted: Set<Int>) throws {
        let missing = wanted.subtracting(blocks.keys)
        guard !missing.isEmpty else { return }
        let width = 1 << LedgerHead.storedLevel
        var leaves: [Int: [Int: Digest]] = [:]
        // One pass over the blocks' span (a sealed table has no index by seq).
        let span = missing.min()! * width..<(missing.max()! + 1) * width
        for (seq, entry) in try Self.entries(database, span, only: { missing.contains($0 / width) }) {
            leaves[seq / width, default: [:]][seq] = try MerkleTree.leafHash(entry)
        }
        for block in missing {
            let found = leaves[block] ?? [:]
            blocks[block] = (0..<width).prefix { found[block * width + $0] != nil }.map { found[block * width + $0]! }
        }
    }

    /// The entries whose seq is in `range`, in order.
    static func entries(
        _ database: Database, _ range: Range<Int>, only wanted: (Int) -> Bool = { _ in true }
    ) throws -> [(Int, [UInt8])] {
        var found: [(Int, [UInt8])] = []
        let bounds: [SQLiteValue] = [.integer(Int64(range.lowerBound)), .integer(Int64(range.upperBound))]
        // Row by row, only the wanted ones kept: the span of two blocks far
        // apart (a sync resuming at entry 300,000 of 840,000 proves from
        // there to the end) holds hundreds of thousands of rows; read into
        // an array first they took ~100 MB (docs/office.md, "Memory after
        // a reconnect").
        try database.forEachRow("SELECT seq, entry FROM ledger WHERE seq >= ? AND seq < ? ORDER BY seq", bounds) {
            row in
            guard let seq = row[0].integer.flatMap(Int.init(exactly:)), wanted(seq), case .blob(let bytes) = row[1]
            else { return }
            found.append((seq, try LedgerStorage.json(seq: seq, bytes)))
        }
        for table in LedgerTable.sealedTables {
            try database.forEachRow(table.selectSealedInRange, bounds) { row in
                guard let seq = row[table.columns.count].integer.flatMap(Int.init(exactly:)), wanted(seq) else {
                    return
                }
                found.append((seq, LedgerEntry.sealed(table, seq: seq, values: Array(row.prefix(table.columns.count)))))
            }
        }
        return found.sorted { $0.0 < $1.0 }
    }

    func hash(level: Int, index: Int) throws -> Digest {
        if level >= LedgerHead.storedLevel {
            guard let node = nodes[LedgerHead.nodeKey(level: level, index: index)] else {
                throw LedgerDamage("ledger_nodes has no node at level \(level), index \(index)")
            }
            return node
        }
        let first = index << level
        let block = first >> LedgerHead.storedLevel
        let offset = first - block << LedgerHead.storedLevel
        guard let leaves = blocks[block], offset + (1 << level) <= leaves.count else {
            throw LedgerDamage("entries \(first) to \(first + (1 << level) - 1) are not all in the inventory")
        }
        return try MerkleTree.root(Array(leaves[offset..<offset + (1 << level)]))
    }
}

extension Inventory {
    /// Whether every entry after the first `size` is a kept checkpoint's
    /// (at most `limit` of them): a checkpoint of `size` entries is then
    /// still the newest state of the ledger, but for the record of itself
    /// (a checkpoint's entry comes after the entries it signs).
    public func ledgerHoldsOnlyCheckpoints(after size: Int, limit: Int = 16) throws -> Bool {
        let head = try ledgerTreeHead().size
        guard size <= head, head - size <= limit else { return false }
        if head == size { return true }
        let rows = try database.rows(
            "SELECT seq, entry FROM ledger WHERE seq >= ? AND seq < ? ORDER BY seq",
            [.integer(Int64(size)), .integer(Int64(head))])
        guard rows.count == head - size else { return false }
        return rows.allSatisfy { row in
            guard case .blob(let bytes) = row[1], let stored = try? LedgerStorage.decode(bytes) else { return false }
            return stored.table?.name == LedgerTable.checkpoints.name && stored.op == .insert
        }
    }
}
