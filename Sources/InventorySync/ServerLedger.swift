import FoundationEssentials
import Inventory
import Ledger

#if canImport(Glibc)
    import Glibc
#endif

/// Every bench's ledger on the shared server (docs/ledger.md, "Several
/// benches"): `sync` pushes the bench's entries and checkpoints after
/// checking that its history extends the one the server holds; a history
/// that does not is refused as a whole and recorded in `ledger_rewrites`.
///
/// The server does not trust the bench for any of it: its triggers keep
/// `bench_ledgers` append-only (no update, delete or truncate; a new
/// entry goes exactly at the bench's current size), compute each entry's
/// leaf hash and the tree's head (size, right edge, root) themselves with
/// PostgreSQL's `sha256`, keep `bench_ledger_heads` out of any client's
/// hands, and take a checkpoint only when it signs the tree they computed.
public enum ServerLedger {
    /// Version 6 of the server's schema.
    static let schema = """
        CREATE TABLE IF NOT EXISTS bench_ledger_heads (
            bench_id TEXT PRIMARY KEY,
            size     BIGINT NOT NULL,
            frontier BYTEA NOT NULL,
            root     BYTEA NOT NULL
        );
        CREATE TABLE IF NOT EXISTS bench_ledgers (
            bench_id TEXT NOT NULL,
            seq      BIGINT NOT NULL,
            entry    BYTEA NOT NULL,
            leaf     BYTEA NOT NULL,
            PRIMARY KEY (bench_id, seq)
        );
        CREATE TABLE IF NOT EXISTS bench_checkpoints (
            bench_id TEXT NOT NULL,
            size     BIGINT NOT NULL,
            root     BYTEA NOT NULL,
            note     TEXT NOT NULL,
            made_at  TEXT,
            PRIMARY KEY (bench_id, size)
        );
        CREATE TABLE IF NOT EXISTS ledger_rewrites (
            bench_id    TEXT NOT NULL,
            at_entry    BIGINT NOT NULL,
            found_at    TEXT NOT NULL,
            server_size BIGINT NOT NULL,
            bench_size  BIGINT NOT NULL,
            detail      TEXT NOT NULL,
            PRIMARY KEY (bench_id, at_entry)
        );

        -- Each entry's leaf hash, computed here: SHA-256(0x00 || entry).
        CREATE OR REPLACE FUNCTION beaconbench_ledger_leaf() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            NEW.leaf := sha256('\\x00'::bytea || NEW.entry);
            RETURN NEW;
        END
        $fn$;

        -- After each statement that adds entries: per bench, the new
        -- entries must be exactly the next places (from the head's size,
        -- no gap), and the head's right edge and root are folded from
        -- their leaves (RFC 9162: node = SHA-256(0x01 || left || right)).
        CREATE OR REPLACE FUNCTION beaconbench_ledger_append() RETURNS trigger LANGUAGE plpgsql AS $fn$
        DECLARE
            bench TEXT;
            held  BIGINT;
            edge  BYTEA;
            node  BYTEA;
            rest  BIGINT;
            top   BYTEA;
            i     INT;
            known BOOLEAN;
            added RECORD;
        BEGIN
            FOR bench IN SELECT DISTINCT bench_id FROM added_rows LOOP
                SELECT size, frontier INTO held, edge FROM bench_ledger_heads WHERE bench_id = bench FOR UPDATE;
                known := FOUND;
                IF NOT known THEN
                    held := 0;
                    edge := ''::bytea;
                END IF;
                FOR added IN SELECT seq, leaf FROM added_rows WHERE bench_id = bench ORDER BY seq LOOP
                    IF added.seq <> held THEN
                        RAISE EXCEPTION 'bench_ledgers is append-only: bench %''s entry % refused, the next one is %',
                            bench, added.seq, held USING ERRCODE = 'integrity_constraint_violation';
                    END IF;
                    node := added.leaf;
                    rest := held;
                    WHILE rest & 1 = 1 LOOP
                        node := sha256('\\x01'::bytea || substring(edge FROM length(edge) - 31) || node);
                        edge := substring(edge FROM 1 FOR length(edge) - 32);
                        rest := rest >> 1;
                    END LOOP;
                    edge := edge || node;
                    held := held + 1;
                END LOOP;
                top := substring(edge FROM length(edge) - 31);
                i := length(edge) - 64;
                WHILE i >= 0 LOOP
                    top := sha256('\\x01'::bytea || substring(edge FROM i + 1 FOR 32) || top);
                    i := i - 32;
                END LOOP;
                IF known THEN
                    UPDATE bench_ledger_heads SET size = held, frontier = edge, root = top WHERE bench_id = bench;
                ELSE
                    INSERT INTO bench_ledger_heads (bench_id, size, frontier, root) VALUES (bench, held, edge, top);
                END IF;
            END LOOP;
            RETURN NULL;
        END
        $fn$;

        CREATE OR REPLACE FUNCTION beaconbench_ledger_refuse() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
                USING ERRCODE = 'integrity_constraint_violation';
        END
        $fn$;

        -- The head is written only by the trigger above (one level down).
        CREATE OR REPLACE FUNCTION beaconbench_ledger_head_guard() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            IF pg_trigger_depth() < 2 THEN
                RAISE EXCEPTION 'bench_ledger_heads is kept by the server as entries arrive: % refused', TG_OP
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END
        $fn$;

        -- A checkpoint is taken when it signs the tree the server holds
        -- now: its size the head's, its root the head's, its note's body
        -- (origin, size, base64 root) the same. Its signature is not
        -- checked here (the server has no allowed_signers).
        CREATE OR REPLACE FUNCTION beaconbench_checkpoint_check() RETURNS trigger LANGUAGE plpgsql AS $fn$
        DECLARE
            held BIGINT;
            top  BYTEA;
        BEGIN
            SELECT size, root INTO held, top FROM bench_ledger_heads WHERE bench_id = NEW.bench_id;
            IF NOT FOUND THEN
                held := 0;
                top := sha256(''::bytea);
            END IF;
            IF NEW.size IS DISTINCT FROM held THEN
                RAISE EXCEPTION 'bench %''s checkpoint of % entries refused: the server holds %', NEW.bench_id,
                    NEW.size, held USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            IF NEW.root IS DISTINCT FROM top
                OR split_part(NEW.note, E'\\n', 1) IS DISTINCT FROM 'beaconbench.local/bench/' || NEW.bench_id
                OR split_part(NEW.note, E'\\n', 2) IS DISTINCT FROM NEW.size::text
                OR split_part(NEW.note, E'\\n', 3) IS DISTINCT FROM encode(top, 'base64') THEN
                RAISE EXCEPTION 'bench %''s checkpoint of % entries refused: it does not sign the tree the server holds',
                    NEW.bench_id, NEW.size USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END
        $fn$;

        DROP TRIGGER IF EXISTS leaf ON bench_ledgers;
        CREATE TRIGGER leaf BEFORE INSERT ON bench_ledgers
            FOR EACH ROW EXECUTE FUNCTION beaconbench_ledger_leaf();
        DROP TRIGGER IF EXISTS append_only ON bench_ledgers;
        CREATE TRIGGER append_only AFTER INSERT ON bench_ledgers REFERENCING NEW TABLE AS added_rows
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_append();
        DROP TRIGGER IF EXISTS no_change ON bench_ledgers;
        CREATE TRIGGER no_change BEFORE UPDATE OR DELETE ON bench_ledgers
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS no_truncate ON bench_ledgers;
        CREATE TRIGGER no_truncate BEFORE TRUNCATE ON bench_ledgers
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS kept_by_server ON bench_ledger_heads;
        CREATE TRIGGER kept_by_server BEFORE INSERT OR UPDATE ON bench_ledger_heads
            FOR EACH ROW EXECUTE FUNCTION beaconbench_ledger_head_guard();
        DROP TRIGGER IF EXISTS no_change ON bench_ledger_heads;
        CREATE TRIGGER no_change BEFORE DELETE ON bench_ledger_heads
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS no_truncate ON bench_ledger_heads;
        CREATE TRIGGER no_truncate BEFORE TRUNCATE ON bench_ledger_heads
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS checked ON bench_checkpoints;
        CREATE TRIGGER checked BEFORE INSERT ON bench_checkpoints
            FOR EACH ROW EXECUTE FUNCTION beaconbench_checkpoint_check();
        DROP TRIGGER IF EXISTS no_change ON bench_checkpoints;
        CREATE TRIGGER no_change BEFORE UPDATE OR DELETE ON bench_checkpoints
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS no_truncate ON bench_checkpoints;
        CREATE TRIGGER no_truncate BEFORE TRUNCATE ON bench_checkpoints
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS no_change ON ledger_rewrites;
        CREATE TRIGGER no_change BEFORE UPDATE OR DELETE ON ledger_rewrites
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS no_truncate ON ledger_rewrites;
        CREATE TRIGGER no_truncate BEFORE TRUNCATE ON ledger_rewrites
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        """

