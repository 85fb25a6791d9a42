import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

/// `beaconbench-bench office generate` (docs/office.md, "The fleet
/// generator"), run as built: the same seed gives the same fleet, byte for
/// byte, whatever the number of processes; every bench's ledger verifies
/// with `beaconbench ledger verify`; a bench file is never written over.
@Suite("The fleet generator: deterministic benches whose ledgers verify", .timeLimit(.minutes(20)))
struct FleetGeneratorTests {
    static let devices = 200

    /// The generator with `arguments` (a small fleet); fails the test unless it exits 0.
    static func generate(_ directory: String, seed: Int, benches: Int = 3, jobs: Int) async throws -> [String: Any] {
        let output = try await runTool(
            builtProduct("beaconbench-bench"),
            [
                "office", "generate", "--benches", String(benches), "--devices", String(devices), "--seed",
                String(seed),
                "--out", directory, "--jobs", String(jobs),
            ], timeout: 900)
        try #require(output.status == 0, "office generate: \(output.stderr)")
        #expect(output.stdout.contains("rows/s"), "\(output.stdout)")
        let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/manifest.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func files(_ manifest: [String: Any]) -> [[String: Any]] {
        manifest["bench_files"] as? [[String: Any]] ?? []
    }

    static func table(_ file: [String: Any], _ name: String) -> (rows: Int, sha256: String) {
        let entry = (file["tables"] as? [String: Any])?[name] as? [String: Any]
        return (entry?["rows"] as? Int ?? -1, entry?["sha256"] as? String ?? "")
    }

    @Test func theSameSeedGivesTheSameFleetAndEveryLedgerVerifies() async throws {
        let directory = try scratchDirectory("fleet")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try await Self.generate(directory + "/a", seed: 31, jobs: 2)
        _ = try await Self.generate(directory + "/b", seed: 31, jobs: 1)
        let other = try await Self.generate(directory + "/c", seed: 32, jobs: 3)
        // The manifest says the same, to the byte, and so do the files.
        let a = try Data(contentsOf: URL(fileURLWithPath: directory + "/a/manifest.json"))
        let b = try Data(contentsOf: URL(fileURLWithPath: directory + "/b/manifest.json"))
        #expect(a == b, "two runs with seed 31 wrote different manifests")
        for index in 0..<3 {
            let name = String(format: "bench-%03d.sqlite", index)
            let one = try Data(contentsOf: URL(fileURLWithPath: directory + "/a/" + name))
            let two = try Data(contentsOf: URL(fileURLWithPath: directory + "/b/" + name))
            #expect(one == two, "\(name) differs between two runs with seed 31")
            let mode = try FileManager.default.attributesOfItem(atPath: directory + "/a/" + name)[.posixPermissions]
            #expect(mode as? Int == 0o600, "\(name) has mode \(String(describing: mode))")
        }
        let files = Self.files(first)
        try #require(files.count == 3)
        #expect(first["seed"] as? Int == 31)
        #expect(first["fleet_devices"] as? Int == 3 * Self.devices)
        let otherFiles = Self.files(other)
        for (index, file) in files.enumerated() {
            // The sizes asked for: 20 outcomes and 50 readings per device,
            // the bench's own devices and a tenth of the previous bench's.
            #expect(Self.table(file, "outcomes").rows == Self.devices * 20)
            #expect(Self.table(file, "readings").rows == Self.devices * 50)
            #expect(Self.table(file, "devices").rows == Self.devices + Self.devices / 10)
            #expect(Self.table(file, "identities").rows == Self.devices)
            for name in ["runs", "trips", "events", "incidents", "assignments"] {
                #expect(Self.table(file, name).rows > 0, "bench \(index) has no \(name)")
            }
            // Another seed, another history.
            for name in ["devices", "outcomes", "readings", "ledger"] {
                #expect(Self.table(file, name).sha256 != Self.table(otherFiles[index], name).sha256, "\(name)")
            }
            #expect(file["bench_id"] as? String != otherFiles[index]["bench_id"] as? String)
            // The ledger verifies, and it is the one the manifest names.
            let path = directory + "/a/" + (file["file"] as? String ?? "")
            let verify = try await runTool(
                builtProduct("beaconbench"), ["--inventory", path, "ledger", "verify"], timeout: 300)
            #expect(verify.status == 0, "ledger verify \(path): \(verify.stdout) \(verify.stderr)")
            let size = file["ledger_size"] as? Int ?? -1
            let root = file["ledger_root"] as? String ?? "?"
            #expect(verify.stdout.contains("ledger ok: \(size) entries, root \(root)"), "\(verify.stdout)")
        }
        // Every other bench sees a tenth of its neighbour's devices.
        let inventory = try Inventory(path: directory + "/a/bench-001.sqlite", readOnly: true)
        let guests = try await inventory.query("SELECT count(*) FROM devices WHERE address LIKE 'D0:00:00:%'")
        #expect(guests == [[.integer(Int64(Self.devices / 10))]])
    }

    @Test func aMissingSeedIsAUsageErrorAndABenchFileIsNeverWrittenOver() async throws {
        let directory = try scratchDirectory("fleet-refused")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bench = builtProduct("beaconbench-bench")
        let noSeed = try await runTool(bench, ["office", "generate", "--devices", "5", "--out", directory])
        #expect(noSeed.status == 2, "\(noSeed.stderr)")
        #expect(noSeed.stderr.contains("--seed is needed"), "\(noSeed.stderr)")
        let existing = directory + "/bench-000.sqlite"
        try Data("not a bench".utf8).write(to: URL(fileURLWithPath: existing))
        let over = try await runTool(
            bench, ["office", "generate", "--devices", "5", "--seed", "1", "--out", directory], timeout: 300)
        #expect(over.status == 1, "\(over.stderr)")
        #expect(over.stderr.contains("bench-000.sqlite exists"), "\(over.stderr)")
        #expect(try String(contentsOfFile: existing, encoding: .utf8) == "not a bench")
        #expect(!FileManager.default.fileExists(atPath: directory + "/manifest.json"))
    }
}

/// Generated benches against a PostgreSQL server of the test's own.
@Suite("The fleet generator: generated benches sync whole", .exclusive(.postgreSQL), .timeLimit(.minutes(20)))
struct FleetGeneratorSyncTests {
    /// Two generated benches sync to one server: every row of each is
    /// there (row by row), every identity is claimed once, and the sync's
    /// own checks of profiles, identities and assignments take the data.
    @Test func generatedBenchesSyncWholeToOneServer() async throws {
        try await withPostgres { server in
            let directory = try scratchDirectory("fleet-sync")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let manifest = try await FleetGeneratorTests.generate(directory, seed: 7, benches: 2, jobs: 2)
            var identities = 0
            for file in FleetGeneratorTests.files(manifest) {
                let path = directory + "/" + (file["file"] as? String ?? "")
                let sync = try await runTool(
                    builtProduct("beaconbench"), ["--inventory", path, "sync", "--to", server.url], timeout: 600)
                #expect(sync.status == 0, "sync \(path): \(sync.stdout) \(sync.stderr)")
                // No server row refused; the few conflicting assignments settled (the later wins).
                #expect(!sync.stderr.contains("sync: refused"), "\(sync.stderr)")
                #expect(sync.stderr.contains("refused 0"), "\(sync.stderr)")
                let inventory = try Inventory(path: path)
                let bench = try await inventory.benchID()
                #expect(bench == file["bench_id"] as? String)
                let differences = try await RowByRow.differences(inventory, server, bench: bench)
                #expect(differences.isEmpty, "\(differences.prefix(10))")
                identities += FleetGeneratorTests.table(file, "identities").rows
                let claimed = try await server.rows("SELECT count(*) FROM identity_claims WHERE bench_id = '\(bench)'")
                #expect(claimed == [[String(FleetGeneratorTests.table(file, "identities").rows)]])
            }
            #expect(try await server.rows("SELECT count(*) FROM identity_claims") == [[String(identities)]])
            // One identity per device across the fleet (the benches' majors differ).
            let duplicates = try await server.rows(
                """
                SELECT count(*) FROM (SELECT major, minor FROM fleet_devices WHERE major IS NOT NULL
                GROUP BY major, minor HAVING count(*) > 1) AS d
                """)
            #expect(duplicates == [["0"]])
            let assigned = try await server.rows("SELECT count(*) FROM fleet_assignments")
            #expect(Int(assigned.first?.first ?? "") ?? 0 > 0, "no assignment reached the server")
        }
    }
}
