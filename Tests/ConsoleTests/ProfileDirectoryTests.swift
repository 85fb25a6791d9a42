import Foundation
import Profiles
import TestSupport
import Testing

/// Profile directories as trust boundaries (docs/profiles.md, "Where
/// profiles are read from"): one that another user owns or others may
/// write is refused with its name and the fix; only regular files are
/// read, so a FIFO or a link in it blocks nothing and reads nothing; a key
/// written twice is an error at FILE:LINE:COL. Each refusal exits 1 having
/// touched nothing (no inventory is created).
@Suite("profile directories: whose, who may write, what is read", .timeLimit(.minutes(5)))
struct ProfileDirectoryTests {
    /// A bench whose profile directory `profiles` holds a copy of the
    /// shipped van as `lorry.json`, mode 0755, files 0644.
    static func bench() async throws -> (ConsoleFixture, String) {
        let bench = try await ConsoleFixture.start(nil)
        let directory = bench.directory + "/profiles"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        chmod(bench.directory, 0o755)
        chmod(directory, 0o755)
        try FileManager.default.copyItem(
            atPath: ConsoleFixture.repository + "/profiles/van.json", toPath: directory + "/lorry.json")
        chmod(directory + "/lorry.json", 0o644)
        return (bench, directory)
    }

    /// `beaconbench ARGUMENTS` run from `directory` (its `./profiles` is
    /// the working-directory one).
    static func beaconbench(
        _ bench: ConsoleFixture, in directory: String, _ arguments: [String], timeout: TimeInterval = 60
    ) async throws -> ToolOutput {
        try await runTool(
            "/usr/bin/env",
            ["-C", directory, builtProduct("beaconbench"), "--inventory", bench.inventoryPath] + arguments,
            environment: bench.environment, timeout: timeout)
    }

    /// A refusal: exit 1, the message, and no inventory made.
    static func expectRefused(_ run: ToolOutput, _ message: String, _ bench: ConsoleFixture) {
        #expect(run.status == 1, "exit \(run.status): \(run.stderr)")
        #expect(run.stderr.contains(message), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: bench.inventoryPath), "the inventory was created")
    }

