import CPostgres
import FoundationEssentials
import Inventory
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// Why a sync could not be done; never holds a password (libpq's messages
/// do not, and the connection string is never repeated).
public struct SyncError: Error, Sendable, CustomStringConvertible {
    public var message: String
    /// The server could not be reached or the connection broke: worth
    /// trying again (a sync resumes where it stopped).
    public var isConnectionFailure: Bool
    /// Set when the sync stopped because it was asked to (`SyncStop`:
    /// `SIGINT`, `SIGTERM`): the reason given.
    public var stoppedBy: String?
    /// Set when the server refused the bench's ledger (docs/ledger.md,
    /// "Several benches"): nothing of the sync was applied.
    public var ledgerRefusal: ServerLedger.Refusal?
    /// The server's SQLSTATE for a statement it refused (nil: none given).
    public var sqlState: String?
    public init(
        _ message: String, isConnectionFailure: Bool = false, stoppedBy: String? = nil, sqlState: String? = nil
    ) {
        self.message = message
        self.isConnectionFailure = isConnectionFailure
        self.stoppedBy = stoppedBy
        self.sqlState = sqlState
    }

    /// Worth trying again: the connection failed or broke, or the server
    /// refused the statement for a reason it asks to retry
    /// (`Self.retryable(sqlState:)`). A sync resumes where it stopped.
    public var isRetryable: Bool { isConnectionFailure || Self.retryable(sqlState: sqlState) }

    /// The SQLSTATEs PostgreSQL means as "try again" (docs/office.md,
    /// "Sync at scale"): a serialization failure (40001), a deadlock
    /// (40P01), a lock not available (55P03), the server shutting down or
    /// restarting (57P01 admin, 57P02 crash, 57P03 cannot connect now),
    /// too many connections (53300), and any connection exception (class
    /// 08).
    public static func retryable(sqlState: String?) -> Bool {
        guard let state = sqlState else { return false }
        return ["40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"].contains(state) || state.hasPrefix("08")
    }
    init(refusal: ServerLedger.Refusal) {
        self.init(refusal.message)
        ledgerRefusal = refusal
    }
    public var description: String { message }
}

/// A request to stop a sync (a signal): no statement is sent after it,
/// and the one in flight on each connection that carries this stop is
/// cancelled (`PQcancel`: the server rolls it back). Each statement that
/// returned is committed (a chunk is one statement; the exchange of
/// assignments one transaction), so what was sent stays sent and the next
/// sync resumes after it.
public final class SyncStop: @unchecked Sendable {
    // `reason` and `cancels` only under `lock`; a PGcancel is used and
    // freed only under it (PQcancel is thread-safe).
    private let lock = PlainLock()
    private var reason: String?
    private var cancels: [ObjectIdentifier: OpaquePointer] = [:]

    public init() {}

    /// Why the sync was asked to stop (nil: it was not).
    public var requested: String? { lock.withLock { reason } }

    /// Asks the sync to stop, for `reason` (the first request's is kept).
    public func request(_ reason: String) {
        lock.withLock {
            if self.reason == nil { self.reason = reason }
            var buffer = [CChar](repeating: 0, count: 256)
            for cancel in cancels.values { _ = PQcancel(cancel, &buffer, Int32(buffer.count)) }
        }
    }

    /// The error a stopped sync ends with.
    func error(_ reason: String) -> SyncError { SyncError("stopped by \(reason)", stoppedBy: reason) }

    /// Throws when a stop was requested.
    public func check() throws(SyncError) {
        if let reason = requested { throw error(reason) }
    }

    func attach(_ connection: PostgresConnection) {
        guard let cancel = PQgetCancel(connection.handle) else { return }
        lock.withLock { cancels[ObjectIdentifier(connection)] = cancel }
    }

    func detach(_ connection: PostgresConnection) {
        lock.withLock {
            if let cancel = cancels.removeValue(forKey: ObjectIdentifier(connection)) { PQfreeCancel(cancel) }
        }
    }
}

