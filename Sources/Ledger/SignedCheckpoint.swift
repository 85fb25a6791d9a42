import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// Checkpoints signed with the operator's SSH key by stock OpenSSH
/// (`ssh-keygen -Y sign`, namespace `beaconbench-ledger`), as signed notes
/// (docs/ledger.md, "Checkpoints").
public enum SignedCheckpoint {
    public static let defaultSSHKeygen = "/usr/bin/ssh-keygen"

    /// The signed note of `checkpoint`: its body, a blank line and one
    /// signature line `— <signer> <base64(key ID ‖ SSHSIG blob)>`.
    ///
    /// - Parameters:
    ///   - keyPath: the private key ssh-keygen signs with (`-f`), or its
    ///     public key when the private one is in ssh-agent.
    ///   - signer: the key name: the principal allowed_signers names the
    ///     key with.
    ///   - timeout: how long ssh-keygen may take (it may ask for a
    ///     passphrase on the terminal).
    public static func sign(
        _ checkpoint: Checkpoint, keyPath: String, signer: String, sshKeygen: String = defaultSSHKeygen,
        timeout: Duration = .seconds(60)
    ) throws -> String {
        guard SignedNote.isKeyName(signer) else {
            throw LedgerError(
                "the signer \(LedgerError.quoted(signer)) is not a key name: it must be non-empty, at most \(SignedNote.maxKeyName) bytes, without spaces, control characters, \"+\", \",\" or quotes"
            )
        }
        try checkKey(keyPath)
        let body = checkpoint.body
        let directory = try TemporaryDirectory()
        let result = try ExternalProcess.run(
            sshKeygen, ["-Y", "sign", "-f", absolute(keyPath), "-n", SSHSignature.namespace], input: Array(body.utf8),
            in: directory, timeout: timeout)
        guard result.status == 0 else {
            throw LedgerError(
                "ssh-keygen -Y sign -f \(LedgerError.quoted(keyPath)) failed (exit \(result.status)): \(LedgerError.quoted(bytes: result.errors))"
            )
        }
        guard let armor = String(validating: result.output, as: UTF8.self),
            let blob = SSHSignature.unarmor(armor), let parsed = SSHSignature.parse(blob: blob),
            parsed.namespace.sameBytes(SSHSignature.namespace)
        else {
            throw LedgerError(
                "ssh-keygen -Y sign wrote no SSH signature in namespace \(SSHSignature.namespace): \(LedgerError.quoted(bytes: result.output))"
            )
        }
        let keyID = try SSHSignature.keyID(name: signer, publicKey: parsed.publicKey)
        return SignedNote(text: body, signatures: [.init(name: signer, keyID: keyID, signature: blob)]).serialized
    }

    /// The largest key file handed to ssh-keygen (OpenSSH's own bound on a
    /// key file).
    public static let maxKeyFile = 1024 * 1024

    /// Checks the key file at `path`, and its `.pub` beside it when there
    /// is one (ssh-keygen reads it for a key whose public half the private
    /// file does not hold), as every file the tool reads is
    /// (`BoundedFile`: a regular file of at most `maxKeyFile` bytes, opened
    /// without blocking), before ssh-keygen is given its name. The key
    /// itself is not copied: a secret key is not written anywhere else.
    static func checkKey(_ path: String) throws(LedgerError) {
        for file in [path, path + ".pub"] {
            do {
                try BoundedFile.check(file, limit: maxKeyFile)
            } catch .missing where file != path {
                continue
            } catch {
                throw LedgerError("could not read the key \(LedgerError.quoted(file)): \(error)")
            }
        }
    }