    @Test func aSafeDirectoryIsUsedFromTheWorkingDirectoryAndFromProfiles() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        let here = try await Self.beaconbench(bench, in: bench.directory, ["profiles", "list"])
        #expect(here.status == 0, "\(here.stderr)")
        #expect(here.stdout.contains("lorry"), "./profiles was read: \(here.stdout)")
        let given = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        #expect(given.status == 0, "\(given.stderr)")
        #expect(given.stdout.contains("lorry: ok"), "\(given.stdout)")
    }

    @Test(arguments: [0o777, 0o775, 0o757])
    func aDirectoryOthersCanWriteIsRefused(mode: Int) async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        chmod(directory, mode_t(mode))
        let shown = String(mode, radix: 8)
        // From the working directory, for any command, and named with --profiles.
        let here = try await Self.beaconbench(bench, in: bench.directory, ["inventory", "list"])
        Self.expectRefused(here, "error: \(directory): a profile directory writable by", bench)
        #expect(here.stderr.contains("(mode 0\(shown))"), "\(here.stderr)")
        #expect(here.stderr.contains("fix: chmod go-w \(directory)"), "\(here.stderr)")
        let given = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        Self.expectRefused(given, "fix: chmod go-w \(directory)", bench)
        // Fixed as the message says, it is used.
        chmod(directory, 0o755)
        let fixed = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        #expect(fixed.status == 0 && fixed.stdout.contains("lorry: ok"), "\(fixed.stderr)")
    }

    @Test func aDirectoryAboveThatOthersCanWriteIsRefusedUnlessSticky() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        chmod(bench.directory, 0o777)
        let open = try await bench.beaconbench(["--profiles", directory, "profiles", "list"])
        Self.expectRefused(open, "\(bench.directory) above it is writable by others (mode 0777)", bench)
        #expect(open.stderr.contains("fix: chmod go-w \(bench.directory)"), "\(open.stderr)")
        // Sticky, as /tmp: nobody else may rename what is in it.
        chmod(bench.directory, 0o1777)
        let sticky = try await bench.beaconbench(["--profiles", directory, "profiles", "list"])
        #expect(sticky.status == 0 && sticky.stdout.contains("lorry"), "\(sticky.stderr)")
    }

    @Test func aProfileOthersCanWriteIsRefused() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        chmod(directory + "/lorry.json", 0o666)
        let run = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        Self.expectRefused(run, "\(directory)/lorry.json: a profile writable by anyone (mode 0666) is not used", bench)
        #expect(run.stderr.contains("fix: chmod go-w \(directory)/lorry.json"), "\(run.stderr)")
    }

    /// Root only: another user's directory (chowned to nobody). Not root,
    /// the test is skipped (shown as skipped), never counted as passed.
    @Test(.enabled(if: getuid() == 0, "chown to another user needs root"))
    func anotherUsersDirectoryIsRefused() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        #expect(chown(directory, 65534, 65534) == 0, "chown: \(String(cString: strerror(errno)))")
        let here = try await Self.beaconbench(bench, in: bench.directory, ["inventory", "list"])
        Self.expectRefused(here, "error: \(directory): a profile directory owned by uid 65534", bench)
        #expect(here.stderr.contains("fix: chown root \(directory)"), "\(here.stderr)")
        // A profile of another user's in a directory of ours, too.
        #expect(chown(directory, 0, 0) == 0)
        #expect(chown(directory + "/lorry.json", 65534, 65534) == 0)
        let file = try await bench.beaconbench(["--profiles", directory, "profiles", "list"])
        Self.expectRefused(file, "\(directory)/lorry.json: a profile owned by uid 65534", bench)
    }

    /// A FIFO named `car.json`: every command answers at once (a refusal
    /// naming it), none waits for a writer.
    @Test func aFIFONamedLikeAProfileBlocksNothing() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        #expect(mkfifo(directory + "/car.json", 0o644) == 0)
        for arguments in [["inventory", "list"], ["profiles", "check"]] {
            // Blocked on the FIFO, the command would be killed at the cap
            // (SIGTERM): not the refusal (exit 1, the message) checked here.
            let run = try await Self.beaconbench(bench, in: bench.directory, arguments, timeout: 120)
            #expect(run.status != 143 && run.status != 15, "\(arguments) was still waiting on the FIFO car.json")
            Self.expectRefused(run, "\(directory)/car.json: is a FIFO, not a regular file", bench)
        }
    }

    @Test func aLinkedProfileIsRefused() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        let elsewhere = bench.directory + "/elsewhere.json"
        try FileManager.default.copyItem(atPath: ConsoleFixture.repository + "/profiles/car.json", toPath: elsewhere)
        try FileManager.default.createSymbolicLink(atPath: directory + "/car.json", withDestinationPath: elsewhere)
        let run = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        Self.expectRefused(run, "\(directory)/car.json: is a symbolic link, not a regular file", bench)
    }

    /// The same key in sibling objects is no duplicate; the same key twice
    /// in one object, however deep, is.
    @Test func duplicateKeysAreFoundAtAnyDepthAndOnlyWithinOneObject() throws {
        let valid = """
            {"description": "x",
             "driving_behaviour": {"cornering_mg": 300, "braking_mg": 300, "acceleration_mg": 300, "duration_ms": 500, "enabled": ENABLED},
             "requirements": {"minimum_battery_percent": 20, "minimum_firmware": "1.0.7", "calibration_required": false}}
            """
        func refusal(_ enabled: String) -> ProfileError? {
            do {
                _ = try ProfileLoader.parse(
                    Data(valid.replacingOccurrences(of: "ENABLED", with: enabled).utf8), name: "p", file: "p.json")
                return nil
            } catch {
                return error as? ProfileError
            }
        }
        #expect(refusal(#"["DB"]"#) == nil)
        let siblings = refusal(#"[{"x": 1}, {"x": 1}]"#)
        #expect(siblings?.line == nil, "\(siblings?.description ?? "")")
        #expect(siblings?.description.contains("duplicate") == false, "\(siblings?.description ?? "")")
        let deep = refusal(#"[[{"y": {"x": 1, "x": 2}}]]"#)
        #expect(deep?.description.hasPrefix("p.json:2:") == true, "\(deep?.description ?? "")")
        #expect(deep?.description.contains("duplicate key 'x'") == true, "\(deep?.description ?? "")")
        let exponent = refusal(#"[{"n": 5E2}]"#)
        #expect(exponent?.description.contains("an exponent") == true, "\(exponent?.description ?? "")")
    }

    @Test func aKeyWrittenTwiceIsAnErrorAtItsLineAndColumn() async throws {
        let (bench, directory) = try await Self.bench()
        defer { bench.stop() }
        let text = """
            {
              "description": "twice",
              "driving_behaviour": {
                "cornering_mg": 300, "braking_mg": 300, "acceleration_mg": 300, "duration_ms": 500,
                "enabled": ["DB"], "cornering_mg": 5000
              },
              "requirements": {"minimum_battery_percent": 20, "minimum_firmware": "1.0.7", "calibration_required": false}
            }
            """
        try text.write(toFile: directory + "/twice.json", atomically: true, encoding: .utf8)
        let run = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        Self.expectRefused(
            run,
            "error: \(directory)/twice.json:5:24: duplicate key 'cornering_mg' (first at line 4, column 5)", bench)
        // At the top level, and spelt with an escape.
        try #"{"description": "a", "descr\u0069ption": "b"}"#.write(
            toFile: directory + "/twice.json", atomically: true, encoding: .utf8)
        let top = try await bench.beaconbench(["--profiles", directory, "profiles", "check"])
        Self.expectRefused(
            top, "\(directory)/twice.json:1:22: duplicate key 'description' (first at line 1, column 2)", bench)
    }
}
