import Foundation
import TestSupport
import Testing

/// Batches and profiles built to cost memory or flood a terminal: each is a
/// clear error naming the file and line, exit 1, in bounded time and
/// memory, with nothing touched.
@Suite("hostile batches and profiles", .timeLimit(.minutes(5)))
struct HostileFileTests {
    /// Runs the built beaconbench under a virtual-memory limit (`ulimit -v`,
    /// KiB), the way a careful reviewer would.
    func limited(
        _ bench: ConsoleFixture, kilobytes: Int = 262_144, _ arguments: [String]
    ) async throws -> ToolOutput {
        let command =
            (["ulimit -v \(kilobytes); exec \"$0\" \"$@\"", builtProduct("beaconbench")] + [
                "--bus", bench.busAddress, "--inventory", bench.inventoryPath,
            ] + arguments)
        return try await runTool("/bin/sh", ["-c"] + command, environment: bench.environment, timeout: 60)
    }

    /// Seven levels of `set` lines, each ten times the one before: 5 GB
    /// once expanded, 360 bytes written.
    @Test func nestedVariablesAreRefusedWithinMemory() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        var lines = ["set a " + String(repeating: "x", count: 50)]
        var previous = "a"
        for name in ["b", "c", "d", "e", "f", "g", "h"] {
            lines.append("set \(name) " + String(repeating: "${\(previous)}", count: 10))
            previous = name
        }
        lines.append("scan ${h}")
        let batch = bench.directory + "/nested.batch"
        try lines.joined(separator: "\n").write(toFile: batch, atomically: true, encoding: .utf8)
        let run = try await limited(bench, ["run", batch])
        #expect(run.status == 1, "\(run.stderr)")
        #expect(run.stderr.contains("nested.batch:5:"), "\(run.stderr)")
        #expect(run.stderr.contains("once ${d} is expanded"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: bench.inventoryPath))

        // Deep rather than wide: nine levels of one variable each.
        lines = ["set v0 x"] + (1...9).map { "set v\($0) ${v\($0 - 1)}" }
        try lines.joined(separator: "\n").write(toFile: batch, atomically: true, encoding: .utf8)
        let deep = try await limited(bench, ["run", batch])
        #expect(deep.status == 1, "\(deep.stderr)")
        #expect(deep.stderr.contains("nested.batch:9:1: error: 'v8' is defined through 9 levels"), "\(deep.stderr)")
    }

    /// A 10 MB line of escape sequences: refused before it is parsed, and
    /// the message quotes none of it raw.
    @Test func aHugeLineIsRefusedAndNotEchoed() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let batch = bench.directory + "/huge.batch"
        try ("scan " + String(repeating: "\u{1B}[2J", count: 2_500_000) + "\n").write(
            toFile: batch, atomically: true, encoding: .utf8)
        let run = try await limited(bench, ["run", batch])
        #expect(run.status == 1)
        #expect(run.stderr.contains("huge.batch: is larger than 1 MiB"), "\(run.stderr.prefix(300))")
        #expect(run.stderr.utf8.count < 300)

        // Under the file bound but over the line bound: the line is named
        // and quoted as its first characters, made visible.
        try ("profiles list\nscan " + String(repeating: "\u{1B}[2J", count: 20_000) + "\n").write(
            toFile: batch, atomically: true, encoding: .utf8)
        let long = try await limited(bench, ["run", batch])
        #expect(long.status == 1)
        #expect(
            long.stderr.contains("huge.batch:2:1: error: the line is longer than 65536 characters"),
            "\(long.stderr.prefix(300))")
        #expect(long.stderr.contains("'scan \\x1b[2J"), "\(long.stderr.prefix(300))")
        #expect(!long.stderr.contains("\u{1B}"))
        #expect(long.stderr.utf8.count < 400)
    }

    @Test func bytesThatAreNotUTF8AreNamedByLineAndColumn() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let batch = bench.directory + "/latin1.batch"
        try Data("profiles list\nset name Gr".utf8 + [0xFC, 0x6E] + Data("\n".utf8)).write(
            to: URL(fileURLWithPath: batch))
        let run = try await bench.beaconbench(["run", batch])
        #expect(run.status == 1)
        #expect(run.stderr.contains("latin1.batch:2:12: error: not UTF-8 text (byte \\xfc)"), "\(run.stderr)")
    }

    @Test func controlCharactersFromABatchAreShownNotObeyed() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let batch = bench.directory + "/escapes.batch"
        try "profiles list\nfoo\u{1B}]0;pwned\u{07}\u{1B}[2J\u{9B}31m\u{202E} bar\n".write(
            toFile: batch, atomically: true, encoding: .utf8)
        let run = try await bench.beaconbench(["run", batch])
        #expect(run.status == 1)
        #expect(
            run.stderr.contains(
                "escapes.batch:2:1: error: unknown command 'foo\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e'"),
            "\(run.stderr)")
        #expect(
            run.stderr.unicodeScalars.allSatisfy {
                $0 == "\n" || ($0.value >= 0x20 && $0.value != 0x7F && !(0x80...0x9F).contains($0.value))
            })
    }

    /// A profile with a 2 MiB description, one with a long one, one whose
    /// file name holds an escape: each refused, naming the file.
    @Test func oversizedProfilesAreRefused() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let directory = bench.directory + "/profiles"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let van = try String(contentsOfFile: ConsoleFixture.repository + "/profiles/van.json", encoding: .utf8)
        let object = try JSONSerialization.jsonObject(with: Data(van.utf8)) as! [String: Any]
        func write(_ name: String, description: String) throws {
            var copy = object
            copy["description"] = description
            try JSONSerialization.data(withJSONObject: copy).write(to: URL(fileURLWithPath: directory + "/" + name))
        }

        try write("huge.json", description: String(repeating: "d", count: 2 << 20))
        let huge = try await limited(bench, ["--profiles", directory, "profiles", "list"])
        #expect(huge.status == 1)
        #expect(huge.stderr.contains("huge.json: larger than 1 MiB"), "\(huge.stderr)")
        try FileManager.default.removeItem(atPath: directory + "/huge.json")

        try write("wordy.json", description: String(repeating: "d", count: 5000))
        let wordy = try await bench.beaconbench(["--profiles", directory, "profiles", "list"])
        #expect(wordy.status == 1)
        #expect(wordy.stderr.contains("wordy.json: description: 5000 characters; at most 1000"), "\(wordy.stderr)")
        try FileManager.default.removeItem(atPath: directory + "/wordy.json")

        try write("van\u{1B}[2J.json", description: "a van")
        let named = try await bench.beaconbench(["--profiles", directory, "profiles", "list"])
        #expect(named.status == 1)
        #expect(named.stderr.contains("van\\x1b[2J.json: a profile's name"), "\(named.stderr)")
        #expect(!named.stderr.contains("\u{1B}"))
    }
}