    /// `path` from this process's current directory: ssh-keygen runs in a
    /// temporary one.
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Whether `note` verifies as signed by `signer` with the public key
    /// `publicKey` (an OpenSSH public key line, `ssh-ed25519 AAAA…`, its
    /// comment ignored): `verify` against an allowed_signers file of that
    /// one line, written in a private temporary directory. How `ledger
    /// checkpoint` decides whether a kept checkpoint is the operator's own
    /// before giving it again.
    public static func verify(
        note: String, signer: String, publicKey: String, sshKeygen: String = defaultSSHKeygen,
        timeout: Duration = .seconds(30)
    ) throws -> (checkpoint: Checkpoint, signer: String) {
        let fields = publicKey.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).prefix(2)
        guard SignedNote.isKeyName(signer), fields.count == 2,
            fields.allSatisfy({ $0.unicodeScalars.allSatisfy { $0.isASCII && $0.value > 0x20 && $0 != "\"" } })
        else {
            throw LedgerError(
                "\(LedgerError.quoted(publicKey)) is not an SSH public key of \(LedgerError.quoted(signer))")
        }
        let directory = try TemporaryDirectory()
        let allowed = try directory.write(
            "allowed_signers",
            Array("\(signer) namespaces=\"\(SSHSignature.namespace)\" \(fields.joined(separator: " "))\n".utf8))
        let verified = try verify(note: note, allowedSigners: allowed, sshKeygen: sshKeygen, timeout: timeout)
        guard verified.signer == signer else {
            throw LedgerError(
                "the checkpoint is signed by \(LedgerError.quoted(verified.signer)), not \(LedgerError.quoted(signer))")
        }
        return verified
    }

    /// The checkpoint of a signed note and the signer whose signature
    /// verified, when at least one signature line is by a principal of
    /// `allowedSigners` (a path) and verifies with
    /// `ssh-keygen -Y verify`; otherwise an error naming why each one did
    /// not. Lines that are not SSH signatures in the ledger's namespace, or
    /// whose key ID is not their key's, are ignored (unknown keys, as
    /// signed-note says). The body must be a checkpoint.
    public static func verify(
        note: String, allowedSigners: String, sshKeygen: String = defaultSSHKeygen,
        timeout: Duration = .seconds(30)
    ) throws -> (checkpoint: Checkpoint, signer: String) {
        try verify(
            note: note, allowedSigners: try AllowedSigners.load(allowedSigners), sshKeygen: sshKeygen,
            timeout: timeout)
    }

    /// `verify` with the allowed_signers file already read: ssh-keygen
    /// reads a private copy of its bytes (`AllowedSigners`).
    public static func verify(
        note: String, allowedSigners: AllowedSigners, sshKeygen: String = defaultSSHKeygen,
        timeout: Duration = .seconds(30)
    ) throws -> (checkpoint: Checkpoint, signer: String) {
        let parsed = try SignedNote.parse(note)
        let checkpoint = try Checkpoint.parse(parsed.text)
        var reasons: [String] = []
        for (number, signature) in parsed.signatures.enumerated() {
            let who = "signature \(number + 1) (\(LedgerError.quoted(signature.name)))"
            guard let blob = SSHSignature.parse(blob: signature.signature) else {
                reasons.append("\(who) is not an SSH signature")
                continue
            }
            guard blob.namespace.sameBytes(SSHSignature.namespace) else {
                reasons.append(
                    "\(who) is in namespace \(LedgerError.quoted(blob.namespace)), not \(SSHSignature.namespace)")
                continue
            }
            guard try SSHSignature.keyID(name: signature.name, publicKey: blob.publicKey) == signature.keyID else {
                reasons.append("\(who) has a key ID that is not its key's")
                continue
            }
            let directory = try TemporaryDirectory()
            let signatureFile = try directory.write(
                "checkpoint.sig", Array(SSHSignature.armor(signature.signature).utf8))
            let signersFile = try directory.write("allowed_signers", allowedSigners.bytes)
            let result = try ExternalProcess.run(
                sshKeygen,
                [
                    "-Y", "verify", "-f", signersFile, "-I", signature.name, "-n", SSHSignature.namespace,
                    "-s",
                    signatureFile,
                ], input: Array(parsed.text.utf8), in: directory, timeout: timeout)
            if result.status == 0 { return (checkpoint, signature.name) }
            // What ssh-keygen said: its last error line, else its last line
            // of output ("Could not verify signature." when the principal
            // has no such key in allowed_signers).
            let lastLine = { (bytes: [UInt8]) in
                String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline).last.map(String.init)
            }
            let said = lastLine(result.errors) ?? lastLine(result.output) ?? ""
            reasons.append(
                "\(who) does not verify with ssh-keygen -Y verify (exit \(result.status)): \(LedgerError.quoted(said))")
        }
        throw LedgerError(
            "no signature of the checkpoint verifies with \(LedgerError.quoted(allowedSigners.path)): "
                + reasons.joined(separator: "; "))
    }
}
