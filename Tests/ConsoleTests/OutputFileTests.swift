import Foundation
import Inventory
import TestSupport
import Testing

/// Issue 25: `report --out` (and every file the tool writes) goes through
/// one writer that writes only a new file or a regular file, never the
/// inventory by any name; refused, it exits 1 naming the path and why, and
/// changes nothing. Each kind is tried on the built binary against a small
/// real inventory.
@Suite("output files", .timeLimit(.minutes(5)))
struct OutputFileTests {
    static let addresses = ["C0:FE:00:00:00:01", "C0:FE:00:00:00:02", "C0:FE:00:00:00:03"]

    /// A scratch directory with a three-device inventory in it.
    static func place() async throws -> ConsoleFixture {
        let bench = try await ConsoleFixture.start(nil)
        do {
            let inventory = try Inventory(path: bench.inventoryPath)
            for address in addresses { try await inventory.recordDevice(DeviceRecord(address: address)) }
        }
        return bench
    }

    /// `beaconbench --inventory INVENTORY ARGUMENTS`, no bus needed.
    static func tool(_ bench: ConsoleFixture, _ arguments: [String]) async throws -> ToolOutput {
        try await runTool(
            builtProduct("beaconbench"), ["--inventory", bench.inventoryPath] + arguments,
            environment: bench.environment, timeout: 60)
    }

