import Foundation
import Inventory
import TestSupport
import Testing

/// Issue 25: the inventory is opened only at a plain file path, only when
/// it is an inventory (its `application_id`, its tables, a schema version
/// this program knows), and what it refuses it leaves exactly as it was.
/// Every case runs the built binary: a read command, a write command and
/// `report`.
@Suite("inventory paths", .timeLimit(.minutes(5)))
struct InventoryPathTests {
    /// One read, one write, one report.
    static let commands: [[String]] = [
        ["inventory", "list"], ["inventory", "forget", "C0:FE:00:00:00:01", "--yes"],
        ["report", "--out", "page.html"],
    ]

    /// `beaconbench --inventory NAME ARGUMENTS`, run in `directory`.
    static func tool(
        _ bench: ConsoleFixture, in directory: String, inventory: String, _ arguments: [String]
    ) async throws -> ToolOutput {
        try await runTool(
            "/bin/sh",
            ["-c", "cd \"$0\" && exec \"$@\"", directory, builtProduct("beaconbench"), "--inventory", inventory]
                + arguments, environment: bench.environment, timeout: 120)
    }

    /// Everything under `directory`, with each file's bytes.
    static func tree(_ directory: String) -> [String: Data] {
        var found: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let name = enumerator?.nextObject() as? String {
            var info = stat()
            let path = directory + "/" + name
            guard lstat(path, &info) == 0 else { continue }
            found[name] =
                info.st_mode & S_IFMT == S_IFREG
                ? FileManager.default.contents(atPath: path) ?? Data() : Data("type \(info.st_mode & S_IFMT)".utf8)
        }
        return found
    }

