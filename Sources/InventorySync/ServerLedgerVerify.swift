import FoundationEssentials
import Inventory
import Ledger
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// A rewrite the server refused (`ledger_rewrites`): a bench whose ledger
/// did not extend the one the server held.
public struct LedgerRewrite: Sendable, Equatable {
    public var bench: String
    /// The first entry that differed from the server's.
    public var atEntry: Int
    public var foundAt: String
    /// Entries the server held, and the bench offered.
    public var serverSize: Int
    public var benchSize: Int
    public var detail: String

    /// The office's sentence for it.
    public var finding: String { "bench \(bench)'s ledger was rewritten at entry \(atEntry)" }

    public init(bench: String, atEntry: Int, foundAt: String, serverSize: Int, benchSize: Int, detail: String) {
        self.bench = bench
        self.atEntry = atEntry
        self.foundAt = foundAt
        self.serverSize = serverSize
        self.benchSize = benchSize
        self.detail = detail
    }
}

/// What `--inventory postgresql://… ledger verify` found for one bench.
public struct BenchLedgerVerification: Sendable {
    public var bench: String
    /// Entries the server holds for it, and the root recomputed from them (hex).
    public var size = 0
    public var root = ""
    public var checkpoints = 0
    public var rewrites: [LedgerRewrite] = []
    /// The first thing that does not hold in what is stored (nil: all holds).
    public var problem: String?
    public var ok: Bool { problem == nil && rewrites.isEmpty }

    public init(
        bench: String, size: Int = 0, root: String = "", checkpoints: Int = 0, rewrites: [LedgerRewrite] = [],
        problem: String? = nil
    ) {
        self.bench = bench
        self.size = size
        self.root = root
        self.checkpoints = checkpoints
        self.rewrites = rewrites
        self.problem = problem
    }
}

extension ServerLedger {
    /// Every rewrite the server recorded, oldest first.
    public static func rewrites(url: String) throws(SyncError) -> [LedgerRewrite] {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        return try rewrites(server)
    }

    static func rewrites(_ server: PostgresConnection, bench: String? = nil) throws(SyncError) -> [LedgerRewrite] {
        try server.exec(
            """
            SELECT r.bench_id, r.at_entry::text, r.found_at, r.server_size::text, r.bench_size::text, r.detail
            FROM ledger_rewrites r WHERE $1::text IS NULL OR r.bench_id = $1 ORDER BY r.found_at, r.bench_id, r.at_entry
            """, [bench]
        ).map { row in
            let cell = { (index: Int) in index < row.count ? row[index] ?? "" : "" }
            return LedgerRewrite(
                bench: StoredText.shown(cell(0)), atEntry: Int(cell(1)) ?? -1, foundAt: StoredText.shown(cell(2)),
                serverSize: Int(cell(3)) ?? -1, benchSize: Int(cell(4)) ?? -1,
                detail: StoredText.shown(cell(5), limit: 400))
        }
    }

    /// Checks every bench's ledger on the server: its entries in order
    /// from 0 without a gap, each entry's stored leaf hash, the tree
    /// recomputed from them against the stored head (size, edge, root)
    /// and every stored checkpoint (its size and root, and its note's
    /// origin, size and root); recorded rewrites are listed. Reads only.
    public static func verify(url: String, chunkSize: Int = 10_000) throws(SyncError) -> [BenchLedgerVerification] {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        let benches = try server.exec(
            """
            SELECT bench_id FROM benches UNION SELECT bench_id FROM bench_ledger_heads
            UNION SELECT bench_id FROM bench_checkpoints UNION SELECT bench_id FROM ledger_rewrites ORDER BY 1
            """
        ).compactMap { $0.first ?? nil }
        var results: [BenchLedgerVerification] = []
        for bench in benches {
            results.append(try verify(bench: bench, server, chunkSize: max(1, chunkSize)))
        }
        return results
    }

