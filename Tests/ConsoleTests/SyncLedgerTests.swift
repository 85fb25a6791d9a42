import Foundation
import Inventory
import Ledger
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// Every bench's ledger on the shared server (docs/ledger.md, "Several
/// benches"): pushed exactly, refused as a whole when a bench's history
/// was rewritten (recorded, shown by the office's audit and `ledger
/// verify`), kept append-only by the server's own triggers, and resumed
/// without a gap or a duplicate after a sync stopped in the middle of it.
@Suite("several benches' ledgers on one server", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct SyncLedgerTests {
    /// The differences between a bench's ledger and what the server holds
    /// of it (entries byte for byte, in order; the head's size and root).
    static func ledgerDifferences(_ inventory: Inventory, _ server: LocalPostgres) async throws -> [String] {
        let bench = try await inventory.benchID()
        let head = try await inventory.ledgerTreeHead()
        let local = try await inventory.ledgerEntries(0..<head.size)
        let remote = try await server.rows(
            "SELECT seq, encode(entry, 'hex') FROM bench_ledger_entries WHERE bench_id = '\(bench)' ORDER BY seq")
        var differences: [String] = []
        if local.count != remote.count {
            differences.append("\(local.count) entries here, \(remote.count) on the server")
        }
        for (index, row) in remote.enumerated() {
            if row.first != String(index) {
                differences.append("the server's entry \(index) has seq \(row.first ?? "")")
            }
            if index < local.count, row.count > 1, row[1] != Hex.encode(local[index]) {
                differences.append("entry \(index) differs")
            }
        }
        let serverHead = try await server.rows(
            "SELECT size, encode(root, 'hex') FROM bench_ledger_heads WHERE bench_id = '\(bench)'")
        if serverHead != [[String(head.size), head.root.hex]] {
            differences.append("the server's head is \(serverHead), the bench's \(head.size) \(head.root.hex)")
        }
        return Array(differences.prefix(10))
    }

    /// Every server table (its rows' count and digest): what a refused sync must leave as it was.
    static let serverTables = [
        "benches", "devices", "runs", "outcomes", "readings", "trips", "events", "incidents", "identities",
        "identity_claims", "fleet_assignments", "assignment_conflicts", "bench_ledgers", "bench_ledger_blocks",
        "bench_ledger_heads", "bench_checkpoints", "ledger_rewrites",
    ]

    static func snapshot(_ server: LocalPostgres) async throws -> [String: String] {
        var tables: [String: String] = [:]
        for table in serverTables {
            tables[table] = try await server.psql(
                "SELECT count(*)::text || ' ' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM \(table) t"
            )
        }
        return tables
    }

    /// `--json` output checked against docs/json.md.
    static func shapeProblems(_ stdout: String) throws -> [String] {
        let kinds = try JSONShapeTests.documentedKinds()
        return stdout.split(separator: "\n").flatMap { JSONShapeTests.problems(String($0), kinds) }
    }

    /// Two benches provision and sync: the server holds both ledgers
    /// exactly; a second sync sends only the new entries. Then one bench's
    /// inventory is replaced by a copy an insider kept (same bench id, the
    /// same history up to entry k, another after it: internally
    /// consistent, so its own `ledger verify` passes): its next sync is
    /// refused, nothing of it applied, the rewrite recorded at entry k, and
    /// the office's audit and `ledger verify` name it.
    @Test func twoBenchesLedgersAreHeldExactlyAndARewriteIsRefused() async throws {
        try await withPostgres { server in
            func sync(_ bench: ConsoleFixture) async throws -> [String: Any] {
                let sync = try await bench.beaconbench(["--json", "sync", "--to", server.url])
                #expect(sync.status == 0, "\(sync.stderr)")
                #expect(try Self.shapeProblems(sync.stdout).isEmpty, "\(sync.stdout)")
                return try #require(ConsoleFixture.jsonLines(sync.stdout, kind: "sync").first, "\(sync.stdout)")
            }
            func provision(_ bench: ConsoleFixture) async throws {
                let run = try await bench.beaconbench([
                    "run", bench.batch("provision-new.batch"), "--set", "scan=120s", "--set", "expect=\(bench.beacons)",
                ])
                #expect(run.status == 0, "\(run.stderr)")
            }
            try await withNewFleet(numbers: [1, 2, 3, 4]) { first in
                try await withNewFleet(numbers: [20, 21, 22, 23]) { second in
                    try await provision(first)
                    try await provision(second)
                    var sizes: [Int] = []
                    for bench in [first, second] {
                        let line = try await sync(bench)
                        let inventory = try Inventory(path: bench.inventoryPath)
                        let head = try await inventory.ledgerTreeHead()
                        #expect(head.size > 20, "a provisioning run leaves entries")
                        #expect(try await Self.ledgerDifferences(inventory, server).isEmpty)
                        // The whole ledger went (the sync's own entries, if any, go next time).
                        let sent = (line["sent"] as? [String: Int])?["ledger"] ?? -1
                        #expect(sent == line["ledger_size"] as? Int && sent > 0, "\(line)")
                        sizes.append(head.size)
                    }
                    let firstInventory = try Inventory(path: first.inventoryPath)
                    let id = try await firstInventory.benchID()
                    let secondID = try await Inventory(path: second.inventoryPath).benchID()

                    // The insider's spare copy: the same bench, the same history so far.
                    let copy = first.directory + "/spare.sqlite"
                    let backup = try await runTool("/usr/bin/sqlite3", [first.inventoryPath, ".backup '\(copy)'"])
                    #expect(backup.status == 0, "\(backup.stderr)")
                    let k = try await Inventory(path: copy).ledgerTreeHead().size

                    // The bench goes on: reads a beacon again, syncs: only the new entries go.
                    let held = try await server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'")
                    let again = try await first.beaconbench(["require", "battery>=20", "C0:FE:00:00:00:01"])
                    #expect(again.status == 0, "\(again.stderr)")
                    let grown = try await firstInventory.ledgerTreeHead().size
                    #expect(grown > k, "the bench's read made entries")
                    let resync = try await sync(first)
                    #expect((resync["sent"] as? [String: Int])?["ledger"] == grown - held, "\(resync)")
                    #expect(try await Self.ledgerDifferences(firstInventory, server).isEmpty)
                    let m = try await server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'")

                    // The copy gets another history from entry k on, made by
                    // beaconbench's own code: it verifies by itself.
                    do {
                        let spare = try Inventory(path: copy)
                        try await spare.recordReading(
                            address: "C0:FE:00:00:00:02", at: Date(), battery: 99, rssi: -40, firmware: "1.0.8")
                        #expect(try await spare.ledgerTreeHead().size > k)
                    }
                    let verify = try await runTool(
                        builtProduct("beaconbench"), ["--inventory", copy, "ledger", "verify"],
                        environment: first.environment)
                    #expect(verify.status == 0, "the copy verifies by itself: \(verify.stdout) \(verify.stderr)")

                    // Put in place of the bench's inventory, its sync is refused whole.
                    let before = try await Self.snapshot(server)
                    for suffix in ["", "-wal", "-shm"] {
                        try? FileManager.default.removeItem(atPath: first.inventoryPath + suffix)
                    }
                    try FileManager.default.moveItem(atPath: copy, toPath: first.inventoryPath)
                    for attempt in 1...2 {
                        let refused = try await first.beaconbench(["sync", "--to", server.url])
                        #expect(refused.status == 2, "attempt \(attempt): \(refused.stdout) \(refused.stderr)")
                        #expect(
                            refused.stderr.contains(
                                "the server refused this bench's ledger: it was rewritten at entry \(k) (the server holds \(m) entries from before)"
                            ), "\(refused.stderr)")
                        #expect(!refused.stdout.contains("synced bench"), "\(refused.stdout)")
                        var after = try await Self.snapshot(server)
                        // Nothing applied: every table as it was, but the one rewrite recorded (once).
                        after["ledger_rewrites"] = before["ledger_rewrites"]
                        #expect(after == before, "attempt \(attempt): the server changed")
                        let recorded = try await server.rows(
                            "SELECT bench_id, at_entry, server_size FROM ledger_rewrites ORDER BY found_at")
                        #expect(recorded == [[id, String(k), String(m)]], "\(recorded)")
                    }

                    // The office sees it.
                    func office(_ arguments: [String]) async throws -> ToolOutput {
                        try await runTool(
                            builtProduct("beaconbench"), ["--inventory", server.url] + arguments,
                            environment: second.environment)
                    }
                    let audit = try await office(["--json", "audit"])
                    #expect(audit.status == 2, "\(audit.stderr)")
                    #expect(try Self.shapeProblems(audit.stdout).isEmpty, "\(audit.stdout)")
                    let rewrites = ConsoleFixture.jsonLines(audit.stdout, kind: "ledger_rewrite")
                    #expect(rewrites.count == 1, "\(audit.stdout)")
                    #expect(rewrites.first?["bench"] as? String == id && rewrites.first?["at_entry"] as? Int == k)
                    let peopleAudit = try await office(["audit"])
                    #expect(
                        peopleAudit.stdout.contains("bench \(id)'s ledger was rewritten at entry \(k)"),
                        "\(peopleAudit.stdout)")

                    let ledger = try await office(["--json", "ledger", "verify"])
                    #expect(ledger.status == 2, "\(ledger.stderr)")
                    #expect(try Self.shapeProblems(ledger.stdout).isEmpty, "\(ledger.stdout)")
                    let benches = Dictionary(
                        ConsoleFixture.jsonLines(ledger.stdout, kind: "ledger_bench").map {
                            ($0["bench"] as? String ?? "", $0)
                        }, uniquingKeysWith: { a, _ in a })
                    #expect(
                        benches[id]?["ok"] as? Bool == false && benches[id]?["problem"] is NSNull, "\(ledger.stdout)")
                    #expect(benches[id]?["size"] as? Int == m)
                    #expect(
                        (benches[id]?["rewrites"] as? [[String: Any]])?.first?["at_entry"] as? Int == k,
                        "\(ledger.stdout)")
                    #expect(benches[secondID]?["ok"] as? Bool == true, "\(ledger.stdout)")
                    #expect(benches[secondID]?["size"] as? Int == sizes[1])
                    print(
                        "SyncLedgerTests: ledgers of \(sizes) entries pushed; the copy diverged at entry \(k); the server held \(m); refused: \(rewrites.first?["detail"] ?? "")"
                    )
                    let peopleLedger = try await office(["ledger", "verify"])
                    #expect(peopleLedger.status == 2)
                    #expect(
                        peopleLedger.stdout.contains("bench \(id)'s ledger was rewritten at entry \(k)"),
                        "\(peopleLedger.stdout)")
                    #expect(
                        peopleLedger.stdout.contains("bench \(secondID): ledger on the server ok"),
                        "\(peopleLedger.stdout)")
                }
            }
        }
    }

    /// A sync stopped (SIGTERM) in the middle of the ledger — at a moment
    /// the test holds: two chunks of entries committed, the third waiting
    /// on a lock the test holds on `bench_checkpoints` (its chunk carries
    /// the checkpoint it ends at) — leaves the server a whole prefix (its
    /// head at 10,000, no table row sent yet); the next sync completes it
    /// with no gap and no duplicate. Then the server's own triggers refuse
    /// every change to what it holds, and a change made with the triggers
    /// off is found by `ledger verify`.
    @Test func aSyncStoppedMidLedgerCompletesWithNoGapOrDuplicate() async throws {
        try await withSyncScene("sync-ledger-stop") { scene in
            let server = scene.server
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 50, outcomes: 12_000)
            let id = try await bench.inventory.benchID()
            let head = try await bench.inventory.ledgerTreeHead()
            try #require(head.size > 10_000 && head.size < 15_000, "\(head.size) entries")
            // A signed checkpoint of the whole ledger (a throwaway key).
            let key = scene.directory + "/key"
            let made = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key])
            try #require(made.status == 0, "\(made.stderr)")
            let checkpoint = try Checkpoint(origin: Checkpoint.origin(bench: id), size: head.size, root: head.root)
            let note = try SignedCheckpoint.sign(checkpoint, keyPath: key, signer: "tester@bench")
            try await bench.inventory.recordCheckpoint(size: head.size, root: head.root, note: note)
            // Keeping it is itself an entry, after the entries it signs (docs/ledger.md).
            let whole = try await bench.inventory.ledgerTreeHead()
            try #require(whole.size == head.size + 1, "\(whole.size) entries after the checkpoint")

            try await scene.makeSchema()
            let lock = try await onThreadOfItsOwn { try TableLock(url: server.url, "bench_checkpoints", mode: "SHARE") }
            let sync = try scene.beaconbench(["--inventory", bench.path, "--json", "sync", "--to", server.url])
            let waiting = """
                SELECT count(*) FROM pg_stat_activity
                WHERE application_name = 'beaconbench' AND wait_event_type = 'Lock' AND pid <> \(lock.pid)
                """
            let held = try await SyncScene.waitUntil(
                "the sync to wait on the lock on bench_checkpoints (pg_stat_activity)", stopEarly: { !sync.isRunning }
            ) { try await server.count(waiting) == 1 }
            try #require(held, "the sync ended before it reached the checkpoint: \(scene.stderr)")
            sync.send(SIGTERM)
            let exit = await sync.waitForExit().status
            #expect(exit >> 8 == 143, "exit \(exit >> 8): \(scene.stderr)")
            #expect(
                scene.stderr.contains("devices 0,") && scene.stderr.contains("ledger 10000, checkpoints 0"),
                "\(scene.stderr)")
            let line = try #require(ConsoleFixture.jsonLines(scene.stdout, kind: "sync").first, "\(scene.stdout)")
            #expect((line["sent"] as? [String: Int])?["ledger"] == 10_000, "\(line)")
            #expect(try Self.shapeProblems(scene.stdout).isEmpty, "\(scene.stdout)")
            // A whole prefix: 10,000 entries from 0, the head the server computed at 10,000.
            let there = "FROM bench_ledger_entries WHERE bench_id = '\(id)'"
            await #expect(try server.count("SELECT count(*) \(there)") == 10_000)
            await #expect(try server.count("SELECT max(seq) \(there)") == 9_999)
            let prefixRoot = try await bench.inventory.ledgerRoot(size: 10_000)
            await #expect(
                try server.rows("SELECT size, encode(root, 'hex') FROM bench_ledger_heads WHERE bench_id = '\(id)'")
                    == [["10000", prefixRoot.hex]])
            await #expect(try server.count("SELECT count(*) FROM devices WHERE bench_id = '\(id)'") == 0)

            print("SyncLedgerTests: stopped at 10000 of \(head.size) entries; \(scene.stderr.suffix(400))")
            await onThreadOfItsOwn { lock.release() }
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            #expect(try await Self.ledgerDifferences(bench.inventory, server).isEmpty)
            await #expect(try server.count("SELECT count(*) \(there)") == whole.size)
            await #expect(try server.count("SELECT count(DISTINCT seq) \(there)") == whole.size)
            await #expect(try server.count("SELECT count(*) FROM bench_checkpoints WHERE bench_id = '\(id)'") == 1)
            let rows = try await scene.differences(bench)
            #expect(rows.isEmpty, "\(rows.prefix(5))")
            let verified = try scene.beaconbench(["--inventory", server.url, "--json", "ledger", "verify"])
            await #expect(verified.waitForExit().status >> 8 == 0, "\(scene.stdout) \(scene.stderr)")
            let mine = ConsoleFixture.jsonLines(scene.stdout, kind: "ledger_bench").first {
                $0["bench"] as? String == id
            }
            #expect(mine?["size"] as? Int == whole.size && mine?["checkpoints"] as? Int == 1, "\(scene.stdout)")
            #expect(mine?["root"] as? String == whole.root.hex)

            // The server keeps it append-only itself, whatever a client sends.
            let before = try await Self.snapshot(server)
            let refusedChanges = [
                "UPDATE bench_ledgers SET entry = 'x'::bytea WHERE bench_id = '\(id)' AND seq = 5",
                "DELETE FROM bench_ledgers WHERE bench_id = '\(id)' AND seq = \(whole.size - 1)",
                "TRUNCATE bench_ledgers",
                "INSERT INTO bench_ledgers (bench_id, seq, entry) VALUES ('\(id)', \(whole.size + 1), 'x'::bytea)",
                "INSERT INTO bench_ledgers (bench_id, seq, entry) VALUES ('\(id)', 3, 'x'::bytea)",
                "UPDATE bench_ledger_blocks SET entries[1] = 'x'::bytea WHERE bench_id = '\(id)' AND first = 0",
                "DELETE FROM bench_ledger_blocks WHERE bench_id = '\(id)' AND first = 0",
                "TRUNCATE bench_ledger_blocks",
                "INSERT INTO bench_ledger_blocks VALUES ('\(id)', \(whole.size + 1), 1, ARRAY['x'::bytea])",
                "INSERT INTO bench_ledger_blocks VALUES ('\(id)', 3, 1, ARRAY['x'::bytea])",
                "INSERT INTO bench_ledger_blocks VALUES ('\(id)', \(whole.size), 2, ARRAY['x'::bytea])",
                "INSERT INTO bench_ledger_blocks VALUES ('\(id)', \(whole.size), 2, ARRAY['x'::bytea, NULL])",
                "INSERT INTO bench_ledger_blocks VALUES ('\(id)', \(whole.size), 0, ARRAY[]::bytea[])",
                "UPDATE bench_ledger_heads SET size = 3 WHERE bench_id = '\(id)'",
                "DELETE FROM bench_ledger_heads",
                "INSERT INTO bench_ledger_heads VALUES ('someone', 0, ''::bytea, sha256(''::bytea))",
                "DELETE FROM bench_checkpoints",
                "INSERT INTO bench_checkpoints (bench_id, size, root, note) VALUES ('\(id)', \(whole.size), sha256('x'::bytea), 'n')",
                "DELETE FROM ledger_rewrites",
            ]
            for change in refusedChanges {
                await #expect(throws: (any Error).self, "\(change)") { try await server.psql(change) }
            }
            #expect(try await Self.snapshot(server) == before, "the server's tables changed")
            // A change made with the triggers off (an administrator's) is found.
            // (Entries are stored in blocks, with no leaf each: the tree
            // rebuilt from them is not the head's, nor its checkpoint's.)
            _ = try await server.psql(
                """
                ALTER TABLE bench_ledger_blocks DISABLE TRIGGER USER;
                UPDATE bench_ledger_blocks SET entries[8] = convert_to('{"v":1}', 'UTF8') WHERE bench_id = '\(id)' AND first = 0;
                ALTER TABLE bench_ledger_blocks ENABLE TRIGGER USER;
                """)
            let tampered = try scene.beaconbench(["--inventory", server.url, "ledger", "verify"])
            await #expect(tampered.waitForExit().status >> 8 == 2)
            // The entry is named (not an entry at its place), and the checkpoint whose root it breaks.
            #expect(
                scene.stdout.contains("bench \(id): ledger on the server does not hold: entry 7 is not an entry")
                    && scene.stdout.contains("bench \(id): its checkpoint of"), "\(scene.stdout)")
        }
    }
}

