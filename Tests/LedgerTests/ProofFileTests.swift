import Foundation
import Testing

@testable import Ledger

/// Proof files checked twice: by `ProofFile.check` and by the independent
/// Python verifier (`Tests/Peers/ledger_check.py`, written from
/// docs/ledger.md alone), which must agree on every file.
@Suite("Per-device proof files, checked in Swift and by the Python verifier", .timeLimit(.minutes(5)))
struct ProofFileTests {
    static let count = 43
    static let device = LedgerFixture.devices[0]
    static let other = LedgerFixture.devices[1]

    @Test func aProofFileIsLaidOutAsDocumentedAndChecksInBoth() throws {
        let fixture = try LedgerFixture()
        let leaves = LedgerFixture.ledger(Self.count)
        let (tree, note) = try fixture.signed(leaves)
        for device in LedgerFixture.devices {
            let items = try fixture.items(leaves, tree: tree, device: device)
            let at = LedgerFixture.time(Self.count)
            let file = try ProofFile.make(
                device: device, at: at, checkpointNote: note,
                entries: items.map { item in
                    (item.index, Array(item.entry.utf8), item.proof.map { Digest(hex: $0)! })
                })
            // Byte for byte what docs/ledger.md, "Proof files", lays out.
            #expect(file == LedgerFixture.write(device: device, at: at, note: note, items: items))
            let text = String(decoding: file, as: UTF8.self)
            #expect(
                text.hasPrefix(
                    "{\"format\":\"beaconbench-ledger-proof/1\",\n\"device\":\"\(device)\",\n\"at\":\"\(at)\",\n"))
            #expect(text.hasSuffix("]}\n"))

            let report = try ProofFile.check(file, allowedSigners: fixture.allowedSigners)
            #expect(report.device == device)
            #expect(report.signer == LedgerFixture.signer)
            #expect(report.checkpoint.size == Self.count)
            #expect(report.checkpoint.origin == "beaconbench.local/bench/bench-7")
            #expect(report.entries.map(\.index) == (0..<Self.count).filter { LedgerFixture.isAbout($0, device) })
            #expect(Set(report.entries.map(\.table)) == ["devices", "outcomes", "assignments", "identities"])
            #expect(report.entries.allSatisfy { $0.at != nil && $0.event != "" && $0.op != "" })

            let python = try fixture.python(file)
            #expect(python.status == 0, "\(python.said)")
            #expect(python.said.hasPrefix("ok: \(items.count) entries about '\(device)'"), "\(python.said)")
        }
        // Without a time, too.
        let items = try fixture.items(leaves, tree: tree, device: Self.device)
        let file = LedgerFixture.write(device: Self.device, at: nil, note: note, items: items)
        #expect(try ProofFile.check(file, allowedSigners: fixture.allowedSigners).at == nil)
        #expect(try fixture.python(file).status == 0)
    }

    /// What a forger with write access to the inventory, the file or both
    /// might do, and the word each checker's reason must hold.
    enum Tampering: String, CaseIterable, Sendable {
        case entryEditedByOneByte, entryRemovedFromTheLedger, twoEntriesSwapped, entriesTextsSwapped
        case anotherDevicesEntryInserted, proofHashChanged, checkpointSizeChanged, checkpointRootChanged
        case signedByAKeyNotInAllowedSigners, noteWithoutSignature, nonCanonicalEntry, wrongFormatID
        case entryEditedWithAProofFromTheForgedLedger, indexBeyondTheTreeSize, entryLaterThanTheFilesTime

        /// (Swift's word, Python's word).
        var named: (swift: String, python: String) {
            switch self {
            case .entryEditedByOneByte, .proofHashChanged, .entryRemovedFromTheLedger,
                .entryEditedWithAProofFromTheForgedLedger:
                ("inclusion proof does not verify", "inclusion proof does not verify")
            case .twoEntriesSwapped: ("not greater than the one before it", "is not after")
            case .entriesTextsSwapped: ("seq that is not its index", "seq is not its index")
            case .anotherDevicesEntryInserted: ("is not about the device", "is not about the device")
            case .checkpointSizeChanged, .checkpointRootChanged, .signedByAKeyNotInAllowedSigners:
                ("no signature of the checkpoint verifies", "no signature of the checkpoint verifies")
            case .noteWithoutSignature: ("no signature", "no signature")
            case .nonCanonicalEntry: ("not canonical", "not canonical")
            case .wrongFormatID: ("format", "format")
            case .entryLaterThanTheFilesTime: ("after the file's time", "after the file's time")
            case .indexBeyondTheTreeSize: ("not below the checkpoint's tree size", "below the tree size")
            }
        }
    }

    @Test(arguments: Tampering.allCases)
    func everyTamperingIsRefusedByBoth(_ tampering: Tampering) throws {
        let fixture = try LedgerFixture()
        let leaves = LedgerFixture.ledger(Self.count)
        let (tree, note) = try fixture.signed(leaves)
        var items = try fixture.items(leaves, tree: tree, device: Self.device)
        var format = ProofFile.format
        var checkpointNote = note
        var at: String? = nil
        let edited = 2  // an outcome: its detail has text to edit
        #expect(items[edited].entry.contains("\"table\":\"outcomes\""))

        switch tampering {
        case .entryEditedByOneByte:
            items[edited].entry = items[edited].entry.replacingOccurrences(of: "\"changed\"", with: "\"chanted\"")
        case .entryRemovedFromTheLedger:
            // The ledger without entry 1 (renumbered), proofs made against
            // it, and the checkpoint signed before.
            let removed =
                Array(leaves[0..<1])
                + (2..<Self.count).map { seq in
                    var value = LedgerFixture.entry(seq)
                    if case .object(var members) = value {
                        members[1].1 = .integer(Int64(seq - 1))
                        value = .object(members)
                    }
                    return CanonicalJSON.encode(value)
                }
            let shorter = try MemoryTree(removed)
            items = try removed.indices.filter { index in
                String(decoding: removed[index], as: UTF8.self).contains(Self.device)
            }.map { index in
                LedgerFixture.Item(
                    index: index, entry: String(decoding: removed[index], as: UTF8.self),
                    proof: try MerkleTree.inclusionProof(index: index, size: removed.count, in: shorter).map(\.hex))
            }
        case .twoEntriesSwapped:
            items.swapAt(1, 2)
        case .entriesTextsSwapped:
            (items[1].entry, items[2].entry) = (items[2].entry, items[1].entry)
            (items[1].proof, items[2].proof) = (items[2].proof, items[1].proof)
        case .anotherDevicesEntryInserted:
            let theirs = try fixture.items(leaves, tree: tree, device: Self.other)
            let intruder = try #require(theirs.first { $0.index > items[0].index && $0.index < items[1].index })
            items.insert(intruder, at: 1)
        case .proofHashChanged:
            var hash = Array(items[edited].proof[0].utf8)
            hash[5] = hash[5] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
            items[edited].proof[0] = String(decoding: hash, as: UTF8.self)
        case .checkpointSizeChanged:
            checkpointNote = note.replacingOccurrences(of: "\n\(Self.count)\n", with: "\n\(Self.count + 1)\n")
            #expect(checkpointNote != note)
        case .checkpointRootChanged:
            let parsed = try SignedNote.parse(note)
            let checkpoint = try Checkpoint.parse(parsed.text)
            let other = try Checkpoint(origin: checkpoint.origin, size: checkpoint.size, root: Digest.sha256([7]))
            checkpointNote = SignedNote(text: other.body, signatures: parsed.signatures).serialized
        case .signedByAKeyNotInAllowedSigners:
            checkpointNote = try fixture.signed(leaves, key: fixture.strangerKey).note
        case .noteWithoutSignature:
            checkpointNote = try SignedNote.parse(note).text
        case .nonCanonicalEntry:
            // The forger's ledger holds an entry with a space after a comma,
            // signed and proved like any other.
            var spaced = leaves
            spaced[items[edited].index] = Array(
                String(decoding: leaves[items[edited].index], as: UTF8.self)
                    .replacingOccurrences(of: ",\"step\":", with: ", \"step\":").utf8)
            let (spacedTree, spacedNote) = try fixture.signed(spaced)
            items = try fixture.items(spaced, tree: spacedTree, device: Self.device)
            #expect(items[edited].entry.contains(", \"step\""))
            checkpointNote = spacedNote
        case .wrongFormatID:
            format = "beaconbench-ledger-proof/2"
        case .entryEditedWithAProofFromTheForgedLedger:
            // The forger edits the entry in the ledger and makes its proof
            // in the edited tree; the checkpoint is the one signed before.
            var forged = leaves
            let index = items[edited].index
            forged[index] = Array(
                String(decoding: leaves[index], as: UTF8.self)
                    .replacingOccurrences(of: "\"changed\"", with: "\"failed\"").utf8)
            items = try fixture.items(forged, tree: MemoryTree(forged), device: Self.device)
            #expect(items[edited].entry.contains("\"failed\""))
        case .indexBeyondTheTreeSize:
            // An entry from a longer ledger, proved in it, shown with this
            // ledger's (shorter) checkpoint.
            let longer = LedgerFixture.ledger(Self.count + 8)
            let late = try #require(
                try fixture.items(longer, tree: MemoryTree(longer), device: Self.device).first {
                    $0.index >= Self.count
                })
            items.append(late)
        case .entryLaterThanTheFilesTime:
            at = LedgerFixture.time(items[edited].index - 1)
        }
        let file = LedgerFixture.write(format: format, device: Self.device, at: at, note: checkpointNote, items: items)

        let swiftSaid = failure { try ProofFile.check(file, allowedSigners: fixture.allowedSigners) }
        #expect(swiftSaid?.contains(tampering.named.swift) == true, "Swift said: \(swiftSaid ?? "accepted")")
        let python = try fixture.python(file)
        #expect(python.status == 2, "\(python.said)")
        #expect(python.said.contains(tampering.named.python), "Python said: \(python.said)")
    }

    /// The limit docs/ledger.md states: a proof file cannot show that it
    /// holds every entry about the device. An entry left out of the file
    /// leaves the rest valid for both checkers; only `ledger verify` on the
    /// inventory, or another proof of the same ledger, shows it.
    @Test func anEntryLeftOutOfTheFileIsNotSomethingAProofCanShow() throws {
        let fixture = try LedgerFixture()
        let leaves = LedgerFixture.ledger(Self.count)
        let (tree, note) = try fixture.signed(leaves)
        var items = try fixture.items(leaves, tree: tree, device: Self.device)
        let full = items.count
        items.remove(at: 1)
        let file = LedgerFixture.write(device: Self.device, at: nil, note: note, items: items)
        #expect(try ProofFile.check(file, allowedSigners: fixture.allowedSigners).entries.count == full - 1)
        #expect(try fixture.python(file).status == 0)
    }

    /// Files that are not proof files at all: refused by both, never a crash
    /// or a hang, and no raw control character in the reason.
    @Test func malformedFilesAreRefusedByBoth() throws {
        let fixture = try LedgerFixture()
        let leaves = LedgerFixture.ledger(12)
        let (tree, note) = try fixture.signed(leaves)
        let items = try fixture.items(leaves, tree: tree, device: Self.device)
        let good = String(
            decoding: LedgerFixture.write(device: Self.device, at: nil, note: note, items: items), as: UTF8.self)
        let cases: [(String, [UInt8])] = [
            ("empty", []),
            ("not UTF-8", [0xff, 0xfe] + Array(good.utf8)),
            ("not JSON", Array("{\"format\":".utf8)),
            ("an array", Array("[1,2]".utf8)),
            (
                "a member twice",
                Array(good.replacingOccurrences(of: "\"at\":null", with: "\"at\":null,\"at\":null").utf8)
            ),
            (
                "an unknown member",
                Array(good.replacingOccurrences(of: "\"at\":null", with: "\"at\":null,\"x\":1").utf8)
            ),
            ("at is a boolean", Array(good.replacingOccurrences(of: "\"at\":null", with: "\"at\":true").utf8)),
            (
                "at is not a time",
                Array(good.replacingOccurrences(of: "\"at\":null", with: "\"at\":\"yesterday\"").utf8)
            ),
            (
                "index is a fraction",
                Array(good.replacingOccurrences(of: "{\"index\":", with: "{\"index\":1.5,\"i\":").utf8)
            ),
            ("no entries", LedgerFixture.write(device: Self.device, at: nil, note: note, items: [])),
            (
                "17 signature lines",
                LedgerFixture.write(
                    device: Self.device, at: nil,
                    note: try {
                        let parsed = try SignedNote.parse(note)
                        return SignedNote(
                            text: parsed.text, signatures: Array(repeating: parsed.signatures[0], count: 17)
                        ).serialized
                    }(), items: items)
            ),
            (
                "a device with an escape sequence",
                Array(
                    good.replacingOccurrences(
                        of: "\"device\":\"\(Self.device)\",\n", with: "\"device\":\"\\u001b[2J\",\n"
                    ).utf8)
            ),
            (
                "uppercase hex",
                Array(good.replacingOccurrences(of: items[0].proof[0], with: items[0].proof[0].uppercased()).utf8)
            ),
            ("a lone surrogate", Array(good.replacingOccurrences(of: "\"at\":null", with: "\"at\":\"\\ud800\"").utf8)),
            (
                "a lone surrogate escaped in an entry",
                Array(good.replacingOccurrences(of: "sync-time", with: "\\\\ud800").utf8)
            ),
        ]
        for (what, file) in cases {
            let said = failure { try ProofFile.check(file, allowedSigners: fixture.allowedSigners) }
            #expect(said != nil, "\(what): accepted")
            #expect(!(said ?? "").unicodeScalars.contains { $0.value < 0x20 }, "\(what): \(said ?? "")")
            let python = try fixture.python(file)
            #expect(python.status == 2, "\(what): \(python.said)")
            #expect(!python.said.dropLast().unicodeScalars.contains { $0.value < 0x20 }, "\(what): \(python.said)")
        }
    }
}