/// One libpq connection. Values always travel as parameters
/// (`PQexecParams`), never inside the SQL text.
final class PostgresConnection {
    let handle: OpaquePointer
    /// Whether each statement is watched by `StatementGuard`: off only for
    /// work known to take long while the server is answering (a
    /// migration's index builds, `ServerMigrations`).
    var guardsStatements = true
    /// The server, for messages (never the connection string).
    let location: String
    /// What may stop this connection's statements (a signal).
    let stop: SyncStop?

    /// Connects with a `postgresql://…` URL or a `key=value` string; libpq
    /// adds the `PG*` environment variables and `~/.pgpass`, and TLS as the
    /// string asks (`sslmode=…`). Unless the string or the environment says
    /// otherwise, connecting gives up after 10 s and a dead network is
    /// noticed within about 30 s (TCP keepalives and user timeout), so no
    /// call waits for ever.
    init(_ conninfo: String, connectTimeout: Int = 10, stop: SyncStop? = nil) throws(SyncError) {
        try stop?.check()
        guard beaconbench_libpq_load() == 1 else {
            let reason = beaconbench_libpq_error().map { String(cString: $0) } ?? "not found"
            throw SyncError("libpq could not be loaded (\(reason)): install it with apt-get install libpq5")
        }
        let environment = ProcessInfo.processInfo.environment
        var defaults: [(keyword: String, value: String)] = [
            ("keepalives", "1"), ("keepalives_idle", "10"), ("keepalives_interval", "5"), ("keepalives_count", "3"),
            ("tcp_user_timeout", "30000"),
        ]
        if environment["PGCONNECT_TIMEOUT"] == nil { defaults.append(("connect_timeout", String(connectTimeout))) }
        if environment["PGAPPNAME"] == nil { defaults.append(("application_name", "beaconbench")) }
        // Swift strings are UTF-8; the server converts to its own encoding.
        if environment["PGCLIENTENCODING"] == nil { defaults.append(("client_encoding", "UTF8")) }
        // Given before `dbname`, which holds the caller's string: what that
        // string sets wins (libpq: later entries override earlier ones).
        let keywords = (defaults.map(\.keyword) + ["dbname"]).map { strdup($0) } + [nil]
        let values = (defaults.map(\.value) + [conninfo]).map { strdup($0) } + [nil]
        defer { for pointer in keywords + values { free(pointer) } }
        let connection = keywords.map { UnsafePointer($0) }.withUnsafeBufferPointer { keywordBuffer in
            values.map { UnsafePointer($0) }.withUnsafeBufferPointer { valueBuffer in
                PQconnectdbParams(keywordBuffer.baseAddress, valueBuffer.baseAddress, 1)
            }
        }
        guard let connection else { throw SyncError("libpq could not allocate a connection") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection)).trimmingWhitespace()
            // A refusal (wrong password, no such database or role) is not
            // worth trying again; an unreachable server may come back.
            let refused = Self.isRefusal(message) || PQconnectionNeedsPassword(connection) == 1
            PQfinish(connection)
            // libpq quotes a part of a string it cannot parse, which may be
            // the password: never shown.
            throw SyncError(
                "cannot connect to the server: \(ConnectionPasswords.scrub(message, of: conninfo))",
                isConnectionFailure: !refused)
        }
        handle = connection
        location = Self.describe(conninfo)
        self.stop = stop
        stop?.attach(self)
        do {
            try stop?.check()
        } catch {
            stop?.detach(self)
            throw error
        }
    }

    /// Whether libpq's message on a failed connection is the server's (or
    /// the client's TLS settings') refusal, which no retry can change
    /// (docs/office.md, "Refusals"): authentication (28P01, 28000: a wrong
    /// password, no pg_hba.conf entry, no password given), a database or
    /// role that does not exist (3D000), no right to connect (42501), TLS
    /// required but not offered by the server, or a certificate that does
    /// not verify. A server that cannot be reached may come back.
    static func isRefusal(_ message: String) -> Bool {
        let lowered = message.lowercased()
        return [
            "authentication failed", "does not exist", "no password supplied", "no pg_hba.conf entry",
            "permission denied", "does not support ssl", "ssl error", "certificate", "sslmode value",
            "root certificate file", "password is required",
        ].contains { lowered.contains($0) }
    }

    deinit {
        stop?.detach(self)
        PQfinish(handle)
    }

    /// Runs one statement with text parameters (nil is NULL); returns the
    /// rows as text.
    @discardableResult
    func exec(_ sql: String, _ parameters: [String?] = []) throws(SyncError) -> [[String?]] {
        try run(sql, parameters) { result in
            (0..<PQntuples(result)).map { row in
                (0..<PQnfields(result)).map { column in
                    PQgetisnull(result, row, column) == 1 ? nil : String(cString: PQgetvalue(result, row, column))
                }
            }
        }
    }

    /// Runs one query; returns its column names and its rows, integers as
    /// integers (by the columns' types), everything else as text.
    func query(
        _ sql: String, _ parameters: [String?] = []
    ) throws(SyncError) -> (
        columns: [String], rows: [[SQLiteValue]]
    ) {
        try run(sql, parameters) { result in
            let columns = (0..<PQnfields(result))
            let integer = columns.map { [20, 21, 23].contains(PQftype(result, $0)) }
            let names = columns.map { String(cString: PQfname(result, $0)) }
            let rows = (0..<PQntuples(result)).map { row in
                columns.map { column -> SQLiteValue in
                    guard PQgetisnull(result, row, column) == 0, let value = PQgetvalue(result, row, column) else {
                        return .null
                    }
                    if integer[Int(column)] { return .integer(Int64(strtoll(value, nil, 10))) }
                    let length = Int(PQgetlength(result, row, column))
                    return .text(
                        value.withMemoryRebound(to: UInt8.self, capacity: length) {
                            String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                        })
                }
            }
            return (names, rows)
        }
    }

    /// Sends one statement and hands its successful result to `read`.
    private func run<T>(
        _ sql: String, _ parameters: [String?], read: (OpaquePointer) -> T
    ) throws(SyncError) -> T {
        // Once a stop is asked for, nothing more is sent (but a rollback).
        if sql != "ROLLBACK" { try stop?.check() }
        let copies = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { for copy in copies { free(copy) } }
        // A server that answers nothing ends the statement (the connection
        // shut): a connection failure, tried again (`StatementGuard`).
        let guarded = guardsStatements ? StatementGuard.arm(PQsocket(handle)) : nil
        defer { StatementGuard.disarm(guarded) }
        // Without parameters (the schema: several statements) PQexec; with
        // them PQexecParams, which takes one statement.
        let result: OpaquePointer? =
            parameters.isEmpty
            ? PQexec(handle, sql)
            : copies.withUnsafeBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: max(1, buffer.count)) {
                    PQexecParams(handle, sql, Int32(parameters.count), nil, $0, nil, nil, 0)
                }
            }
        guard let result else {
            try stop?.check()
            throw SyncError(
                "lost the connection to the server: \(StatementGuard.explain(guarded, lastError))",
                isConnectionFailure: true)
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK: return read(result)
        default:
            // Cancelled by a stop: that, not the server's "canceling statement".
            try stop?.check()
            let message = String(cString: PQresultErrorMessage(result)).trimmingWhitespace()
            // PG_DIAG_SQLSTATE ('C').
            let state = PQresultErrorField(result, 67).map { String(cString: $0) }
            if PQstatus(handle) != CONNECTION_OK {
                throw SyncError(
                    "lost the connection to the server: \(StatementGuard.explain(guarded, message.isEmpty ? lastError : message))",
                    isConnectionFailure: true, sqlState: state)
            }
            throw SyncError(message.isEmpty ? "the server refused: \(lastError)" : message, sqlState: state)
        }
    }

    /// A connection string's server and database, without user or password:
    /// `PostgreSQL fleet on depot.example:5432`.
    static func describe(_ conninfo: String) -> String {
        var facts: [String: String] = [:]
        if let options = PQconninfoParse(conninfo, nil) {
            var option = options
            while let keyword = option.pointee.keyword {
                if let value = option.pointee.val { facts[String(cString: keyword)] = String(cString: value) }
                option += 1
            }
            PQconninfoFree(options)
        }
        let environment = ProcessInfo.processInfo.environment
        let database = facts["dbname"] ?? environment["PGDATABASE"] ?? "the default database"
        let host = facts["host"] ?? environment["PGHOST"] ?? "the local socket"
        let port = facts["port"] ?? environment["PGPORT"]
        return "PostgreSQL \(database) on \(host)\(port.map { ":" + $0 } ?? "")"
    }

    /// The same connection string without its password, as `key=value`
    /// pairs (libpq then takes the password from PGPASSWORD or ~/.pgpass):
    /// what an inventory may remember of a server.
    static func withoutPassword(_ conninfo: String) -> String? {
        guard let options = PQconninfoParse(conninfo, nil) else { return nil }
        defer { PQconninfoFree(options) }
        var pairs: [String] = []
        var option = options
        while let keyword = option.pointee.keyword {
            let name = String(cString: keyword)
            if let value = option.pointee.val, name != "password" {
                let text = String(cString: value).replacingEvery("\\", with: "\\\\")
                    .replacingEvery("'", with: "\\'")
                pairs.append("\(name)='\(text)'")
            }
            option += 1
        }
        return pairs.joined(separator: " ")
    }

    var lastError: String {
        String(cString: PQerrorMessage(handle)).trimmingWhitespace()
    }

    /// `body` in one transaction: committed when it returns, rolled back
    /// when it throws.
    func transaction<T>(_ body: () throws(SyncError) -> T) throws(SyncError) -> T {
        try exec("BEGIN")
        do {
            let value = try body()
            try exec("COMMIT")
            return value
        } catch {
            _ = try? exec("ROLLBACK")
            throw error
        }
    }
}