extension SyncLedgerTests {
    /// A server that took a bench's entries as rows (before version 10)
    /// takes the rest as blocks once migrated: the bench's ledger there is
    /// its rows then its blocks, exact; `ledger verify` rebuilds the same
    /// tree from both; a block that does not follow the rows is refused;
    /// and blocks cost a fraction of rows.
    @Test func entriesHeldAsRowsGoOnInBlocks() async throws {
        try await withSyncScene("sync-ledger-blocks") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 200, outcomes: 12_000)
            let id = try await bench.inventory.benchID()
            let url = scene.server.url
            try await onThreadOfItsOwn { try ServerAdministration.migrate(url, through: 9) }
            // The first k entries as a version-9 bench pushed them: rows.
            let k = 1_234
            let early = try await bench.inventory.ledgerEntries(0..<k)
            let hex = PostgresArray.literal(early.map { Optional(Hex.encode($0)) })
            try await onThreadOfItsOwn {
                try PostgresConnection(url).exec(
                    """
                    INSERT INTO bench_ledgers (bench_id, seq, entry)
                    SELECT $1, n - 1, decode(e, 'hex') FROM unnest($2::text[]) WITH ORDINALITY AS t(e, n)
                    """, [id, hex])
            }
            await #expect(try scene.server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'") == k)

