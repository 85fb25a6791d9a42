import FoundationEssentials
import Inventory
import Ledger
import LocalBus
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

// The ledger (docs/ledger.md): verify it, sign a checkpoint of it, prove a
// device's entries, check a proof file.

/// `ledger verify [--since CHECKPOINT [--signers FILE]]`.
public struct LedgerVerifyCommand: ConsoleCommand {
    public var since: String?
    public var signers: String?
    public init(since: String? = nil, signers: String? = nil) {
        self.since = since
        self.signers = signers
    }
    public static let spec = CommandSpec(
        name: "ledger verify",
        summary: "recompute the ledger's tree and check the inventory's tables are exactly what its entries say",
        example: "ledger verify --since checkpoint.txt --signers allowed_signers",
        options: [
            .value(
                "--since", "CHECKPOINT", .text,
                "also prove the ledger only grew since this checkpoint file (a consistency proof)"),
            .value(
                "--signers", "FILE",
                .text,
                "an allowed_signers file: every kept checkpoint, and the --since one, must be signed by a key in it"),
        ], onlyReadsTheInventory: true, isFamilyDefault: true,
        detail:
            "Exit 0 when all holds; 2 naming the first entry, row or checkpoint that disagrees (an edit, deletion, reordering or insertion made outside beaconbench); 1 when the --since or --signers file cannot be read (docs/ledger.md, \"Exit statuses\").",
        emits: [.ledger, .ledgerServer, .ledgerBench]
    ).shapeChecked(by: "ledger verify").documented(in: "ledger.md")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        since = arguments.text("--since")
        signers = arguments.text("--signers")
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.verifyLedger(since: since, signers: signers)
    }
}

/// `ledger checkpoint [--key PATH] [--signer NAME] [--out FILE]`.
public struct LedgerCheckpointCommand: ConsoleCommand {
    public var key: String?
    public var signer: String?
    public var out: String?
    public init(key: String? = nil, signer: String? = nil, out: String? = nil) {
        self.key = key
        self.signer = signer
        self.out = out
    }
    public static let spec = CommandSpec(
        name: "ledger checkpoint",
        summary: "sign the ledger's size and root with your SSH key (a checkpoint), after verifying it",
        example: "ledger checkpoint --key ~/.ssh/id_ed25519 --signer ana@depot --out checkpoint.txt",
        options: [
            .value(
                "--key", "PATH", .text, "the SSH private key (default $BEACONBENCH_LEDGER_KEY, else ~/.ssh/id_ed25519)"),
            .value(
                "--signer", "NAME", .text,
                "your name in allowed_signers files (default $BEACONBENCH_LEDGER_SIGNER, else user@host)"),
            .value("--out", "FILE", .text, "also write the signed checkpoint to FILE"),
        ],
        detail:
            "The checkpoint (C2SP signed note, signed with ssh-keygen -Y sign, namespace beaconbench-ledger) is kept in the inventory; anyone checks it with stock OpenSSH (docs/ledger.md).",
        emits: [.checkpoint]
    ).shapeNotChecked(because: "needs an SSH key: LedgerCommandTests checks its `checkpoint` line").documented(
        in: "ledger.md")
    public init(_ arguments: inout ParsedArguments) {
        key = arguments.text("--key")
        signer = arguments.text("--signer")
        out = arguments.text("--out")
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.checkpointLedger(key: key, signer: signer, out: out)
    }
}

