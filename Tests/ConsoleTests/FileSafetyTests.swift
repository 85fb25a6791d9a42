import BeaconSimulator
import DBusBinding
import Foundation
import InventorySync
import TestSupport
import Testing

/// Files and secrets (issue 15): every file and directory the tool makes is
/// private whatever the umask and never made through a link it did not
/// expect; read commands open an inventory read-only, changing nothing, so
/// that another user's or one on read-only media can be audited; a
/// password is never visible to other processes after start-up, nor kept
/// in the REPL's history.
@Suite("files and secrets", .serialized, .timeLimit(.minutes(5)))
struct FileSafetyTests {
    // MARK: Helpers

    /// The permission bits of `path` itself (not of what a link leads to).
    static func mode(_ path: String) -> Int? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return Int(info.st_mode & 0o7777)
    }

    static func isLink(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK
    }

    static func listing(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    static func octal(_ mode: Int?) -> String { mode.map { String($0, radix: 8) } ?? "missing" }

    /// `beaconbench ARGUMENTS` started by `/bin/sh -c 'umask 000; exec …'`.
    static func underUmask000(_ arguments: [String]) -> [String] {
        ["/bin/sh", "-c", "umask 000; exec \"$0\" \"$@\"", builtProduct("beaconbench")] + arguments
    }

    /// Types `steps` into `command` on a pseudo-terminal
    /// (Tests/Peers/repl_driver.py), in the fixture's environment.
    static func drive(
        _ bench: ConsoleFixture, _ steps: [[String: Any]], command: [String]
    ) async throws -> ReplTests.Transcript {
        let script = bench.directory + "/script-\(UUID().uuidString).json"
        try JSONSerialization.data(withJSONObject: steps).write(to: URL(fileURLWithPath: script))
        let driver = ConsoleFixture.repository + "/Tests/Peers/repl_driver.py"
        let output = try await runTool(
            "/usr/bin/python3", [driver, script, "--"] + command, environment: bench.environment, timeout: 120)
        return try JSONDecoder().decode(ReplTests.Transcript.self, from: Data(output.stdout.utf8))
    }

    /// `beaconbench` as user `nobody` (uid and gid 65534, no groups).
    static func asNobody(_ arguments: [String], environment: [String: String]) async throws -> ToolOutput {
        try await runTool(
            "/usr/bin/setpriv",
            ["--reuid=65534", "--regid=65534", "--clear-groups", "--", builtProduct("beaconbench")] + arguments,
            environment: environment)
    }

    /// A fleet file of `count` factory-new beacons that can all be provisioned.
    static func goodFleet(count: Int, in directory: String) throws -> String {
        let entries = (1...count).map { number -> [String: Any] in
            [
                "address": String(format: "C0:FE:00:00:00:%02X", number), "factoryDefault": true, "calibrated": false,
                "battery": 80, "firmware": "1.0.8", "major": 1, "minor": 1,
            ]
        }
        let path = directory + "/good-fleet.json"
        try JSONSerialization.data(withJSONObject: entries).write(to: URL(fileURLWithPath: path))
        return path
    }

    // MARK: File modes

    /// The run's first connect (to whichever beacon) held by the simulator until released.
    static let firstConnectHeld =
        #"{"rules": [{"id": "hold", "hook": "connect.requested", "target": {"any": true}, "trigger": {"nth": 1}, "#
        + #""times": 1, "action": {"kind": "stall", "until": "released", "hold": "first-connect"}}]}"#

    /// Under umask 000: the XDG directories made 0700; the inventory, its
    /// -wal and -shm (seen while the run has them open: its first connect
    /// held by the simulator), its reserve and the history 0600.
    @Test func everyFileIsPrivateWhateverTheUmask() async throws {
        try await RecoveryTests.withPlan(Self.firstConnectHeld, count: 3) { bench in
            let data = bench.directory + "/data"
            let inventory = data + "/beaconbench/inventory.sqlite"
            // The default inventory, under XDG_DATA_HOME: no --inventory.
            let command = Self.underUmask000(["--bus", bench.busAddress])
            let run = Task {
                try await runTool(
                    command[0], Array(command.dropFirst()), environment: bench.environment,
                    stdin: "\(bench.scanAll)\nselect all\ninfo\n", timeout: 300)
            }
            // While the run's first connect is held, it has the inventory open.
            let control = SimulatorControl.Client(try await BusConnection.connect(.address(bench.busAddress)))
            try await control.waitFor(#"{"held": "first-connect"}"#, timeout: .seconds(300))
            var sidecars: [String: Int] = [:]
            for suffix in ["-wal", "-shm"] {
                if let mode = Self.mode(inventory + suffix) { sidecars[suffix] = mode }
            }
            #expect(try await control.release("first-connect") == 1)
            await control.connection.close()
            let output = try await run.value
            #expect(output.status == 0, "\(output.stderr.suffix(2000))")
            #expect(sidecars == ["-wal": 0o600, "-shm": 0o600], "\(sidecars.mapValues(Self.octal))")
            for (path, expected) in [
                (data, 0o700), (data + "/beaconbench", 0o700), (inventory, 0o600), (inventory + "-reserve", 0o600),
            ] {
                #expect(Self.mode(path) == expected, "\(path): \(Self.octal(Self.mode(path)))")
            }

            // The history, made by a REPL under umask 000.
            let session = try await Self.drive(
                bench, [["expect": "]> "], ["send": "help\n"], ["expect": "]> "], ["eof": true]],
                command: Self.underUmask000(["--bus", bench.busAddress]))
            #expect(session.ok && session.status == 0, "\(session.transcript)")
            let state = bench.directory + "/state"
            for (path, expected) in [
                (state, 0o700), (state + "/beaconbench", 0o700), (state + "/beaconbench/history", 0o600),
            ] {
                #expect(Self.mode(path) == expected, "\(path): \(Self.octal(Self.mode(path)))")
            }
        }
    }

    // MARK: Symbolic links

    /// A link that leads nowhere, to a directory, or a -wal that is a link:
    /// the inventory is unusable (exit 3), a message naming the path,
    /// nothing created.
    @Test func aLinkThatLeadsNowhereIsRefusedAndNothingIsMade() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let place = bench.directory + "/place"
            try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true)
            let dangling = place + "/inventory.sqlite"
            try FileManager.default.createSymbolicLink(
                atPath: dangling, withDestinationPath: place + "/elsewhere.sqlite")
            let toDirectory = place + "/directory.sqlite"
            try FileManager.default.createSymbolicLink(atPath: toDirectory, withDestinationPath: bench.directory)
            let before = Self.listing(place)
            for (link, words) in [
                (dangling, ["inventory", "list"]), (dangling, ["audit"]), (dangling, ["scan", "1s"]),
                (toDirectory, ["inventory", "list"]), (toDirectory, ["scan", "1s"]),
            ] {
                let output = try await runTool(
                    builtProduct("beaconbench"), ["--bus", bench.busAddress, "--inventory", link] + words,
                    environment: bench.environment)
                #expect(output.status == 3, "\(words): \(output.status) \(output.stderr)")
                #expect(output.stderr.contains(link) && output.stderr.contains("symbolic link"), "\(output.stderr)")
                #expect(Self.listing(place) == before, "\(words): \(Self.listing(place))")
                #expect(Self.mode(place + "/elsewhere.sqlite") == nil)
            }
            #expect(!FileManager.default.fileExists(atPath: bench.directory + "/data"))

            // A -wal beside an inventory that is a link: refused, not followed.
            let real = place + "/real.sqlite"
            let made = try await runTool(
                builtProduct("beaconbench"), ["--inventory", real, "inventory", "list"], environment: bench.environment)
            #expect(made.status == 0, "\(made.stderr)")
            try FileManager.default.createSymbolicLink(atPath: real + "-wal", withDestinationPath: place + "/log")
            let refused = try await runTool(
                builtProduct("beaconbench"), ["--inventory", real, "inventory", "list"], environment: bench.environment)
            #expect(refused.status == 3, "\(refused.stderr)")
            #expect(refused.stderr.contains(real + "-wal is a symbolic link"), "\(refused.stderr)")
            #expect(Self.mode(place + "/log") == nil)
        }
    }

    /// A link to an existing inventory is followed: what is written lands
    /// in the real file, its -wal, -shm and reserve beside it.
    @Test func aLinkToAnInventoryIsFollowed() async throws {
        try await withNewFleet(count: 2) { bench in
            let place = bench.directory + "/place"
            try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true)
            let real = place + "/real.sqlite"
            let made = try await runTool(
                builtProduct("beaconbench"), ["--inventory", real, "inventory", "list"], environment: bench.environment)
            #expect(made.status == 0, "\(made.stderr)")
            let link = bench.directory + "/link.sqlite"
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: real)
            let run = try await runTool(
                builtProduct("beaconbench"), ["--bus", bench.busAddress, "--inventory", link],
                environment: bench.environment, stdin: "\(bench.scanAll)\nselect all\ninfo\n")
            #expect(run.status == 0, "\(run.stderr.suffix(2000))")
            #expect(Self.isLink(link))
            let rows = try await TrustedOutcomesTests.rows(real, "SELECT count(*) FROM devices")
            #expect(rows == ["2"])
            #expect(Self.mode(real) == 0o600 && Self.mode(real + "-reserve") == 0o600)
            #expect(
                Self.listing(bench.directory).filter { $0.hasPrefix("link.sqlite") } == ["link.sqlite"],
                "\(Self.listing(bench.directory))")
            let list = try await runTool(
                builtProduct("beaconbench"), ["--inventory", link, "inventory", "list"], environment: bench.environment)
            let resolved = URL(fileURLWithPath: real).resolvingSymlinksInPath().path
            #expect(list.status == 0 && list.stderr.contains("2 devices in \(resolved)"), "\(list.stderr)")
        }
    }

    /// A history that is a link: a warning, no history kept, the file it
    /// points at untouched (content and mode).
    @Test func aHistoryThatIsALinkIsLeftAlone() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let directory = bench.directory + "/state/beaconbench"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let history = directory + "/history"
            let target = bench.directory + "/precious"
            try Data("precious\n".utf8).write(to: URL(fileURLWithPath: target))
            chmod(target, 0o644)
            try FileManager.default.createSymbolicLink(atPath: history, withDestinationPath: target)
            let steps: [[String: Any]] = [
                ["expect": "history is not kept"], ["expect": "]> "], ["send": "help\n"], ["expect": "]> "],
                ["eof": true],
            ]
            let command = [builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory", bench.inventoryPath]
            let linked = try await Self.drive(bench, steps, command: command)
            #expect(linked.ok && linked.status == 0, "\(linked.transcript)")
            #expect(linked.transcript.contains("\(history) is a symbolic link"), "\(linked.transcript)")
            #expect(try String(contentsOfFile: target, encoding: .utf8) == "precious\n")
            #expect(Self.mode(target) == 0o644)
            #expect(Self.isLink(history))
        }
    }

    /// A history of 1 GiB (sparse: its last lines real): only its last
    /// 4 MiB is read, the session works, and what is kept is those last
    /// lines and the new one; the gigabyte is not read whole (it would be
    /// seconds and a gigabyte of memory).
    @Test func aHugeHistoryIsReadOnlyAtItsEnd() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let directory = bench.directory + "/state/beaconbench"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            chmod(bench.directory + "/state", 0o700)
            chmod(directory, 0o700)
            let history = directory + "/history"
            let descriptor = open(history, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            try #require(descriptor >= 0)
            let tail = Array("\nprofiles list\n".utf8)
            try #require(ftruncate(descriptor, off_t(1 << 30) - off_t(tail.count)) == 0)
            try #require(pwrite(descriptor, tail, tail.count, off_t(1 << 30) - off_t(tail.count)) == tail.count)
            close(descriptor)
            let steps: [[String: Any]] = [["expect": "]> "], ["send": "help\n"], ["expect": "]> "], ["eof": true]]
            let command = [builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory", bench.inventoryPath]
            let session = try await Self.drive(bench, steps, command: command)
            #expect(session.ok && session.status == 0, "\(session.transcript)")
            #expect(!session.transcript.contains("history is not kept"), "\(session.transcript)")
            #expect(try String(contentsOfFile: history, encoding: .utf8) == "profiles list\nhelp\n")
        }
    }

    /// A history that is a file of another user: a warning, no history
    /// kept, the file untouched (content and mode). Root-only, so reported
    /// as skipped when not root (never passed without running), and a
    /// failure of `scripts/test` under CI=true when skipped as root.
    @Test(.enabled(if: isRoot, "needs root: a file of another user (chown)"))
    func aHistoryOfAnotherUserIsLeftAlone() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let directory = bench.directory + "/state/beaconbench"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let history = directory + "/history"
            let steps: [[String: Any]] = [
                ["expect": "history is not kept"], ["expect": "]> "], ["send": "help\n"], ["expect": "]> "],
                ["eof": true],
            ]
            let command = [builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory", bench.inventoryPath]
            try Data("precious\n".utf8).write(to: URL(fileURLWithPath: history))
            chmod(history, 0o644)
            try #require(chown(history, 65534, 65534) == 0, "chown: errno \(errno)")
            let foreign = try await Self.drive(bench, steps, command: command)
            #expect(foreign.ok && foreign.status == 0, "\(foreign.transcript)")
            #expect(foreign.transcript.contains("belongs to user 65534"), "\(foreign.transcript)")
            #expect(try String(contentsOfFile: history, encoding: .utf8) == "precious\n")
            #expect(Self.mode(history) == 0o644)
        }
    }

    // MARK: Read-only opening

    /// An inventory of root's (0644, after its writer closed: no -shm) read
    /// by `nobody` in a 0755 directory, then a 0555 one; by root on a
    /// read-only bind mount; an older schema; a log left by a killed writer.
    /// Each read command exits 0 and the file's bytes, its mode and the
    /// directory stay as they were.
    @Test(.enabled(if: isRoot, "needs root: another user and a read-only mount (CI runs as root)"))
    func anInventoryThatCannotBeWrittenIsReadAndLeftAsItWas() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("ro-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let fleet = try Self.goodFleet(count: 2, in: scratch)
        try await withResource({ try await ConsoleFixture.start(["--fleet", fleet]) }, stop: { await $0.stop() }) {
            bench in
            let provision = try await bench.beaconbench(
                [
                    "run", bench.batch("provision-new.batch"), "--set", "profile=van", "--set", "scan=120s", "--set",
                    "expect=\(bench.beacons)",
                ])
            #expect(provision.status == 0, "\(provision.stderr.suffix(2000))")
            let shelf = bench.directory + "/shelf"
            try FileManager.default.createDirectory(atPath: shelf, withIntermediateDirectories: true)
            let inventory = shelf + "/inventory.sqlite"
            try FileManager.default.copyItem(atPath: bench.inventoryPath, toPath: inventory)
            #expect(!FileManager.default.fileExists(atPath: bench.inventoryPath + "-shm"), "the writer left a -shm")
            chmod(inventory, 0o644)
            chmod(shelf, 0o755)
            chmod(bench.directory, 0o755)
            let commands = [
                ["inventory", "list"], ["inventory", "show", "C0:FE:00:00:00:01"], ["inventory", "export", "--csv"],
                ["inventory", "export", "--json"], ["log"], ["audit"],
            ]
            var environment = bench.environment
            environment["HOME"] = shelf

            func readsAll(
                _ label: String, _ path: String, nobody: Bool, warning: String? = nil
            ) async throws {
                let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
                let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
                let mode = Self.mode(path)
                let files = Self.listing(directory)
                for words in commands {
                    let arguments = ["--bus", bench.busAddress, "--inventory", path] + words
                    let output =
                        nobody
                        ? try await Self.asNobody(arguments, environment: environment)
                        : try await runTool(builtProduct("beaconbench"), arguments, environment: environment)
                    #expect(output.status == 0, "\(label) \(words): \(output.status) \(output.stderr)")
                    #expect(!output.stdout.isEmpty, "\(label) \(words)")
                    if let warning {
                        #expect(output.stderr.contains(warning), "\(label) \(words): \(output.stderr)")
                    } else {
                        #expect(!output.stderr.contains("warning"), "\(label) \(words): \(output.stderr)")
                    }
                }
                #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes, "\(label): the file changed")
                #expect(Self.mode(path) == mode, "\(label): \(Self.octal(Self.mode(path)))")
                #expect(Self.listing(directory) == files, "\(label): \(Self.listing(directory))")
            }

            try await readsAll("nobody, 0755 directory", inventory, nobody: true)
            chmod(shelf, 0o555)
            try await readsAll("nobody, 0555 directory", inventory, nobody: true)
            chmod(shelf, 0o755)

            let mount = bench.directory + "/media"
            try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
            let bound = try await runTool("/bin/mount", ["--bind", shelf, mount])
            try #require(bound.status == 0, "\(bound.stderr)")
            defer { unmount(mount) }
            let readOnly = try await runTool("/bin/mount", ["-o", "remount,bind,ro", mount])
            try #require(readOnly.status == 0, "\(readOnly.stderr)")
            try await readsAll("root, read-only mount", mount + "/inventory.sqlite", nobody: false)
            _ = try await runTool("/bin/umount", [mount])

            // A file of an older schema: read as it is; a query it cannot
            // answer says how to migrate it.
            let older = bench.directory + "/older/inventory.sqlite"
            try FileManager.default.createDirectory(
                atPath: bench.directory + "/older", withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: inventory, toPath: older)
            _ = try await TrustedOutcomesTests.rows(
                older, "DROP TABLE claims; DROP TABLE identities; PRAGMA user_version = 2;")
            chmod(older, 0o644)
            let list = try await Self.asNobody(["--inventory", older, "inventory", "list"], environment: environment)
            #expect(list.status == 0 && list.stderr.contains("2 devices"), "\(list.stderr)")
            let audit = try await Self.asNobody(["--inventory", older, "audit"], environment: environment)
            #expect(audit.stderr.contains("open it once for writing to migrate it"), "\(audit.stderr)")
            #expect(try await TrustedOutcomesTests.rows(older, "PRAGMA user_version") == ["2"])

            // A log left by a killed writer, and no -shm: read without it,
            // with a warning saying so.
            let killed = bench.directory + "/killed"
            try FileManager.default.createDirectory(atPath: killed, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: inventory, toPath: killed + "/inventory.sqlite")
            let writer = try await runTool(
                "/usr/bin/python3",
                [
                    "-c",
                    """
                    import os, signal, sqlite3
                    c = sqlite3.connect('\(killed)/inventory.sqlite')
                    c.execute('UPDATE devices SET battery = 7'); c.commit()
                    os.kill(os.getpid(), signal.SIGKILL)
                    """,
                ])
            #expect(writer.status != 0)
            try? FileManager.default.removeItem(atPath: killed + "/inventory.sqlite-shm")
            for name in Self.listing(killed) { chmod(killed + "/" + name, 0o644) }
            try await readsAll(
                "nobody, a log left beside", killed + "/inventory.sqlite", nobody: true,
                warning: "holds changes that a read-only opening here cannot read")
        }
    }

    // MARK: Secrets

    @Test func passwordsAreFoundInEveryForm() {
        let cases: [(String, String)] = [
            ("sync --to postgresql://u:hunter2@127.0.0.1:1/db", "sync --to postgresql://u:***@127.0.0.1:1/db"),
            ("postgres://:hunter2@h", "postgres://:***@h"),
            ("postgresql://u@h/db", "postgresql://u@h/db"),
            ("postgresql://h:5432/db?user=a@b", "postgresql://h:5432/db?user=a@b"),
            ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db"),
            ("postgresql://h/db?password=hunter2&sslmode=require", "postgresql://h/db?password=***&sslmode=require"),
            ("host=h password=hunter2 dbname=x", "host=h password=*** dbname=x"),
            ("host=h password = 'hun ter\\'2' dbname=x", "host=h password = '***' dbname=x"),
            ("password=hunter2", "password=***"),
            ("set password_hint x", "set password_hint x"),
            ("--bus unix:path=/tmp/bus", "--bus unix:path=/tmp/bus"),
        ]
        for (text, expected) in cases {
            #expect(ConnectionPasswords.redacted(text) == expected, "\(text)")
        }
        #expect(
            ConnectionPasswords.scrub(
                "invalid percent-encoded token: \"hun%zzter2\"", of: "postgresql://u:hun%zzter2@h/db")
                == "invalid percent-encoded token: \"***\"")
    }

    /// A TCP socket listening on 127.0.0.1 that never accepts: a client's
    /// connection completes (the kernel's backlog) and then waits for an
    /// answer that never comes, until the socket is closed (a reset).
    final class SilentServer {
        let descriptor: Int32
        let port: Int

        init() throws {
            // Close-on-exec: a child started meanwhile must not hold it open.
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(descriptor, pointer, length) == 0 && listen(descriptor, 8) == 0
                        && getsockname(descriptor, pointer, &length) == 0
                }
            }
            guard descriptor >= 0, bound else {
                _ = Glibc.close(descriptor)
                throw LocalBusError("cannot listen on 127.0.0.1")
            }
            self.descriptor = descriptor
            port = Int(UInt16(bigEndian: address.sin_port))
        }

        func close() { _ = Glibc.close(descriptor) }
    }

    /// A password in `sync --to URL` and in `--server` conninfo: accepted
    /// with one warning, and gone from /proc/PID/cmdline while the sync
    /// still runs; never printed. The sync is kept running, for as long as
    /// the test looks, by a server that never answers (`connect_timeout=0`:
    /// libpq waits for ever); closed, the sync tries again and ends (exit 3).
    @Test func aPasswordOnTheCommandLineIsScrubbedAtOnce() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let errors = bench.directory + "/stderr"
            let silent = try SilentServer()
            let child: ChildProcess
            do {
                child = try ChildProcess(
                    builtProduct("beaconbench"),
                    [
                        "--bus", bench.busAddress, "--server", "host=127.0.0.1 port=1 password=hunter2", "--inventory",
                        bench.inventoryPath, "sync", "--to",
                        "postgresql://u:hunter2@127.0.0.1:\(silent.port)/db?connect_timeout=0",
                    ], standardError: errors)
            } catch {
                silent.close()
                throw error
            }
            var seen = ""
            try await SyncScene.waitUntil("the command line of the sync without its password (/proc)") {
                let bytes = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(child.pid)/cmdline"))) ?? Data()
                seen = String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "\0", with: " ")
                return !seen.isEmpty && !seen.contains("hunter2")
            }
            // (A process that has exited shows an empty command line.)
            let stillRunning = !seen.isEmpty && kill(child.pid, 0) == 0
            silent.close()
            let ended = await child.waitForExit()
            #expect(stillRunning, "the sync ended before its command line could be read")
            #expect(!seen.contains("hunter2"), "\(seen)")
            #expect(seen.contains("postgresql://u:*******@127.0.0.1:\(silent.port)/db?connect_timeout=0"), "\(seen)")
            #expect(seen.contains("port=1 password=*******"), "\(seen)")
            #expect((ended.status >> 8) & 0xff == 3)
            let stderr = try String(contentsOfFile: errors, encoding: .utf8)
            #expect(!stderr.contains("hunter2"), "\(stderr)")
            #expect(
                stderr.components(separatedBy: "a password in a URL is visible to other users until beaconbench starts")
                    .count == 2, "\(stderr)")
        }
    }

    /// Lines typed at the REPL with a password (a URL's, a conninfo's) are
    /// kept in the history with `***`; a password an older beaconbench
    /// wrote there is replaced when the history is read.
    @Test func theHistoryKeepsNoPassword() async throws {
        try await withResource({ try await ConsoleFixture.start(nil) }, stop: { await $0.stop() }) { bench in
            let directory = bench.directory + "/state/beaconbench"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let history = directory + "/history"
            try Data("sync --to postgresql://old:oldsecret@depot/fleet\n".utf8).write(to: URL(fileURLWithPath: history))
            chmod(history, 0o600)
            // Each line a usage error, so that nothing is tried.
            let session = try await Self.drive(
                bench,
                [
                    ["expect": "]> "],
                    ["send": "sync --to postgresql://u:hunter2@127.0.0.1:1/db now\n"], ["expect": "usage"],
                    ["expect": "]> "],
                    ["send": "sync --to \"host=127.0.0.1 port=1 password='hunter2'\" now\n"], ["expect": "usage"],
                    ["expect": "]> "],
                    // Up: the line as the history holds it.
                    ["send": "\u{1B}[A"], ["expect": "password='***'"], ["send": "\u{15}"],
                    ["eof": true],
                ],
                command: [builtProduct("beaconbench"), "--bus", bench.busAddress, "--inventory", bench.inventoryPath])
            #expect(session.ok && session.status == 0, "stopped at step \(session.step): \(session.transcript)")
            let kept = try String(contentsOfFile: history, encoding: .utf8)
            #expect(!kept.contains("hunter2") && !kept.contains("oldsecret"), "\(kept)")
            #expect(
                kept == """
                    sync --to postgresql://old:***@depot/fleet
                    sync --to postgresql://u:***@127.0.0.1:1/db now
                    sync --to "host=127.0.0.1 port=1 password='***'" now

                    """, "\(kept)")
            #expect(Self.mode(history) == 0o600)
        }
    }
}