            let sync = try scene.sync(bench)
            await #expect(sync.waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let head = try await bench.inventory.ledgerTreeHead()
            #expect(try await Self.ledgerDifferences(bench.inventory, scene.server).isEmpty)
            await #expect(try scene.server.count("SELECT count(*) FROM bench_ledgers WHERE bench_id = '\(id)'") == k)
            await #expect(
                try scene.server.count("SELECT min(first) FROM bench_ledger_blocks WHERE bench_id = '\(id)'") == k)
            await #expect(
                try scene.server.count("SELECT sum(count) FROM bench_ledger_blocks WHERE bench_id = '\(id)'")
                    == head.size - k)
            let verified = try scene.beaconbench(["--inventory", url, "--json", "ledger", "verify"])
            await #expect(verified.waitForExit().status >> 8 == 0, "\(scene.stdout) \(scene.stderr)")
            let mine = ConsoleFixture.jsonLines(scene.stdout, kind: "ledger_bench").first {
                $0["bench"] as? String == id
            }
            #expect(mine?["size"] as? Int == head.size && mine?["root"] as? String == head.root.hex, "\(scene.stdout)")
            // A block must start at the head's size, even one of true entries.
            let again = try await bench.inventory.ledgerEntries(0..<1)
            await #expect(throws: (any Error).self) {
                try await scene.server.psql(
                    "INSERT INTO bench_ledger_blocks VALUES ('\(id)', \(k), 1, ARRAY['\\x\(Hex.encode(again[0]))'::bytea])"
                )
            }
            // What each form costs the server (the same kind of entries).
            let rowBytes = try await scene.server.count(
                "SELECT (pg_total_relation_size('bench_ledgers') / \(k))::bigint")
            let blockBytes = try await scene.server.count(
                "SELECT (pg_total_relation_size('bench_ledger_blocks') / \(head.size - k))::bigint")
            #expect(blockBytes * 3 < rowBytes, "rows \(rowBytes) B per entry, blocks \(blockBytes) B")
            print(
                "SyncLedgerTests: \(k) entries as rows, \(head.size - k) in blocks; \(rowBytes) B an entry as a row, \(blockBytes) B in a block"
            )
        }
    }

    /// The ledger's part of a sync of a large bench, measured: a ledger of
    /// about 100,000 entries checked against the server and pushed
    /// (`ServerLedger.check` and `push`, in process), then the server's
    /// `ledger verify` of it; the server holds it exactly.
    @Test func aLargeLedgerIsPushedAndVerifiedMeasured() async throws {
        try await withSyncScene("sync-ledger-large") { scene in
            let bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 1_000, outcomes: 100_000)
            let id = try await bench.inventory.benchID()
            let size = try await bench.inventory.ledgerTreeHead().size
            try await scene.makeSchema()
            let url = scene.server.url
            let inventory = bench.inventory
            let clock = ContinuousClock()
            let server = try PostgresConnection(url)
            var pushed = ServerLedger.Pushed()
            let pushing = try await clock.measure {
                let plan = try await ServerLedger.check(inventory, server, bench: id, chunkSize: 5_000)
                pushed = try await ServerLedger.push(
                    inventory, server, bench: id, plan: plan, chunkSize: 5_000, total: InventorySync.SentRows(),
                    progress: { _, _ in })
            }
            #expect(pushed.entries == size && pushed.size == size)
            var again = ServerLedger.Pushed()
            let resync = try await clock.measure {
                let plan = try await ServerLedger.check(inventory, server, bench: id, chunkSize: 5_000)
                again = try await ServerLedger.push(
                    inventory, server, bench: id, plan: plan, chunkSize: 5_000, total: InventorySync.SentRows(),
                    progress: { _, _ in })
            }
            #expect(again.entries == 0 && again.size == size)
            var verified: [BenchLedgerVerification] = []
            let verifying = try await clock.measure { verified = try ServerLedger.verify(url: url) }
            // What each sync now costs before it sends: the bench's own verify.
            let own = try await clock.measure { try await InventorySync.verifyOwnLedger(inventory) }
            // And the bench's side of the row check (its rows read and hashed by block).
            let rowCheck = try await clock.measure {
                _ = try await ServerRowCheck.differences(inventory, server, bench: id, include: true, missing: false)
            }
            let mine = verified.first { $0.bench == id }
            #expect(mine?.ok == true && mine?.size == size, "\(String(describing: mine))")
            #expect(try await Self.ledgerDifferences(inventory, scene.server).isEmpty)
            print(
                "SyncLedgerTests: \(size) entries: checked and pushed in \(pushing), checked again (nothing to send) in \(resync); the server's ledger verify took \(verifying); the bench's own verify before a sync \(own); the row check's \(rowCheck)"
            )
        }
    }
}