    static func verify(
        bench: String, _ server: PostgresConnection, chunkSize: Int
    ) throws(SyncError) -> BenchLedgerVerification {
        var result = BenchLedgerVerification(bench: StoredText.shown(bench))
        result.rewrites = try rewrites(server, bench: bench)
        let head = try server.exec(
            "SELECT size::text, encode(frontier, 'hex'), encode(root, 'hex') FROM bench_ledger_heads WHERE bench_id = $1",
            [bench]
        ).first
        let checkpoints = try server.exec(
            "SELECT c.size::text, encode(c.root, 'hex'), c.note FROM bench_checkpoints c WHERE c.bench_id = $1 ORDER BY c.size",
            [bench])
        result.checkpoints = checkpoints.count
        var pending: [(size: Int, root: Digest?, note: String)] = checkpoints.map { row in
            (
                (row.first ?? nil).flatMap { Int($0) } ?? -1,
                (row.count > 1 ? row[1] : nil).flatMap { Digest(hex: $0) },
                (row.count > 2 ? row[2] : nil) ?? ""
            )
        }
        var problem: String?
        func found(_ text: String) { if problem == nil { problem = text } }
        var tree = Frontier()
        func checkCheckpoints() {
            while let first = pending.first, first.size <= tree.size {
                pending.removeFirst()
                guard first.size == tree.size else {
                    found("its checkpoint of size \(first.size) is not a size the ledger had")
                    continue
                }
                guard let root = try? tree.root() else { continue }
                if first.root != root {
                    found("its checkpoint of \(first.size) entries does not hold: the entries' root is \(root.hex)")
                    continue
                }
                do {
                    let note = try SignedNote.parse(first.note)
                    let checkpoint = try Checkpoint.parse(note.text)
                    if !checkpoint.origin.sameBytes(Checkpoint.origin(bench: bench)) || checkpoint.size != first.size
                        || checkpoint.root != root
                    {
                        found("its checkpoint of \(first.size) entries has a note for another tree")
                    }
                } catch {
                    found("its checkpoint of \(first.size) entries has a note that is not a checkpoint: \(error)")
                }
            }
        }
        checkCheckpoints()
        var next = 0
        let held =
            try server.exec(
                """
                SELECT greatest((SELECT max(seq) + 1 FROM bench_ledgers WHERE bench_id = $1),
                                (SELECT max(first + count) FROM bench_ledger_blocks WHERE bench_id = $1))::text
                """, [bench]
            ).first.flatMap { $0.first ?? nil }.flatMap { Int($0) } ?? 0
        reading: while next < held {
            let end = min(held, next + chunkSize)
            for stored in try storedEntries(server, bench: bench, next..<end) {
                guard stored.seq == next else {
                    found("entry \(next) is missing")
                    break reading
                }
                guard let entry = stored.entry, let leaf = try? MerkleTree.leafHash(entry) else {
                    found("entry \(next) is unreadable")
                    break reading
                }
                if stored.leaf != nil, stored.leaf != leaf {
                    found("entry \(next) is not the entry whose leaf hash the server stored")
                }
                do {
                    try tree.append(leaf)
                } catch {
                    throw SyncError("\(error)")
                }
                next += 1
                checkCheckpoints()
            }
            if next < end {
                found("entry \(next) is missing")
                break
            }
        }
        result.size = tree.size
        result.root = (try? tree.root().hex) ?? ""
        for checkpoint in pending {
            found("its checkpoint of size \(checkpoint.size) is beyond its \(tree.size) entries")
        }
        if let head {
            let size = (head.first ?? nil).flatMap { Int($0) }
            let edge = (head.count > 1 ? head[1] : nil) ?? ""
            let root = (head.count > 2 ? head[2] : nil) ?? ""
            if size != tree.size {
                found("its head says \(size.map(String.init) ?? "no number of") entries, the server holds \(tree.size)")
            } else if root != result.root || edge != Hex.encode(tree.edge.flatMap(\.hash.bytes)) {
                found("its head's root is not the root of its \(tree.size) entries (\(result.root))")
            }
        } else if tree.size > 0 {
            found("it has \(tree.size) entries but no head")
        }
        result.problem = problem
        return result
    }
}

/// Text read from the server, made safe to show: control and invisible
/// characters escaped, at most `limit` characters.
enum StoredText {
    static func shown(_ text: String, limit: Int = 200) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            if scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value)
                || scalar.properties.isDefaultIgnorableCodePoint
            {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return text.unicodeScalars.count > limit ? out + "…" : out
    }
}