/// A read that streams: server-side cursors (`DECLARE … NO SCROLL CURSOR`)
/// inside one read-only `REPEATABLE READ` transaction, so that every
/// cursor of it sees the same snapshot, fetched `batch` rows at a time —
/// memory is one batch per open cursor, whatever the size of the result.
/// A lost connection ends the read with the error (`isConnectionFailure`);
/// its caller decides whether to start again (`ServerInventory` repeats a
/// read once, from the beginning).
final class PostgresSnapshot {
    let connection: PostgresConnection
    private var cursors = 0

    fileprivate init(_ connection: PostgresConnection) { self.connection = connection }

    /// A cursor over `sql` (one `SELECT`, text parameters).
    func cursor(_ sql: String, _ parameters: [String?] = [], batch: Int = 10_000) throws(SyncError) -> PostgresCursor {
        cursors += 1
        let name = "beaconbench_stream_\(cursors)"
        try connection.exec("DECLARE \(name) NO SCROLL CURSOR FOR \(sql)", parameters)
        return PostgresCursor(connection, name: name, batch: max(1, batch))
    }
}

/// One cursor of a `PostgresSnapshot`: rows as `PostgresConnection.query`
/// returns them, one at a time, fetched a batch at a time.
final class PostgresCursor {
    private let connection: PostgresConnection
    private let name: String
    private let batch: Int
    private var rows: [[SQLiteValue]] = []
    private var position = 0
    private var finished = false
    /// The result's column names (known after the first fetch).
    private(set) var columns: [String] = []

