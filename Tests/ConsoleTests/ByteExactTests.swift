import Foundation
import Inventory
import TestSupport
import Testing

/// Stored values are compared as bytes (docs/development.md, "Stored
/// values are compared as bytes"): text rewritten in a real inventory file
/// into a canonically equivalent form — `é` as `e` + U+0301, `Å` as the
/// Ångström sign U+212B — or into bytes that are not UTF-8 is a difference
/// `ledger verify` (the built binary) finds and names, though Swift's
/// `String` would call the two equal.
@Suite("stored values compared as bytes: ledger verify", .timeLimit(.minutes(5)))
struct ByteExactTests {
    static let first = "C0:1E:6D:EA:89:86"
    static let second = "C1:EC:D7:13:92:60"

    /// An inventory whose first device's serial is `Café` (é as U+00E9),
    /// whose second's is `Å-17` (U+00C5), whose model is U+FFFD, and a run
    /// with a step whose detail holds U+FFFD; its ledger verifies.
    static func inventory() async throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("exact-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/inventory.sqlite"
        let inventory = try Inventory(path: path)
        var one = DeviceRecord(address: first)
        one.serial = "Caf\u{E9}"
        one.battery = 80
        try await inventory.recordDevice(one)
        var two = DeviceRecord(address: second)
        two.serial = "\u{C5}-17"
        two.model = "\u{FFFD}"
        try await inventory.recordDevice(two)
        let run = try await inventory.beginRun(.init(command: "run provision.batch", operatorName: "ana"))
        let step = try await inventory.beginStep(run: run, device: first, step: "apply car")
        try await inventory.finishStep(step, .changed, detail: "braking \u{FFFD}")
        try await inventory.endRun(run, .finished)
        let verify = try await Self.verify(path)
        try #require(verify.status == 0, "the untouched inventory: \(verify.stdout)\(verify.stderr)")
        return path
    }

    static func verify(_ path: String) async throws -> ToolOutput {
        try await runTool(
            builtProduct("beaconbench"), ["--inventory", path, "--json", "ledger", "verify"], timeout: 120)
    }

    static func sqlite(_ path: String, _ sql: String) async throws {
        let edit = try await runTool("/usr/bin/sqlite3", [path, sql])
        try #require(edit.status == 0, "sqlite3 \(sql): \(edit.stderr)")
    }

    /// The findings' messages of `ledger verify --json`.
    static func messages(_ output: ToolOutput) -> [String] {
        let line = ConsoleFixture.jsonLines(output.stdout, kind: "ledger").first
        return (line?["findings"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
    }

    /// Whether `text` holds `part` byte for byte (`String.contains` would
    /// take a canonically equivalent part).
    static func holds(_ text: String, _ part: String) -> Bool {
        let bytes = Array(text.utf8)
        let wanted = Array(part.utf8)
        guard bytes.count >= wanted.count else { return false }
        return (0...(bytes.count - wanted.count)).contains { Array(bytes[$0..<($0 + wanted.count)]) == wanted }
    }

    @Test func aSerialRewrittenInAnotherUnicodeFormIsFound() async throws {
        let path = try await Self.inventory()
        // `Cafe` + U+0301 and the Ångström sign U+212B, written as bytes.
        try await Self.sqlite(
            path, "UPDATE devices SET serial = CAST(X'43616665CC81' AS TEXT) WHERE address = '\(Self.first)'")
        try await Self.sqlite(
            path, "UPDATE devices SET serial = CAST(X'E284AB2D3137' AS TEXT) WHERE address = '\(Self.second)'")
        // The strings Swift calls equal: the test's premise.
        #expect("Cafe\u{301}" == "Caf\u{E9}" && "\u{212B}-17" == "\u{C5}-17")
        let verify = try await Self.verify(path)
        #expect(verify.status == 2, "\(verify.stdout)\(verify.stderr)")
        let messages = Self.messages(verify)
        #expect(messages.count == 2, "\(messages)")
        let cafe = messages.first { Self.holds($0, "devices \"\(Self.first)\": serial is") }
        #expect(
            cafe.map {
                Self.holds($0, "serial is \"Cafe\u{301}\" but the ledger says \"Caf\u{E9}\"")
                    && Self.holds($0, "bytes 43 61 66 65 cc 81 against 43 61 66 c3 a9")
            } == true, "\(messages)")
        let angstrom = messages.first { Self.holds($0, "devices \"\(Self.second)\": serial is") }
        #expect(
            angstrom.map { Self.holds($0, "bytes e2 84 ab 2d 31 37 against c3 85 2d 31 37") } == true, "\(messages)")
    }

