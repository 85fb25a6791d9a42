/// A Merkle tree as RFC 9162 (Certificate Transparency 2.0, §2.1) defines
/// it, over SHA-256: a leaf's hash is SHA-256(0x00 ‖ leaf), a node's
/// SHA-256(0x01 ‖ left ‖ right); a tree of n leaves splits at the largest
/// power of two below n. Inclusion and consistency proofs are made and
/// checked exactly as §2.1.3 and §2.1.4 say, so any RFC 9162 verifier
/// accepts them (docs/ledger.md).
public enum MerkleTree {
    /// The hash of the empty tree: SHA-256 of nothing.
    public static func emptyRoot() throws(CryptoUnavailable) -> Digest { try Digest.sha256([]) }

    public static func leafHash(_ leaf: [UInt8]) throws(CryptoUnavailable) -> Digest {
        try Digest.sha256(prefix: [0x00], leaf)
    }

    public static func nodeHash(_ left: Digest, _ right: Digest) throws(CryptoUnavailable) -> Digest {
        try Digest.sha256(prefix: [0x01], left.bytes + right.bytes)
    }

    /// The largest power of two below `n` (n ≥ 2).
    static func split(_ n: Int) -> Int {
        precondition(n >= 2)
        return 1 << (Int.bitWidth - 1 - (n - 1).leadingZeroBitCount)
    }

    /// MTH(D[n]) of `leafHashes` (the leaves already hashed).
    public static func root(_ leafHashes: [Digest]) throws(CryptoUnavailable) -> Digest {
        if leafHashes.isEmpty { return try emptyRoot() }
        var tree = Frontier()
        for hash in leafHashes { try tree.append(hash) }
        return try tree.root()
    }

    // MARK: Proofs over any store of perfect subtrees.

    /// MTH of leaves `range` (a range the RFC's recursion visits: its start
    /// is a multiple of the largest power of two not above its length).
    /// - Throws: `LedgerError` for an empty or negative range (MTH of no
    ///   leaves is `emptyRoot`), never a trap.
    public static func hash(_ range: Range<Int>, in tree: some PerfectSubtrees) throws -> Digest {
        let n = range.count
        guard n >= 1, range.lowerBound >= 0 else {
            throw LedgerError("no subtree hash for leaves \(range.lowerBound) to \(range.upperBound - 1)")
        }
        if n & (n - 1) == 0 {
            let level = n.trailingZeroBitCount
            return try tree.hash(level: level, index: range.lowerBound >> level)
        }
        let k = split(n)
        return try nodeHash(
            hash(range.lowerBound..<range.lowerBound + k, in: tree),
            hash(range.lowerBound + k..<range.upperBound, in: tree))
    }

    /// PATH(m, D[n]): the inclusion proof of leaf `index` in the tree of the
    /// first `size` leaves (RFC 9162 §2.1.3.1), leaf side first.
    /// - Throws: `LedgerError` when `index` is not below `size` (or is
    ///   negative): there is no such leaf. Never a trap, whatever the sizes.
    public static func inclusionProof(index: Int, size: Int, in tree: some PerfectSubtrees) throws -> [Digest] {
        guard 0 <= index && index < size else {
            throw LedgerError("no inclusion proof of entry \(index) in a tree of \(size) entries: it has no such entry")
        }
        var proof: [Digest] = []
        func path(_ m: Int, _ range: Range<Int>) throws {
            let n = range.count
            guard n > 1 else { return }
            let k = split(n)
            if m < k {
                try path(m, range.lowerBound..<range.lowerBound + k)
                proof.append(try hash(range.lowerBound + k..<range.upperBound, in: tree))
            } else {
                try path(m - k, range.lowerBound + k..<range.upperBound)
                proof.append(try hash(range.lowerBound..<range.lowerBound + k, in: tree))
            }
        }
        try path(index, 0..<size)
        return proof
    }

    /// PROOF(m, D[n]): that the tree of the first `oldSize` leaves is a
    /// prefix of the tree of the first `newSize` (RFC 9162 §2.1.4.1). The
    /// empty tree is a prefix of every tree and a tree of itself: both
    /// proofs are empty (`oldSize` 0, or equal to `newSize`).
    /// - Throws: `LedgerError` when `oldSize` is negative or beyond
    ///   `newSize` (the newer tree is shorter: no proof can exist). Never a
    ///   trap, whatever the sizes.
    public static func consistencyProof(oldSize: Int, newSize: Int, in tree: some PerfectSubtrees) throws -> [Digest] {
        guard 0 <= oldSize && oldSize <= newSize else {
            throw LedgerError(
                "no consistency proof from a tree of \(oldSize) entries to one of \(newSize): the second is shorter")
        }
        if oldSize == 0 || oldSize == newSize { return [] }
        var proof: [Digest] = []
        func subproof(_ m: Int, _ range: Range<Int>, _ complete: Bool) throws {
            let n = range.count
            if m == n {
                if !complete { proof.append(try hash(range, in: tree)) }
                return
            }
            let k = split(n)
            if m <= k {
                try subproof(m, range.lowerBound..<range.lowerBound + k, complete)
                proof.append(try hash(range.lowerBound + k..<range.upperBound, in: tree))
            } else {
                try subproof(m - k, range.lowerBound + k..<range.upperBound, false)
                proof.append(try hash(range.lowerBound..<range.lowerBound + k, in: tree))
            }
        }
        try subproof(oldSize, 0..<newSize, true)
        return proof
    }

