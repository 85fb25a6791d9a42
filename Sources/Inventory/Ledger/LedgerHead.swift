import Ledger

/// The tree's right edge as stored (`ledger_head`): appending a leaf costs
/// O(log n) hashes, and the perfect subtrees it completes at level
/// `LedgerHead.storedLevel` and above are kept in `ledger_nodes` for proofs.
struct LedgerHead {
    /// Subtrees of 2^6 = 64 leaves and more are stored; below, a proof
    /// hashes the (at most 64) entries of their block again.
    static let storedLevel = 6

    var frontier: Frontier
    var nodes: [(level: Int, index: Int, hash: Digest)] = []

    var size: Int { frontier.size }

    /// Reads the stored head (an empty tree when there is none yet).
    static func read(_ database: Database) throws -> LedgerHead {
        guard let row = try database.rows("SELECT size, frontier FROM ledger_head WHERE one = 1").first else {
            return LedgerHead(frontier: Frontier())
        }
        guard let size = row[0].integer.flatMap(Int.init(exactly:)), case .blob(let bytes) = row[1],
            let frontier = decode(size: size, bytes)
        else { throw LedgerDamage("ledger_head holds no valid tree edge: the ledger's head was edited") }
        return LedgerHead(frontier: frontier)
    }

    static func decode(size: Int, _ bytes: [UInt8]) -> Frontier? {
        guard size >= 0 else { return nil }
        let levels = (0..<Int.bitWidth).reversed().filter { size >> $0 & 1 == 1 }
        guard bytes.count == levels.count * 32 else { return nil }
        var edge: [(level: Int, hash: Digest)] = []
        for (position, level) in levels.enumerated() {
            guard let hash = Digest(bytes: Array(bytes[position * 32..<position * 32 + 32])) else { return nil }
            edge.append((level, hash))
        }
        return Frontier(size: size, edge: edge)
    }

    /// Appends an entry; returns its leaf check.
    mutating func append(_ entry: [UInt8]) throws -> Int64 {
        let leaf = try MerkleTree.leafHash(entry)
        for node in try frontier.append(leaf) where node.level >= Self.storedLevel { nodes.append(node) }
        return Self.check(leaf)
    }

    /// A leaf hash's first 4 bytes, big-endian, as a signed 32-bit integer
    /// (what `ledger_leaf` and `ledger.leaf` hold: SQLite keeps it in 4
    /// bytes). It names the one entry that changed; the tree's nodes, not
    /// this, are what a forger cannot match.
    static func check(_ leaf: Digest) -> Int64 {
        Int64(Int32(bitPattern: leaf.bytes.prefix(4).reduce(0) { $0 << 8 | UInt32($1) }))
    }

    /// The key of node (level, index) in `ledger_nodes`: the leaf that
    /// completes it, times 64, plus its level. Nodes are stored in the order
    /// they are completed, so the keys only grow and the table's pages fill.
    static func nodeKey(level: Int, index: Int) -> Int64 {
        Int64(((index + 1) << level) - 1) << 6 | Int64(level)
    }

    /// Stores the new edge, root and completed nodes (in the caller's transaction).
    mutating func write(_ database: Database) throws {
        let edgeBytes = frontier.edge.flatMap(\.hash.bytes)
        try database.run(
            """
            INSERT INTO ledger_head(one, size, frontier, root) VALUES (1, ?, ?, ?)
            ON CONFLICT(one) DO UPDATE SET size = excluded.size, frontier = excluded.frontier, root = excluded.root
            """,
            // The root is folded from the edge when asked (`ledgerTreeHead`,
            // verify), not on every append: that would be log n hashes each.
            [.integer(Int64(size)), .blob(edgeBytes), .blob([])])
        for node in nodes {
            try database.run(
                "INSERT INTO ledger_nodes(node, hash) VALUES (?, ?)",
                [.integer(Self.nodeKey(level: node.level, index: node.index)), .blob(node.hash.bytes)])
        }
        nodes = []
    }
}

/// The ledger's own tables are not as the tool left them.
public struct LedgerDamage: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
