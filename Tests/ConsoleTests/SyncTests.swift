import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

/// A PostgreSQL server of the test's own: initdb into a temporary
/// directory, listening only on a Unix socket there.
final class PostgresServer: Sendable {
    let directory: String
    let port = 54_329
    let binaries: String

    var url: String { "postgresql:///postgres?host=\(directory)&port=\(port)&user=bench" }

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        guard let version = versions.sorted().last else {
            throw TestSupportError("PostgreSQL is not installed (apt-get install postgresql)")
        }
        binaries = "/usr/lib/postgresql/\(version)/bin"
    }

    /// Runs a PostgreSQL program as the `postgres` user when we are root
    /// (it refuses to run as root).
    func asOwner(_ program: String, _ arguments: [String]) throws -> (status: Int32, log: String) {
        // No pipes: the server started by pg_ctl would hold them open.
        let path = binaries + "/" + program
        let log = directory + "/\(program).out"
        let child =
            getuid() == 0
            ? try ChildProcess(
                "/usr/bin/setpriv", ["--reuid=postgres", "--regid=postgres", "--init-groups", path] + arguments,
                standardOutput: log, standardError: log + ".err")
            : try ChildProcess(path, arguments, standardOutput: log, standardError: log + ".err")
        let (status, _) = child.waitForExit()
        return (status, (try? String(contentsOfFile: log + ".err", encoding: .utf8)) ?? "")
    }

    func initialize() throws {
        if getuid() == 0 { _ = try runToolBlocking("/bin/chown", ["-R", "postgres", directory]) }
        let made = try asOwner("initdb", ["-D", directory + "/data", "-A", "trust", "-U", "bench", "--no-sync"])
        guard made.status == 0 else { throw TestSupportError("initdb: \(made.log)") }
    }

    func start() throws {
        let started = try asOwner(
            "pg_ctl",
            [
                "-D", directory + "/data", "-l", directory + "/log", "-w", "-o",
                "-k \(directory) -h '' -p \(port) -c fsync=off", "start",
            ])
        guard started.status == 0 else { throw TestSupportError("pg_ctl start: \(started.log)") }
    }

    func stop() {
        _ = try? asOwner("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
    }

    func remove() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// One number from the server.
    func count(_ sql: String) throws -> Int {
        let result = try runToolBlocking("/usr/bin/psql", [url, "-Atc", sql])
        guard result.status == 0, let value = Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSupportError("psql: \(result.stderr)")
        }
        return value
    }
}

@Suite("sync to a PostgreSQL server", .serialized)
struct SyncTests {
    static func localCount(_ inventory: Inventory, _ table: String) async throws -> Int {
        let sql =
            switch table {
            case "devices": "SELECT count(*) FROM devices"
            case "runs": "SELECT count(*) FROM runs"
            default: "SELECT count(*) FROM outcomes"
            }
        return Int(try await inventory.query(sql).first?.first?.integer ?? -1)
    }

    @Test func twoBenchesSyncIdempotentlyAndAServerDownIsExit3() async throws {
        let server = try PostgresServer()
        defer { server.remove() }
        try server.initialize()
        try server.start()

        // Two benches; the second's four beacons were on the first bench too.
        try await withNewFleet(count: 6) { first in
            try await withNewFleet(count: 4) { second in
                for bench in [first, second] {
                    let run = try await bench.beaconbench([
                        "run", bench.batch("provision-new.batch"), "--set", "scan=1s",
                    ])
                    #expect(run.status == 0, "\(run.stderr)")
                    let sync = try await bench.beaconbench(["sync", "--to", server.url])
                    #expect(sync.status == 0, "\(sync.stderr)")
                    #expect(sync.stdout.hasPrefix("synced bench "), "\(sync.stdout)")
                    #expect(!sync.stdout.contains(server.url) && !sync.stderr.contains(server.url))
                    // Again: nothing is duplicated.
                    #expect(try await bench.beaconbench(["sync", "--to", server.url]).status == 0)
                }
                for bench in [first, second] {
                    let inventory = try Inventory(path: bench.inventoryPath)
                    let id = try await inventory.benchID()
                    for table in ["devices", "runs", "outcomes"] {
                        let remote = try server.count("SELECT count(*) FROM \(table) WHERE bench_id = '\(id)'")
                        #expect(remote == (try await Self.localCount(inventory, table)), "\(table) of \(id)")
                    }
                }
                // The fleet, once per beacon however many benches saw it.
                #expect(try server.count("SELECT count(*) FROM fleet_devices") == 6)
                #expect(try server.count("SELECT count(*) FROM devices") == 10)
                #expect(try server.count("SELECT count(*) FROM benches") == 2)

                // The server down: a clear error, exit 3, the local inventory untouched.
                server.stop()
                let before = try await Self.localCount(try Inventory(path: first.inventoryPath), "outcomes")
                let down = try await first.beaconbench(["sync", "--to", server.url])
                #expect(down.status == 3, "\(down.stderr)")
                #expect(down.stderr.contains("cannot connect to the server"), "\(down.stderr)")
                #expect(try await Self.localCount(try Inventory(path: first.inventoryPath), "outcomes") == before)
                // Back up: the next sync completes.
                try server.start()
                #expect(try await first.beaconbench(["sync", "--to", server.url]).status == 0)
            }
        }
    }
}
