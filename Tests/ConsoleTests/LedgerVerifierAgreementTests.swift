import Foundation
import TestSupport
import Testing

/// A second verifier, written from docs/ledger.md alone
/// (`Tests/Peers/ledger_verify.py`, standard library only), and `beaconbench
/// ledger verify` agree on inventories the built binary made on the
/// simulator: both exit 0 on the untouched file (with the same size and
/// root) and both exit 2 on every tamper case of `LedgerTamperCases`.
@Suite("ledger verify and a verifier from the docs agree", .timeLimit(.minutes(10)))
struct LedgerVerifierAgreementTests {
    struct Verdicts {
        let swift: ToolOutput
        let python: ToolOutput
    }

    static func verify(_ path: String, _ environment: [String: String]) async throws -> Verdicts {
        let swift = try await runTool(
            builtProduct("beaconbench"), ["--inventory", path, "--json", "ledger", "verify"], environment: environment,
            timeout: 120)
        let python = try await runTool(
            "/usr/bin/python3", [LedgerCommandTests.peer("ledger_verify.py"), path], timeout: 120)
        return Verdicts(swift: swift, python: python)
    }

    static func sqlite(_ path: String, _ sql: String) async throws -> ToolOutput {
        try await runTool("/usr/bin/sqlite3", [path, sql], timeout: 60)
    }

