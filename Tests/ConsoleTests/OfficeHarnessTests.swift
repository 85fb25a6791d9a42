import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

/// The office harness (`beaconbench-bench office sync|check|faults`,
/// docs/office.md "Faults"), with the built binaries at a small size: 4
/// benches × 100 devices (60 step outcomes each, so a bench's ledger is
/// more than one 5,000-entry chunk).
@Suite(
    "office harness: concurrent sync, union check, kill -9", .serialized, .exclusive(.postgreSQL),
    .timeLimit(.minutes(4)))
struct OfficeHarnessTests {
    static let bench = builtProduct("beaconbench-bench")

    static func office(_ arguments: [String]) async throws -> ToolOutput {
        try await runTool(bench, ["office"] + arguments, timeout: 240)
    }

    /// Four test benches in a new directory.
    static func benches() async throws -> (directory: String, files: [String]) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("office-\(UUID().uuidString)")
            .path
        let files = (0..<4).map { directory + String(format: "/bench-%03d.sqlite", $0) }
        return (directory, files)
    }

    static let make = ["--make", "4", "--devices", "100", "--outcomes-per-device", "60"]

    /// Four benches sync at once: all complete, and the check finds the
    /// server holding exactly their rows — then, once one outcome is
    /// altered, one reading deleted and one identity doubled on the server,
    /// names each (table, bench, key) and fails.
    @Test func syncThenCheckThenTamper() async throws {
        let (directory, files) = try await Self.benches()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await withPostgres(port: 54_447) { server in
            let sync = try await Self.office(["sync", "--to", server.url, "--dir", directory, "--json"] + Self.make)
            #expect(sync.status == 0, "\(sync.stdout)\n\(sync.stderr)")
            #expect(sync.stdout.contains("union exact"), "\(sync.stdout)")
            let round = ConsoleFixture.jsonLines(sync.stdout, kind: "sync_round").first
            #expect(round?["completed"] as? Int == 4, "\(sync.stdout)")
            let check = ConsoleFixture.jsonLines(sync.stdout, kind: "union_check").first
            #expect(check?["ok"] as? Bool == true)
            // Every row of every bench compared: devices, runs, outcomes, readings, identities.
            #expect((check?["rows"] as? Int ?? 0) >= 4 * (100 + 1 + 6_000 + 100) + 3 * 90, "\(sync.stdout)")

            // Nothing changed: the check alone passes.
            let clean = try await Self.office(["check", "--to", server.url] + files)
            #expect(clean.status == 0, "\(clean.stdout)\n\(clean.stderr)")

            let ids = try await files.asyncMap { try await Inventory(path: $0, readOnly: true).benchID() }

            // Two benches that reserved one identity offline (bench 2's
            // device given bench 3's (1003, 5) on both sides): the duplicate
            // is the benches' own, listed and not failed.
            let taken = try await server.rows(
                "SELECT device, major, minor FROM identities WHERE bench_id = '\(ids[2])' ORDER BY device LIMIT 1")
            let device = taken.first?[0] ?? ""
            #expect(device.count == 17, "\(taken)")
            func reserve(_ major: String, _ minor: String) async throws {
                let database = try Database(path: files[2])
                _ = try database.run(
                    "UPDATE identities SET major = ?1, minor = ?2 WHERE device = ?3",
                    [.integer(Int64(major) ?? -1), .integer(Int64(minor) ?? -1), .text(device)])
                _ = try await server.psql(
                    "UPDATE identities SET major = \(Int(major) ?? -1), minor = \(Int(minor) ?? -1)"
                        + " WHERE bench_id = '\(ids[2])' AND device = '\(device)'")
            }
            try await reserve("1003", "5")
            let inherited = try await Self.office(["check", "--to", server.url] + files)
            #expect(inherited.status == 0, "\(inherited.stdout)\n\(inherited.stderr)")
            #expect(
                inherited.stdout.contains(
                    "duplicate identity already in the benches' own rows: identities: (1003, 5) reserved for"),
                "\(inherited.stdout)")
            #expect(!inherited.stdout.contains("duplicate identity: identities:"), "\(inherited.stdout)")
            try await reserve(taken.first?[1] ?? "", taken.first?[2] ?? "")
            _ = try await server.psql(
                "UPDATE outcomes SET status = 'failed' WHERE bench_id = '\(ids[1])' AND local_id = 7")
            _ = try await server.psql("DELETE FROM readings WHERE bench_id = '\(ids[2])' AND local_id = 3")
            _ = try await server.psql(
                """
                INSERT INTO identities (bench_id, device, major, minor, source, profile, run_id, reserved_at)
                SELECT bench_id, 'C2:FF:FF:FF:00:00', major, minor, source, profile, run_id, reserved_at
                FROM identities WHERE bench_id = '\(ids[3])' AND device = 'C2:03:00:05:00:00'
                """)
            // Text the same to Swift's `==`, other bytes (docs/development.md,
            // "Stored values are compared as bytes"): a serial `Café` on the
            // bench is `Cafe` + U+0301 on the server, a model `Å` the
            // Ångström sign U+212B.
            let pair = try await server.rows(
                "SELECT address FROM devices WHERE bench_id = '\(ids[0])' ORDER BY address LIMIT 2"
            ).compactMap(\.first)
            try #require(pair.count == 2, "\(pair)")
            let local = try Database(path: files[0])
            _ = try local.run(
                "UPDATE devices SET serial = ?1 WHERE address = ?2", [.text("Caf\u{E9}"), .text(pair[0])])
            _ = try local.run("UPDATE devices SET model = ?1 WHERE address = ?2", [.text("\u{C5}"), .text(pair[1])])
            _ = try await server.psql(
                "UPDATE devices SET serial = convert_from('\\x43616665cc81'::bytea, 'UTF8') WHERE bench_id = '\(ids[0])'"
                    + " AND address = '\(pair[0])'")
            _ = try await server.psql(
                "UPDATE devices SET model = convert_from('\\xe284ab'::bytea, 'UTF8') WHERE bench_id = '\(ids[0])'"
                    + " AND address = '\(pair[1])'")
            let tampered = try await Self.office(["check", "--to", server.url, "--json"] + files)
            #expect(tampered.status == 1, "\(tampered.stdout)\n\(tampered.stderr)")
            let out = tampered.stdout
            #expect(
                out.contains(
                    "differs: outcomes bench \(ids[1]) key '7': differs: status bench 'changed' server 'failed'"),
                "\(out)")
            #expect(out.contains("differs: readings bench \(ids[2]) key '3': missing on the server"), "\(out)")
            #expect(
                out.contains("differs: identities bench \(ids[3]) key 'C2:FF:FF:FF:00:00': on the server only"),
                "\(out)")
            #expect(
                out.contains(
                    "duplicate identity: identities: (1003, 5) reserved for C2:03:00:05:00:00 C2:FF:FF:FF:00:00"),
                "\(out)")
            #expect(
                out.contains(
                    "differs: devices bench \(ids[0]) key '\(pair[0])': differs: serial bench 'Caf\u{E9}' server 'Cafe\u{301}'"
                        + " (the same text in another Unicode form: bytes 43 61 66 c3 a9 against 43 61 66 65 cc 81)"),
                "\(out)")
            #expect(
                out.contains(
                    "differs: devices bench \(ids[0]) key '\(pair[1])': differs: model bench '\u{C5}' server '\u{212B}'"
                        + " (the same text in another Unicode form: bytes c3 85 against e2 84 ab)"),
                "\(out)")
            let report = ConsoleFixture.jsonLines(out, kind: "union_check").first
            #expect(report?["missing"] as? Int == 1)
            #expect(report?["server_only"] as? Int == 1)
            #expect(report?["differing"] as? Int == 3)
            #expect(out.contains("union NOT exact"))
        }
    }

    /// One of four benches `kill -9`ed once the server holds its first
    /// committed chunk: the next run completes it, nothing lost or doubled.
    /// The server's directory, named, is kept (and said to be); the case's
    /// database is dropped once checked.
    @Test func killedMidSync() async throws {
        let (directory, _) = try await Self.benches()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let faults = try await Self.office(
            [
                "faults", "kill", "--local-server", directory + "/pg", "--dir", directory, "--json", "--logs",
                directory + "/logs",
            ] + Self.make)
        #expect(
            faults.stderr.contains("the server's data directory \(directory)/pg is kept after the run"),
            "\(faults.stderr)")
        let kept = try await LocalPostgres.create(port: 54_441, directory: directory + "/pg")
        try await onThreadOfItsOwn { try kept.start() }
        let databases = try await onThreadOfItsOwn {
            try kept.rows("SELECT datname FROM pg_database WHERE datname LIKE 'fault%'")
        }
        await kept.remove()
        #expect(databases.isEmpty, "the checked case's database was kept: \(databases)")
        #expect(faults.status == 0, "\(faults.stdout)\n\(faults.stderr)")
        let result = ConsoleFixture.jsonLines(faults.stdout, kind: "fault_case").first
        #expect(result?["case"] as? String == "kill")
        #expect((result?["fault"] as? String)?.contains("mid-sync") == true, "\(faults.stdout)")
        #expect(result?["first_exit_codes"] as? [Int] == [-9, 0, 0, 0], "\(faults.stdout)")
        #expect(result?["retried_next"] as? Int == 1)
        #expect(result?["completed_next"] as? Int == 1)
        #expect(result?["lost"] as? Int == 0)
        #expect(result?["doubled"] as? Int == 0)
        #expect(result?["union_exact"] as? Bool == true, "\(faults.stdout)")
    }

    /// A proxy that is not there is named before anything starts: no
    /// bench made, no server started, no case run (found at the third
    /// case, an hour of syncs at the judged size was lost once).
    @Test func missingProxyRefusedBeforeAnyCase() async throws {
        let (directory, _) = try await Self.benches()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let faults = try await Self.office(
            [
                "faults", "restart", "reset", "--proxy", directory + "/no-proxy.py", "--local-server",
                directory + "/pg", "--dir", directory,
            ] + Self.make)
        #expect(faults.status == 2, "\(faults.stdout)\n\(faults.stderr)")
        #expect(faults.stderr.contains("--proxy \(directory)/no-proxy.py: no such file"), "\(faults.stderr)")
        #expect(!faults.stderr.contains("syncing at once"), "\(faults.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/pg"))
        #expect(!FileManager.default.fileExists(atPath: directory + "/bench-000.sqlite"))
    }

    /// A case that fails keeps its database for inspection: one bench's
    /// sync refused in both runs (a wrapper in place of `beaconbench` that
    /// exits 1 for it), so its rows never reach the server; the union is
    /// not exact, the run exits 1, and `fault_restart` is still there.
    @Test func failedCaseKeepsItsDatabase() async throws {
        let (directory, files) = try await Self.benches()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let real = builtProduct("beaconbench")
        let wrapper = directory + "/beaconbench-refusing"
        try """
        #!/bin/sh
        case "$*" in *\(files[3])*) echo "refused by the test" >&2; exit 1 ;; esac
        exec \(real) "$@"

        """.write(toFile: wrapper, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: wrapper)
        let faults = try await Self.office(
            [
                "faults", "restart", "--local-server", directory + "/pg", "--dir", directory, "--json",
                "--beaconbench", wrapper, "--logs", directory + "/logs",
            ] + Self.make)
        #expect(faults.status == 1, "\(faults.stdout)\n\(faults.stderr)")
        #expect(
            faults.stderr.contains("restart: database fault_restart kept: the case failed"), "\(faults.stderr)")
        let result = ConsoleFixture.jsonLines(faults.stdout, kind: "fault_case").first
        #expect(result?["union_exact"] as? Bool == false, "\(faults.stdout)")
        #expect((result?["lost"] as? Int ?? 0) > 0, "\(faults.stdout)")
        let kept = try await LocalPostgres.create(port: 54_442, directory: directory + "/pg")
        try await onThreadOfItsOwn { try kept.start() }
        let databases = try await onThreadOfItsOwn {
            try kept.rows("SELECT datname FROM pg_database WHERE datname LIKE 'fault%'")
        }
        await kept.remove()
        #expect(databases == [["fault_restart"]], "\(databases)")
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async throws -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
