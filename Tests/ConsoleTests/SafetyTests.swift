import Foundation
import TestSupport
import Testing

@Suite("least privilege and saved fuzz inputs", .timeLimit(.minutes(5)))
struct SafetyTests {
    /// Every seed and every input that ever crashed a fuzz target, replayed
    /// through the same code (the replayer is beaconbench-fuzz built
    /// normally; scripts/fuzz builds it with libFuzzer).
    @Test(arguments: [
        "batch", "profile", "records", "adverts", "dbus-value", "dbus-wire", "display", "csv", "expansion",
        "gatt-text", "grammar", "rows", "stored-row",
    ])
    func savedFuzzInputsStillPass(target: String) async throws {
        let fuzz = ConsoleFixture.repository + "/Tests/Fuzz"
        let replay = try await runTool(
            builtProduct("beaconbench-fuzz"),
            ["replay", target, fuzz + "/corpus/" + target, fuzz + "/crashes/" + target])
        #expect(replay.status == 0, "\(replay.stderr)")
        #expect(replay.stdout.hasPrefix("\(target): "), "\(replay.stdout)")
    }

    /// A batch others can write is run with a warning; a profile directory
    /// others can write is refused (ProfileDirectoryTests).
    @Test func aBatchOthersCanWriteIsWarnedAbout() async throws {
        let bench = try await ConsoleFixture.start(nil)
        defer { bench.stop() }
        let open = bench.directory + "/open"
        try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: true)
        chmod(open, 0o755)
        try FileManager.default.copyItem(
            atPath: ConsoleFixture.repository + "/profiles/van.json", toPath: open + "/lorry.json")
        let batch = bench.directory + "/shared.batch"
        try "profiles list\n".write(toFile: batch, atomically: true, encoding: .utf8)
        chmod(batch, 0o666)
        let run = try await bench.beaconbench(["--profiles", open, "run", batch])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("warning: \(batch) is writable by anyone"), "\(run.stderr)")
        #expect(run.stdout.contains("lorry"))
    }

    @Test func theInventoryAndItsJournalAreTheOwnersAlone() async throws {
        try await withNewFleet(count: 2) { bench in
            let run = try await bench.beaconbench(["--sim-option", "x", "profiles"])
            #expect(run.status == 1)  // --sim-option without --sim: refused before anything is created
            let info = try await bench.beaconbench(["info", "00000001"])
            #expect(info.status == 0, "\(info.stderr)")
            // The file itself must be there; SQLite may have folded the WAL away.
            #expect(FileManager.default.fileExists(atPath: bench.inventoryPath))
            for suffix in ["", "-wal", "-shm"] {
                let path = bench.inventoryPath + suffix
                guard FileManager.default.fileExists(atPath: path) else { continue }
                let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
                #expect(mode == 0o600, "\(path)")
            }
        }
    }
}