    /// A copy of the inventory file (and its write-ahead log, if one is left).
    static func copy(_ path: String, to target: String) throws {
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.copyItem(atPath: path + suffix, toPath: target + suffix)
        }
    }

    /// An inventory made by the built binary: a provisioning run (its batch in
    /// a directory named with an `é` and an `Å`, so a kept row holds both), a
    /// pull of the beacons' records, and a signed checkpoint.
    static func withInventory(_ body: (String, ConsoleFixture) async throws -> Void) async throws {
        try await withNewFleet(count: 4) { bench in
            let lot = bench.directory + "/" + LedgerTamperCases.accentedDirectory
            try FileManager.default.createDirectory(atPath: lot, withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                atPath: bench.batch("provision-new.batch"), toPath: lot + "/provision-new.batch")
            let scan = ["--set", "scan=120s", "--set", "expect=\(bench.beacons)"]
            let run = try await bench.beaconbench(["run", lot + "/provision-new.batch"] + scan, timeout: 300)
            #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
            let pull = try await bench.beaconbench(["run", bench.batch("pull-records.batch")] + scan, timeout: 300)
            #expect(pull.status == 0, "\(pull.stdout) \(pull.stderr)")
            let key = bench.directory + "/key"
            let made = try await runTool("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", key])
            try #require(made.status == 0, "\(made.stderr)")
            let checkpoint = try await bench.beaconbench(
                ["ledger", "checkpoint", "--key", key, "--signer", "ana@depot"])
            #expect(checkpoint.status == 0, "\(checkpoint.stdout) \(checkpoint.stderr)")
            try await body(bench.inventoryPath, bench)
        }
    }

    @Test func bothVerifiersAgreeOnEveryTamperCase() async throws {
        try await Self.withInventory { path, bench in
            let untouched = try await Self.verify(path, bench.environment)
            #expect(untouched.swift.status == 0, "\(untouched.swift.stdout) \(untouched.swift.stderr)")
            #expect(untouched.python.status == 0, "\(untouched.python.stdout) \(untouched.python.stderr)")
            let line = try #require(ConsoleFixture.jsonLines(untouched.swift.stdout, kind: "ledger").first)
            let size = try #require(line["size"] as? Int)
            let root = try #require(line["root"] as? String)
            #expect(line["checkpoints"] as? Int == 1)
            // The same tree, computed apart: the Python verifier's size and root are beaconbench's.
            #expect(
                untouched.python.stdout.contains("ok: \(size) entries, root \(root); 1 checkpoints hold"),
                "\(untouched.python.stdout) (beaconbench: \(size), \(root))")

            for (number, tamper) in LedgerTamperCases.all.enumerated() {
                let copy = bench.directory + "/tampered-\(number).sqlite"
                try Self.copy(path, to: copy)
                if let needs = tamper.needs {
                    let count = try await Self.sqlite(copy, needs)
                    #expect(
                        Int(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 > 0,
                        "\(tamper): the inventory has nothing for it (\(needs): \(count.stdout) \(count.stderr))")
                }
                let applied = try await Self.sqlite(copy, tamper.sql)
                #expect(applied.status == 0 && applied.stderr.isEmpty, "\(tamper): sqlite3: \(applied.stderr)")
                let verdicts = try await Self.verify(copy, bench.environment)
                #expect(
                    verdicts.python.status == 2 && verdicts.python.stdout.hasPrefix("finding: "),
                    "\(tamper): ledger_verify.py exit \(verdicts.python.status): \(verdicts.python.stdout) \(verdicts.python.stderr)"
                )
                #expect(!verdicts.python.stderr.contains("Traceback"), "\(tamper): \(verdicts.python.stderr)")
                #expect(
                    verdicts.swift.status == 2,
                    "\(tamper): ledger verify exit \(verdicts.swift.status): \(verdicts.swift.stdout) \(verdicts.swift.stderr)"
                )
            }
        }
    }

    /// Hostile stored entries: each is a finding (exit 2) for both, never a
    /// crash; and the verifier's own input unreadable is exit 1.
    @Test func malformedEntriesAreFindingsAndAnUnreadableFileIsExit1() async throws {
        try await Self.withInventory { path, bench in
            let entries = [
                "",  // nothing
                "02",  // another version
                "01",  // ends after the version
                "010a000000",  // table 10: none
                "0101060000",  // operation 6: none
                "0101000b00",  // event 11: none
                "0100040000",  // a whole row of no table
                "0100030006",  // tag 6 before `at` is known
                "010003000000",  // ends before the row's count
                "01000300008080808080808080808001",  // a varint of 11 bytes
                "0100030000ff7f",  // a count beyond the entry
                "010100010000010c00",  // a column number out of range (runs has 12)
                "0101040100020100000100",  // a whole row's columns out of order
                "01000300000001010200",  // a note's member name that is not a text
                "01000300090001",  // a value of no known kind
                "0100030003ffffffffffffffffff010000",  // a time no gmtime gives
                "010003000000000000",  // bytes after its end
                "0100030002ffffffff0f",  // a text whose length runs past the end
            ]
            for (number, hex) in entries.enumerated() {
                let copy = bench.directory + "/malformed-\(number).sqlite"
                try Self.copy(path, to: copy)
                let applied = try await Self.sqlite(
                    copy,
                    "DROP TRIGGER ledger_no_update; UPDATE ledger SET entry = x'\(hex)' WHERE seq = (SELECT max(seq) FROM ledger)"
                )
                #expect(applied.status == 0, "\(hex): \(applied.stderr)")
                let verdicts = try await Self.verify(copy, bench.environment)
                #expect(
                    verdicts.python.status == 2 && !verdicts.python.stderr.contains("Traceback"),
                    "x'\(hex)': ledger_verify.py exit \(verdicts.python.status): \(verdicts.python.stdout) \(verdicts.python.stderr)"
                )
                #expect(verdicts.swift.status == 2, "x'\(hex)': ledger verify exit \(verdicts.swift.status)")
            }
            // Every kept entry random bytes: many findings, listed at most 50, no crash.
            let copy = bench.directory + "/random.sqlite"
            try Self.copy(path, to: copy)
            let applied = try await Self.sqlite(
                copy, "DROP TRIGGER ledger_no_update; UPDATE ledger SET entry = randomblob(abs(random() % 64))")
            #expect(applied.status == 0, "\(applied.stderr)")
            let verdicts = try await Self.verify(copy, bench.environment)
            #expect(verdicts.python.status == 2 && !verdicts.python.stderr.contains("Traceback"))
            #expect(verdicts.python.stdout.split(separator: "\n").filter { $0.hasPrefix("finding: ") }.count <= 50)
            #expect(verdicts.swift.status == 2)

            // The verifier's own input it cannot read: exit 1, naming the file.
            let fifo = bench.directory + "/fifo"
            #expect(mkfifo(fifo, 0o600) == 0)
            let text = bench.directory + "/not-an-inventory"
            try "hello\n".write(toFile: text, atomically: true, encoding: .utf8)
            for unreadable in [bench.directory + "/missing.sqlite", bench.directory, fifo, text] {
                let python = try await runTool(
                    "/usr/bin/python3", [LedgerCommandTests.peer("ledger_verify.py"), unreadable], timeout: 60)
                #expect(
                    python.status == 1 && python.stderr.contains("cannot read"),
                    "\(unreadable): exit \(python.status): \(python.stderr)")
            }
        }
    }
}