/// `ledger prove DEVICE [--at TIME] --out FILE`.
public struct LedgerProveCommand: ConsoleCommand {
    public var device: String
    public var at: Date?
    public var out: String
    public var key: String?
    public var signer: String?
    public var signers: String?
    public static let spec = CommandSpec(
        name: "ledger prove",
        summary: "write a self-contained proof of a device's ledger entries, checkable without the inventory",
        example: "ledger prove a3b5c7d9 --out a3b5c7d9.proof", operands: [.required("DEVICE", .device)],
        options: [
            .value("--out", "FILE", .text, "the proof file", required: true),
            .value("--at", "TIME", .time, "only the entries made at or before TIME"),
            .value("--key", "PATH", .text, "the SSH key to sign a new checkpoint with (as ledger checkpoint)"),
            .value("--signer", "NAME", .text, "your name in allowed_signers files (as ledger checkpoint)"),
            .value(
                "--signers", "FILE", .text,
                "with no key at hand: an allowed_signers file; the newest kept checkpoint one of its keys signed is used"
            ),
        ],
        detail:
            "The file holds the device's entries, each with its inclusion proof, and a signed checkpoint: a new one when a key is at hand (or the kept one of this size your key signed), else the newest kept one that a key in --signers signed. `ledger check FILE --signers allowed_signers` checks it anywhere.",
        emits: [.proof]
    ).shapeNotChecked(because: "needs an SSH key: LedgerCommandTests checks its `proof` line").documented(
        in: "ledger.md")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        device = arguments.operand(0) ?? ""
        at = arguments.time("--at")
        key = arguments.text("--key")
        signer = arguments.text("--signer")
        signers = arguments.text("--signers")
        guard let out = arguments.text("--out"), !out.isEmpty else {
            throw arguments.fail(at: 0, "ledger prove needs --out FILE (usage: \(Self.spec.synopsis))")
        }
        self.out = out
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.proveLedger(self)
    }
}

/// `ledger check FILE --signers FILE`: a proof file checked, no inventory needed.
public struct LedgerCheckCommand: ConsoleCommand {
    public var file: String
    public var signers: String
    public static let spec = CommandSpec(
        name: "ledger check",
        summary: "check a proof file (ledger prove) against an allowed_signers file, without any inventory",
        example: "ledger check a3b5c7d9.proof --signers allowed_signers", operands: [.required("FILE", .text)],
        options: [.value("--signers", "FILE", .text, "the allowed_signers file (ssh-keygen's format)", required: true)],
        detail:
            "Exit 0 when the file holds; 2 naming the first thing that fails (docs/ledger.md, \"Checking a proof file\"); 1 when the proof file or the allowed_signers file cannot be read.",
        emits: [.proofCheck]
    ).shapeNotChecked(because: "needs a proof file: LedgerCommandTests checks its `proof_check` line").documented(
        in: "ledger.md")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        file = arguments.operand(0) ?? ""
        guard let signers = arguments.text("--signers"), !signers.isEmpty else {
            throw arguments.fail(at: 0, "ledger check needs --signers FILE (usage: \(Self.spec.synopsis))")
        }
        self.signers = signers
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.checkProof(file: file, signers: signers)
    }
}

extension Session {
    /// The bench's own inventory, with a ledger (an older one's has none yet).
    private func ledgerInventory(_ command: String) async throws(ConsoleFailure) -> Inventory {
        if invocation.inventoryIsServer {
            throw ConsoleFailure(.badInput, "\(command) works on a bench's own inventory, not a server's")
        }
        let inventory = try inventory()
        do {
            guard try await inventory.hasLedger() else {
                throw ConsoleFailure(
                    .badInput,
                    "\(inventory.path) has no ledger yet (an older beaconbench's inventory): any command that writes to it starts one"
                )
            }
        } catch let failure as ConsoleFailure {
            throw failure
        } catch {
            throw ConsoleFailure(.infrastructure, "\(command): \(error)")
        }
        return inventory
    }

    /// Why the checker's own file at `path` (a checkpoint, an
    /// allowed_signers file, a public key) cannot be read, or nil when it
    /// is a regular file of at most `limit` bytes this process may read.
    /// Through `BoundedFile`, as every reader: never blocking on a FIFO,
    /// never reading a device. Such a file is the checker's, not what is
    /// checked: exit 1, not a finding (docs/ledger.md, "Exit statuses").
    static func unreadable(_ path: String, limit: Int) -> String? {
        do {
            _ = try BoundedFile.read(path, limit: limit)
            return nil
        } catch {
            return "could not read \(Visible.text(path, limit: 200)): \(error)"
        }
    }

    /// `unreadable`, as the failure it is (exit 1).
    static func checkReadable(_ path: String, limit: Int, _ command: String) throws(ConsoleFailure) {
        if let reason = unreadable(path, limit: limit) { throw ConsoleFailure(.badInput, "\(command): \(reason)") }
    }

