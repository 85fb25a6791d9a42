/// Ways someone with write access to an inventory file can tamper with it
/// using `sqlite3` (docs/ledger.md, "What verify checks"): each one must
/// make `beaconbench ledger verify` and a verifier written from the docs
/// alone (`Tests/Peers/ledger_verify.py`) exit 2. Written so that they
/// apply to any inventory that has been through a provisioning run (no
/// address or place is assumed): `needs`, when given, is a query whose
/// count must be above 0 for the case to mean anything, and is checked.
public struct LedgerTamperCase: Sendable, CustomStringConvertible {
    public let name: String
    /// What `sqlite3 FILE SQL` runs.
    public let sql: String
    /// `SELECT count(*) …` that must be above 0 before the case applies.
    public let needs: String?
    /// Why `ledger verify` does not find it yet (an open defect), if it does not.

    public init(_ name: String, _ sql: String, needs: String? = nil) {
        self.name = name
        self.sql = sql
        self.needs = needs
    }

    public var description: String { name }
}

public enum LedgerTamperCases {
    /// The directory a test puts its batch in, so that a kept row (`runs.command`)
    /// holds an `é` and an `Å` (precomposed: U+00E9, U+00C5).
    public static let accentedDirectory = "lot-\u{E9}-\u{C5}"