    fileprivate init(_ connection: PostgresConnection, name: String, batch: Int) {
        self.connection = connection
        self.name = name
        self.batch = batch
    }

    /// The next row, or nil after the last.
    func next() throws(SyncError) -> [SQLiteValue]? {
        if position == rows.count {
            guard !finished else { return nil }
            rows = []  // the last batch goes before the next arrives
            let fetched = try connection.query("FETCH FORWARD \(batch) FROM \(name)")
            columns = fetched.columns
            rows = fetched.rows
            position = 0
            if rows.count < batch { finished = true }
            guard !rows.isEmpty else { return nil }
        }
        defer { position += 1 }
        return rows[position]
    }
}

extension PostgresConnection {
    /// `body` in a read-only, repeatable-read transaction whose cursors
    /// stream (`PostgresSnapshot`); rolled back when it ends (nothing was
    /// written), the error passed on when it throws.
    func snapshot<T>(_ body: (PostgresSnapshot) throws -> T) throws -> T {
        let snapshot = try beginSnapshot()
        do {
            let value = try body(snapshot)
            try exec("COMMIT")
            return value
        } catch {
            endSnapshotAfterError()
            throw error
        }
    }

    /// `snapshot` for a reader that awaits between batches (a bench's pull
    /// writes each page into its own inventory before it fetches the
    /// next).
    func streamingRead<T>(_ body: (PostgresSnapshot) async throws(SyncError) -> T) async throws(SyncError) -> T {
        let snapshot = try beginSnapshot()
        do {
            let value = try await body(snapshot)
            try exec("COMMIT")
            return value
        } catch {
            endSnapshotAfterError()
            throw error
        }
    }