    func verifyLedger(since: String?, signers: String?) async throws(ConsoleFailure) {
        if invocation.inventoryIsServer, let url = invocation.inventoryPath, since == nil {
            if let signers { try Self.checkReadable(signers, limit: AllowedSigners.maxFile, "ledger verify --signers") }
            return try await verifyServerLedgers(url: url, signers: signers)
        }
        // The checker's own files first: one that cannot be read is exit 1.
        if let since { try Self.checkReadable(since, limit: SignedNote.maxNote, "ledger verify --since") }
        if let signers { try Self.checkReadable(signers, limit: AllowedSigners.maxFile, "ledger verify --signers") }
        let inventory = try await ledgerInventory("ledger verify")
        var verification: LedgerVerification
        var grown: (size: Int, signer: String?)?
        do {
            verification = try await inventory.verifyLedger()
            if let signers {
                try await Self.checkSigners(inventory, verification: &verification, signers: signers)
            }
            if let since {
                grown = try await Self.extends(
                    inventory, verification: &verification, checkpointFile: since, signers: signers)
            }
        } catch let failure as ConsoleFailure {
            throw failure
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger verify: \(error)")
        }
        output.render(LedgerVerifyResult(verification: verification, since: grown))
        if !verification.ok { note(.devicesFailed) }
    }

    /// `--signers`: every kept checkpoint is signed by a key of `signers`
    /// (one that is not is a finding: a checkpoint slipped in under
    /// someone's name, or kept by an operator the checker does not trust).
    private static func checkSigners(
        _ inventory: Inventory, verification: inout LedgerVerification, signers: String
    ) async throws {
        let origin = Checkpoint.origin(bench: try await inventory.benchID())
        for kept in try await inventory.checkpoints() {
            let note = kept.note
            do {
                let verified = try await onThreadOfItsOwn {
                    try SignedCheckpoint.verify(note: note, allowedSigners: signers)
                }
                guard verified.checkpoint.origin == origin else {
                    throw LedgerError(
                        "it is of \(LedgerError.quoted(verified.checkpoint.origin, limit: 120)), not of this inventory (\(origin))"
                    )
                }
            } catch let error as LedgerError {
                verification.findings.insert(
                    LedgerFinding(
                        seq: kept.size,
                        message:
                            "the checkpoint kept at size \(kept.size) is not signed by a key of the allowed signers: \(error.message)"
                    ), at: 0)
            }
        }
    }

