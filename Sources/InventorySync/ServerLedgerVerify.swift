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

    /// Who can have made it: the server records a rewrite only when the
    /// bench holds no signed checkpoint at or before the entry that
    /// differs (docs/ledger.md, "When the server refuses"), so the
    /// evidence does not tell the bench's doing from the server's.
    public var who: String {
        "the bench \(bench) (its ledger offered another history), or whoever can write the server's ledger tables (entries written there): no checkpoint signed by the bench tells which"
    }

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
    /// Every finding (the first 50): the ledger's, each checkpoint's
    /// signature (with allowed signers), then the server's rows that are
    /// not what the entries say.
    public var findings: [String] = []
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
        try verifyServer(url: url, chunkSize: chunkSize).benches
    }

    /// What the office's `ledger verify` found: the server's ledger
    /// triggers and functions (`structure`: what is not as beaconbench
    /// made it), and every bench's ledger, its checkpoints (signed by a
    /// key of `signers`, an allowed_signers file, when given) and its rows.
    public struct ServerVerification: Sendable {
        public var structure: [String] = []
        public var benches: [BenchLedgerVerification] = []
        public var ok: Bool { structure.isEmpty && benches.allSatisfy(\.ok) }
    }

    public static func verifyServer(
        url: String, signers: String? = nil, chunkSize: Int = 10_000
    ) throws(SyncError) -> ServerVerification {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        var verification = ServerVerification()
        verification.structure = try verifyStructure(server)
        let benches = try server.exec(
            """
            SELECT bench_id FROM benches UNION SELECT bench_id FROM bench_ledger_heads
            UNION SELECT bench_id FROM bench_checkpoints UNION SELECT bench_id FROM ledger_rewrites ORDER BY 1
            """
        ).compactMap { $0.first ?? nil }
        for bench in benches {
            verification.benches.append(
                try verify(bench: bench, server, chunkSize: max(1, chunkSize), signers: signers))
        }
        return verification
    }

    static func verify(
        bench: String, _ server: PostgresConnection, chunkSize: Int, signers: String? = nil
    ) throws(SyncError) -> BenchLedgerVerification {
        var result = BenchLedgerVerification(bench: StoredText.shown(bench))
        var tables = ServerTableCheck()
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
        func found(_ text: String) {
            if problem == nil { problem = text }
            if result.findings.count < 50 { result.findings.append(text) }
        }
        if let signers {
            for checkpoint in pending {
                do {
                    let (signed, _) = try SignedCheckpoint.verify(note: checkpoint.note, allowedSigners: signers)
                    if !signed.origin.sameBytes(Checkpoint.origin(bench: bench)) {
                        found("its checkpoint of \(checkpoint.size) entries is another bench's")
                    }
                } catch {
                    found(
                        "its checkpoint of \(checkpoint.size) entries is not signed by a key of the allowed signers: \(StoredText.shown("\(error)", limit: 200))"
                    )
                }
            }
        }
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
                if let wrong = tables.replay(entry, seq: next) { found(wrong) }
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
        // The server's rows of the bench, against what its entries say
        // (only when the entries themselves hold: else the replay is not
        // the bench's history).
        let sent = try InventorySync.tablesSeq(server, bench: bench)
        // A sync ends with its tables sent up to the ledger it pushed: more
        // entries than that are a sync cut short (or under way), or written
        // on the server by someone else.
        if let sent, tree.size > sent {
            found(
                "the server holds entries \(sent) to \(tree.size - 1) beyond what the bench's last complete sync sent (\(sent)): a sync cut short or under way, or entries written on the server; the bench's next sync tells which"
            )
        }
        if problem == nil || problem?.hasPrefix("the server holds entries") == true {
            let tablesSeq = sent.map { min($0, tree.size) }
            try tables.compare(server, bench: bench, tablesSeq: tablesSeq)
            for finding in tables.findings { found(finding) }
            if tables.more > 0 { found("and \(tables.more) more rows") }
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

/// The server's ledger triggers and functions, checked against the text
/// the migrations gave them (docs/ledger.md, "The server's tables and
/// triggers"), as the local `ledger verify` checks its own triggers.
extension ServerLedger {
    /// A trigger the ledger needs: its table, name, and its definition as
    /// `pg_get_triggerdef` gives it, white space folded, without schema.
    struct ExpectedTrigger: Equatable {
        var table: String
        var name: String
        var definition: String
    }

    /// The ledger's SQL, in the order the migrations run it.
    static var ledgerSQL: String { schema + "\n" + blocksSchema }

    /// Every `CREATE TRIGGER` of the ledger's SQL (the last of each table
    /// and name, as the migrations leave it).
    static let expectedTriggers: [ExpectedTrigger] = {
        var found: [String: ExpectedTrigger] = [:]
        var order: [String] = []
        var rest = Substring(ledgerSQL)
        while let start = rest.firstRange(of: "CREATE TRIGGER ") {
            guard let end = rest[start.lowerBound...].firstIndex(of: ";") else { break }
            let text = folded(String(rest[start.lowerBound..<end]))
            let words = text.split(separator: " ")
            let name = String(words[2])
            let table = words.firstIndex(of: "ON").map { String(words[$0 + 1]) } ?? ""
            let key = table + "." + name
            if found[key] == nil { order.append(key) }
            found[key] = ExpectedTrigger(table: table, name: name, definition: text)
            rest = rest[end...]
        }
        return order.compactMap { found[$0] }
    }()

    /// Every function of the ledger's SQL: its name and its body (`prosrc`,
    /// the text between the dollar quotes).
    static let expectedFunctions: [(name: String, body: String)] = {
        var found: [String: String] = [:]
        var order: [String] = []
        var rest = Substring(ledgerSQL)
        while let start = rest.firstRange(of: "CREATE OR REPLACE FUNCTION ") {
            let name = String(rest[start.upperBound...].prefix { $0 != "(" && !$0.isWhitespace })
            guard let open = rest[start.upperBound...].firstRange(of: "AS $fn$"),
                let close = rest[open.upperBound...].firstRange(of: "$fn$")
            else { break }
            if found[name] == nil { order.append(name) }
            found[name] = String(rest[open.upperBound..<close.lowerBound])
            rest = rest[close.upperBound...]
        }
        return order.compactMap { name in found[name].map { (name, $0) } }
    }()

    /// White space runs as one space, trimmed, and a trigger's events in
    /// one order (`pg_get_triggerdef` writes `DELETE OR UPDATE` for the
    /// `UPDATE OR DELETE` a migration gave).
    static func folded(_ text: String) -> String {
        var words = text.split(whereSeparator: { $0.isWhitespace }).map(String.init)
        if let timing = words.firstIndex(where: { $0 == "BEFORE" || $0 == "AFTER" }),
            let on = words[timing...].firstIndex(of: "ON"), on > timing + 1
        {
            let events = words[(timing + 1)..<on].filter { $0 != "OR" }.sorted()
            words.replaceSubrange((timing + 1)..<on, with: Array(events.map { [$0] }.joined(separator: ["OR"])))
        }
        return words.joined(separator: " ")
    }

    /// What is not as the migrations made it: a trigger gone, disabled or
    /// replaced; a function gone or replaced. Empty when all holds.
    static func verifyStructure(_ server: PostgresConnection) throws(SyncError) -> [String] {
        var findings: [String] = []
        let tables = Array(Set(expectedTriggers.map(\.table))).sorted()
        var present: [String: (enabled: String, definition: String)] = [:]
        for row in try server.exec(
            """
            SELECT c.relname, t.tgname, t.tgenabled::text, pg_get_triggerdef(t.oid), n.nspname
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE NOT t.tgisinternal AND pg_table_is_visible(c.oid) AND c.relname = ANY($1::text[])
            """, [PostgresArray.literal(tables.map { Optional($0) })])
        {
            guard row.count > 4, let table = row[0], let name = row[1] else { continue }
            var definition = folded(row[3] ?? "")
            if let schema = row[4] {
                definition = definition.replacing(" ON \(schema).", with: " ON ")
                    .replacing(" FUNCTION \(schema).", with: " FUNCTION ")
            }
            present[table + "." + name] = (row[2] ?? "", definition)
        }
        for trigger in expectedTriggers {
            guard let there = present[trigger.table + "." + trigger.name] else {
                findings.append(
                    "trigger \(trigger.name) on \(trigger.table) is gone: the server's ledger was opened to changes")
                continue
            }
            if there.definition != trigger.definition {
                findings.append(
                    "trigger \(trigger.name) on \(trigger.table) is not the one beaconbench made: it was replaced on the server"
                )
            } else if there.enabled != "O" && there.enabled != "A" {
                findings.append(
                    "trigger \(trigger.name) on \(trigger.table) is disabled: the server's ledger was opened to changes"
                )
            }
        }
        var bodies: [String: [String]] = [:]
        for row in try server.exec(
            """
            SELECT p.proname, p.prosrc FROM pg_proc p
            WHERE pg_function_is_visible(p.oid) AND p.proname = ANY($1::text[])
            """, [PostgresArray.literal(expectedFunctions.map { Optional($0.name) })])
        {
            if row.count > 1, let name = row[0] { bodies[name, default: []].append(row[1] ?? "") }
        }
        for function in expectedFunctions {
            guard let there = bodies[function.name] else {
                findings.append("function \(function.name) is gone: the server's ledger triggers cannot run")
                continue
            }
            if there != [function.body] {
                findings.append(
                    "function \(function.name) is not the one beaconbench made: it was replaced on the server")
            }
        }
        return findings
    }
}
