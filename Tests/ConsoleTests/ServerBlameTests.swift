import Foundation
import Inventory
import Ledger
import TestSupport
import Testing

@testable import InventorySync

/// Who is blamed for what on the office's server (issue 46): an idle sync
/// changes nothing on either side; a bench that is not the bench its
/// ledger began as is refused at the bench; what an insider changes on
/// the server is found by the office's `ledger verify` and by the bench's
/// `sync`, and put on the server, not on the bench.
@Suite("blame on the office's server", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct ServerBlameTests {
    static let profiles: Set<String> = ["car", "van", "truck"]

    static func sync(_ inventory: Inventory, _ url: String) async throws -> BenchSync.Outcome {
        try await BenchSync.run(inventory, to: url, includeSimulated: true, profiles: profiles, stop: SyncStop())
    }

    /// Two benches whose assignments crossed (each won some devices, each
    /// converged some of the other's) settle; then two rounds with nothing
    /// new on either side: no ledger entry on either bench, none on the
    /// server, and nothing sent or pulled.
    @Test func twoIdleSyncsInARowWriteNoLedgerEntryOnEitherSide() async throws {
        try await withPostgres { server in
            let directory = try scratchDirectory("blame-idle")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let a = try Inventory(path: directory + "/a.sqlite")
            let b = try Inventory(path: directory + "/b.sqlite")
            func assignment(_ number: Int, _ profile: String, at: String, by: String) -> Assignment {
                Assignment(
                    address: LargeInventory.address(number), profile: profile, major: 250, assignedAt: at,
                    assignedBy: by)
            }
            _ = try await a.assign((0..<10).map { assignment($0, "car", at: "2026-12-01T08:00:00.000Z", by: "tech@a") })
            _ = try await b.assign((5..<15).map { assignment($0, "van", at: "2026-12-02T08:00:00.000Z", by: "tech@b") })
            for inventory in [a, b, a, b] { _ = try await Self.sync(inventory, server.url) }
            // Each converges one of the other's.
            for (inventory, number) in [(a, 7), (b, 1)] {
                let run = try await inventory.beginRun(.init(command: "station"))
                try await inventory.markConverged(LargeInventory.address(number), run: run)
                try await inventory.endRun(run, .finished)
            }
            // And A assigns again one B had won, later.
            _ = try await a.assign([assignment(12, "truck", at: "2026-12-03T08:00:00.000Z", by: "tech@a")])
            for inventory in [a, b, a, b, a, b] { _ = try await Self.sync(inventory, server.url) }

            func sizes() async throws -> [Int] {
                var sizes: [Int] = []
                for inventory in [a, b] {
                    sizes.append(try await inventory.ledgerTreeHead().size)
                    let id = try await inventory.benchID()
                    sizes.append(try await server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'"))
                }
                return sizes
            }
            let settled = try await sizes()
            #expect(settled[0] == settled[1] && settled[2] == settled[3], "the server holds each ledger: \(settled)")
            for round in 1...2 {
                for (name, inventory) in [("A", a), ("B", b)] {
                    let idle = try await Self.sync(inventory, server.url)
                    let sent = idle.report.sent.filter { $0.value != 0 }
                    #expect(sent.isEmpty, "round \(round), bench \(name) sent \(sent)")
                    #expect(
                        idle.exchange.pulled == 0 && idle.exchange.pushed == 0 && idle.exchange.converged == 0,
                        "round \(round), bench \(name): \(idle.exchange)")
                }
                #expect(try await sizes() == settled, "round \(round): ledger sizes (A, server's A, B, server's B)")
            }
            #expect(try await a.verifyLedger().ok)
            #expect(try await b.verifyLedger().ok)
            #expect(try await a.assignment(for: LargeInventory.address(12))?.profile == "truck")
            #expect(try await b.assignment(for: LargeInventory.address(12))?.profile == "truck")
        }
    }

    /// Bench B's inventory with `meta.bench_id` set to A's: its sync is
    /// refused at the bench (its own ledger does not verify: it began as
    /// B), exit 2, before anything reaches the server: every server table
    /// as it was, nothing recorded against A, whose next sync goes on.
    @Test func anInventoryGivenAnotherBenchsIdIsRefusedAtTheBenchAndNothingIsRecordedAgainstIt() async throws {
        try await withSyncScene("blame-impersonation") { scene in
            let a = try await LargeInventory(path: scene.directory + "/a.sqlite", devices: 5, outcomes: 40)
            let b = try await LargeInventory(path: scene.directory + "/b.sqlite", devices: 5, outcomes: 60)
            await #expect(try scene.sync(a).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let id = try await a.inventory.benchID()
            let edit = try await runTool(
                "/usr/bin/sqlite3",
                [b.path, "UPDATE meta SET value = '\(id)' WHERE key = 'bench_id'; SELECT changes();"])
            try #require(edit.stdout.hasPrefix("1"), "\(edit.stdout) \(edit.stderr)")
            let before = try await SyncLedgerTests.snapshot(scene.server)
            await #expect(try scene.sync(b).waitForExit().status >> 8 == 2, "\(scene.stderr)")
            #expect(
                scene.stderr.contains("this bench's own ledger does not verify: the bench id in meta")
                    && scene.stderr.contains("nothing was sent, nothing recorded on the server"), "\(scene.stderr)")
            #expect(try await SyncLedgerTests.snapshot(scene.server) == before, "the server changed")
            await #expect(try scene.server.count("SELECT count(*) FROM ledger_rewrites") == 0)
            try await a.inventory.recordReading(
                address: LargeInventory.address(1), at: Date(), battery: 77, rssi: -50, firmware: "1.0.8")
            await #expect(try scene.sync(a).waitForExit().status >> 8 == 0, "A syncs on: \(scene.stderr)")
        }
    }

    /// What an insider does to A's copy on the server as its owner (SQL as
    /// superuser) is found by the office's `ledger verify` (exit 2), named:
    /// two plausible edits of A's device row (battery 55, braking 420);
    /// seven of the ledger's triggers dropped; an entry inserted at the
    /// head of A's ledger. A checkpoint is checked against the allowed
    /// signers given. And A, whose own ledger and signed checkpoint hold,
    /// is not blamed for the entry it never had: its sync is refused
    /// naming the server, and nothing is recorded against it.
    @Test func theOfficesVerifyFindsEditsDroppedTriggersAndAnEntryAtTheHeadAndTheBenchIsNotBlamed() async throws {
        try await withSyncScene("blame-insider") { scene in
            let server = scene.server
            let a = try await LargeInventory(path: scene.directory + "/a.sqlite", devices: 8, outcomes: 80)
            let id = try await a.inventory.benchID()
            // A signs its ledger (a throwaway key), then syncs.
            let key = scene.directory + "/key"
            let made = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key])
            try #require(made.status == 0, "\(made.stderr)")
            let head = try await a.inventory.ledgerTreeHead()
            let checkpoint = try Checkpoint(origin: Checkpoint.origin(bench: id), size: head.size, root: head.root)
            let note = try SignedCheckpoint.sign(checkpoint, keyPath: key, signer: "tester@bench")
            try await a.inventory.recordCheckpoint(size: head.size, root: head.root, note: note)
            await #expect(try scene.sync(a).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let signers = scene.directory + "/allowed_signers"
            let publicKey = try String(contentsOfFile: key + ".pub", encoding: .utf8)
            try "tester@bench \(publicKey)".write(toFile: signers, atomically: true, encoding: .utf8)
            let otherKey = scene.directory + "/other"
            _ = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", otherKey])
            let otherSigners = scene.directory + "/other_signers"
            try "tester@bench \(try String(contentsOfFile: otherKey + ".pub", encoding: .utf8))".write(
                toFile: signers + "-other", atomically: true, encoding: .utf8)
            try FileManager.default.moveItem(atPath: signers + "-other", toPath: otherSigners)

            func office(_ arguments: [String]) async throws -> ToolOutput {
                try await runTool(builtProduct("beaconbench"), ["--inventory", server.url] + arguments)
            }
            let clean = try await office(["ledger", "verify", "--signers", signers])
            #expect(clean.status == 0, "\(clean.stdout) \(clean.stderr)")
            #expect(clean.stdout.contains("as beaconbench made them"), "\(clean.stdout)")
            let foreign = try await office(["ledger", "verify", "--signers", otherSigners])
            #expect(foreign.status == 2, "\(foreign.stdout)")
            #expect(foreign.stdout.contains("is not signed by a key of the allowed signers"), "\(foreign.stdout)")

            // Two plausible edits of A's rows.
            let device = LargeInventory.address(3)
            _ = try await server.psql(
                "UPDATE devices SET battery = 55, config_braking = 420 WHERE bench_id = '\(id)' AND address = '\(device)'"
            )
            let edited = try await office(["--json", "ledger", "verify"])
            #expect(edited.status == 2, "\(edited.stdout) \(edited.stderr)")
            #expect(try SyncLedgerTests.shapeProblems(edited.stdout).isEmpty, "\(edited.stdout)")
            let mine = ConsoleFixture.jsonLines(edited.stdout, kind: "ledger_bench").first {
                $0["bench"] as? String == id
            }
            let findings = (mine?["findings"] as? [String]) ?? []
            #expect(
                findings.contains {
                    $0.hasPrefix("devices \(device): battery is '55' on the server but the ledger says")
                }
                    && findings.contains { $0.hasPrefix("devices \(device): config_braking is '420' on the server") },
                "\(findings)")
            // A's own sync names them (exit 2) and leaves them; `--full`
            // puts A's back, saying so; then all holds.
            await #expect(try scene.sync(a).waitForExit().status >> 8 == 2, "\(scene.stderr)")
            let said = scene.stderr
            #expect(
                said.contains(
                    "sync: on the server: devices \(device): battery is '55' on the server, the bench's ledger says"
                )
                    && said.contains("config_braking is '420' on the server") && said.contains("left as they are"),
                "\(said)")
            await #expect(
                try server.count("SELECT battery FROM devices WHERE bench_id = '\(id)' AND address = '\(device)'") == 55
            )
            await #expect(try scene.sync(a, ["--full"]).waitForExit().status >> 8 == 2, "\(scene.stderr)")
            #expect(scene.stderr.contains("--full sent this bench's rows, which put them back"), "\(scene.stderr)")
            await #expect(
                try server.count("SELECT battery FROM devices WHERE bench_id = '\(id)' AND address = '\(device)'") != 55
            )
            await #expect(try scene.sync(a).waitForExit().status >> 8 == 0, "then clean: \(scene.stderr)")
            let restored = try await office(["ledger", "verify"])
            #expect(restored.status == 0, "the row put back: \(restored.stdout)")

            // Seven triggers dropped.
            let dropped = [
                ("leaf", "bench_ledgers"), ("append_only", "bench_ledgers"), ("no_change", "bench_ledgers"),
                ("kept_by_server", "bench_ledger_heads"), ("checked", "bench_checkpoints"),
                ("no_change", "bench_ledger_blocks"), ("no_truncate", "ledger_rewrites"),
            ]
            _ = try await server.psql(dropped.map { "DROP TRIGGER \($0.0) ON \($0.1);" }.joined(separator: " "))
            let opened = try await office(["--json", "ledger", "verify"])
            #expect(opened.status == 2, "\(opened.stdout)")
            let structure = ConsoleFixture.jsonLines(opened.stdout, kind: "ledger_server").first
            let gone = (structure?["findings"] as? [String]) ?? []
            for (trigger, table) in dropped {
                #expect(
                    gone.contains("trigger \(trigger) on \(table) is gone: the server's ledger was opened to changes"),
                    "\(gone)")
            }
            #expect(gone.count == dropped.count, "\(gone)")
            _ = try await server.psql("ALTER TABLE bench_ledger_blocks DISABLE TRIGGER no_truncate")
            let disabled = try await office(["--json", "ledger", "verify"])
            #expect(
                disabled.stdout.contains("trigger no_truncate on bench_ledger_blocks is disabled"), "\(disabled.stdout)"
            )
        }
    }

    /// One INSERT at the head of A's ledger on the server (a well-formed
    /// entry at the right place, the head folded by the server's own
    /// trigger): the office's verify names it; A's next sync is refused
    /// naming the server, nothing recorded against A, and the office's
    /// audit lists no rewrite of A.
    @Test func anEntryInsertedAtTheHeadOnTheServerIsFoundAndNotBlamedOnTheBench() async throws {
        try await withSyncScene("blame-head") { scene in
            let server = scene.server
            let a = try await LargeInventory(path: scene.directory + "/a.sqlite", devices: 4, outcomes: 30)
            let id = try await a.inventory.benchID()
            let key = scene.directory + "/key"
            let made = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key])
            try #require(made.status == 0, "\(made.stderr)")
            let head = try await a.inventory.ledgerTreeHead()
            let checkpoint = try Checkpoint(origin: Checkpoint.origin(bench: id), size: head.size, root: head.root)
            let note = try SignedCheckpoint.sign(checkpoint, keyPath: key, signer: "tester@bench")
            try await a.inventory.recordCheckpoint(size: head.size, root: head.root, note: note)
            await #expect(try scene.sync(a).waitForExit().status >> 8 == 0, "\(scene.stderr)")
            let m = try await server.count("SELECT size FROM bench_ledger_heads WHERE bench_id = '\(id)'")
            let entry =
                #"{"v":1,"seq":\#(m),"at":"2026-12-04T10:00:00.000Z","event":"reading","table":"readings","op":"insert","key":[9999],"row":{"id":9999,"device":"C2:00:00:00:01:00","at":"2026-12-04T10:00:00.000Z","battery":5,"rssi":-40,"firmware":"1.0.8"}}"#
            _ = try await server.psql(
                "INSERT INTO bench_ledger_blocks VALUES ('\(id)', \(m), 1, ARRAY[convert_to('\(entry)', 'UTF8')])")
            let found = try await runTool(builtProduct("beaconbench"), ["--inventory", server.url, "ledger", "verify"])
            #expect(found.status == 2, "\(found.stdout)")
            #expect(
                found.stdout.contains(
                    "the server holds entries \(m) to \(m) beyond what the bench's last complete sync sent"),
                "\(found.stdout)")
            for attempt in 1...2 {
                await #expect(try scene.sync(a).waitForExit().status >> 8 == 2, "attempt \(attempt): \(scene.stderr)")
                #expect(
                    scene.stderr.contains("the difference is the server's, not this bench's"), "\(scene.stderr)")
            }
            await #expect(try server.count("SELECT count(*) FROM ledger_rewrites") == 0)
            let audit = try await runTool(builtProduct("beaconbench"), ["--inventory", server.url, "audit"])
            #expect(!audit.stdout.contains("ledger-rewritten"), "\(audit.stdout)")
        }
    }
}