    /// `--since`: the checkpoint read (its signature checked when `signers`
    /// is given) and the ledger proved to extend it. Whatever does not
    /// hold — the file is no checkpoint, its signature does not verify, it
    /// is another bench's, the ledger is shorter or does not extend it —
    /// is a finding (exit 2); only a file that cannot be read is exit 1.
    private static func extends(
        _ inventory: Inventory, verification: inout LedgerVerification, checkpointFile: String, signers: String?
    ) async throws -> (size: Int, signer: String?)? {
        func finding(_ message: String) -> (size: Int, signer: String?)? {
            verification.findings.insert(LedgerFinding(seq: nil, message: message), at: 0)
            return nil
        }
        let note: String
        let allowed: AllowedSigners?
        do {
            note = String(decoding: try BoundedFile.read(checkpointFile, limit: SignedNote.maxNote), as: UTF8.self)
        } catch {
            throw ConsoleFailure(.badInput, "ledger verify --since: could not read \(checkpointFile): \(error)")
        }
        do {
            allowed = try signers.map { path throws(BoundedFile.Failure) in try AllowedSigners.read(path) }
        } catch {
            throw ConsoleFailure(.badInput, "ledger verify --signers: could not read \(signers ?? ""): \(error)")
        }
        let checkpoint: Checkpoint
        var signer: String?
        do {
            if let allowed {
                let verified = try await onThreadOfItsOwn {
                    try SignedCheckpoint.verify(note: note, allowedSigners: allowed)
                }
                (checkpoint, signer) = (verified.checkpoint, verified.signer)
            } else {
                checkpoint = try Checkpoint.parse(try SignedNote.parse(note).text)
            }
        } catch let error as LedgerError {
            return finding("the checkpoint \(Visible.text(checkpointFile, limit: 200)) does not hold: \(error.message)")
        }
        let origin = Checkpoint.origin(bench: try await inventory.benchID())
        guard checkpoint.origin.sameBytes(origin) else {
            return finding(
                "the checkpoint \(Visible.text(checkpointFile, limit: 200)) is of \(Visible.text(checkpoint.origin, limit: 120)), not of this inventory (\(origin))"
            )
        }
        guard let root = Digest(hex: verification.root) else { return nil }
        if checkpoint.size > verification.size {
            verification.findings.insert(
                LedgerFinding(
                    seq: verification.size,
                    message:
                        "the ledger is shorter than the checkpoint: the checkpoint holds \(checkpoint.size) entries, the ledger \(verification.size): entries were removed since it was signed"
                ), at: 0)
            return nil
        }
        // The proof from the stored tree: a tree too damaged to give one
        // is a finding (verify has said where), not a failure of the tool.
        let proof: [Digest]
        do {
            proof = try await inventory.ledgerConsistencyProof(from: checkpoint.size, to: verification.size)
        } catch let damage as LedgerDamage {
            return finding(
                "no consistency proof from the checkpoint of \(checkpoint.size) entries can be made: \(damage.description)"
            )
        } catch let error as LedgerError {
            return finding(
                "no consistency proof from the checkpoint of \(checkpoint.size) entries can be made: \(error.message)")
        }
        guard
            try MerkleTree.verifyConsistency(
                oldSize: checkpoint.size, newSize: verification.size, oldRoot: checkpoint.root, newRoot: root,
                proof: proof)
        else {
            return finding(
                "the ledger does not extend the checkpoint of \(checkpoint.size) entries: its first \(checkpoint.size) entries were rewritten since it was signed"
            )
        }
        return (checkpoint.size, signer)
    }

    /// Where the operator's key and name come from: the options, else
    /// `BEACONBENCH_LEDGER_KEY` / `BEACONBENCH_LEDGER_SIGNER`, else
    /// `~/.ssh/id_ed25519` and `user@host`.
    static func signingKey(_ key: String?, _ signer: String?) -> (key: String, signer: String) {
        let environment = ProcessInfo.processInfo.environment
        let home = environment["HOME"] ?? Paths.passwdHome()
        let key = key ?? environment["BEACONBENCH_LEDGER_KEY"] ?? home + "/.ssh/id_ed25519"
        let user = environment["USER"] ?? "operator"
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "bench"
        return (key, signer ?? environment["BEACONBENCH_LEDGER_SIGNER"] ?? "\(user)@\(host)")
    }

    /// Verifies the ledger, then signs a checkpoint of it and keeps it.
    /// - Returns: the checkpoint kept (nil when the ledger failed to verify: said, exit 2).
    @discardableResult
    func checkpointLedger(
        key: String?, signer: String?, out: String?, quietly: Bool = false
    ) async throws(ConsoleFailure)
        -> String?
    {
        let inventory = try await ledgerInventory("ledger checkpoint")
        if let out {
            do {
                _ = try OutputFile.check(out, protecting: protectedFiles())
            } catch {
                throw ConsoleFailure(.badInput, "ledger checkpoint: \(error)")
            }
        }
        let (keyPath, signerName) = Self.signingKey(key, signer)
        let made: (note: String, size: Int, root: Digest, origin: String, new: Bool)
        do {
            let verification = try await inventory.verifyLedger()
            guard verification.ok else {
                output.render(LedgerVerifyResult(verification: verification))
                terminal.error("ledger checkpoint: the ledger does not verify: no checkpoint signed")
                note(.devicesFailed)
                return nil
            }
            let head = try await inventory.ledgerTreeHead()
            let origin = Checkpoint.origin(bench: try await inventory.benchID())
            let kept = try await inventory.checkpoints()
            if let reused = try await Self.ownCheckpoint(
                kept.last, of: inventory, origin: origin, keyPath: keyPath, signer: signerName)
            {
                made = (reused.note, reused.size, reused.root, origin, false)
            } else if kept.contains(where: { $0.size == head.size }) {
                // Kept, of this very size, but not signed by this key: not
                // given again, and a second one of a size cannot be kept.
                throw ConsoleFailure(
                    .devicesFailed,
                    "ledger checkpoint: the checkpoint kept at size \(head.size) is not signed by \(signerName)'s key (\(keyPath).pub): it is not given again, and no other can be kept at that size until the ledger grows"
                )
            } else {
                let checkpoint = try Checkpoint(origin: origin, size: head.size, root: head.root)
                let note = try await onThreadOfItsOwn {
                    try SignedCheckpoint.sign(checkpoint, keyPath: keyPath, signer: signerName)
                }
                try await inventory.recordCheckpoint(size: head.size, root: head.root, note: note)
                made = (note, head.size, head.root, origin, true)
            }
        } catch let failure as ConsoleFailure {
            throw failure
        } catch let error as LedgerError {
            throw ConsoleFailure(.badInput, "ledger checkpoint: \(error.message)")
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger checkpoint: \(error)")
        }
        if let out {
            do {
                try OutputFile.write(Array(made.note.utf8), to: out, protecting: protectedFiles())
            } catch {
                throw ConsoleFailure(.badInput, "ledger checkpoint: \(error)")
            }
        }
        if quietly { return made.note }
        output.render(
            CheckpointResult(
                size: made.size, root: made.root.hex, origin: made.origin, signer: Self.signers(of: made.note),
                new: made.new, out: out, note: made.note))
        return made.note
    }

