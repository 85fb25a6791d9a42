import Foundation
import Inventory
import Ledger
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The ledger commands' exit statuses, one per kind of finding
/// (docs/ledger.md, "Exit statuses"), and checkpoints that cannot be
/// slipped in: each row of the table held by the built binary.
@Suite("ledger exit statuses and checkpoints kept as entries", .timeLimit(.minutes(5)))
struct LedgerStatusTests {
    typealias Bench = LedgerCommandTests.Bench

    /// A checkpoint of the inventory's first `size` entries (`root` given
    /// for sizes beyond it), signed with the bench's key, written to a file.
    static func checkpointFile(
        _ bench: Bench, size: Int, root: Digest? = nil, origin: String? = nil, key: String? = nil, name: String
    ) async throws -> String {
        let inventory = try Inventory(path: bench.inventory, readOnly: true)
        let bench0 = try await inventory.benchID()
        var treeRoot = root
        if treeRoot == nil { treeRoot = try await inventory.ledgerRoot(size: size) }
        let checkpoint = try Checkpoint(
            origin: origin ?? Checkpoint.origin(bench: bench0), size: size, root: try #require(treeRoot))
        let note = try SignedCheckpoint.sign(checkpoint, keyPath: key ?? bench.key, signer: "ana@depot")
        let file = bench.directory + "/" + name
        try note.write(toFile: file, atomically: true, encoding: .utf8)
        return file
    }

    /// A key of someone else's, and its public line.
    static func stranger(_ bench: Bench) async throws -> String {
        let key = bench.directory + "/stranger"
        let made = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key, "-C", "eve"])
        try #require(made.status == 0, "\(made.stderr)")
        return key
    }

    /// `verify --since` on checkpoints of size 0, 1, the current size and
    /// beyond it: no crash, each a clear result.
    @Test func verifySinceAnySizeEndsWithAClearResult() async throws {
        let bench = try await LedgerCommandTests.bench()
        let size = try await Inventory(path: bench.inventory, readOnly: true).ledgerTreeHead().size
        for (checked, status) in [(0, 0), (1, 0), (size, 0)] {
            let file = try await Self.checkpointFile(bench, size: checked, name: "at-\(checked).txt")
            let result = try await bench.tool([
                "--json", "ledger", "verify", "--since", file, "--signers", bench.signers,
            ])
            #expect(result.status == Int32(status), "size \(checked): \(result.stdout) \(result.stderr)")
            let line = try #require(LedgerCommandTests.lines(result, "ledger").first, "size \(checked)")
            #expect(line["since"] as? Int == checked, "size \(checked): \(line)")
        }
        // The empty tree's checkpoint must carry the empty tree's root.
        let wrongEmpty = try await Self.checkpointFile(
            bench, size: 0, root: try MerkleTree.leafHash([1]), name: "at-0-wrong.txt")
        let refusedEmpty = try await bench.tool(["ledger", "verify", "--since", wrongEmpty])
        #expect(refusedEmpty.status == 2, "\(refusedEmpty.stdout) \(refusedEmpty.stderr)")
        // Beyond the ledger: 2, the ledger is shorter than the checkpoint.
        let beyond = try await Self.checkpointFile(
            bench, size: size + 3, root: try MerkleTree.leafHash([7]), name: "beyond.txt")
        let shorter = try await bench.tool(["ledger", "verify", "--since", beyond, "--signers", bench.signers])
        #expect(shorter.status == 2, "\(shorter.stdout) \(shorter.stderr)")
        #expect(shorter.stdout.contains("the ledger is shorter than the checkpoint"), "\(shorter.stdout)")
    }

    /// Each row of the exit status table, for verify, verify --since and check.
    @Test func eachKindOfFindingHasOneStatus() async throws {
        let bench = try await LedgerCommandTests.bench()
        let size = try await Inventory(path: bench.inventory, readOnly: true).ledgerTreeHead().size
        let good = try await Self.checkpointFile(bench, size: size, name: "good.txt")
        let fifo = bench.directory + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        let missing = bench.directory + "/missing"

        // Could not check: a file of the checker's own missing or unreadable → 1 (a FIFO is never opened).
        for arguments in [
            ["ledger", "verify", "--since", missing],
            ["ledger", "verify", "--since", fifo],
            ["ledger", "verify", "--since", bench.directory],
            ["ledger", "verify", "--since", good, "--signers", missing],
            ["ledger", "verify", "--signers", fifo],
            ["ledger", "check", missing, "--signers", bench.signers],
            ["ledger", "check", fifo, "--signers", bench.signers],
        ] {
            let result = try await bench.tool(arguments)
            #expect(result.status == 1, "\(arguments): \(result.stdout) \(result.stderr)")
            #expect(result.stderr.contains(": could not read "), "\(arguments): \(result.stderr)")
        }
        // Bad usage → 1, as ever: no --signers for check.
        let usage = try await bench.tool(["ledger", "check", good])
        #expect(usage.status == 1 && usage.stderr.contains("needs --signers"), "\(usage.stderr)")
        // Does not hold → 2: another key's signature, another bench's, not a checkpoint at all.
        let strangerKey = try await Self.stranger(bench)
        let forged = try await Self.checkpointFile(bench, size: size, key: strangerKey, name: "forged.txt")
        let otherBench = try await Self.checkpointFile(
            bench, size: size, origin: Checkpoint.origin(bench: "0a6d1c3e-another"), name: "other.txt")
        let garbage = bench.directory + "/garbage.txt"
        try "not a checkpoint\n".write(toFile: garbage, atomically: true, encoding: .utf8)
        for (file, said) in [
            (forged, "does not hold"), (otherBench, "not of this inventory"), (garbage, "does not hold"),
        ] {
            let result = try await bench.tool(["ledger", "verify", "--since", file, "--signers", bench.signers])
            #expect(result.status == 2, "\(file): \(result.stdout) \(result.stderr)")
            #expect(result.stdout.contains(said), "\(file): \(result.stdout)")
        }
        // The same checkpoints in a proof file: `ledger check` says 2 too.
        let proof = bench.directory + "/device.proof"
        #expect(try await bench.tool(["ledger", "prove", "6dea8986", "--out", proof]).status == 0)
        let signersOfEve = bench.directory + "/eve.signers"
        try "ana@depot \(try String(contentsOfFile: strangerKey + ".pub", encoding: .utf8))".write(
            toFile: signersOfEve, atomically: true, encoding: .utf8)
        let unsigned = try await bench.tool(["ledger", "check", proof, "--signers", signersOfEve])
        #expect(unsigned.status == 2, "\(unsigned.stdout) \(unsigned.stderr)")
        // A covered column dropped: 2 naming it (not 3, not SQLite's words).
        let dropped = try await runTool(
            "/usr/bin/sqlite3", [bench.inventory, "ALTER TABLE devices DROP COLUMN hardware_revision"])
        #expect(dropped.status == 0, "\(dropped.stderr)")
        for arguments in [["ledger", "verify"], ["ledger", "verify", "--since", good, "--signers", bench.signers]] {
            let result = try await bench.tool(arguments)
            #expect(result.status == 2, "\(arguments): \(result.stdout) \(result.stderr)")
            #expect(
                result.stdout.contains("table devices has lost column hardware_revision"),
                "\(arguments): \(result.stdout)")
            #expect(!result.stderr.contains("no such column"), "\(result.stderr)")
        }
    }

    /// A checkpoint made under the operator's name with another key: kept
    /// as an entry (it went through beaconbench), but `verify --signers`
    /// names it, `ledger checkpoint` with the operator's key does not hand
    /// it back, and `ledger prove --signers` without a key does not use it.
    @Test func aCheckpointNoAllowedKeySignedIsNamedAndNeverReused() async throws {
        let bench = try await LedgerCommandTests.bench()
        let strangerKey = try await Self.stranger(bench)
        let first = try await bench.tool(["--json", "ledger", "checkpoint"])
        #expect(first.status == 0, "\(first.stderr)")
        let firstSize = try #require(LedgerCommandTests.lines(first, "checkpoint").first?["size"] as? Int)
        try await LedgerCommandTests.fill(bench.inventory, steps: 1)
        let eve = try await bench.tool([
            "--json", "ledger", "checkpoint", "--key", strangerKey, "--signer", "ana@depot",
        ])
        #expect(eve.status == 0, "\(eve.stderr)")
        let eveSize = try #require(LedgerCommandTests.lines(eve, "checkpoint").first?["size"] as? Int)
        // Without --signers the ledger holds (the entries are all there) …
        #expect(try await bench.tool(["ledger", "verify"]).status == 0)
        // … with them, Eve's checkpoint is named.
        let named = try await bench.tool(["ledger", "verify", "--signers", bench.signers])
        #expect(named.status == 2, "\(named.stdout) \(named.stderr)")
        #expect(
            named.stdout.contains(
                "the checkpoint kept at size \(eveSize) is not signed by a key of the allowed signers"),
            "\(named.stdout)")
        #expect(!named.stdout.contains("kept at size \(firstSize) is not"), "\(named.stdout)")

        // prove with no key at hand: the newest kept checkpoint an allowed key signed (Ana's), not Eve's.
        var environment = ProcessInfo.processInfo.environment
        environment["BEACONBENCH_LEDGER_KEY"] = bench.directory + "/no-such-key"
        let proof = bench.directory + "/device.proof"
        let unchecked = try await runTool(
            builtProduct("beaconbench"),
            ["--inventory", bench.inventory, "ledger", "prove", "6dea8986", "--out", proof],
            environment: environment)
        #expect(unchecked.status == 1 && unchecked.stderr.contains("--signers"), "\(unchecked.stderr)")
        let proved = try await runTool(
            builtProduct("beaconbench"),
            [
                "--inventory", bench.inventory, "--json", "ledger", "prove", "6dea8986", "--out", proof, "--signers",
                bench.signers,
            ], environment: environment)
        #expect(proved.status == 0, "\(proved.stderr)")
        #expect(LedgerCommandTests.lines(proved, "proof").first?["size"] as? Int == firstSize, "\(proved.stdout)")
        let check = try await bench.tool(["ledger", "check", proof, "--signers", bench.signers])
        #expect(check.status == 0, "\(check.stdout)")

        // Ana's key: Eve's checkpoint (the newest, nothing after it but
        // itself) is not handed back as Ana's: a new one is made and holds.
        let ana = try await bench.tool(["--json", "ledger", "checkpoint"])
        #expect(ana.status == 0, "\(ana.stderr)")
        let made = try #require(LedgerCommandTests.lines(ana, "checkpoint").first)
        #expect(made["new"] as? Bool == true && made["size"] as? Int == eveSize + 1, "\(made)")
        _ = try SignedCheckpoint.verify(note: made["note"] as? String ?? "", allowedSigners: bench.signers)
        // Asked again with nothing new: the same one is given back (it is Ana's).
        let again = try await bench.tool(["--json", "ledger", "checkpoint"])
        let given = try #require(LedgerCommandTests.lines(again, "checkpoint").first)
        #expect(given["new"] as? Bool == false && given["size"] as? Int == eveSize + 1, "\(given)")
    }
}
