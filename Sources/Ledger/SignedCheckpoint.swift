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

    /// `path` from this process's current directory: ssh-keygen runs in a
    /// temporary one.
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
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
            let result = try ExternalProcess.run(
                sshKeygen,
                [
                    "-Y", "verify", "-f", absolute(allowedSigners), "-I", signature.name, "-n", SSHSignature.namespace,
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
            "no signature of the checkpoint verifies with \(LedgerError.quoted(allowedSigners)): "
                + reasons.joined(separator: "; "))
    }
}