extension SyncLedgerTests {
    /// A step outcome edited with `sqlite3` after its entry was made (its
    /// trigger dropped, nothing recomputed), before the bench's next sync:
    /// the bench's own verify, run before anything is sent, names the
    /// entry, and the sync is refused (exit 2) with nothing of it applied —
    /// not recorded as a rewrite, since the server's history is intact.
    @Test func entriesEditedWithoutTheirTreeAreRefusedAndNothingApplied() async throws {
        try await withSyncScene("sync-ledger-edited") { scene in
            var bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 10, outcomes: 300)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let held = try await bench.inventory.ledgerTreeHead().size
            try await bench.moreWork(1)
            let grown = try await bench.inventory.ledgerTreeHead().size
            // An outcome whose entry is inside a block of 32 the tree already stores.
            let target = (held / 32 + 2) * 32 + 5
            try #require(target < grown - 64, "\(held) → \(grown)")
            let edit = try await runTool(
                "/usr/bin/sqlite3",
                [
                    bench.path,
                    "DROP TRIGGER outcomes_sealed_update; UPDATE outcomes SET detail = 'edited behind the tool' WHERE ledger_seq = \(target); SELECT changes();",
                ])
            try #require(
                edit.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(edit.stdout) \(edit.stderr)")
            let before = try await Self.snapshot(scene.server)
            let sync = try scene.sync(bench)
            await #expect(sync.waitForExit().status >> 8 == 2, "\(scene.stderr)")
            // Refused at the bench, by its own verify, before anything is sent.
            #expect(
                scene.stderr.contains("this bench's own ledger does not verify: ")
                    && scene.stderr.contains("nothing was sent, nothing recorded on the server"), "\(scene.stderr)")
            #expect(try await Self.snapshot(scene.server) == before, "the server changed")
            let verify = try await runTool(
                builtProduct("beaconbench"), ["--inventory", bench.path, "ledger", "verify"])
            #expect(verify.status == 2 && verify.stdout.contains("entry \(target)"), "\(verify.stdout)")
        }
    }
}

