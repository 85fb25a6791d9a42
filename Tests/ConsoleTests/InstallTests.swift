import Foundation
import TestSupport
import Testing

/// `make install` into a temporary prefix: the installed binary, run from
/// elsewhere with a bare environment, finds its shipped profiles and
/// batches, its man page renders, its completions are in place; `make
/// uninstall` takes it all away. (BIN= installs what the tests built; the
/// default release build installs the same files, built again.)
@Suite("make install", .timeLimit(.minutes(10)))
struct InstallTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test func anInstalledBeaconbenchRunsTheShippedBatchesFromAnywhere() async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("install-\(UUID())").path
        try FileManager.default.createDirectory(atPath: scratch + "/home", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let prefix = scratch + "/prefix"
        // BIN: the executables the tests run (SwiftPM's lock on .build is
        // the test run's own, so nothing is built here).
        let bin = URL(fileURLWithPath: builtProduct("beaconbench")).deletingLastPathComponent().path
        let install = try await runTool(
            "/usr/bin/make", ["-C", Self.root, "install", "PREFIX=\(prefix)", "BIN=\(bin)"], timeout: 300)
        #expect(install.status == 0, "\(install.stdout) \(install.stderr)")
        for file in [
            "bin/beaconbench", "bin/beaconbench-sim", "share/man/man1/beaconbench.1",
            "share/bash-completion/completions/beaconbench", "share/zsh/site-functions/_beaconbench",
            "share/fish/vendor_completions.d/beaconbench.fish", "share/beaconbench/profiles/car.json",
            "share/beaconbench/batches/provision-new.batch", "share/doc/beaconbench/json.md",
        ] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/" + file), "\(file) is not installed")
        }
        // Nothing of the source tree: another directory, a bare environment.
        let environment = [
            "PATH": prefix + "/bin:/usr/bin:/bin", "HOME": scratch + "/home", "NO_COLOR": "1",
            "MANPATH": prefix + "/share/man",
        ]
        func installed(_ arguments: [String]) async throws -> ToolOutput {
            try await runTool(
                "/bin/sh", ["-c", "cd \"$0\" && exec beaconbench \"$@\"", scratch + "/home"] + arguments,
                environment: environment, timeout: 180)
        }
        let profiles = try await installed(["profiles", "list"])
        #expect(profiles.status == 0 && profiles.stdout.contains("truck"), "\(profiles.stderr)")
        let run = try await installed(["--sim", "6", "--sim-option", "--fresh", "--json", "run", "provision-new"])
        #expect(run.status == 0 || run.status == 2, "\(run.stderr)")
        let summary = run.stdout.split(separator: "\n").last { $0.contains("\"kind\":\"summary\"") }
        #expect(summary?.contains("\"devices\":6") == true, "\(run.stdout) \(run.stderr)")
        let named = try await installed(["--sim", "3", "run", "audit.batch", "--dry-run"])
        #expect(named.status == 0 || named.status == 2, "\(named.stderr)")
        let page = try await runTool("/usr/bin/man", ["-P", "cat", "beaconbench"], environment: environment)
        #expect(page.status == 0 && page.stdout.contains("inventory forget"), "\(page.stderr)")

        let uninstall = try await runTool(
            "/usr/bin/make", ["-C", Self.root, "uninstall", "PREFIX=\(prefix)"], timeout: 60)
        #expect(uninstall.status == 0, "\(uninstall.stderr)")
        let left = FileManager.default.enumerator(atPath: prefix)?.compactMap { $0 as? String }.filter {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: prefix + "/" + $0, isDirectory: &isDirectory)
                && !isDirectory.boolValue
        }
        #expect(left?.isEmpty ?? true, "left after uninstall: \(left ?? [])")
    }
}