    /// Why the server would not take this bench's ledger: nothing of the
    /// sync was applied.
    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// The first entry that differs from the server's, when the
        /// history was rewritten (recorded in `ledger_rewrites`).
        public var rewrittenAt: Int?
        /// How many entries of this bench the server held.
        public var serverSize: Int
        public var message: String
        public var description: String { message }
    }

    /// What the server held of the bench's ledger, and what the bench holds.
    struct Plan {
        var serverSize: Int
        var benchSize: Int
        var benchRoot: Digest
    }

    /// What the push did.
    struct Pushed {
        var entries = 0
        var checkpoints = 0
        /// Local checkpoints older than the server's tree that it lacks
        /// (the server takes a checkpoint only with the entries it signs).
        var checkpointsNotSent = 0
        var size = 0
        var root = ""
    }

    /// The server's head of `bench`'s ledger: its size and root (0 and the
    /// empty tree's when it holds none).
    static func serverHead(_ server: PostgresConnection, bench: String) throws(SyncError) -> (size: Int, root: Digest) {
        let row = try server.exec(
            "SELECT size::text, encode(root, 'hex') FROM bench_ledger_heads WHERE bench_id = $1", [bench]
        ).first
        guard let row else {
            do {
                return (0, try MerkleTree.emptyRoot())
            } catch {
                throw SyncError("\(error)")
            }
        }
        guard let size = (row.first ?? nil).flatMap({ Int($0) }), size >= 0,
            let root = (row.count > 1 ? row[1] : nil).flatMap({ Digest(hex: $0) })
        else {
            throw SyncError(
                "the server's ledger head for bench \(bench) (bench_ledger_heads) is not a size and a 32-byte root: nothing was sent"
            )
        }
        return (size, root)
    }

    /// Compares the bench's ledger with the server's before anything is
    /// sent: the bench must hold at least the server's `m` entries, their
    /// root must be the server's, and the consistency proof from `m` to
    /// the bench's size must verify. Otherwise the first entry that
    /// differs is found (entry by entry against the server's), recorded in
    /// `ledger_rewrites`, and the sync refused (`Refusal`).
    static func check(
        _ inventory: Inventory, _ server: PostgresConnection, bench: String, chunkSize: Int
    ) async throws(SyncError) -> Plan {
        let (m, r) = try serverHead(server, bench: bench)
        let n: Int
        let benchRoot: Digest
        do {
            if try await inventory.hasLedger() {
                let head = try await inventory.ledgerTreeHead()
                (n, benchRoot) = (head.size, head.root)
            } else {
                (n, benchRoot) = (0, try MerkleTree.emptyRoot())
            }
        } catch {
            throw SyncError("the local inventory's ledger: \(error)")
        }
        var extends = n >= m
        if extends, m > 0 {
            do {
                extends = try await inventory.ledgerRoot(size: m) == r
            } catch {
                throw SyncError("the local inventory's ledger: \(error)")
            }
        }
        if !extends {
            let at = try await firstDifference(inventory, server, bench: bench, upTo: min(n, m), chunkSize: chunkSize)
            let found = at ?? min(n, m)
            // Blame stays with the evidence: the bench's own ledger verified
            // before this (InventorySync.verifyOwnLedger), so its signed
            // checkpoints hold. When it has one and the server holds no
            // checkpoint of this bench beyond the difference, what the
            // server holds from there is signed by no one (before the
            // bench's checkpoint, the bench signed its own version; after
            // it, neither is signed): the server's copy is what is in
            // question, and nothing is recorded against the bench.
            let signed: Int
            do {
                signed = try await inventory.checkpoints().map(\.size).filter { $0 <= n }.max() ?? 0
            } catch {
                throw SyncError("the local inventory's checkpoints: \(error)")
            }
            let signedBeyond =
                try server.exec(
                    "SELECT count(*)::text FROM bench_checkpoints WHERE bench_id = $1 AND size > $2",
                    [bench, String(found)]
                ).first.flatMap { $0.first ?? nil }.flatMap { Int($0) } ?? 0
            if signed > 0, signedBeyond == 0 {
                throw SyncError(
                    refusal: Refusal(
                        rewrittenAt: nil, serverSize: m,
                        message:
                            "the server's copy of this bench's ledger is not the bench's from entry \(found) on: the bench signed its first \(signed) entries (its last checkpoint) and holds \(n), the server holds \(m), and no checkpoint of the bench covers entry \(found) there; the difference is the server's, not this bench's: nothing was sent and nothing recorded against this bench (docs/ledger.md, \"When the server refuses\")"
                    ))
            }
            let detail =
                at == nil
                ? "the bench holds \(n) entries (root \(benchRoot.hex)); the server held \(m) (root \(r.hex)); the bench's first \(min(n, m)) are the server's, "
                    + (n < m ? "its entry \(n) and after are gone" : "but its tree's root over them is not")
                : "entry \(found) on the bench is not the server's; the bench holds \(n) entries (root \(benchRoot.hex)), the server held \(m) (root \(r.hex))"
            try server.exec(
                """
                INSERT INTO ledger_rewrites (bench_id, at_entry, found_at, server_size, bench_size, detail)
                VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (bench_id, at_entry) DO NOTHING
                """,
                [bench, String(found), ServerInventory.timestamp(Date()), String(m), String(n), detail])
            throw SyncError(
                refusal: Refusal(
                    rewrittenAt: found, serverSize: m,
                    message:
                        "the server refused this bench's ledger: it was rewritten at entry \(found) (the server holds \(m) entries from before); nothing was sent, and the rewrite is recorded for the office (docs/ledger.md, \"Several benches\")"
                ))
        }
        if m > 0, n > m {
            let proved: Bool
            do {
                let proof = try await inventory.ledgerConsistencyProof(from: m, to: n)
                proved = try MerkleTree.verifyConsistency(
                    oldSize: m, newSize: n, oldRoot: r, newRoot: benchRoot, proof: proof)
            } catch {
                throw SyncError("the local inventory's ledger: \(error)")
            }
            guard proved else {
                throw SyncError(
                    refusal: Refusal(
                        rewrittenAt: nil, serverSize: m,
                        message:
                            "the server refused this bench's ledger: its consistency proof from the server's \(m) entries to its \(n) does not verify; the bench's tree is damaged (beaconbench ledger verify); nothing was sent"
                    ))
            }
        }
        return Plan(serverSize: m, benchSize: n, benchRoot: benchRoot)
    }

    /// The first of entries `0..<limit` that differs between the bench and
    /// the server (compared byte for byte), or nil.
    static func firstDifference(
        _ inventory: Inventory, _ server: PostgresConnection, bench: String, upTo limit: Int, chunkSize: Int
    ) async throws(SyncError) -> Int? {
        var start = 0
        var reader = LocalEntries(inventory: inventory, limit: limit)
        while start < limit {
            let end = min(limit, start + chunkSize)
            let local = try await reader.entries(start..<end)
            var held: [Int: [UInt8]] = [:]
            for stored in try storedEntries(server, bench: bench, start..<end) {
                if let bytes = stored.entry { held[stored.seq] = bytes }
            }
            for seq in start..<end {
                let mine = seq - start < local.count ? local[seq - start] : nil
                if mine == nil || held[seq] != mine { return seq }
            }
            start = end
        }
        return nil
    }

    /// Pushes entries `plan.serverSize..<plan.benchSize` in chunks (each
    /// one transaction: the entries, the head the server computes from
    /// them checked against the bench's own root at that size, and the
    /// checkpoints of that size), and every checkpoint the server lacks.
    /// A chunk ends at each checkpoint's size, so that the server takes
    /// the checkpoint with the entries it signs. Stopped or cut off
    /// between chunks, the server holds a whole prefix; the next sync goes
    /// on from its size.
    static func push(
        _ inventory: Inventory, _ server: PostgresConnection, bench: String, plan: Plan, chunkSize: Int,
        total: InventorySync.SentRows, progress: (_ table: String, _ sent: Int) -> Void
    ) async throws(SyncError) -> Pushed {
        var pushed = Pushed()
        let local: [StoredCheckpoint]
        do {
            local = try await inventory.checkpoints().filter { $0.size <= plan.benchSize }
        } catch {
            throw SyncError("the local inventory's checkpoints: \(error)")
        }
        let there = Set(
            try server.exec("SELECT size::text FROM bench_checkpoints WHERE bench_id = $1", [bench]).compactMap {
                ($0.first ?? nil).flatMap { Int($0) }
            })
        let missing = local.filter { !there.contains($0.size) }
        pushed.checkpointsNotSent = missing.filter { $0.size < plan.serverSize }.count
        var pending = Dictionary(
            missing.filter { $0.size >= plan.serverSize }.map { ($0.size, $0) }, uniquingKeysWith: { a, _ in a })
        var current = plan.serverSize
        var reader = LocalEntries(inventory: inventory, limit: plan.benchSize)
        while current < plan.benchSize || pending[current] != nil {
            let next = pending.keys.filter { $0 > current }.min() ?? plan.benchSize
            let end = min(plan.benchSize, current + chunkSize, next)
            let entries: [[UInt8]]
            let expected: Digest
            entries = end > current ? try await reader.entries(current..<end) : []
            do {
                expected = try await inventory.ledgerRoot(size: end)
            } catch {
                throw SyncError("the local inventory's ledger: \(error)")
            }
            guard entries.count == end - current else {
                throw SyncError(
                    "the local inventory's ledger: entries \(current) to \(end - 1) are not all there (beaconbench ledger verify)"
                )
            }
            let start = current
            var sentCheckpoints = 0
            try server.transaction { () throws(SyncError) in
                if let checkpoint = pending[start] {
                    try insert(checkpoint, bench: bench, server)
                    sentCheckpoints += 1
                }
                guard end > start else { return }
                // One block (`bench_ledger_blocks`, version 10): the
                // server hashes and folds every entry of it itself.
                try server.exec(
                    """
                    INSERT INTO bench_ledger_blocks (bench_id, first, count, entries)
                    SELECT $1, $2::bigint, $3::integer, array_agg(decode(e, 'hex') ORDER BY n)
                    FROM unnest($4::text[]) WITH ORDINALITY AS t(e, n)
                    """,
                    [
                        bench, String(start), String(end - start),
                        PostgresArray.literal(entries.map { Optional(Hex.encode($0)) }),
                    ])
                let (size, root) = try serverHead(server, bench: bench)
                guard size == end, root == expected else {
                    throw SyncError(
                        refusal: Refusal(
                            rewrittenAt: nil, serverSize: start,
                            message:
                                "the server refused this bench's ledger: entries \(start) to \(end - 1) do not make the bench's own tree (the server computed root \(root.hex) for \(size) entries, the bench's is \(expected.hex)); the bench's ledger is damaged (beaconbench ledger verify); these entries were not applied"
                        ))
                }
                if let checkpoint = pending[end] {
                    try insert(checkpoint, bench: bench, server)
                    sentCheckpoints += 1
                }
            }
            pending[start] = nil
            if end > start { pending[end] = nil }
            total.add("ledger", end - start)
            if sentCheckpoints > 0 { total.add("checkpoints", sentCheckpoints) }
            pushed.entries += end - start
            pushed.checkpoints += sentCheckpoints
            current = end
            progress("ledger", pushed.entries)
        }
        let (size, root) = try serverHead(server, bench: bench)
        pushed.size = size
        pushed.root = root.hex
        return pushed
    }

    static func insert(_ checkpoint: StoredCheckpoint, bench: String, _ server: PostgresConnection) throws(SyncError) {
        try server.exec(
            "INSERT INTO bench_checkpoints (bench_id, size, root, note, made_at) VALUES ($1, $2, decode($3, 'hex'), $4, $5)",
            [bench, String(checkpoint.size), checkpoint.root.hex, checkpoint.note, checkpoint.madeAt])
    }
}

