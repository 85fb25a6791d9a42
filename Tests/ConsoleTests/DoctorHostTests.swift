import Foundation
import TestSupport
import Testing

@testable import Console

/// `doctor`'s checks of the machine beyond Bluetooth, and `--version`, on
/// the built binary; each check failed on purpose.
@Suite("doctor: the host", .timeLimit(.minutes(5)))
struct DoctorHostTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    static func scratch() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "doctor-host-\(UUID().uuidString.prefix(8))"
        ).path
        try FileManager.default.createDirectory(atPath: directory + "/home", withIntermediateDirectories: true)
        return directory
    }

    /// `beaconbench --json doctor` against no bus (the host's checks do not
    /// need one); its check lines by name.
    static func doctor(
        _ arguments: [String], path: String = "/usr/bin:/bin", home: String
    ) async throws -> (
        status: Int32, checks: [String: [String: Any]]
    ) {
        let output = try await runTool(
            builtProduct("beaconbench"),
            ["--bus", "unix:path=/nonexistent/beaconbench/bus", "--json"] + arguments + ["doctor"],
            environment: ["PATH": path, "HOME": home, "NO_COLOR": "1"], timeout: 60)
        var checks: [String: [String: Any]] = [:]
        for line in output.stdout.split(separator: "\n") {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                object["kind"] as? String == "check", let name = object["name"] as? String
            else { continue }
            checks[name] = object
        }
        return (output.status, checks)
    }

    @Test func anInventoryDirectoryOthersMayWriteInFails() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let shared = directory + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        chmod(shared, 0o777)
        let open = try await Self.doctor(["--inventory", shared + "/inventory.sqlite"], home: directory + "/home")
        let check = try #require(open.checks["inventory directory"], "\(open.checks.keys.sorted())")
        #expect(check["status"] as? String == "failed")
        #expect((check["detail"] as? String)?.contains("mode 0777") == true, "\(check)")
        #expect((check["fix"] as? String)?.contains("chmod 0700 \(shared)") == true, "\(check)")
        #expect(open.status == 3)

        chmod(shared, 0o700)
        let closed = try await Self.doctor(["--inventory", shared + "/inventory.sqlite"], home: directory + "/home")
        #expect(closed.checks["inventory directory"]?["status"] as? String == "ok", "\(closed.checks)")
    }

    @Test func aMissingSshKeygenIsNamedWithItsPackage() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bare = try await Self.doctor([], path: directory + "/empty-path", home: directory + "/home")
        let check = try #require(bare.checks["ssh-keygen"], "\(bare.checks.keys.sorted())")
        #expect(check["status"] as? String == "warning")
        #expect(check["fix"] as? String == "sudo apt-get install openssh-client")
        let found = try await Self.doctor([], home: directory + "/home")
        #expect(found.checks["ssh-keygen"]?["status"] as? String == "ok")
        // This machine has both libraries (scripts/install-deps).
        #expect(found.checks["libcrypto"]?["status"] as? String == "ok", "\(found.checks)")
        #expect(found.checks["libpq"]?["status"] as? String == "ok", "\(found.checks)")
    }

    /// libpq and libcrypto hidden in a mount namespace of its own (a bind
    /// mount of /dev/null over each): libcrypto fails (every inventory
    /// write needs it), libpq is a warning (the office only).
    @Test(.enabled(if: isRoot, "needs root: a mount namespace hides libpq.so.5 and libcrypto.so.3"))
    func missingLibrariesAreNamedWithTheirPackages() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cache = try await runTool("/sbin/ldconfig", ["-p"])
        func resolved(_ soname: String) throws -> String {
            let line = cache.stdout.split(separator: "\n").first { $0.contains(soname + " (") }
            return try #require(line?.components(separatedBy: " => ").last, "\(soname) in ldconfig -p")
        }
        let libpq = try resolved("libpq.so.5")
        let libcrypto = try resolved("libcrypto.so.3")
        let script = """
            mount --bind /dev/null "$1" && mount --bind /dev/null "$2" && shift 2 && exec "$@"
            """
        let output = try await runTool(
            "/usr/bin/unshare",
            [
                "-m", "--propagation", "private", "/bin/sh", "-c", script, "sh", libpq, libcrypto,
                builtProduct("beaconbench"),
                "--bus", "unix:path=/nonexistent/beaconbench/bus", "--json", "doctor",
            ],
            environment: ["PATH": "/usr/bin:/bin", "HOME": directory + "/home"], timeout: 60)
        let lines = output.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let crypto = try #require(
            lines.first { $0["name"] as? String == "libcrypto" }, "\(output.stdout) \(output.stderr)")
        #expect(crypto["status"] as? String == "failed")
        #expect(crypto["fix"] as? String == "sudo apt-get install libssl3")
        let pq = try #require(lines.first { $0["name"] as? String == "libpq" })
        #expect(pq["status"] as? String == "warning")
        #expect(pq["fix"] as? String == "sudo apt-get install libpq5")
        #expect(output.status == 3)
    }

    /// Writes an executable script through a child process: a descriptor
    /// this process held open for writing could be inherited by a child
    /// another test spawns at that moment, and the script's exec would
    /// then fail with ETXTBSY.
    static func writeExecutable(_ path: String, _ text: String) async throws {
        let written = try await runTool(
            "/bin/sh", ["-c", "cat > \"$1.new\" && chmod 755 \"$1.new\" && mv \"$1.new\" \"$1\"", "sh", path],
            stdin: text)
        try #require(written.status == 0, "\(written.stderr)")
    }

    /// The station service's state from systemctl (a stand-in that prints
    /// what systemctl list-units prints), and what is said where systemd
    /// does not run.
    @Test func theStationServiceStateIsReported() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var host = HostChecks()
        host.unitDirectories = [directory + "/units"]
        host.systemdRunning = directory + "/run-systemd"
        host.path = directory + "/bin"
        #expect(host.station() == nil, "not installed: no check")

        try FileManager.default.createDirectory(atPath: directory + "/units", withIntermediateDirectories: true)
        try "".write(toFile: directory + "/units/" + HostChecks.unit, atomically: true, encoding: .utf8)
        let chroot = try #require(host.station())
        #expect(chroot.status == .warning && chroot.detail.contains("systemd is not running here"), "\(chroot)")

        try FileManager.default.createDirectory(atPath: host.systemdRunning, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/bin", withIntermediateDirectories: true)
        let systemctl = directory + "/bin/systemctl"
        try await Self.writeExecutable(
            systemctl,
            """
            #!/bin/sh
            echo 'beaconbench-station@hci0.service loaded failed failed beaconbench install-bench station on hci0'
            echo 'beaconbench-station@hci1.service loaded active running beaconbench install-bench station on hci1'

            """)
        let failed = try #require(host.station())
        #expect(failed.status == .failed, "\(failed)")
        #expect(failed.detail.contains("beaconbench-station@hci1.service active (running)"), "\(failed)")
        #expect(failed.fix?.contains("journalctl -u beaconbench-station@hci0.service") == true, "\(failed)")

        try await Self.writeExecutable(systemctl, "#!/bin/sh\nexit 0\n")
        let idle = try #require(host.station())
        #expect(idle.status == .ok && idle.detail.contains("no instance enabled or running"), "\(idle)")
    }

    /// `--version`: the version and commit, the versions of the libraries
    /// linked in (as Debian's -dev packages built it), and with -v the
    /// ones loaded at first use.
    @Test func versionNamesTheCommitAndTheLibraries() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func upstream(_ package: String) async throws -> String {
            let output = try await runTool("/usr/bin/dpkg-query", ["-W", "-f=${Version}", package])
            // 3.40.1-2+deb12u1 → 3.40.1; 8.2-1.3 → 8.2
            return String(output.stdout.split(separator: "-").first ?? "")
        }
        let built = try await runTool(
            builtProduct("beaconbench"), ["--version"], environment: ["PATH": "/usr/bin:/bin"])
        let lines = built.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("beaconbench \(BeaconbenchMain.version) (commit ") == true, "\(lines)")
        let linked = try #require(lines.first { $0.hasPrefix("linked in:") })
        #expect(linked.contains("SQLite \(try await upstream("libsqlite3-dev"))"), "\(linked)")
        #expect(linked.contains("readline \(try await upstream("libreadline-dev"))"), "\(linked)")
        #expect(linked.contains("libdbus-1 \(try await upstream("libdbus-1-dev"))"), "\(linked)")
        #expect(linked.contains("zlib 1."), "\(linked)")
        #expect(!built.stdout.contains("OpenSSL"), "--version alone loads nothing")

        let verbose = try await runTool(builtProduct("beaconbench"), ["--version", "-v"])
        let loaded = try #require(verbose.stdout.split(separator: "\n").first { $0.hasPrefix("loaded at first use:") })
        #expect(loaded.contains("OpenSSL 3."), "\(loaded)")
        #expect(loaded.contains("(libpq \(try await upstream("libpq5")))"), "\(loaded)")

        // Installed, it names the commit it was built from.
        let bin = URL(fileURLWithPath: builtProduct("beaconbench")).deletingLastPathComponent().path
        let install = try await runTool(
            "/usr/bin/env", ["PREFIX=\(directory)/prefix", "BIN=\(bin)", Self.root + "/scripts/install"], timeout: 120)
        #expect(install.status == 0, "\(install.stderr)")
        let head = try await runTool("/usr/bin/git", ["-C", Self.root, "rev-parse", "--short=12", "HEAD"])
        let installed = try await runTool(directory + "/prefix/bin/beaconbench", ["--version"])
        let commit = head.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!commit.isEmpty)
        #expect(
            installed.stdout.hasPrefix("beaconbench \(BeaconbenchMain.version) (commit \(commit)"),
            "\(installed.stdout)")
    }
}