    @Test func textThatIsNotUTF8IsFoundNotRepaired() async throws {
        let path = try await Self.inventory()
        // U+FFFD rewritten as the byte FF, which a UTF-8 decoder repairs to
        // U+FFFD: in a row the ledger covers, and in a sealed row (its
        // trigger dropped and made again, the same text, around the edit).
        try await Self.sqlite(
            path, "UPDATE devices SET model = CAST(X'FF' AS TEXT) WHERE address = '\(Self.second)'")
        let trigger = try await runTool(
            "/usr/bin/sqlite3", [path, "SELECT sql FROM sqlite_schema WHERE name = 'outcomes_sealed_update'"])
        let text = trigger.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(text.hasPrefix("CREATE TRIGGER"), "\(trigger.stdout)\(trigger.stderr)")
        try await Self.sqlite(
            path,
            "DROP TRIGGER outcomes_sealed_update; UPDATE outcomes SET detail = CAST(X'6272616B696E6720FF' AS TEXT); \(text);"
        )
        let verify = try await Self.verify(path)
        #expect(verify.status == 2, "\(verify.stdout)\(verify.stderr)")
        let messages = Self.messages(verify)
        // The two, and (the sealed entry's leaf changed) the head that no
        // longer matches the entries.
        #expect(messages.count == 3, "\(messages)")
        #expect(
            messages.contains { Self.holds($0, "model is {\"blob\":\"ff\"} but the ledger says \"\u{FFFD}\"") },
            "\(messages)")
        #expect(messages.contains { Self.holds($0, "devices \"\(Self.second)\": model is") }, "\(messages)")
        #expect(
            messages.contains { Self.holds($0, "(outcomes ") && Self.holds($0, "is not what was recorded") },
            "\(messages)")
    }

    /// scripts/golden compares outputs with `diff` after
    /// scripts/lib/golden_normalise.py: what the normaliser does not replace
    /// comes out byte for byte — both Unicode forms of a text, bytes that
    /// are not UTF-8 — so two outputs that differ only so still differ.
    @Test func theGoldenNormaliserKeepsBytes() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/lib/golden_normalise.py").path
        let input: [UInt8] =
            Array("serial Caf\u{E9} Cafe\u{301} \u{C5} \u{212B} digits \u{661}\u{662} ms\n".utf8) + [0xFF, 0x0A]
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("golden-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("in")
        try Data(input).write(to: file)
        let out = directory.appendingPathComponent("out")
        let run = try await runTool(
            "/bin/sh", ["-c", "python3 \"$0\" /nonexistent < \"$1\" > \"$2\"", script, file.path, out.path])
        #expect(run.status == 0, "\(run.stderr)")
        let output = try #require(FileManager.default.contents(atPath: out.path))
        #expect(Array(output) == input, "\(Array(output)) against \(input)")
        // And what it replaces, it still replaces (ASCII digits).
        try Data("took 12 ms\n".utf8).write(to: file)
        _ = try await runTool(
            "/bin/sh", ["-c", "python3 \"$0\" /nonexistent < \"$1\" > \"$2\"", script, file.path, out.path])
        #expect(FileManager.default.contents(atPath: out.path) == Data("took <dur>\n".utf8))
    }

    @Test func theSameBytesWrittenAgainAreNoFinding() async throws {
        // The control: the serial rewritten with its own bytes is no change.
        let path = try await Self.inventory()
        try await Self.sqlite(
            path, "UPDATE devices SET serial = CAST(X'436166C3A9' AS TEXT) WHERE address = '\(Self.first)'")
        let verify = try await Self.verify(path)
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(Self.messages(verify).isEmpty)
    }
}
