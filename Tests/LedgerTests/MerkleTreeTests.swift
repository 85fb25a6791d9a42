import Testing

@testable import Ledger

/// Perfect subtrees kept in memory, as the frontier completes them.
struct MemoryTree: PerfectSubtrees {
    var nodes: [Int: [Int: Digest]] = [:]
    var frontier = Frontier()

    init(_ leaves: [[UInt8]]) throws {
        for leaf in leaves {
            for node in try frontier.append(MerkleTree.leafHash(leaf)) {
                nodes[node.level, default: [:]][node.index] = node.hash
            }
        }
    }

    struct Missing: Error {}
    func hash(level: Int, index: Int) throws -> Digest {
        guard let hash = nodes[level]?[index] else { throw Missing() }
        return hash
    }
}

@Suite("RFC 9162 Merkle trees", .timeLimit(.minutes(2)))
struct MerkleTreeTests {
    /// Certificate Transparency's test leaves (RFC 6962's reference
    /// implementation, merkle_tree_test): eight leaves and the roots of
    /// their first 1…8.
    static let leaves: [[UInt8]] = [
        [], [0x00], [0x10], [0x20, 0x21], [0x30, 0x31], [0x40, 0x41, 0x42, 0x43], Array(0x50...0x57),
        Array(0x60...0x6f),
    ]
    static let roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]

    @Test func sha256IsOpenSSLs() throws {
        #expect(try Digest.sha256([]).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            try Digest.sha256(Array("abc".utf8)).hex
                == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(try Digest.sha256(prefix: Array("a".utf8), Array("bc".utf8)) == Digest.sha256(Array("abc".utf8)))
        #expect(
            Digest(hex: "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855") == (try Digest.sha256([])))
        #expect(Digest(hex: "e3b0") == nil)
        #expect(Digest(hex: String(repeating: "g", count: 64)) == nil)
    }

    @Test func rootsAreCertificateTransparencys() throws {
        #expect(try MerkleTree.root([]).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        for n in 1...8 {
            let hashes = try Self.leaves[0..<n].map { leaf throws(CryptoUnavailable) in try MerkleTree.leafHash(leaf) }
            #expect(try MerkleTree.root(hashes).hex == Self.roots[n - 1], "root of \(n) leaves")
            let tree = try MemoryTree(Array(Self.leaves[0..<n]))
            #expect(try MerkleTree.hash(0..<n, in: tree).hex == Self.roots[n - 1], "MTH from the stored subtrees")
            #expect(try tree.frontier.root().hex == Self.roots[n - 1], "the frontier's root")
        }
    }

    /// Every leaf of every tree up to 70 leaves: its proof checks, and no
    /// proof checks for another leaf, index, size or root.
    @Test func inclusionProofsCheckAndNothingElseDoes() throws {
        let leaves = (0..<70).map { [UInt8(truncatingIfNeeded: $0), 0xbe, 0xac] }
        let tree = try MemoryTree(leaves)
        for size in 1...leaves.count {
            let root = try MerkleTree.hash(0..<size, in: tree)
            for index in 0..<size {
                let proof = try MerkleTree.inclusionProof(index: index, size: size, in: tree)
                let leaf = try MerkleTree.leafHash(leaves[index])
                #expect(proof.count <= Int.bitWidth - (size - 1).leadingZeroBitCount)
                #expect(
                    try MerkleTree.verifyInclusion(leafHash: leaf, index: index, size: size, proof: proof, root: root))
                let other = try MerkleTree.leafHash(leaves[(index + 1) % leaves.count])
                #expect(
                    !(try MerkleTree.verifyInclusion(
                        leafHash: other, index: index, size: size, proof: proof, root: root)))
                if size > 1 {
                    #expect(
                        !(try MerkleTree.verifyInclusion(
                            leafHash: leaf, index: (index + 1) % size, size: size, proof: proof, root: root)))
                    var bent = proof
                    bent[0] = try MerkleTree.leafHash([0xff])
                    #expect(
                        !(try MerkleTree.verifyInclusion(
                            leafHash: leaf, index: index, size: size, proof: bent, root: root)))
                }
                if size < leaves.count {
                    // The next tree's root is not proved by this tree's path.
                    let next = try MerkleTree.hash(0..<size + 1, in: tree)
                    #expect(
                        !(try MerkleTree.verifyInclusion(
                            leafHash: leaf, index: index, size: size + 1, proof: proof, root: next)))
                }
            }
        }
    }

    @Test func consistencyProofsCheckAndNothingElseDoes() throws {
        let leaves = (0..<50).map { [UInt8(truncatingIfNeeded: $0 &* 7)] }
        let tree = try MemoryTree(leaves)
        let roots = try (1...leaves.count).map { try MerkleTree.hash(0..<$0, in: tree) }
        for newSize in 1...leaves.count {
            for oldSize in 1...newSize {
                let proof = try MerkleTree.consistencyProof(oldSize: oldSize, newSize: newSize, in: tree)
                let (old, new) = (roots[oldSize - 1], roots[newSize - 1])
                #expect(
                    try MerkleTree.verifyConsistency(
                        oldSize: oldSize, newSize: newSize, oldRoot: old, newRoot: new, proof: proof),
                    "\(oldSize) → \(newSize)")
                guard oldSize < newSize else { continue }
                // Another history of the same length is not a prefix.
                let rewritten = try MerkleTree.hash(0..<oldSize, in: MemoryTree([[0xee]] + leaves[1..<oldSize]))
                #expect(
                    !(try MerkleTree.verifyConsistency(
                        oldSize: oldSize, newSize: newSize, oldRoot: rewritten, newRoot: new, proof: proof)))
                // Nor is it a prefix of another tree (the next one's root).
                #expect(
                    !(try MerkleTree.verifyConsistency(
                        oldSize: oldSize, newSize: newSize, oldRoot: old, newRoot: roots[newSize % leaves.count],
                        proof: proof)))
                #expect(
                    !(try MerkleTree.verifyConsistency(
                        oldSize: oldSize, newSize: newSize, oldRoot: old, newRoot: new, proof: Array(proof.dropLast())))
                )
            }
        }
    }

    /// Every pair of sizes m ≤ n for n up to 130 (0 and n included), and
    /// sizes out of range: nothing traps (a trap would end the test run),
    /// every proof made verifies, and a size beyond the tree, a negative
    /// one or an index past the end is an error, never a proof.
    @Test func anySizeGivesAProofOrAnErrorNeverATrap() throws {
        let leaves = (0..<130).map { [UInt8(truncatingIfNeeded: $0), UInt8(truncatingIfNeeded: $0 >> 8), 0x5a] }
        let tree = try MemoryTree(leaves)
        let empty = try MerkleTree.emptyRoot()
        let roots = try [empty] + (1...leaves.count).map { try MerkleTree.hash(0..<$0, in: tree) }
        for newSize in 0...leaves.count {
            for oldSize in 0...newSize {
                let proof = try MerkleTree.consistencyProof(oldSize: oldSize, newSize: newSize, in: tree)
                #expect(
                    try MerkleTree.verifyConsistency(
                        oldSize: oldSize, newSize: newSize, oldRoot: roots[oldSize], newRoot: roots[newSize],
                        proof: proof),
                    "\(oldSize) → \(newSize)")
                if oldSize == 0 || oldSize == newSize { #expect(proof.isEmpty, "\(oldSize) → \(newSize)") }
            }
            // Beyond the tree, or negative: an error, and nothing verifies.
            for oldSize in [newSize + 1, newSize + 64, Int.max, -1, Int.min] {
                #expect(throws: LedgerError.self, "\(oldSize) → \(newSize)") {
                    try MerkleTree.consistencyProof(oldSize: oldSize, newSize: newSize, in: tree)
                }
                #expect(
                    !(try MerkleTree.verifyConsistency(
                        oldSize: oldSize, newSize: newSize, oldRoot: empty, newRoot: roots[newSize], proof: [])))
            }
            for index in [newSize, newSize + 1, Int.max, -1] {
                #expect(throws: LedgerError.self, "entry \(index) of \(newSize)") {
                    try MerkleTree.inclusionProof(index: index, size: newSize, in: tree)
                }
            }
            // The empty tree's proof holds only for the empty tree's root.
            if newSize > 0 {
                #expect(
                    !(try MerkleTree.verifyConsistency(
                        oldSize: 0, newSize: newSize, oldRoot: roots[1], newRoot: roots[newSize], proof: [])))
            }
        }
        #expect(throws: LedgerError.self) { try MerkleTree.hash(5..<5, in: tree) }
        #expect(throws: LedgerError.self) { try MerkleTree.hash(-2..<2, in: tree) }
    }

    @Test func aFrontierRestoredFromItsEdgeGoesOnAlike() throws {
        var grown = Frontier()
        for byte in 0..<37 { try grown.append(MerkleTree.leafHash([UInt8(byte)])) }
        let restored = try #require(Frontier(size: grown.size, edge: grown.edge))
        #expect(restored == grown)
        #expect(Frontier(size: grown.size + 1, edge: grown.edge) == nil, "levels must add up to the size")
        var a = grown
        var b = restored
        try a.append(MerkleTree.leafHash([0x99]))
        try b.append(MerkleTree.leafHash([0x99]))
        #expect(try a.root() == b.root())
    }
}
