import Foundation
import Testing

@testable import Ledger

@Suite("Checkpoints: C2SP tlog-checkpoint in a signed note, signed by ssh-keygen", .timeLimit(.minutes(3)))
struct CheckpointTests {
    static let root = Digest(hex: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4")!

    @Test func theBodyIsTheC2SPFormatAndReadsBack() throws {
        let checkpoint = try Checkpoint(origin: Checkpoint.origin(bench: "b-1"), size: 5, root: Self.root)
        #expect(checkpoint.body == "beaconbench.local/bench/b-1\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n")
        #expect(try Checkpoint.parse(checkpoint.body) == checkpoint)
        let extended = try Checkpoint(origin: "o", size: 0, root: Self.root, extensions: ["x y", "z"])
        #expect(extended.body.hasSuffix("=\nx y\nz\n"))
        #expect(try Checkpoint.parse(extended.body) == extended)
        #expect(throws: LedgerError.self) { try Checkpoint(origin: "has space", size: 1, root: Self.root) }
        #expect(throws: LedgerError.self) { try Checkpoint(origin: "o", size: -1, root: Self.root) }
        #expect(throws: LedgerError.self) { try Checkpoint(origin: "o", size: 1, root: Self.root, extensions: [""]) }
    }

    /// Every malformed body is refused, naming what is wrong.
    @Test(arguments: [
        ("", "newline"),
        ("o\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=", "newline"),
        ("o\n5\n", "lines"),
        ("\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "line 1"),
        ("o p\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "origin"),
        ("o+p\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "origin"),
        ("o\n05\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "tree size"),
        ("o\n 5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "tree size"),
        ("o\n+5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "tree size"),
        ("o\n-5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "tree size"),
        ("o\n9223372036854775808\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "tree size"),
        ("o\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ\n", "root hash"),
        ("o\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNR=\n", "root hash"),
        ("o\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZA==\n", "root hash"),
        ("o\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ= \n", "root hash"),
        ("o\n5\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n\n", "line 4"),
        ("o\n5\r\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n", "control"),
    ])
    func aMalformedBodyIsRefused(body: String, named: String) throws {
        let said = failure { try Checkpoint.parse(body) }
        #expect(said?.contains(named) == true, "\(said ?? "accepted")")
        #expect(
            try Checkpoint.parse("o\n9223372036854775807\nTju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=\n").size == .max)
    }

    @Test func aSignedNoteIsReadStrictly() throws {
        let sig = SignedNote.Signature(name: "a@b", keyID: [1, 2, 3, 4], signature: [5, 6])
        let note = SignedNote(text: "o\n5\nroot\n", signatures: [sig, sig])
        #expect(note.serialized == "o\n5\nroot\n\n— a@b AQIDBAUG\n— a@b AQIDBAUG\n")
        #expect(try SignedNote.parse(note.serialized) == note)
        for (text, named) in [
            ("o\n5\nroot\n", "no signature"),
            ("o\n5\nroot\n\n", "no signature"),
            ("o\n5\nroot\n\n-- a@b AQIDBAUG\n", "em dash"),
            ("o\n5\nroot\n\n—  a@b AQIDBAUG\n", "key name"),
            ("o\n5\nroot\n\n— a@b AQIDBAUG \n", "key name"),
            ("o\n5\nroot\n\n— a+b AQIDBAUG\n", "key name"),
            ("o\n5\nroot\n\n— a@b AQIDBA==\n", "base64"),
            ("o\n5\nroot\n\n— a@b AQIDBAU\n", "base64"),
            ("o\n5\nroot\n\n— a@b AQIDBAUG", "newline"),
            ("o\n5\u{1b}[2J\nroot\n\n— a@b AQIDBAUG\n", "control character"),
        ] {
            let said = failure { try SignedNote.parse(text) }
            #expect(said?.contains(named) == true, "\(LedgerError.quoted(text)): \(said ?? "accepted")")
        }
        let many = "o\n5\nroot\n\n" + String(repeating: sig.line, count: 17)
        #expect(failure { try SignedNote.parse(many) }?.contains("17 signature lines") == true)
    }

    /// Signed with a real key by ssh-keygen; the line is the name and the
    /// base64 of the key ID (computed here from the key's .pub, as the docs
    /// say) and the blob inside ssh-keygen's armor.
    @Test func aCheckpointSignsAndVerifies() throws {
        let fixture = try LedgerFixture()
        let checkpoint = try Checkpoint(origin: LedgerFixture.origin, size: 5, root: Self.root)
        let text = try SignedCheckpoint.sign(checkpoint, keyPath: fixture.key, signer: LedgerFixture.signer)
        #expect(text.hasPrefix(checkpoint.body + "\n— " + LedgerFixture.signer + " "))
        let note = try SignedNote.parse(text)
        #expect(note.signatures.count == 1)
        let expectedID = Array(
            try Digest.sha256(
                Array((LedgerFixture.signer + "\n").utf8) + [0xff] + Array("beaconbench-sshsig".utf8)
                    + fixture.publicKey
            ).bytes.prefix(4))
        #expect(note.signatures[0].keyID == expectedID)
        let blob = try #require(SSHSignature.parse(blob: note.signatures[0].signature))
        #expect(blob.publicKey == fixture.publicKey)
        #expect(blob.namespace == "beaconbench-ledger")
        let verified = try SignedCheckpoint.verify(note: text, allowedSigners: fixture.allowedSigners)
        #expect(verified.checkpoint == checkpoint)
        #expect(verified.signer == LedgerFixture.signer)

        // A stranger's signature in front of the operator's is ignored; the
        // operator's verifies.
        let stranger = try SignedCheckpoint.sign(checkpoint, keyPath: fixture.strangerKey, signer: "stranger@x")
        let both = SignedNote(text: note.text, signatures: try SignedNote.parse(stranger).signatures + note.signatures)
        #expect(
            try SignedCheckpoint.verify(note: both.serialized, allowedSigners: fixture.allowedSigners).signer
                == LedgerFixture.signer)
        // So are a witness's Ed25519 cosignature (not an SSHSIG blob) and the
        // operator's own signature with its last byte changed (it fails)
        // when another of the operator's verifies; and the note is refused
        // when only those are left.
        let witness = SignedNote.Signature(
            name: "witness.example/w1", keyID: [1, 2, 3, 4], signature: Array(repeating: 7, count: 64))
        var broken = note.signatures[0].signature
        broken[broken.count - 1] ^= 0x01
        let failing = SignedNote.Signature(
            name: LedgerFixture.signer, keyID: note.signatures[0].keyID, signature: broken)
        let mixed = SignedNote(text: note.text, signatures: [witness, failing] + note.signatures)
        #expect(
            try SignedCheckpoint.verify(note: mixed.serialized, allowedSigners: fixture.allowedSigners).signer
                == LedgerFixture.signer)
        let without = SignedNote(text: note.text, signatures: [witness, failing]).serialized
        let said = failure { try SignedCheckpoint.verify(note: without, allowedSigners: fixture.allowedSigners) }
        #expect(said?.contains("signature 1 (\"witness.example/w1\") is not an SSH signature") == true, "\(said ?? "")")
        #expect(said?.contains("signature 2 (\"\(LedgerFixture.signer)\") does not verify") == true, "\(said ?? "")")
        let python = try fixture.python(
            LedgerFixture.write(
                device: "d", at: nil, note: mixed.serialized, items: [.init(index: 0, entry: "{\"v\": 1}", proof: [])]))
        #expect(
            python.said.contains("entry 0 is not canonical"), "the Python verifier got past the note: \(python.said)")
    }

    @Test func aCheckpointChangedAfterSigningOrSignedByAStrangerIsRefused() throws {
        let fixture = try LedgerFixture()
        let checkpoint = try Checkpoint(origin: LedgerFixture.origin, size: 5, root: Self.root)
        let text = try SignedCheckpoint.sign(checkpoint, keyPath: fixture.key, signer: LedgerFixture.signer)
        let note = try SignedNote.parse(text)
        let otherRoot = try Digest.sha256([1])
        let cases: [(String, String, String)] = [
            (
                "size changed", text.replacingOccurrences(of: "\n5\n", with: "\n6\n"),
                "no signature of the checkpoint verifies"
            ),
            (
                "root changed",
                SignedNote(
                    text: try Checkpoint(origin: LedgerFixture.origin, size: 5, root: otherRoot).body,
                    signatures: note.signatures
                ).serialized, "does not verify with ssh-keygen"
            ),
            (
                "signed by a stranger under the operator's name",
                try SignedCheckpoint.sign(checkpoint, keyPath: fixture.strangerKey, signer: LedgerFixture.signer),
                "Could not verify signature"
            ),
            (
                "the key name changed (its key ID no longer matches)",
                SignedNote(
                    text: note.text,
                    signatures: [
                        .init(
                            name: "someone@else", keyID: note.signatures[0].keyID,
                            signature: note.signatures[0].signature)
                    ]
                ).serialized, "key ID"
            ),
            ("no signature", checkpoint.body, "no signature"),
            ("a blank line and nothing after it", checkpoint.body + "\n", "no signature"),
        ]
        for (what, tampered, named) in cases {
            let said = failure { try SignedCheckpoint.verify(note: tampered, allowedSigners: fixture.allowedSigners) }
            #expect(said?.contains(named) == true, "\(what): \(said ?? "accepted")")
        }
    }

    /// The "Signing and verifying by hand" script of docs/ledger.md, run as
    /// it stands with /bin/sh: a checkpoint beaconbench signed verifies with
    /// plain ssh-keygen, and the same checkpoint with its size changed does
    /// not.
    @Test func theCheckpointVerifiesByHandAsTheDocsSay() throws {
        let fixture = try LedgerFixture()
        let docs = try String(
            contentsOf: LedgerFixture.root.appendingPathComponent("docs/ledger.md"), encoding: .utf8)
        let block = try #require(docs.components(separatedBy: "<!-- by-hand: begin -->\n```sh\n").dropFirst().first)
        let script = try #require(block.components(separatedBy: "```\n<!-- by-hand: end -->").first)
        #expect(script.contains("ssh-keygen -Y verify"))
        _ = try fixture.file(
            "allowed_signers", Array(try String(contentsOfFile: fixture.allowedSigners, encoding: .utf8).utf8))
        let checkpoint = try Checkpoint(origin: LedgerFixture.origin, size: 5, root: Self.root)
        let note = try SignedCheckpoint.sign(checkpoint, keyPath: fixture.key, signer: LedgerFixture.signer)

        _ = try fixture.file("checkpoint", Array(note.utf8))
        let good = try ExternalProcess.run(
            "/bin/sh", ["-eu"], input: Array(script.utf8), in: fixture.directory, timeout: .seconds(60))
        let said = String(decoding: good.output + good.errors, as: UTF8.self)
        #expect(good.status == 0, "\(said)")
        #expect(said.contains("Good \"beaconbench-ledger\" signature for \(LedgerFixture.signer)"), "\(said)")

        _ = try fixture.file("checkpoint", Array(note.replacingOccurrences(of: "\n5\n", with: "\n6\n").utf8))
        let bad = try ExternalProcess.run(
            "/bin/sh", ["-eu"], input: Array(script.utf8), in: fixture.directory, timeout: .seconds(60))
        #expect(bad.status != 0)
    }

    @Test func signingFailsNamingWhy() throws {
        let fixture = try LedgerFixture()
        let checkpoint = try Checkpoint(origin: LedgerFixture.origin, size: 5, root: Self.root)
        let missing = failure {
            try SignedCheckpoint.sign(checkpoint, keyPath: fixture.directory.path + "/missing", signer: "a@b")
        }
        // Checked before ssh-keygen is given it (BoundedFile).
        #expect(missing?.contains("could not read the key") == true, "\(missing ?? "signed")")
        #expect(missing?.hasSuffix("/missing\": does not exist") == true, "\(missing ?? "signed")")
        let spaced = failure { try SignedCheckpoint.sign(checkpoint, keyPath: fixture.key, signer: "two words") }
        #expect(spaced?.contains("not a key name") == true, "\(spaced ?? "signed")")
        let absent = failure {
            try SignedCheckpoint.sign(
                checkpoint, keyPath: fixture.key, signer: "a@b", sshKeygen: "/nonexistent/ssh-keygen")
        }
        #expect(absent?.contains("cannot run") == true, "\(absent ?? "signed")")
    }

    /// ssh-keygen runs in a temporary directory: a relative key or
    /// allowed_signers path is taken from this process's directory first.
    @Test func relativePathsAreThisProcesssDirectorys() throws {
        let here = FileManager.default.currentDirectoryPath
        #expect(SignedCheckpoint.absolute("keys/operator") == here + "/keys/operator")
        #expect(SignedCheckpoint.absolute("/etc/allowed_signers") == "/etc/allowed_signers")
        // The fixture's files by relative paths that resolve from here
        // only: through this directory's own name, up to / and down again.
        let fixture = try LedgerFixture()
        let components = here.split(separator: "/")
        let up = "../\(components.last ?? "")/" + String(repeating: "../", count: components.count)
        let checkpoint = try Checkpoint(origin: LedgerFixture.origin, size: 5, root: Self.root)
        let note = try SignedCheckpoint.sign(
            checkpoint, keyPath: up + fixture.key.dropFirst(), signer: LedgerFixture.signer)
        let verified = try SignedCheckpoint.verify(note: note, allowedSigners: up + fixture.allowedSigners.dropFirst())
        #expect(verified.checkpoint == checkpoint)
    }

    @Test func anSSHKeygenThatHangsIsKilledAtTheTimeout() throws {
        let fixture = try LedgerFixture()
        let hang = try fixture.file("hang", Array("#!/bin/sh\nexec sleep 600\n".utf8))
        chmod(hang, 0o700)
        let checkpoint = try Checkpoint(origin: LedgerFixture.origin, size: 5, root: Self.root)
        let started = ContinuousClock.now
        let said = failure {
            try SignedCheckpoint.sign(
                checkpoint, keyPath: fixture.key, signer: "a@b", sshKeygen: hang, timeout: .seconds(1))
        }
        #expect(said?.contains("did not end within") == true, "\(said ?? "signed")")
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func hostileTextIsQuotedBoundedAndEscaped() {
        #expect(LedgerError.quoted("a\u{1b}[2J\u{202e}b\"\\") == "\"a\\u001b[2J\\u202eb\\\"\\\\\"")
        #expect(LedgerError.quoted(String(repeating: "x", count: 500), limit: 10) == "\"xxxxxxxxxx…\"")
    }
}