    /// `:memory:`, SQLite URIs, the empty name: exit 1, a message, and
    /// nothing made — no directory from `file:a/b`, no default inventory.
    @Test(arguments: [
        (":memory:", "':memory:' is SQLite's in-memory database, which keeps nothing"),
        ("file::memory:", "'file::memory:' is an SQLite URI: beaconbench opens only plain file paths"),
        ("file:made/here/inventory.sqlite", "'file:made/here/inventory.sqlite' is an SQLite URI"),
        ("file:/tmp/beaconbench-uri-test/x.sqlite?mode=rwc", "is an SQLite URI"),
        ("FILE:upper.sqlite", "is an SQLite URI"),
        ("", "the inventory's path is empty"),
    ])
    func aNameThatIsNotAPlainPathIsRefused(name: String, message: String) async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let work = bench.directory + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: false)
        for command in Self.commands {
            let refused = try await Self.tool(bench, in: work, inventory: name, command)
            #expect(refused.status == 1, "\(name) \(command): \(refused.status) \(refused.stderr)")
            #expect(refused.stderr.contains(message), "\(name) \(command): \(refused.stderr)")
            #expect(Self.tree(work).isEmpty, "\(name) \(command): \(Self.tree(work).keys.sorted())")
            #expect(!FileManager.default.fileExists(atPath: bench.directory + "/data"), "\(name) \(command)")
            #expect(!FileManager.default.fileExists(atPath: "/tmp/beaconbench-uri-test"))
        }
    }

    /// What cannot be an inventory — the null device, a FIFO (which must
    /// not block), a directory, a text file — exits 3 with a message, for
    /// reading, writing and reporting alike, and is left as it was.
    @Test(arguments: ["/dev/null", "fifo", "directory", "text file", "a fifo as its -wal"])
    func anUnusableInventoryExits3(kind: String) async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let work = bench.directory + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: false)
        var path = work + "/inventory.sqlite"
        let message: String
        switch kind {
        case "/dev/null":
            path = "/dev/null"
            message = "/dev/null is a character device, not a regular file: it cannot be an inventory"
        case "fifo":
            try #require(mkfifo(path, 0o600) == 0)
            message = "is a FIFO (named pipe), not a regular file: it cannot be an inventory"
        case "directory":
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            message = "is a directory, not a regular file: it cannot be an inventory"
        case "a fifo as its -wal":
            let made = try await Self.tool(bench, in: work, inventory: path, ["inventory", "list"])
            try #require(made.status == 0, "\(made.stderr)")
            try #require(mkfifo(path + "-wal", 0o600) == 0)
            message = "\(path)-wal is a FIFO (named pipe), not a regular file: it cannot be the inventory's"
        default:
            try ("not a database, but long enough to look like one; " + String(repeating: "x", count: 200))
                .write(toFile: path, atomically: false, encoding: .utf8)
            message = "is not an SQLite database: it cannot be an inventory"
        }
        let before = Self.tree(work)
        let device = OutputFileTests.snapshot("/dev/null")
        for command in Self.commands {
            // A command that blocked (on a FIFO) is killed at the tool's
            // cap and fails the status check below with what it printed.
            let refused = try await Self.tool(bench, in: work, inventory: path, command)
            #expect(refused.status == 3, "\(kind) \(command): \(refused.status) \(refused.stderr)")
            #expect(refused.stderr.contains(message), "\(kind) \(command): \(refused.stderr)")
            #expect(Self.tree(work) == before, "\(kind) \(command): \(Self.tree(work).keys.sorted())")
        }
        #expect(OutputFileTests.snapshot("/dev/null") == device)
    }

    /// An inventory another user may not read: exit 3 with SQLite's reason.
    @Test func anUnreadableInventoryExits3() async throws {
        let bench = try await OutputFileTests.place()
        defer { bench.stop() }
        // nobody may enter the directory, not read the file (mode 0600, root's).
        chmod(bench.directory, 0o755)
        let before = Self.tree(bench.directory)
        for command in [["inventory", "list"], ["inventory", "forget", "C0:FE:00:00:00:01", "--yes"]] {
            let refused = try await FileSafetyTests.asNobody(
                ["--inventory", bench.inventoryPath] + command, environment: bench.environment)
            #expect(refused.status == 3, "\(command): \(refused.status) \(refused.stderr)")
            #expect(refused.stderr.contains("cannot open the inventory"), "\(command): \(refused.stderr)")
        }
        #expect(Self.tree(bench.directory) == before)
    }

    /// Writes an SQLite file with python's sqlite3 (another program).
    static func sqlite(_ path: String, _ script: String) async throws {
        let made = try await runTool(
            "/usr/bin/python3",
            [
                "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.close()",
                path,
                script,
            ])
        try #require(made.status == 0, "\(made.stderr)")
    }

    /// Another program's SQLite file — with tables none of which is an
    /// inventory's (rollback journal or WAL), or another application_id —
    /// and an inventory whose user_version this program does not know
    /// (negative, newer, 0 with tables): exit 3, a message (with the
    /// number), and the file byte for byte as it was, no -wal or -shm made.
    @Test(arguments: [
        ("foreign", "is an SQLite database of another program (1 table, not an inventory's"),
        ("foreign in WAL mode", "is an SQLite database of another program (2 tables, not an inventory's"),
        (
            "another application_id",
            "is an SQLite database of another program (application_id 1179602516, 0x464f4e54; an inventory's is 1111649891"
        ),
        ("user_version -1", "has schema version -1 (user_version), which this beaconbench does not know"),
        ("user_version 99", "has schema version 99 (user_version), which this beaconbench does not know"),
        ("user_version 0", "has schema version 0 (user_version), which this beaconbench does not know"),
    ])
    func aFileThatIsNotOneOfOurInventoriesIsLeftAlone(kind: String, message: String) async throws {
        let bench = try await OutputFileTests.place()
        defer { bench.stop() }
        let work = bench.directory + "/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: false)
        let path = work + "/file.sqlite"
        switch kind {
        case "foreign":
            try await Self.sqlite(path, "CREATE TABLE notes(body TEXT); INSERT INTO notes VALUES ('mine');")
        case "foreign in WAL mode":
            try await Self.sqlite(
                path, "PRAGMA journal_mode = WAL; CREATE TABLE a(x); CREATE TABLE devices(y); INSERT INTO a VALUES (1);"
            )
        case "another application_id":
            try FileManager.default.copyItem(atPath: bench.inventoryPath, toPath: path)
            try await Self.sqlite(path, "PRAGMA application_id = 1179602516;")  // "FONT"
        default:
            let version = kind.split(separator: " ").last.map(String.init) ?? "0"
            try FileManager.default.copyItem(atPath: bench.inventoryPath, toPath: path)
            try await Self.sqlite(path, "PRAGMA user_version = \(version);")
        }
        let before = Self.tree(work)
        let header = try #require(FileManager.default.contents(atPath: path)).prefix(100)
        for command in Self.commands {
            let refused = try await Self.tool(bench, in: work, inventory: path, command)
            #expect(refused.status == 3, "\(kind) \(command): \(refused.status) \(refused.stderr)")
            #expect(refused.stderr.contains("\(path) \(message)"), "\(kind) \(command): \(refused.stderr)")
            #expect(refused.stderr.contains("beaconbench leaves it as it is"), "\(kind): \(refused.stderr)")
            #expect(Self.tree(work) == before, "\(kind) \(command): \(Self.tree(work).keys.sorted())")
        }
        // The journal mode (header bytes 18 and 19) and everything else kept.
        #expect(FileManager.default.contents(atPath: path)?.prefix(100) == header)
    }

    /// An inventory of an older beaconbench (application_id 0, schema 5):
    /// read as it is by a read command, changing nothing; given its
    /// application_id and schema 6 by the next command that writes.
    @Test func anOlderInventoryGetsItsApplicationIDOnTheNextWrite() async throws {
        let bench = try await OutputFileTests.place()
        defer { bench.stop() }
        let path = bench.inventoryPath
        // What a version-5 file was: no application id, no ledger.
        let ledgerGone =
            ["outcomes", "readings", "trips", "events", "incidents"].map {
                "DROP TRIGGER \($0)_sealed_update; DROP TRIGGER \($0)_sealed_delete; ALTER TABLE \($0) DROP COLUMN ledger_seq; ALTER TABLE \($0) DROP COLUMN ledger_leaf;"
            }.joined()
            + "DROP TABLE ledger; DROP TABLE ledger_head; DROP TABLE ledger_nodes; DROP TABLE ledger_checkpoints;"
        try await Self.sqlite(path, ledgerGone + "PRAGMA application_id = 0; PRAGMA user_version = 5;")
        let before = FileManager.default.contents(atPath: path)
        let list = try await Self.tool(bench, in: bench.directory, inventory: path, ["inventory", "list"])
        #expect(list.status == 0 && list.stderr.contains("3 devices"), "\(list.stderr)")
        #expect(FileManager.default.contents(atPath: path) == before)
        let forget = try await Self.tool(
            bench, in: bench.directory, inventory: path, ["inventory", "forget", "C0:FE:00:00:00:01", "--yes"])
        #expect(forget.status == 0, "\(forget.stderr)")
        #expect(try await TrustedOutcomesTests.rows(path, "PRAGMA application_id") == ["1111649891"])
        let version = try await TrustedOutcomesTests.rows(path, "PRAGMA user_version").first.flatMap { Int($0) }
        #expect((version ?? 0) >= 6, "\(String(describing: version))")
        #expect(try await TrustedOutcomesTests.rows(path, "PRAGMA integrity_check") == ["ok"])
        // A new inventory has it from the start.
        let fresh = bench.directory + "/fresh.sqlite"
        let made = try await Self.tool(bench, in: bench.directory, inventory: fresh, ["inventory", "list"])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(try await TrustedOutcomesTests.rows(fresh, "PRAGMA application_id") == ["1111649891"])
    }
}