    // MARK: Checking proofs (no tree needed).

    /// RFC 9162 §2.1.3.2: whether `proof` shows the leaf with `leafHash` at
    /// `index` in the tree of `size` leaves whose root is `root`.
    public static func verifyInclusion(
        leafHash: Digest, index: Int, size: Int, proof: [Digest], root: Digest
    ) throws(CryptoUnavailable) -> Bool {
        guard index >= 0, index < size else { return false }
        var fn = index
        var sn = size - 1
        var r = leafHash
        for p in proof {
            if sn == 0 { return false }
            if fn & 1 == 1 || fn == sn {
                r = try nodeHash(p, r)
                if fn & 1 == 0 {
                    while fn & 1 == 0 && fn != 0 {
                        fn >>= 1
                        sn >>= 1
                    }
                }
            } else {
                r = try nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && r == root
    }

    /// RFC 9162 §2.1.4.2: whether `proof` shows the tree of `oldSize` leaves
    /// with root `oldRoot` is a prefix of the tree of `newSize` with `newRoot`.
    public static func verifyConsistency(
        oldSize: Int, newSize: Int, oldRoot: Digest, newRoot: Digest, proof: [Digest]
    ) throws(CryptoUnavailable) -> Bool {
        guard oldSize >= 0, oldSize <= newSize else { return false }
        if oldSize == newSize { return proof.isEmpty && oldRoot == newRoot }
        // The empty tree is a prefix of every tree: nothing to prove, but
        // its root must be the empty tree's.
        if oldSize == 0 {
            let empty = try emptyRoot()
            return proof.isEmpty && oldRoot == empty
        }
        guard !proof.isEmpty else { return false }
        var path = proof
        if oldSize & (oldSize - 1) == 0 { path.insert(oldRoot, at: 0) }
        var fn = oldSize - 1
        var sn = newSize - 1
        while fn & 1 == 1 {
            fn >>= 1
            sn >>= 1
        }
        var fr = path[0]
        var sr = path[0]
        for c in path.dropFirst() {
            if sn == 0 { return false }
            if fn & 1 == 1 || fn == sn {
                fr = try nodeHash(c, fr)
                sr = try nodeHash(c, sr)
                if fn & 1 == 0 {
                    while fn & 1 == 0 && fn != 0 {
                        fn >>= 1
                        sn >>= 1
                    }
                }
            } else {
                sr = try nodeHash(sr, c)
            }
            fn >>= 1
            sn >>= 1
        }
        return fr == oldRoot && sr == newRoot && sn == 0
    }
}

/// Where a tree's perfect subtrees are kept: the hash of the 2^level leaves
/// from leaf `index << level`. The inventory keeps them in a table (every
/// one that is complete), tests in memory.
public protocol PerfectSubtrees {
    func hash(level: Int, index: Int) throws -> Digest
}

/// The right edge of a growing tree: the roots of its perfect subtrees,
/// largest first (one per bit set in its size). Appending a leaf costs
/// O(log n) hashes and says which perfect subtrees it completed, so a
/// store can keep them; the root is folded from the edge.
public struct Frontier: Sendable, Equatable {
    public private(set) var size = 0
    /// (level, hash), levels strictly decreasing.
    public private(set) var edge: [(level: Int, hash: Digest)] = []

    public init() {}

    /// A frontier restored from storage; nil when the levels do not match the size.
    public init?(size: Int, edge: [(level: Int, hash: Digest)]) {
        guard size >= 0, edge.map({ 1 << $0.level }).reduce(0, +) == size,
            zip(edge, edge.dropFirst()).allSatisfy({ $0.level > $1.level })
        else { return nil }
        self.size = size
        self.edge = edge
    }

    /// Appends a leaf's hash; returns the perfect subtrees it completed
    /// (the leaf itself at level 0, then each merge), lowest first.
    @discardableResult
    public mutating func append(
        _ leafHash: Digest
    ) throws(CryptoUnavailable) -> [(level: Int, index: Int, hash: Digest)] {
        var completed = [(level: 0, index: size, hash: leafHash)]
        var node = (level: 0, hash: leafHash)
        while let last = edge.last, last.level == node.level {
            edge.removeLast()
            node = (level: node.level + 1, hash: try MerkleTree.nodeHash(last.hash, node.hash))
            completed.append((level: node.level, index: size >> node.level, hash: node.hash))
        }
        edge.append(node)
        size += 1
        return completed
    }

    /// MTH of the leaves so far.
    public func root() throws(CryptoUnavailable) -> Digest {
        guard var root = edge.last?.hash else { return try MerkleTree.emptyRoot() }
        for node in edge.dropLast().reversed() { root = try MerkleTree.nodeHash(node.hash, root) }
        return root
    }

    public static func == (a: Frontier, b: Frontier) -> Bool {
        a.size == b.size && a.edge.map(\.level) == b.edge.map(\.level) && a.edge.map(\.hash) == b.edge.map(\.hash)
    }
}