/// A proof file with random one-byte changes: Swift's checker and the
/// Python verifier, written from docs/ledger.md alone, must reach the same
/// verdict on every one (so the docs say enough), and neither may crash.
@Suite("Swift's checker and the Python verifier agree on mutated files", .timeLimit(.minutes(5)))
struct ProofFileAgreementTests {
    static let rounds = 60

    /// SplitMix64: the same mutations on every run.
    struct Random {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(bound))
        }
    }

    @Test func everyMutationGetsTheSameVerdictFromBoth() throws {
        let fixture = try LedgerFixture()
        let leaves = LedgerFixture.ledger(7)
        let (tree, note) = try fixture.signed(leaves)
        let items = try fixture.items(leaves, tree: tree, device: LedgerFixture.devices[0])
        let good = LedgerFixture.write(
            device: LedgerFixture.devices[0], at: LedgerFixture.time(30), note: note, items: items)
        var random = Random(state: 29)
        let text = String(decoding: good, as: UTF8.self)
        var outside = Array(good.indices)
        for proof in text.ranges(of: #/"proof":\[[^\]]*\]/#) {
            let range =
                text.utf8.distance(
                    from: text.startIndex, to: proof.lowerBound)..<text.utf8.distance(
                    from: text.startIndex, to: proof.upperBound)
            outside.removeAll { range.contains($0) }
        }
        let alphabet = Array(" \t\n\"\\,:{}[]0123456789-aefnlrtuxAF/+=.—é".utf8)
        var accepted = 0
        for round in 0..<Self.rounds {
            var file = good
            // Mostly outside the proofs' hex, where a change is surely caught.
            let position = random.next(5) == 0 ? random.next(file.count) : outside[random.next(outside.count)]
            switch random.next(3) {
            case 0: file[position] = alphabet[random.next(alphabet.count)]
            case 1: file.remove(at: position)
            default: file.insert(file[position], at: position)
            }
            let swift = failure { try ProofFile.check(file, allowedSigners: fixture.allowedSigners) }
            let python = try fixture.python(file)
            #expect(
                (swift == nil) == (python.status == 0),
                "round \(round), byte \(position): Swift: \(swift ?? "accepted"); Python: \(python.said)")
            #expect(python.status == 0 || python.status == 2, "round \(round): \(python.said)")
            if swift == nil { accepted += 1 }
        }
        // Some changes are harmless: white space between members is JSON's
        // own business. Both accept such a file.
        let respaced = Array(
            text.replacingOccurrences(of: ",\n\"device\":", with: " ,\t\"device\" : ").utf8)
        #expect(respaced != good)
        #expect(failure { try ProofFile.check(respaced, allowedSigners: fixture.allowedSigners) } == nil)
        #expect(try fixture.python(respaced).status == 0)
        print("ProofFileAgreementTests: \(accepted) of \(Self.rounds) mutated files accepted by both")
    }
}