    public static let all: [LedgerTamperCase] = [
        .init(
            "a device's column edited",
            "UPDATE devices SET config_braking = 999 WHERE address = (SELECT min(address) FROM devices)",
            needs: "SELECT count(*) FROM devices"),
        .init(
            // (A text in an INTEGER column that reads as a number is made an
            // integer again by the column's affinity: a blob keeps its type.)
            "a device's text stored as a blob of the same bytes",
            "UPDATE devices SET firmware = CAST(firmware AS BLOB) WHERE firmware IS NOT NULL",
            needs: "SELECT count(*) FROM devices WHERE firmware IS NOT NULL"),
        .init(
            "a device deleted", "DELETE FROM devices WHERE address = (SELECT max(address) FROM devices)",
            needs: "SELECT count(*) FROM devices"),
        .init(
            "an identity deleted", "DELETE FROM identities WHERE rowid = (SELECT min(rowid) FROM identities)",
            needs: "SELECT count(*) FROM identities"),
        .init(
            "a run inserted",
            "INSERT INTO runs(started_at, command, status) VALUES ('2026-01-01T00:00:00.000Z', 'backdated', 'finished')"
        ),
        .init(
            "an assignment inserted",
            """
            INSERT INTO assignments(address, profile, minor_policy, assigned_at, assigned_by, source)
            VALUES ('C0:FF:EE:00:00:01', 'truck', 'auto', '2026-01-01T00:00:00.000Z', 'x', 'local')
            """),
        .init(
            "an outcome edited",
            "DROP TRIGGER outcomes_sealed_update; UPDATE outcomes SET detail = 'edited' WHERE id = (SELECT min(id) FROM outcomes WHERE ledger_seq IS NOT NULL)",
            needs: "SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL"),
        .init(
            "an outcome deleted",
            "DROP TRIGGER outcomes_sealed_delete; DELETE FROM outcomes WHERE id = (SELECT min(id) FROM outcomes WHERE ledger_seq IS NOT NULL)",
            needs: "SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL"),
        .init(
            "an outcome inserted",
            "INSERT INTO outcomes(run_id, device, step, status, started_at, ended_at) SELECT min(id), 'C0:FF:EE:00:00:01', 'calibrate', 'ok', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z' FROM runs"
        ),
        .init(
            "an outcome given a place another entry holds",
            "INSERT INTO outcomes(run_id, device, step, status, started_at, ended_at, ledger_seq, ledger_leaf) SELECT min(id), 'C0:FF:EE:00:00:01', 'calibrate', 'ok', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 3, 0 FROM runs"
        ),
        .init(
            "a sealed row's leaf check cleared",
            "DROP TRIGGER outcomes_sealed_update; UPDATE outcomes SET ledger_leaf = NULL WHERE id = (SELECT min(id) FROM outcomes WHERE ledger_seq IS NOT NULL)",
            needs: "SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL"),
        .init(
            "a sealed row's leaf check off by one",
            "DROP TRIGGER outcomes_sealed_update; UPDATE outcomes SET ledger_leaf = ledger_leaf + 1 WHERE id = (SELECT min(id) FROM outcomes WHERE ledger_seq IS NOT NULL)",
            needs: "SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL"),
        .init(
            "a sealed row's place stored as text",
            "DROP TRIGGER outcomes_sealed_update; UPDATE outcomes SET ledger_seq = CAST(ledger_seq AS TEXT) WHERE id = (SELECT min(id) FROM outcomes WHERE ledger_seq IS NOT NULL)",
            needs: "SELECT count(*) FROM outcomes WHERE ledger_seq IS NOT NULL"),
        .init(
            "a trip inserted",
            "INSERT INTO trips(device, start_ms, end_ms, beacon_index, pulled_at) VALUES ('C0:FF:EE:00:00:01', 1, 2, 9, '2026-01-01T00:00:00.000Z')"
        ),
        .init(
            "the last byte of a kept entry changed",
            """
            DROP TRIGGER ledger_no_update; UPDATE ledger SET entry = substr(entry, 1, length(entry) - 1)
            || CASE WHEN substr(entry, -1) = x'00' THEN x'01' ELSE x'00' END WHERE seq = (SELECT max(seq) FROM ledger)
            """),
        .init(
            "a kept entry and its leaf check rewritten",
            "DROP TRIGGER ledger_no_update; UPDATE ledger SET entry = x'01030004', leaf = 0 WHERE seq = (SELECT min(seq) FROM ledger WHERE seq > 0)"
        ),
        .init(
            "a kept entry's leaf check off by one",
            "DROP TRIGGER ledger_no_update; UPDATE ledger SET leaf = leaf + 1 WHERE seq = (SELECT max(seq) FROM ledger)"
        ),
        .init(
            "two kept entries swapped",
            """
            DROP TRIGGER ledger_no_update;
            CREATE TEMP TABLE two AS SELECT seq FROM ledger WHERE seq > 0 ORDER BY seq LIMIT 2;
            UPDATE ledger SET seq = 1000000000 WHERE seq = (SELECT min(seq) FROM two);
            UPDATE ledger SET seq = (SELECT min(seq) FROM two) WHERE seq = (SELECT max(seq) FROM two);
            UPDATE ledger SET seq = (SELECT max(seq) FROM two) WHERE seq = 1000000000;
            """, needs: "SELECT count(*) - 2 FROM ledger"),
        .init(
            "a kept entry deleted",
            "DROP TRIGGER ledger_no_delete; DELETE FROM ledger WHERE seq = (SELECT min(seq) FROM ledger WHERE seq > 2)"),
        .init(
            "the last kept entry deleted",
            "DROP TRIGGER ledger_no_delete; DELETE FROM ledger WHERE seq = (SELECT max(seq) FROM ledger)"),
        .init(
            "an entry appended outside the tool",
            "INSERT INTO ledger(seq, leaf, entry) SELECT size, 0, x'0100030001020000' FROM ledger_head"),
        .init(
            "the head rewound",
            "DROP TRIGGER ledger_head_grows; UPDATE ledger_head SET size = 3, frontier = substr(frontier, 1, 64)"),
        .init("the head's root filled in wrongly", "UPDATE ledger_head SET root = zeroblob(32)"),
        .init(
            "a tree node changed",
            "DROP TRIGGER ledger_nodes_no_update; UPDATE ledger_nodes SET hash = zeroblob(32) WHERE node = (SELECT min(node) FROM ledger_nodes)",
            needs: "SELECT count(*) FROM ledger_nodes"),
        .init(
            "a tree node deleted",
            "DROP TRIGGER ledger_nodes_no_delete; DELETE FROM ledger_nodes WHERE node = (SELECT max(node) FROM ledger_nodes)",
            needs: "SELECT count(*) FROM ledger_nodes"),
        .init(
            "a tree node of no entries added",
            "INSERT INTO ledger_nodes(node, hash) VALUES (4194303 * 64 + 6, zeroblob(32))"),
        .init("a trigger dropped", "DROP TRIGGER ledger_no_delete"),
        .init(
            "a trigger weakened",
            "DROP TRIGGER outcomes_sealed_update; CREATE TRIGGER outcomes_sealed_update BEFORE UPDATE ON outcomes WHEN 0 BEGIN SELECT 1; END;"
        ),
        .init(
            "a trigger made again with other spacing",
            "DROP TRIGGER ledger_no_update; CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: an entry cannot be changed'); END;"
        ),
        .init("the bench id changed", "UPDATE meta SET value = 'another-bench' WHERE key = 'bench_id'"),
        .init(
            "a checkpoint's root edited",
            "DROP TRIGGER ledger_checkpoints_no_update; UPDATE ledger_checkpoints SET root = zeroblob(32)",
            needs: "SELECT count(*) FROM ledger_checkpoints"),
        .init(
            "a checkpoint of no entries with another root, its note saying so",
            """
            INSERT INTO ledger_checkpoints(size, root, note, made_at) SELECT 0, zeroblob(32),
            'beaconbench.local/bench/' || value || char(10) || '0' || char(10)
            || 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=' || char(10) || char(10)
            || char(8212) || ' ana@depot AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=' || char(10),
            '2026-01-01T00:00:00.000Z' FROM meta WHERE key = 'bench_id'
            """),
        .init(
            "a covered column dropped", "ALTER TABLE devices DROP COLUMN forgotten_at"),
        .init(
            "an é in a kept row decomposed (e + U+0301)",
            "UPDATE runs SET command = replace(command, CAST(x'c3a9' AS TEXT), CAST(x'65cc81' AS TEXT))",
            needs: "SELECT count(*) FROM runs WHERE instr(command, CAST(x'c3a9' AS TEXT)) > 0"),
        .init(
            "an Å in a kept row written as the Ångström sign (U+212B)",
            "UPDATE runs SET command = replace(command, CAST(x'c385' AS TEXT), CAST(x'e284ab' AS TEXT))",
            needs: "SELECT count(*) FROM runs WHERE instr(command, CAST(x'c385' AS TEXT)) > 0"),
        .init(
            "a kept checkpoint deleted",
            "DROP TRIGGER ledger_checkpoints_no_delete; DELETE FROM ledger_checkpoints",
            needs: "SELECT count(*) FROM ledger_checkpoints"),
        .init(
            "a kept checkpoint back-dated",
            """
            DROP TRIGGER ledger_checkpoints_no_update;
            UPDATE ledger_checkpoints SET made_at = '2020-01-01T00:00:00.000Z'
            """,
            needs: "SELECT count(*) FROM ledger_checkpoints"),
        .init(
            "a checkpoint slipped in with no entry (a copy of the kept one's note at a new size)",
            """
            INSERT INTO ledger_checkpoints(size, root, note, made_at)
            SELECT size + 1, root, note, made_at FROM ledger_checkpoints ORDER BY size DESC LIMIT 1
            """,
            needs: "SELECT count(*) FROM ledger_checkpoints"),
    ]
}