    /// `kept` (the newest kept checkpoint) when it may be given again for
    /// `signer`: nothing but checkpoints entered the ledger since it was
    /// made, it is this bench's, its root is the tree's at its size, and it
    /// verifies against the signer's own public key (`keyPath`.pub).
    /// Otherwise nil: a new one is signed. A checkpoint slipped into the
    /// file under the operator's name is never handed back as theirs.
    static func ownCheckpoint(
        _ kept: StoredCheckpoint?, of inventory: Inventory, origin: String, keyPath: String, signer: String
    ) async throws -> StoredCheckpoint? {
        guard let kept, try await inventory.ledgerHoldsOnlyCheckpoints(after: kept.size),
            try await inventory.ledgerRoot(size: kept.size) == kept.root
        else { return nil }
        let publicPath = keyPath.hasSuffix(".pub") ? keyPath : keyPath + ".pub"
        guard let publicKey = try? String(decoding: BoundedFile.read(publicPath, limit: 16 * 1024), as: UTF8.self)
        else { return nil }
        let note = kept.note
        guard
            let verified = try? await onThreadOfItsOwn({
                try SignedCheckpoint.verify(note: note, signer: signer, publicKey: publicKey)
            }), verified.checkpoint.origin == origin, verified.checkpoint.size == kept.size,
            verified.checkpoint.root == kept.root
        else { return nil }
        return kept
    }

    /// The newest kept checkpoint that a key of `signers` signed, that is
    /// this bench's and whose root is the tree's at its size; nil when
    /// none is.
    static func allowedCheckpoint(
        of inventory: Inventory, signers: String
    ) async throws -> (note: String, reasons: [String])? {
        let origin = Checkpoint.origin(bench: try await inventory.benchID())
        var reasons: [String] = []
        for kept in try await inventory.checkpoints().reversed() {
            let note = kept.note
            do {
                let verified = try await onThreadOfItsOwn {
                    try SignedCheckpoint.verify(note: note, allowedSigners: signers)
                }
                guard verified.checkpoint.origin == origin,
                    try await inventory.ledgerRoot(size: kept.size) == kept.root
                else {
                    reasons.append("the one at size \(kept.size) is not this ledger's")
                    continue
                }
                return (note, reasons)
            } catch let error as LedgerError {
                reasons.append("the one at size \(kept.size): \(error.message)")
            }
        }
        return (note: "", reasons: reasons.isEmpty ? ["none is kept"] : reasons)
    }

    /// The key names on a note's signature lines.
    static func signers(of note: String) -> [String] {
        ((try? SignedNote.parse(note))?.signatures ?? []).map(\.name)
    }

