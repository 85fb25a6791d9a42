import Foundation
import Testing

@testable import Ledger

/// A throwaway operator key (and a stranger's) in a private directory, an
/// allowed_signers file naming the operator's, and a ledger of synthetic
/// canonical entries about several devices (docs/ledger.md, "Entries").
final class LedgerFixture {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let devices = ["C0:1E:6D:EA:89:86", "C0:1E:6D:00:00:01", "C0:1E:6D:00:00:02"]
    static let signer = "operator@bench-7"
    static let origin = Checkpoint.origin(bench: "bench-7")

    let directory: TemporaryDirectory
    /// The operator's private key, and a stranger's (not in allowed_signers).
    let key: String
    let strangerKey: String
    let allowedSigners: String
    /// The public key (SSH wire encoding) of the operator's key, from its `.pub`.
    let publicKey: [UInt8]

    init() throws {
        directory = try TemporaryDirectory()
        key = directory.path + "/operator"
        strangerKey = directory.path + "/stranger"
        for (path, comment) in [(key, "operator"), (strangerKey, "stranger")] {
            let made = try ExternalProcess.run(
                "/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", path, "-C", comment], input: [],
                in: directory, timeout: .seconds(60))
            #expect(made.status == 0, "ssh-keygen -t ed25519: \(String(decoding: made.errors, as: UTF8.self))")
        }
        let pub = try String(contentsOfFile: key + ".pub", encoding: .utf8).split(separator: " ")
        publicKey = try #require(Base64.decode(pub[1]))
        allowedSigners = try directory.write(
            "allowed_signers",
            Array("\(Self.signer) namespaces=\"beaconbench-ledger\" \(pub[0]) \(pub[1])\n".utf8))
    }

    /// Runs a program (at most 60 s); fails the test unless it exits 0.
    @discardableResult
    func run(_ executable: String, _ arguments: [String], input: [UInt8] = []) throws -> ExternalProcess.Result {
        let result = try ExternalProcess.run(executable, arguments, input: input, in: directory, timeout: .seconds(60))
        guard result.status == 0 else {
            throw LedgerError(
                "\(executable) \(arguments) exited \(result.status): \(String(decoding: result.errors, as: UTF8.self))")
        }
        return result
    }

    /// Writes `bytes` to `name` in the fixture's directory; its path.
    func file(_ name: String, _ bytes: [UInt8]) throws -> String { try directory.write(name, bytes) }

    // MARK: Entries and trees

    static func time(_ second: Int) -> String {
        let text = String(format: "2026-12-03T11:%02d:%02d.%03dZ", second / 60 % 60, second % 60, second * 7 % 1000)
        return text
    }

    /// Entry `seq` of the synthetic ledger: a genesis note, then in turn a
    /// device's update, an outcome, an assignment and an identity, about
    /// the devices one after another.
    static func entry(_ seq: Int) -> CanonicalJSON.Value {
        func entry(
            _ event: String, _ table: String, _ op: String, _ key: [CanonicalJSON.Value],
            _ row: [(String, CanonicalJSON.Value)]
        ) -> CanonicalJSON.Value {
            .object([
                ("v", .integer(1)), ("seq", .integer(Int64(seq))), ("at", seq == 0 ? .null : .text(time(seq))),
                ("event", .text(event)), ("table", .text(table)), ("op", .text(op)), ("key", .array(key)),
                ("row", .object(row)),
            ])
        }
        if seq == 0 {
            return entry(
                "genesis", "", "note", [],
                [("bench", .text("bench-7")), ("text", .text("the ledger begins; history before it is unproven"))])
        }
        let device = devices[seq % devices.count]
        switch seq % 4 {
        case 0:
            return entry(
                "device", "devices", "update", [.text(device)],
                [("battery", .integer(Int64(90 - seq % 50))), ("battery_at", .text(time(seq)))])
        case 1:
            return entry(
                "step", "outcomes", "insert", [.integer(Int64(seq))],
                [
                    ("id", .integer(Int64(seq))), ("run_id", .integer(1)), ("device", .text(device)),
                    ("step", .text("sync-time")), ("status", .text("changed")),
                    (
                        "detail",
                        .text(
                            "time offset 0 → \(1_795_531_158_597 + seq)\n\"quoted\" \\ tab\t \u{1}\u{1f}\u{7f}\u{2028}\u{feff}/é😀"
                        )
                    ),
                    ("error", .null), ("duration_ms", .integer(-4)),
                ])
        case 2:
            return entry(
                "assignment", "assignments", "insert", [.text(device)],
                [
                    ("address", .text(device)), ("profile", .text("fleet-ä")), ("major", .integer(100)),
                    ("assigned_at", .text(time(seq))),
                ])
        default:
            return entry(
                "identity", "identities", "insert", [.integer(100), .integer(Int64(seq))],
                [
                    ("major", .integer(100)), ("minor", .integer(Int64(seq))), ("device", .text(device)),
                    ("source", .text("assigned")), ("run_id", .null),
                ])
        }
    }

    static func ledger(_ count: Int) -> [[UInt8]] { (0..<count).map { CanonicalJSON.encode(entry($0)) } }

    /// Whether an entry is about `device` (docs/ledger.md's definition, read
    /// again here from the synthetic values).
    static func isAbout(_ seq: Int, _ device: String) -> Bool {
        seq > 0 && devices[seq % devices.count] == device
    }

    /// A checkpoint of `leaves`, signed with `key`.
    func signed(_ leaves: [[UInt8]], key: String? = nil) throws -> (tree: MemoryTree, note: String) {
        let tree = try MemoryTree(leaves)
        let checkpoint = try Checkpoint(origin: Self.origin, size: leaves.count, root: tree.frontier.root())
        return (tree, try SignedCheckpoint.sign(checkpoint, keyPath: key ?? self.key, signer: Self.signer))
    }

    /// One item of a proof file: index, entry text, proof as hex.
    struct Item {
        var index: Int
        var entry: String
        var proof: [String]
    }

    /// The proof items of `device`'s entries in `leaves`.
    func items(_ leaves: [[UInt8]], tree: MemoryTree, device: String, size: Int? = nil) throws -> [Item] {
        try leaves.indices.filter { Self.isAbout($0, device) && $0 < (size ?? leaves.count) }.map { index in
            Item(
                index: index, entry: String(decoding: leaves[index], as: UTF8.self),
                proof: try MerkleTree.inclusionProof(index: index, size: size ?? leaves.count, in: tree).map(\.hex))
        }
    }

    /// A proof file written as docs/ledger.md lays it out, without any of
    /// ProofFile.make's checks (so tampered files can be written too).
    static func write(
        format: String = ProofFile.format, device: String, at: String?, note: String, items: [Item]
    )
        -> [UInt8]
    {
        func string(_ text: String) -> String {
            String(decoding: CanonicalJSON.encode(.text(text)), as: UTF8.self)
        }
        var text = "{\"format\":\(string(format)),\n\"device\":\(string(device)),\n"
        text += "\"at\":\(at.map(string) ?? "null"),\n\"checkpoint\":\(string(note)),\n\"entries\":[\n"
        text += items.map { item in
            "{\"index\":\(item.index),\"entry\":\(string(item.entry)),\"proof\":["
                + item.proof.map(string).joined(separator: ",") + "]}"
        }.joined(separator: ",\n")
        return Array((text + "\n]}\n").utf8)
    }

    // MARK: The Python verifier

    /// `/usr/bin/python3 Tests/Peers/ledger_check.py FILE --signers ALLOWED` (Debian's python3, as the other peers): its
    /// exit status and what it wrote (output and errors).
    func python(_ file: [UInt8], signers: String? = nil) throws -> (status: Int32, said: String) {
        let path = try directory.write("proof.json", file)
        let script = Self.root.appendingPathComponent("Tests/Peers/ledger_check.py").path
        let result = try ExternalProcess.run(
            "/usr/bin/python3", [script, path, "--signers", signers ?? allowedSigners], input: [],
            in: directory, timeout: .seconds(120))
        return (
            result.status,
            String(decoding: result.output, as: UTF8.self) + String(decoding: result.errors, as: UTF8.self)
        )
    }
}

/// Why `body` failed (a LedgerError's message), or nil when it did not.
func failure(_ body: () throws -> Any) -> String? {
    do {
        _ = try body()
        return nil
    } catch {
        return (error as? LedgerError)?.message ?? "\(error)"
    }
}