    /// Opens the read-only, repeatable-read transaction of a snapshot.
    private func beginSnapshot() throws(SyncError) -> PostgresSnapshot {
        try exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            // Every cursor is read to its end: plan for the whole result
            // (the default, 0.1, favours a fast first row).
            try exec("SET LOCAL cursor_tuple_fraction = 1")
        } catch {
            endSnapshotAfterError()
            throw error
        }
        return PostgresSnapshot(self)
    }

    /// Rolls a snapshot back after an error, when the connection is still there.
    private func endSnapshotAfterError() {
        if PQstatus(handle) == CONNECTION_OK { _ = try? exec("ROLLBACK") }
    }
}

/// Passwords written into connection strings, found so that they are never
/// shown or kept: the `PASSWORD` of `scheme://USER:PASSWORD@host…`, and the
/// value of `password=VALUE` (a `key=value` connection string, or a URL's
/// query). The way to give a password is libpq's own: PGPASSWORD,
/// `~/.pgpass`, or a PGSERVICE entry.
public enum ConnectionPasswords {
    /// The byte ranges of every password in `text`, in order, not
    /// overlapping.
    public static func ranges(in text: [UInt8]) -> [Range<Int>] {
        var found = urlPasswords(text) + keywordPasswords(text)
        found.sort { $0.lowerBound < $1.lowerBound }
        var merged: [Range<Int>] = []
        for range in found where !range.isEmpty {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    /// Whether `text` holds a password.
    public static func contains(_ text: String) -> Bool { !ranges(in: Array(text.utf8)).isEmpty }

    /// `text` with every password replaced by `replacement`.
    public static func redacted(_ text: String, replacement: String = "***") -> String {
        let bytes = Array(text.utf8)
        let found = ranges(in: bytes)
        guard !found.isEmpty else { return text }
        var result: [UInt8] = []
        var position = 0
        for range in found {
            result += bytes[position..<range.lowerBound]
            result += Array(replacement.utf8)
            position = range.upperBound
        }
        result += bytes[position...]
        return String(decoding: result, as: UTF8.self)
    }

    /// A message about `conninfo` (libpq quotes the piece of a string it
    /// could not parse, which may be the password) with the passwords of
    /// `conninfo`, and any other it holds, replaced by `***`.
    public static func scrub(_ message: String, of conninfo: String) -> String {
        var text = redacted(message)
        let bytes = Array(conninfo.utf8)
        // Longest first, so that a password inside another goes with it.
        let secrets = ranges(in: bytes).map { String(decoding: bytes[$0], as: UTF8.self) }.filter { $0.count >= 3 }
        for secret in secrets.sorted(by: { $0.count > $1.count }) {
            text = text.replacingEvery(secret, with: "***")
        }
        return text
    }

    static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0d).contains(byte) }