    /// The inventory is whole and holds its three devices.
    static func expectIntact(_ path: String, _ label: String) async throws {
        #expect(try await TrustedOutcomesTests.rows(path, "PRAGMA integrity_check") == ["ok"], "\(label)")
        #expect(
            try await TrustedOutcomesTests.rows(path, "SELECT address FROM devices ORDER BY address") == addresses,
            "\(label)")
    }

    /// What is at `path` itself: its type, inode, device number, and where
    /// a link leads.
    static func snapshot(_ path: String) -> String {
        var info = stat()
        guard lstat(path, &info) == 0 else { return "absent" }
        let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? ""
        return "\(info.st_mode & S_IFMT) \(info.st_ino) \(info.st_rdev) \(info.st_size) \(target)"
    }

    static func listing(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    static func bytes(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    /// Makes a Unix socket at `path` (left behind when the maker exits).
    static func makeSocket(_ path: String) async throws {
        let made = try await runTool(
            "/usr/bin/python3", ["-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", path])
        try #require(made.status == 0, "\(made.stderr)")
    }

    /// Each kind of path that is not a file to write: exit 1, a message
    /// naming the path and why, the thing at the path as it was, nothing
    /// left in its directory, the inventory whole and unchanged.
    @Test(arguments: [
        "fifo", "socket", "directory", "dangling link", "link to a directory", "link to a fifo", "the inventory",
        "a link to the inventory", "a hard link to the inventory", "the absent -journal", "/dev/stdout",
    ])
    func aPathThatIsNotAFileToWriteIsRefused(kind: String) async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        let directory = bench.directory
        let out: String
        let why: String
        switch kind {
        case "fifo":
            out = directory + "/report.html"
            try #require(mkfifo(out, 0o600) == 0)
            why = "is a FIFO (named pipe), not a regular file"
        case "socket":
            out = directory + "/report.html"
            try await Self.makeSocket(out)
            why = "is a socket, not a regular file"
        case "directory":
            out = directory + "/report.html"
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
            why = "is a directory, not a regular file"
        case "dangling link":
            out = directory + "/report.html"
            try FileManager.default.createSymbolicLink(atPath: out, withDestinationPath: directory + "/gone.html")
            why = "is a symbolic link to \(directory)/gone.html, which does not exist"
        case "link to a directory":
            out = directory + "/report.html"
            try FileManager.default.createSymbolicLink(atPath: out, withDestinationPath: "/tmp")
            why = "is a symbolic link to /tmp, which is a directory"
        case "link to a fifo":
            try #require(mkfifo(directory + "/pipe", 0o600) == 0)
            out = directory + "/report.html"
            try FileManager.default.createSymbolicLink(atPath: out, withDestinationPath: "pipe")
            why = "is a symbolic link to pipe, which is a FIFO (named pipe)"
        case "the inventory":
            out = bench.inventoryPath
            why = "is the inventory (\(bench.inventoryPath))"
        case "a link to the inventory":
            out = directory + "/report.html"
            try FileManager.default.createSymbolicLink(atPath: out, withDestinationPath: bench.inventoryPath)
            why = "is the inventory (\(bench.inventoryPath))"
        case "a hard link to the inventory":
            out = directory + "/report.html"
            try #require(link(bench.inventoryPath, out) == 0)
            why = "is another name of the inventory (\(bench.inventoryPath))"
        case "the absent -journal":
            out = bench.inventoryPath + "-journal"
            why = "is the inventory's rollback journal"
        default:
            out = "/dev/stdout"
            why = "is a symbolic link to /proc/self/fd/1, an open descriptor's link"
        }
        let before = (Self.snapshot(out), Self.listing(directory), Self.bytes(bench.inventoryPath))
        let refused = try await Self.tool(bench, ["report", "--out", out])
        #expect(refused.status == 1, "\(kind): \(refused.status) \(refused.stderr)")
        #expect(
            refused.stderr.contains("report: \(out) \(why)") && refused.stderr.contains("nothing written"),
            "\(kind): \(refused.stderr)")
        #expect(Self.snapshot(out) == before.0, "\(kind)")
        #expect(Self.listing(directory) == before.1, "\(kind): \(Self.listing(directory))")
        #expect(Self.bytes(bench.inventoryPath) == before.2, "\(kind): the inventory changed")
        try await Self.expectIntact(bench.inventoryPath, kind)
    }

    /// `--out /dev/null`, as root: refused; /dev/null is still the same
    /// character device.
    @Test func theNullDeviceIsNeverReplaced() async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        var info = stat()
        try #require(stat("/dev/null", &info) == 0 && info.st_mode & S_IFMT == S_IFCHR)
        let before = Self.snapshot("/dev/null")
        let refused = try await Self.tool(bench, ["report", "--out", "/dev/null"])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(
            refused.stderr.contains(
                "report: /dev/null is a character device, not a regular file: nothing written"), "\(refused.stderr)")
        #expect(stat("/dev/null", &info) == 0 && info.st_mode & S_IFMT == S_IFCHR)
        #expect(Self.snapshot("/dev/null") == before)
        try await Self.expectIntact(bench.inventoryPath, "/dev/null")
    }

    /// The -wal and -shm of an inventory a writer has open: refused; both
    /// are the same files afterwards, and the writer's change is kept.
    @Test(arguments: [("-wal", "write-ahead log"), ("-shm", "shared-memory index")])
    func aLiveInventorysLogAndIndexAreRefused(suffix: String, what: String) async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        let writer = try Inventory(path: bench.inventoryPath)
        try await writer.setSetting("kept", "yes")
        let out = bench.inventoryPath + suffix
        let before = [Self.snapshot(bench.inventoryPath + "-wal"), Self.snapshot(bench.inventoryPath + "-shm")]
        try #require(!before.contains("absent"), "\(before)")
        let refused = try await Self.tool(bench, ["report", "--out", out])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("report: \(out) is the inventory's \(what)"), "\(refused.stderr)")
        #expect([Self.snapshot(bench.inventoryPath + "-wal"), Self.snapshot(bench.inventoryPath + "-shm")] == before)
        #expect(try await writer.setting("kept") == "yes")
        try await Self.expectIntact(bench.inventoryPath, suffix)
    }

    /// A link to a regular file: the file it leads to is replaced (mode
    /// 0600), the link stays; a regular file of mode 0644 is replaced by
    /// one of mode 0600. Nothing else is left in either directory.
    @Test func aLinkToAFileWritesTheFileAndKeepsTheLink() async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        let elsewhere = bench.directory + "/pages"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: false)
        let target = elsewhere + "/fleet.html"
        try "old".write(toFile: target, atomically: false, encoding: .utf8)
        chmod(target, 0o644)
        let link = bench.directory + "/report.html"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "pages/fleet.html")
        let written = try await Self.tool(bench, ["report", "--out", link])
        #expect(written.status == 0, "\(written.stderr)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == "pages/fleet.html")
        let page = String(decoding: Self.bytes(target) ?? Data(), as: UTF8.self)
        #expect(page.hasPrefix("<!DOCTYPE html>") && page.contains("3 of 3 devices"), "\(page.prefix(200))")
        #expect(FileSafetyTests.mode(target) == 0o600, "\(FileSafetyTests.octal(FileSafetyTests.mode(target)))")
        #expect(Self.listing(elsewhere) == ["fleet.html"])

        let plain = bench.directory + "/plain.html"
        try "old".write(toFile: plain, atomically: false, encoding: .utf8)
        chmod(plain, 0o644)
        let replaced = try await Self.tool(bench, ["report", "--out", plain])
        #expect(replaced.status == 0, "\(replaced.stderr)")
        #expect(String(decoding: Self.bytes(plain) ?? Data(), as: UTF8.self).hasPrefix("<!DOCTYPE html>"))
        #expect(FileSafetyTests.mode(plain) == 0o600)
        #expect(
            !Self.listing(bench.directory).contains { $0.hasPrefix(".beaconbench-") },
            "\(Self.listing(bench.directory))")
        try await Self.expectIntact(bench.inventoryPath, "after writing")
    }

    /// `--sim-state` is written by the same writer: a FIFO, the null
    /// device or the inventory is refused (exit 1) before the simulator
    /// starts, and stays as it was.
    @Test(arguments: ["fifo", "/dev/null", "the inventory"])
    func theSimulatorsStateFileIsCheckedTheSameWay(kind: String) async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        let state: String
        let why: String
        switch kind {
        case "fifo":
            state = bench.directory + "/state.json"
            try #require(mkfifo(state, 0o600) == 0)
            why = "is a FIFO (named pipe), not a regular file"
        case "/dev/null":
            state = "/dev/null"
            why = "is a character device, not a regular file"
        default:
            state = bench.inventoryPath
            why = "is the inventory"
        }
        let before = (Self.snapshot(state), Self.listing(bench.directory), Self.bytes(bench.inventoryPath))
        let refused = try await Self.tool(bench, ["--sim", "2", "--sim-state", state, "scan", "1s"])
        #expect(refused.status == 1, "\(kind): \(refused.status) \(refused.stderr)")
        #expect(refused.stderr.contains("--sim-state: \(state) \(why)"), "\(kind): \(refused.stderr)")
        #expect(Self.snapshot(state) == before.0)
        #expect(Self.listing(bench.directory) == before.1, "\(Self.listing(bench.directory))")
        #expect(Self.bytes(bench.inventoryPath) == before.2)
    }

    /// In a batch, a `--out` that cannot be written is an error at its
    /// line and column before anything runs: the `forget` above it is not
    /// carried out.
    @Test func aBatchWithABadOutIsRefusedBeforeItRuns() async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        let pipe = bench.directory + "/page.html"
        try #require(mkfifo(pipe, 0o600) == 0)
        let batch = bench.directory + "/report.batch"
        try "inventory forget \(Self.addresses[0]) --yes\nreport --out \(pipe)\n".write(
            toFile: batch, atomically: true, encoding: .utf8)
        let before = Self.bytes(bench.inventoryPath)
        let refused = try await Self.tool(bench, ["run", batch])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(
            refused.stderr.contains("report.batch:2:14: error: report: \(pipe) is a FIFO (named pipe)"),
            "\(refused.stderr)")
        #expect(Self.bytes(bench.inventoryPath) == before)
        try await Self.expectIntact(bench.inventoryPath, "batch")
    }

    /// A page whose directory does not exist: exit 1, nothing made.
    @Test func aMissingDirectoryIsRefused() async throws {
        let bench = try await Self.place()
        defer { bench.stop() }
        let before = Self.listing(bench.directory)
        let out = bench.directory + "/no/such/report.html"
        let refused = try await Self.tool(bench, ["report", "--out", out])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stderr.contains("report: \(out) cannot be written"), "\(refused.stderr)")
        #expect(Self.listing(bench.directory) == before)
    }
}