extension SyncLedgerTests {
    /// An older copy of the inventory put back (the recent history taken
    /// away, what is left verifying by itself): the bench offers fewer
    /// entries than the server holds, all of them the server's; the sync
    /// is refused, the rewrite recorded at the first entry taken away.
    @Test func anOlderCopyPutBackIsARewriteAtTheFirstEntryTakenAway() async throws {
        try await withSyncScene("sync-ledger-older") { scene in
            var bench = try await LargeInventory(
                path: scene.directory + "/inventory.sqlite", devices: 10, outcomes: 300)
            let id = try await bench.inventory.benchID()
            let older = scene.directory + "/older.sqlite"
            let backup = try await runTool("/usr/bin/sqlite3", [bench.path, ".backup '\(older)'"])
            try #require(backup.status == 0, "\(backup.stderr)")
            let k = try await Inventory(path: older).ledgerTreeHead().size
            try await bench.moreWork(1)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let m = try await scene.server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'")
            try #require(m > k)
            let before = try await Self.snapshot(scene.server)
            let refused = try scene.beaconbench(["--inventory", older, "sync", "--to", scene.server.url])
            await #expect(refused.waitForExit().status >> 8 == 2, "\(scene.stderr)")
            #expect(
                scene.stderr.contains(
                    "it was rewritten at entry \(k) (the server holds \(m) entries from before)"), "\(scene.stderr)")
            var after = try await Self.snapshot(scene.server)
            after["ledger_rewrites"] = before["ledger_rewrites"]
            #expect(after == before, "the server changed")
            await #expect(
                try scene.server.rows("SELECT at_entry, server_size, bench_size FROM ledger_rewrites")
                    == [[String(k), String(m), String(k)]])
        }
    }
}

/// A connection holding `table` locked in `mode` (in an open transaction)
/// until `release()`.
final class TableLock: @unchecked Sendable {
    // Used by one thread at a time: made, then released, each on a thread of its own.
    private let connection: PostgresConnection
    let pid: String

    init(url: String, _ table: String, mode: String) throws {
        connection = try PostgresConnection(url)
        try connection.exec("BEGIN")
        try connection.exec("LOCK TABLE \(table) IN \(mode) MODE")
        guard let pid = try connection.exec("SELECT pg_backend_pid()").first?.first ?? nil else {
            throw LocalBusError("pg_backend_pid() answered nothing")
        }
        self.pid = pid
    }

    func release() { _ = try? connection.exec("ROLLBACK") }
}