    /// `scheme://USER:PASSWORD@…`: the user information ends, as libpq
    /// reads it, at the first `@` before a `/`; a password holding a `/`
    /// is found too (up to an `@` before any `?`).
    static func urlPasswords(_ text: [UInt8]) -> [Range<Int>] {
        var found: [Range<Int>] = []
        var index = 0
        while index + 2 < text.count {
            guard text[index] == UInt8(ascii: ":"), text[index + 1] == UInt8(ascii: "/"),
                text[index + 2] == UInt8(ascii: "/")
            else {
                index += 1
                continue
            }
            let start = index + 3
            var end = start
            while end < text.count, !isSpace(text[end]) { end += 1 }
            var at: Int?
            for position in start..<end {
                let byte = text[position]
                if byte == UInt8(ascii: "@") {
                    at = position
                    break
                }
                if byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
            }
            if let at, let colon = text[start..<at].firstIndex(of: UInt8(ascii: ":")), colon + 1 < at {
                found.append((colon + 1)..<at)
            }
            index = max(start, at ?? start)
        }
        return found
    }

    /// `password=VALUE` at the start of a word or after a URL's `?` or `&`;
    /// a `key=value` string's value may be quoted ('…', with backslash escapes).
    static func keywordPasswords(_ text: [UInt8]) -> [Range<Int>] {
        let keyword = Array("password".utf8)
        var found: [Range<Int>] = []
        var index = 0
        while index + keyword.count < text.count {
            let before = index == 0 ? nil : text[index - 1]
            let inURL = before == UInt8(ascii: "?") || before == UInt8(ascii: "&")
            guard before.map(isSpace) ?? true || inURL,
                zip(text[index..<(index + keyword.count)], keyword).allSatisfy({ $0 | 0x20 == $1 })
            else {
                index += 1
                continue
            }
            var position = index + keyword.count
            while position < text.count, isSpace(text[position]) { position += 1 }
            guard position < text.count, text[position] == UInt8(ascii: "=") else {
                index += 1
                continue
            }
            position += 1
            while !inURL, position < text.count, isSpace(text[position]) { position += 1 }
            if !inURL, position < text.count, text[position] == UInt8(ascii: "'") {
                var end = position + 1
                while end < text.count, text[end] != UInt8(ascii: "'") {
                    end += text[end] == UInt8(ascii: "\\") ? 2 : 1
                }
                end = min(end, text.count)
                found.append((position + 1)..<end)
                index = end
                continue
            }
            var end = position
            while end < text.count, !isSpace(text[end]),
                !inURL || (text[end] != UInt8(ascii: "&") && text[end] != UInt8(ascii: "#"))
            {
                end += 1
            }
            found.append(position..<end)
            index = max(end, index + 1)
        }
        return found
    }
}

/// A mutex for a few fields, as Foundation's `NSLock` was used here.
final class PlainLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// The libpq the office commands use, for `--version -v` and `doctor`.
public enum Libpq {
    /// Loads libpq.so.5 (if it is not yet) and gives its PQlibVersion as
    /// text (150013 is "15.13"), or why it cannot be loaded.
    public static func version() -> (version: String?, problem: String?) {
        guard beaconbench_libpq_load() == 1 else {
            let reason = beaconbench_libpq_error().map { String(cString: $0) } ?? "not found"
            return (nil, "libpq could not be loaded (\(reason)): install it with apt-get install libpq5")
        }
        let number = Int(PQlibVersion())
        // 10 and later: major * 10000 + minor.
        return ("\(number / 10000).\(number % 10000)", nil)
    }
}
