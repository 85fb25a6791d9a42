import FoundationEssentials
import Inventory
import Ledger

/// Version 10 of the server's schema (docs/ledger.md, "Several benches";
/// docs/office.md, "Sizing"): a bench's entries arrive as blocks, one row
/// per pushed chunk, in `bench_ledger_blocks`, their bytes an array
/// compressed by PostgreSQL as one value (lz4 where the server has it).
/// One row per entry (`bench_ledgers`, version 6) cost about 510 bytes
/// per entry with its key and leaf; a block costs about 60 (measured on
/// a judged bench: 426 MB of entries as rows, 50 MB as blocks of 5,000).
///
/// The server still trusts nothing of it: the triggers hash every entry
/// of a new block themselves (SHA-256 of 0x00 and the entry), fold the
/// leaves into the bench's head exactly as for rows, refuse a block that
/// does not start at the head's size, whose count is not its entries',
/// or that holds a NULL, and keep blocks append-only. Leaves are not
/// stored: the verifier hashes the entries again. Entries pushed as rows
/// before stay where they are; a bench's ledger is its rows and its
/// blocks in order of place (`bench_ledger_entries` shows them as one).
extension ServerLedger {
    static let blocksSchema = """
        CREATE TABLE IF NOT EXISTS bench_ledger_blocks (
            bench_id TEXT NOT NULL,
            first    BIGINT NOT NULL,
            count    INTEGER NOT NULL,
            entries  BYTEA[] NOT NULL,
            PRIMARY KEY (bench_id, first)
        );
        DO $do$
        BEGIN
            ALTER TABLE bench_ledger_blocks ALTER COLUMN entries SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
            NULL; -- a server built without lz4 compresses with pglz (smaller, slower)
        END
        $do$;

        -- After each statement that adds blocks: per bench, each block
        -- must start exactly at the head's size, its count be its
        -- entries', none NULL; every entry's leaf is hashed here and
        -- folded into the head (RFC 9162), as for rows.
        CREATE OR REPLACE FUNCTION beaconbench_ledger_append_blocks() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
            entry BYTEA;
        BEGIN
            FOR bench IN SELECT DISTINCT bench_id FROM added_blocks LOOP
                SELECT size, frontier INTO held, edge FROM bench_ledger_heads WHERE bench_id = bench FOR UPDATE;
                known := FOUND;
                IF NOT known THEN
                    held := 0;
                    edge := ''::bytea;
                END IF;
                FOR added IN SELECT first, count, entries FROM added_blocks WHERE bench_id = bench ORDER BY first LOOP
                    IF added.first <> held THEN
                        RAISE EXCEPTION 'bench_ledger_blocks is append-only: bench %''s block at % refused, the next entry is %',
                            bench, added.first, held USING ERRCODE = 'integrity_constraint_violation';
                    END IF;
                    IF added.count < 1 OR added.count IS DISTINCT FROM cardinality(added.entries)
                        OR array_position(added.entries, NULL) IS NOT NULL THEN
                        RAISE EXCEPTION 'bench %''s block at % refused: its count is not its entries, or one is NULL',
                            bench, added.first USING ERRCODE = 'integrity_constraint_violation';
                    END IF;
                    FOREACH entry IN ARRAY added.entries LOOP
                        node := sha256('\\x00'::bytea || entry);
                        rest := held;
                        WHILE rest & 1 = 1 LOOP
                            node := sha256('\\x01'::bytea || substring(edge FROM length(edge) - 31) || node);
                            edge := substring(edge FROM 1 FOR length(edge) - 32);
                            rest := rest >> 1;
                        END LOOP;
                        edge := edge || node;
                        held := held + 1;
                    END LOOP;
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

        DROP TRIGGER IF EXISTS append_only ON bench_ledger_blocks;
        CREATE TRIGGER append_only AFTER INSERT ON bench_ledger_blocks REFERENCING NEW TABLE AS added_blocks
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_append_blocks();
        DROP TRIGGER IF EXISTS no_change ON bench_ledger_blocks;
        CREATE TRIGGER no_change BEFORE UPDATE OR DELETE ON bench_ledger_blocks
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();
        DROP TRIGGER IF EXISTS no_truncate ON bench_ledger_blocks;
        CREATE TRIGGER no_truncate BEFORE TRUNCATE ON bench_ledger_blocks
            FOR EACH STATEMENT EXECUTE FUNCTION beaconbench_ledger_refuse();

        -- Every bench's entries one per row, rows and blocks alike, for
        -- whoever reads the ledger by hand.
        CREATE OR REPLACE VIEW bench_ledger_entries AS
            SELECT bench_id, seq, entry FROM bench_ledgers
            UNION ALL
            SELECT b.bench_id, b.first + e.n - 1, e.entry
            FROM bench_ledger_blocks b, unnest(b.entries) WITH ORDINALITY AS e(entry, n);
        """

    /// A stored entry: its place, its bytes, and the leaf hash stored
    /// with it (entries stored as rows; nil for blocks, which keep none).
    struct StoredEntry {
        var seq: Int
        var entry: [UInt8]?
        var leaf: Digest?
    }

    /// `bench`'s stored entries at places `range`, in order, rows and
    /// blocks alike (places the server does not hold are absent). An
    /// entry whose bytes do not read is given with `entry` nil.
    static func storedEntries(
        _ server: PostgresConnection, bench: String, _ range: Range<Int>
    ) throws(SyncError) -> [StoredEntry] {
        var found: [StoredEntry] = []
        for row in try server.exec(
            """
            SELECT seq::text, encode(entry, 'hex'), encode(leaf, 'hex') FROM bench_ledgers
            WHERE bench_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq
            """, [bench, String(range.lowerBound), String(range.upperBound)])
        {
            guard let seq = (row.first ?? nil).flatMap({ Int($0) }) else { continue }
            found.append(
                StoredEntry(
                    seq: seq, entry: (row.count > 1 ? row[1] : nil).flatMap(Hex.decode),
                    leaf: (row.count > 2 ? row[2] : nil).flatMap { Digest(hex: $0) }))
        }
        // The blocks that hold a place in the range (by the key's first
        // place; `count` is in the row, the entries are read only for
        // the places wanted).
        for row in try server.exec(
            """
            SELECT first::text, count::text, (SELECT string_agg(encode(e, 'hex'), ',' ORDER BY n)
                FROM unnest(entries) WITH ORDINALITY AS t(e, n) WHERE first + n - 1 >= $2 AND first + n - 1 < $3)
            FROM bench_ledger_blocks
            WHERE bench_id = $1 AND first < $3 AND first + count > $2
            ORDER BY first
            """, [bench, String(range.lowerBound), String(range.upperBound)])
        {
            guard row.count > 2, let first = row[0].flatMap({ Int($0) }), let count = row[1].flatMap({ Int($0) })
            else { continue }
            let start = max(first, range.lowerBound)
            let end = min(first + count, range.upperBound)
            guard start < end else { continue }
            let texts = row[2].map { $0.split(separator: ",", omittingEmptySubsequences: false) } ?? []
            for offset in 0..<(end - start) {
                let text = offset < texts.count ? String(texts[offset]) : nil
                found.append(StoredEntry(seq: start + offset, entry: text.flatMap(Hex.decode), leaf: nil))
            }
        }
        found.sort { $0.seq < $1.seq }
        return found
    }
}