    func proveLedger(_ command: LedgerProveCommand) async throws(ConsoleFailure) {
        let inventory = try await ledgerInventory("ledger prove")
        do {
            _ = try OutputFile.check(command.out, protecting: protectedFiles())
        } catch {
            throw ConsoleFailure(.badInput, "ledger prove: \(error)")
        }
        let address: String
        do {
            guard let record = try await inventory.device(command.device) else {
                throw ConsoleFailure(.badInput, "the inventory has no device \(command.device)")
            }
            address = record.address
        } catch let failure as ConsoleFailure {
            throw failure
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger prove: \(error)")
        }
        // A new checkpoint when a key is at hand (or the kept one this key
        // signed); else the newest kept one a key of --signers signed.
        let (keyPath, _) = Self.signingKey(command.key, command.signer)
        var note: String?
        if command.key != nil || FileManager.default.isReadableFile(atPath: keyPath) {
            note = try await checkpointLedger(key: command.key, signer: command.signer, out: nil, quietly: true)
            if note == nil { return }
        } else if let signers = command.signers {
            try Self.checkReadable(signers, limit: AllowedSigners.maxFile, "ledger prove --signers")
        }
        let bytes: [UInt8]
        let count: Int
        let size: Int
        do {
            if note == nil, let signers = command.signers {
                let found = try await Self.allowedCheckpoint(of: inventory, signers: signers)
                guard let found, !found.note.isEmpty else {
                    throw ConsoleFailure(
                        .devicesFailed,
                        "ledger prove: no kept checkpoint is signed by a key of \(Visible.text(signers, limit: 200)) (\((found?.reasons ?? []).prefix(3).joined(separator: "; "))), and no SSH key at \(keyPath) to sign a new one: give --key"
                    )
                }
                note = found.note
            }
            guard let note else {
                throw ConsoleFailure(
                    .badInput,
                    "ledger prove: no SSH key at \(keyPath) to sign a new checkpoint, and no --signers to check a kept one against (a kept checkpoint is not used unchecked): give --key or --signers (docs/ledger.md)"
                )
            }
            let checkpoint = try Checkpoint.parse(try SignedNote.parse(note).text)
            size = checkpoint.size
            let at = command.at.map(Inventory.ledgerTime)
            let entries = try await inventory.ledgerEntries(about: address, size: size, at: at)
            guard !entries.isEmpty else {
                throw ConsoleFailure(
                    .badInput,
                    "ledger prove: the ledger holds no entry about \(address)\(at.map { " made by \($0)" } ?? "")")
            }
            count = entries.count
            bytes = try ProofFile.make(
                device: address, at: at, checkpointNote: note,
                entries: entries.map { (index: $0.index, bytes: $0.entry, proof: $0.proof) })
        } catch let failure as ConsoleFailure {
            throw failure
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger prove: \(error)")
        }
        do {
            try OutputFile.write(bytes, to: command.out, protecting: protectedFiles())
        } catch {
            throw ConsoleFailure(.badInput, "ledger prove: \(error)")
        }
        output.render(
            ProofWritten(
                device: address, entries: count, size: size, signers: Self.signers(of: note ?? ""), out: command.out,
                bytes: bytes.count))
    }

    func checkProof(file: String, signers: String) async throws(ConsoleFailure) {
        // The checker's own files: one that cannot be read is "could not
        // check" (exit 1), never a proof that does not hold.
        let bytes: [UInt8]
        let allowed: AllowedSigners
        do {
            bytes = try BoundedFile.read(file, limit: ProofFile.maxFile)
        } catch {
            throw ConsoleFailure(.badInput, "ledger check: could not read \(file): \(error)")
        }
        do {
            allowed = try AllowedSigners.read(signers)
        } catch {
            throw ConsoleFailure(.badInput, "ledger check: could not read \(signers): \(error)")
        }
        let result: ProofCheckResult
        do {
            let report = try await onThreadOfItsOwn { try ProofFile.check(bytes, allowedSigners: allowed) }
            result = ProofCheckResult(file: file, report: report, failure: nil)
        } catch let error as LedgerError {
            result = ProofCheckResult(file: file, report: nil, failure: error.message)
        } catch {
            result = ProofCheckResult(file: file, report: nil, failure: "\(error)")
        }
        output.render(result)
        if result.failure != nil { note(.devicesFailed) }
    }
}
