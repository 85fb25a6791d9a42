import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL server of one's own, from Debian's packages: initdb into a
/// temporary directory, listening only on a Unix socket there, no
/// authentication (the socket directory is private). For the sync tests
/// and benchmarks; when run as root, the server runs as the `postgres`
/// user (it refuses root).
public final class LocalPostgres: Sendable {
    public let directory: String
    public let port: Int
    let binaries: String

    /// The URL a client connects with: database `postgres`, user `bench`.
    public var url: String { "postgresql:///postgres?host=\(directory)&port=\(port)&user=bench" }

    /// Whether `remove()` deletes the cluster (one made in a temporary
    /// directory) or only stops it (one in a directory the caller named).
    public let temporary: Bool

    /// The URL of database `database`, over the Unix socket.
    public func url(_ database: String) -> String {
        "postgresql:///\(database)?host=\(directory)&port=\(port)&user=bench"
    }

    /// The Unix socket's path (what a proxy in front of it connects to).
    public var socket: String { directory + "/.s.PGSQL.\(port)" }

    /// Creates the cluster (not started). `port` only names the socket
    /// file. In `directory` when given (kept, and reused when it already
    /// holds a cluster), else in a temporary one.
    @available(*, noasync, message: "initdb blocks its thread: use `await LocalPostgres.create(port:)`")
    public init(port: Int = 54_329, directory given: String? = nil) throws {
        self.port = port
        temporary = given == nil
        directory =
            given ?? FileManager.default.temporaryDirectory.appendingPathComponent("pg-\(UUID().uuidString)").path
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        guard let version = versions.sorted(by: { (Int($0) ?? 0) < (Int($1) ?? 0) }).last else {
            throw LocalBusError("PostgreSQL is not installed (scripts/install-deps installs it)")
        }
        binaries = "/usr/lib/postgresql/\(version)/bin"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if getuid() == 0 { chownToPostgres(directory) }
        guard !FileManager.default.fileExists(atPath: directory + "/data/PG_VERSION") else { return }
        let made = try asOwner("initdb", ["-D", directory + "/data", "-A", "trust", "-U", "bench", "--no-sync"])
        guard made.status == 0 else { throw LocalBusError("initdb: \(made.log)") }
    }

    /// How long `pg_ctl` may wait for the server to start or stop: a stall
    /// guard (a start takes about a second, more under load), not a pace.
    static let pgCtlTimeout = "300"

    /// Starts the server and returns once it accepts connections.
    ///
    /// Readiness is the server's own word, not a sleep: `pg_ctl start -w`
    /// (PostgreSQL 10 and later) reads the status line the postmaster writes
    /// into `postmaster.pid`, and returns when it says `ready` (written once
    /// the server accepts connections) or when the postmaster dies, or after
    /// `-t` seconds. `pg_isready` on the socket then confirms it from the
    /// client's side, once.
    /// (PostgreSQL's default `max_connections` is 100: a hundred benches
    /// syncing at once need more, `start(maxConnections:)`.)
    public func start() throws { try start(maxConnections: nil) }

    /// `start()`, with `max_connections` when given.
    public func start(maxConnections: Int?) throws {
        let started = try asOwner(
            "pg_ctl",
            [
                "-D", directory + "/data", "-l", directory + "/log", "-w", "-t", Self.pgCtlTimeout, "-o",
                "-k \(directory) -h '' -p \(port) -c fsync=off -c synchronous_commit=off"
                    + (maxConnections.map { " -c max_connections=\($0)" } ?? ""),
                "start",
            ])
        guard started.status == 0 else {
            let log = (try? String(contentsOfFile: directory + "/log", encoding: .utf8)) ?? ""
            throw LocalBusError("pg_ctl start: \(started.log) \(log.suffix(2000))")
        }
        let ready = try asOwner("pg_isready", ["-h", directory, "-p", String(port), "-U", "bench", "-d", "postgres"])
        guard ready.status == 0 else {
            throw LocalBusError("pg_ctl said the server was ready, pg_isready did not (status \(ready.status))")
        }
    }

    /// Stops the server at once (like a crash or a pulled cable: clients
    /// see their connection closed); returns once it is gone (`-w`: its
    /// `postmaster.pid` removed).
    public func stop() {
        _ = try? asOwner(
            "pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "-t", Self.pgCtlTimeout, "stop"])
    }

    /// `pg_ctl restart -m fast -w`: clients' connections are closed, the
    /// server comes back with the options it had; returns once it accepts
    /// connections again.
    public func restart() throws {
        let restarted = try asOwner(
            "pg_ctl", ["-D", directory + "/data", "-m", "fast", "-w", "-t", Self.pgCtlTimeout, "restart"])
        guard restarted.status == 0 else { throw LocalBusError("pg_ctl restart: \(restarted.log)") }
    }

    /// Stops the server as an administrator would (`-m fast`: clients
    /// disconnected, then a clean shutdown; nothing to recover next start).
    public func stopCleanly() {
        _ = try? asOwner("pg_ctl", ["-D", directory + "/data", "-m", "fast", "-w", "-t", Self.pgCtlTimeout, "stop"])
    }

    /// Stops the server and deletes the cluster; one in a directory the
    /// caller named is stopped cleanly and kept.
    public func remove() {
        guard temporary else { return stopCleanly() }
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs `sql` with psql; its unaligned output (fields separated by
    /// U+001F, rows by U+001E, NULL as `\N`).
    public func psql(_ sql: String) throws -> String {
        let output = directory + "/psql-\(UUID().uuidString).out"
        defer {
            try? FileManager.default.removeItem(atPath: output)
            try? FileManager.default.removeItem(atPath: output + ".err")
        }
        let child = try ChildProcess(
            binaries + "/psql",
            [
                url, "-X", "-q", "-A", "-t", "-F", "\u{1F}", "-R", "\u{1E}", "-P", "null=\\N", "-v", "ON_ERROR_STOP=1",
                "-c", sql,
            ],
            standardOutput: output, standardError: output + ".err")
        let (status, _) = child.waitForExit()
        guard status == 0 else {
            throw LocalBusError("psql: " + ((try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? ""))
        }
        return (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
    }

    /// The rows of a query, each a list of fields (NULL as `\N`).
    public func rows(_ sql: String) throws -> [[String]] {
        var text = try psql(sql)
        if text.hasSuffix("\n") { text.removeLast() }
        guard !text.isEmpty else { return [] }
        return text.split(separator: "\u{1E}", omittingEmptySubsequences: false).map {
            $0.split(separator: "\u{1F}", omittingEmptySubsequences: false).map(String.init)
        }
    }

    /// One number from the server.
    public func count(_ sql: String) throws -> Int {
        let text = try psql(sql).trimmingWhitespace()
        guard let value = Int(text) else { throw LocalBusError("psql: not a number: \(text)") }
        return value
    }

    /// Runs a PostgreSQL program, as the `postgres` user when we are root.
    /// No pipes: the server that pg_ctl starts would hold them open.
    func asOwner(_ program: String, _ arguments: [String]) throws -> (status: Int32, log: String) {
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

    private func chownToPostgres(_ path: String) {
        guard let user = getpwnam("postgres") else { return }
        chown(path, user.pointee.pw_uid, user.pointee.pw_gid)
    }
}
