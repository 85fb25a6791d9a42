import Foundation
import Inventory
import Ledger
import SBeaconProtocol
import TestSupport
import Testing

/// The ledger's commands, run as the built binary (docs/ledger.md):
/// checkpoint, prove, check (by beaconbench and by the independent Python
/// verifier), verify and verify --since, and --checkpoint at a run's end.
@Suite("ledger commands: checkpoint, prove, check, verify", .timeLimit(.minutes(5)))
struct LedgerCommandTests {
    static let device = "C0:1E:6D:EA:89:86"

    struct Bench {
        let directory: String
        let inventory: String
        let key: String
        let signers: String

        func tool(_ arguments: [String]) async throws -> ToolOutput {
            var environment = ProcessInfo.processInfo.environment
            environment["BEACONBENCH_LEDGER_KEY"] = key
            environment["BEACONBENCH_LEDGER_SIGNER"] = "ana@depot"
            return try await runTool(
                builtProduct("beaconbench"), ["--inventory", inventory] + arguments, environment: environment,
                timeout: 120)
        }
    }

    /// An inventory with a run's worth of history, a throwaway SSH key and
    /// an allowed_signers file naming it.
    static func bench() async throws -> Bench {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let key = directory + "/key"
        let made = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key, "-C", "ana"])
        try #require(made.status == 0, "\(made.stderr)")
        let publicKey = try String(contentsOfFile: key + ".pub", encoding: .utf8).split(separator: " ").prefix(2)
            .joined(separator: " ")
        let signers = directory + "/allowed_signers"
        try "ana@depot namespaces=\"beaconbench-ledger\" \(publicKey)\n".write(
            toFile: signers, atomically: true, encoding: .utf8)
        let path = directory + "/inventory.sqlite"
        try await fill(path, steps: 3)
        return Bench(directory: directory, inventory: path, key: key, signers: signers)
    }

    static func fill(_ path: String, steps: Int) async throws {
        let inventory = try Inventory(path: path)
        let run = try await inventory.beginRun(.init(command: "run provision.batch", operatorName: "ana"))
        for address in [device, "C1:EC:D7:13:92:60"] {
            var record = DeviceRecord(address: address)
            record.battery = 80
            try await inventory.recordDevice(record)
            for index in 0..<steps {
                let step = try await inventory.beginStep(run: run, device: address, step: "apply car \(index)")
                try await inventory.finishStep(step, .changed, detail: "braking 250 → 300")
            }
        }
        try await inventory.endRun(run, .finished)
    }

    /// The lines of `kind`, each checked against docs/json.md (JSONShapeTests' rules).
    static func lines(_ output: ToolOutput, _ kind: String) -> [[String: Any]] {
        let documented = try? JSONShapeTests.documentedKinds()
        for line in output.stdout.split(separator: "\n") where line.hasPrefix("{") {
            for problem in JSONShapeTests.problems(String(line), documented ?? [:]) {
                Issue.record(Comment(rawValue: problem))
            }
        }
        return ConsoleFixture.jsonLines(output.stdout).filter { $0["kind"] as? String == kind }
    }

    @Test func aProofMadeHereIsCheckedHereAndByAnIndependentVerifier() async throws {
        let bench = try await Self.bench()
        let checkpointFile = bench.directory + "/checkpoint.txt"
        let checkpoint = try await bench.tool(["--json", "ledger", "checkpoint", "--out", checkpointFile])
        #expect(checkpoint.status == 0, "\(checkpoint.stderr)")
        let made = try #require(Self.lines(checkpoint, "checkpoint").first)
        #expect(made["new"] as? Bool == true && made["signers"] as? [String] == ["ana@depot"])
        // Stock OpenSSH checks the checkpoint (docs/ledger.md, "Signing and verifying by hand").
        let verified = try SignedCheckpoint.verify(
            note: try String(contentsOfFile: checkpointFile, encoding: .utf8), allowedSigners: bench.signers)
        #expect(verified.signer == "ana@depot" && verified.checkpoint.size == made["size"] as? Int)

        let proofFile = bench.directory + "/device.proof"
        let prove = try await bench.tool(["--json", "ledger", "prove", "6dea8986", "--out", proofFile])
        #expect(prove.status == 0, "\(prove.stderr)")
        let proof = try #require(Self.lines(prove, "proof").first)
        #expect(proof["device"] as? String == Self.device && (proof["entries"] as? Int ?? 0) >= 4)
        #expect(Self.lines(prove, "checkpoint").isEmpty, "prove says only what it wrote")

        let check = try await runTool(
            builtProduct("beaconbench"), ["--json", "ledger", "check", proofFile, "--signers", bench.signers])
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
        let checked = try #require(Self.lines(check, "proof_check").first)
        #expect(checked["ok"] as? Bool == true && checked["device"] as? String == Self.device)
        #expect((checked["entries"] as? [[String: Any]])?.count == proof["entries"] as? Int)
        let python = try await runTool(
            "/usr/bin/python3", [Self.peer("ledger_check.py"), proofFile, "--signers", bench.signers])
        #expect(python.status == 0, "\(python.stdout) \(python.stderr)")

        // One byte of an entry changed: both refuse it, exit 2.
        var bytes = try #require(FileManager.default.contents(atPath: proofFile))
        let at = try #require(bytes.firstRange(of: Data("braking 250".utf8)))
        bytes[at.lowerBound + 8] = UInt8(ascii: "9")
        let forged = bench.directory + "/forged.proof"
        try bytes.write(to: URL(fileURLWithPath: forged))
        let refused = try await runTool(
            builtProduct("beaconbench"), ["ledger", "check", forged, "--signers", bench.signers])
        #expect(refused.status == 2 && refused.stdout.contains("does not hold"), "\(refused.stdout)")
        let pythonRefused = try await runTool(
            "/usr/bin/python3", [Self.peer("ledger_check.py"), forged, "--signers", bench.signers])
        #expect(pythonRefused.status == 2, "\(pythonRefused.stdout)")
        // Another key's allowed_signers: refused.
        let stranger = bench.directory + "/stranger"
        _ = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", stranger])
        let strangerKey = try String(contentsOfFile: stranger + ".pub", encoding: .utf8).split(separator: " ")
            .prefix(2).joined(separator: " ")
        try "ana@depot \(strangerKey)\n".write(toFile: stranger + ".signers", atomically: true, encoding: .utf8)
        let unsigned = try await runTool(
            builtProduct("beaconbench"), ["ledger", "check", proofFile, "--signers", stranger + ".signers"])
        #expect(unsigned.status == 2, "\(unsigned.stdout)")
    }

    @Test func verifySinceAProvedCheckpointAndARewrittenOne() async throws {
        let bench = try await Self.bench()
        let checkpointFile = bench.directory + "/checkpoint.txt"
        #expect(try await bench.tool(["ledger", "checkpoint", "--out", checkpointFile]).status == 0)
        // The ledger grows (another run) and still extends the checkpoint.
        try await Self.fill(bench.inventory, steps: 2)
        let since = try await bench.tool(
            ["--json", "ledger", "verify", "--since", checkpointFile, "--signers", bench.signers])
        #expect(since.status == 0, "\(since.stdout) \(since.stderr)")
        let line = try #require(Self.lines(since, "ledger").first)
        #expect(line["ok"] as? Bool == true && line["since"] as? Int != nil)

        // A checkpoint of another history of this bench (same size, another root): the ledger does not extend it.
        let inventory = try Inventory(path: bench.inventory, readOnly: true)
        let head = try await inventory.ledgerTreeHead()
        let other = try Checkpoint(
            origin: Checkpoint.origin(bench: try await inventory.benchID()), size: head.size - 3,
            root: try MerkleTree.leafHash(Array("another history".utf8)))
        let note = try SignedCheckpoint.sign(other, keyPath: bench.key, signer: "ana@depot")
        let otherFile = bench.directory + "/other.txt"
        try note.write(toFile: otherFile, atomically: true, encoding: .utf8)
        let rewritten = try await bench.tool(["ledger", "verify", "--since", otherFile, "--signers", bench.signers])
        #expect(rewritten.status == 2, "\(rewritten.stdout)")
        #expect(
            rewritten.stdout.contains("does not extend the checkpoint of \(head.size - 3) entries"),
            "\(rewritten.stdout)")
    }

    @Test func aTamperedInventoryFailsVerifyAndIsNotSigned() async throws {
        let bench = try await Self.bench()
        let edit = try await runTool(
            "/usr/bin/sqlite3", [bench.inventory, "UPDATE devices SET battery = 99 WHERE address = '\(Self.device)'"])
        #expect(edit.status == 0, "\(edit.stderr)")
        let verify = try await bench.tool(["--json", "ledger", "verify"])
        #expect(verify.status == 2)
        let line = try #require(Self.lines(verify, "ledger").first)
        let findings = try #require(line["findings"] as? [[String: Any]])
        #expect(
            (findings.first?["message"] as? String ?? "").contains("battery is 99 but the ledger says 80"),
            "\(findings)")
        let checkpoint = try await bench.tool(["ledger", "checkpoint"])
        #expect(checkpoint.status == 2 && checkpoint.stderr.contains("does not verify"), "\(checkpoint.stderr)")
        let kept = try await Inventory(path: bench.inventory, readOnly: true).checkpoints()
        #expect(kept.isEmpty)
    }

    @Test func aRunCheckpointsAtItsEndWhenAsked() async throws {
        let bench = try await Self.bench()
        let run = try await bench.tool(["--checkpoint", "inventory", "forget", "C1:EC:D7:13:92:60", "--yes"])
        #expect(run.status == 0, "\(run.stderr)")
        let inventory = try Inventory(path: bench.inventory, readOnly: true)
        let kept = try await inventory.checkpoints()
        #expect(kept.count == 1)
        // It covers the forget: the whole ledger as the run left it, then
        // the checkpoint's own entry (docs/ledger.md, "Checkpoints are entries").
        #expect(kept.first.map { $0.size + 1 } == (try await inventory.ledgerTreeHead().size))
        #expect(try await inventory.verifyLedger().checkpoints == 1)
    }

    static func peer(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Peers/\(name)").path
    }
}