/// The bench's entries, read ahead in windows of `window` (up to
/// `limit`): each read of a range scans the sealed tables (they have no
/// index by `ledger_seq`), so a sync of a million entries reads them 20
/// times, not 200.
struct LocalEntries {
    let inventory: Inventory
    let limit: Int
    var window = 50_000
    private var first = 0
    private var held: [[UInt8]] = []

    init(inventory: Inventory, limit: Int) {
        self.inventory = inventory
        self.limit = limit
    }

    /// Entries `range`, in order (fewer when the inventory lacks some).
    mutating func entries(_ range: Range<Int>) async throws(SyncError) -> [[UInt8]] {
        if range.lowerBound < first || range.upperBound > first + held.count {
            let end = max(range.upperBound, min(limit, range.lowerBound + window))
            do {
                held = try await inventory.ledgerEntries(range.lowerBound..<end)
                // An entry missing: the positions no longer say the places;
                // this range alone (its caller counts what came back).
                if held.count != end - range.lowerBound, end > range.upperBound {
                    held = try await inventory.ledgerEntries(range)
                    first = range.lowerBound
                    return held
                }
            } catch {
                throw SyncError("the local inventory's ledger: \(error)")
            }
            first = range.lowerBound
        }
        let from = range.lowerBound - first
        let to = min(held.count, range.upperBound - first)
        return from < to ? Array(held[from..<to]) : []
    }
}

/// Bytes as lowercase hex and back (bytea travels as hex text: exact,
/// whatever the connection's encoding).
enum Hex {
    static func encode(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { text in
            bytes.withUnsafeBufferPointer { input in
                let digits: StaticString = "0123456789abcdef"
                let table = digits.utf8Start
                var out = 0
                for byte in input {
                    text[out] = table[Int(byte >> 4)]
                    text[out + 1] = table[Int(byte & 0x0f)]
                    out += 2
                }
                return out
            }
        }
    }

    static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { units -> [UInt8]? in
            guard units.count % 2 == 0 else { return nil }
            func nibble(_ unit: UInt8) -> UInt8? {
                switch unit {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): unit &- UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): unit &- UInt8(ascii: "a") &+ 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): unit &- UInt8(ascii: "A") &+ 10
                default: nil
                }
            }
            var valid = true
            let bytes = [UInt8](unsafeUninitializedCapacity: units.count / 2) { out, count in
                var index = 0
                while index < units.count {
                    guard let high = nibble(units[index]), let low = nibble(units[index + 1]) else {
                        valid = false
                        break
                    }
                    out[index / 2] = high << 4 | low
                    index += 2
                }
                count = index / 2
            }
            return valid ? bytes : nil
        }
    }
}
