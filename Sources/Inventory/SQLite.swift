import CSQLite
import Glibc
import SafeText

/// An SQLite error: the result code, SQLite's message and the SQL.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var message: String
    public var sql: String?

    public var description: String {
        "SQLite error \(code): \(message)"
            + (sql.map { " (in: \($0.split(whereSeparator: \.isWhitespace).joined(separator: " ").prefix(120)))" } ?? "")
    }

    /// The primary result code (the extended code's low byte).
    public var primaryCode: Int32 { code & 0xff }

    /// Whether the inventory itself failed — disk full, I/O error,
    /// corruption, read-only, gone — rather than one statement: nothing more
    /// can be recorded, so nothing more may be written to a beacon.
    public var inventoryIsUnusable: Bool {
        [
            SQLITE_FULL, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PROTOCOL,
            SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM,
        ].contains(primaryCode)
    }
}

/// A value SQLite stores: bound as a parameter, read from a column.
///
/// Equal and hashed by its bytes (docs/development.md, "Stored values are
/// compared as bytes"): text by its UTF-8 bytes, never by canonical
/// equivalence (`.text("é")` is not `.text("e\u{301}")`), a real by its bit
/// pattern (`0.0` is not `-0.0`), and values of different storage classes
/// are never equal (`.integer(1)` is not `.real(1)` nor `.text("1")`).
/// Text SQLite holds that is not UTF-8 is read as the blob of its bytes
/// (`Statement.column`): no `String` can hold it, and one repaired with
/// U+FFFD would equal text it is not.
public enum SQLiteValue: Sendable, Hashable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByNilLiteral
{
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(nilLiteral: ()) { self = .null }

    public init(_ value: String?) { self = value.map(SQLiteValue.text) ?? .null }
    public init<T: BinaryInteger>(_ value: T?) { self = value.map { .integer(Int64($0)) } ?? .null }
    public init(_ value: Bool?) { self = value.map { .integer($0 ? 1 : 0) } ?? .null }
    public init(_ value: Double?) { self = value.map(SQLiteValue.real) ?? .null }

    public var integer: Int64? { if case .integer(let v) = self { v } else { nil } }
    public var text: String? { if case .text(let v) = self { v } else { nil } }
    public var real: Double? {
        switch self {
        case .real(let v): v
        case .integer(let v): Double(v)
        default: nil
        }
    }
    public var isNull: Bool { self == .null }

    /// Bytewise (see the type's comment).
    public static func == (a: SQLiteValue, b: SQLiteValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.integer(let x), .integer(let y)): x == y
        case (.real(let x), .real(let y)): x.bitPattern == y.bitPattern
        case (.text(let x), .text(let y)): x.sameBytes(y)
        case (.blob(let x), .blob(let y)): x == y
        default: false
        }
    }

    /// Consistent with `==`: the storage class and the bytes.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .integer(let v):
            hasher.combine(1 as UInt8)
            hasher.combine(v)
        case .real(let v):
            hasher.combine(2 as UInt8)
            hasher.combine(v.bitPattern)
        case .text(let v):
            hasher.combine(3 as UInt8)
            hasher.combine(v.utf8.count)
            for byte in v.utf8 { hasher.combine(byte) }
        case .blob(let v):
            hasher.combine(4 as UInt8)
            hasher.combine(v)
        }
    }

    /// The value written out as text: numbers in decimal, a blob in hex;
    /// nil for NULL. (Exports, and values sent to another database.)
    public var textForm: String? {
        switch self {
        case .null: nil
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .text(let v): v
        case .blob(let v): v.map { CFormat.string("%02x", $0) }.joined()
        }
    }
}

/// A file the inventory cannot be: a symbolic link that does not lead to
/// an existing regular file, a directory, a device, a FIFO, a `-wal` or
/// `-shm` beside it that is a symbolic link, a file that is not an SQLite
/// database, another program's database, a schema version this program
/// does not know. Nothing was created or changed; the inventory is
/// unusable (exit 3).
public struct InventoryPathError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String
    public init(_ path: String, _ reason: String) {
        self.path = path
        self.reason = reason
    }
    public var description: String { "\(path) \(reason)" }
}

/// A name that is not a plain file path: empty, SQLite's `:memory:`, an
/// SQLite URI (`file:…`), a name holding a NUL. SQLite would open an
/// in-memory database (writes "succeed" and nothing is kept) or read the
/// name as a URI (directories made from it, options taken from it); the
/// user gave a wrong `--inventory` (bad usage, exit 1). Nothing was made.
public struct InventoryNameError: Error, Sendable, CustomStringConvertible {
    public var name: String
    public var reason: String
    public var description: String { reason }
}

/// One SQLite connection. Not thread-safe: its owner (the `Inventory`
/// actor) confines it. Every value reaches SQL as a bound parameter.
public final class Database {
    /// The SQLite linked in (`sqlite3_libversion`), for `beaconbench --version`.
    public static var libraryVersion: String { String(cString: sqlite3_libversion()) }

    let handle: OpaquePointer
    /// The file opened: the path given, or, when that is a symbolic link,
    /// the regular file it leads to (so that SQLite's `-wal` and `-shm`
    /// files are made beside the real file).
    public let path: String
    /// Opened with `SQLITE_OPEN_READONLY`: nothing is written, not even the
    /// journal mode.
    public let isReadOnly: Bool
    /// What a read-only opening could not do as asked, for the user to be
    /// told (a write-ahead log that an immutable opening does not read).
    public private(set) var caveat: String?
    /// Set by the owner when a read-only file has an older schema than this
    /// program's: a query that fails says how to migrate the file.
    public var olderSchema: String?
    /// When set, every change to a table the ledger covers is appended to
    /// it before its transaction commits (Ledger/LedgerRecorder.swift); a
    /// write outside a transaction is given one.
    var ledger: LedgerRecorder? {
        didSet { ledger?.install(on: self) }
    }

    /// Transactions that wrote and were committed on this connection since
    /// it opened (`sqlite3_commit_hook`, one call per COMMIT or write in
    /// autocommit mode), for `BEACONBENCH_STATS` (benchmarks). The hook runs
    /// before the commit completes: a commit that then fails (SQLITE_BUSY,
    /// SQLITE_FULL) is counted too — rare, and never in the benches. One the
    /// ledger refuses (changes not yet appended) is not.
    public private(set) var commits = 0

    /// Installs the connection's commit hook: it counts `commits` and asks
    /// the ledger, when set, whether a change has no entry yet (the commit
    /// is then turned into a rollback).
    private func installCommitHook() {
        sqlite3_commit_hook(
            handle,
            { context in
                guard let context else { return 0 }
                let database = Unmanaged<Database>.fromOpaque(context).takeUnretainedValue()
                // Non-zero turns the commit into a rollback.
                if database.ledger?.hasPending == true { return 1 }
                database.commits += 1
                return 0
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Opens `path` for reading and writing with WAL, foreign keys and a
    /// busy timeout. A new file is created here, mode 0600 whatever the
    /// umask and never through a symbolic link (SQLite gives the `-wal` and
    /// `-shm` files the database's mode, and opens them without following
    /// links). A `path` that is a symbolic link is followed only to an
    /// existing regular file.
    ///
    /// With `readOnly`, the file must exist; it is opened with
    /// `SQLITE_OPEN_READONLY` and nothing about it is changed (no journal
    /// mode, no file made beside it). See `openForReading`.
    /// - Throws: `InventoryPathError` for a path that is no inventory file,
    ///   else `SQLiteError` with SQLite's message.
    ///
    /// `examine` runs on the opened connection before anything is written
    /// (the journal mode is the first write): it may refuse the file.
    public init(
        path: String, busyTimeout: Int32 = 15000, readOnly: Bool = false,
        examine: (Database) throws -> Void = { _ in }
    ) throws {
        try Self.checkName(path)
        isReadOnly = readOnly
        if readOnly {
            guard let existing = try Self.resolve(path) else {
                throw SQLiteError(code: SQLITE_CANTOPEN, message: "\(path): no such file", sql: nil)
            }
            self.path = existing
            let opened = try Self.openForReading(existing, busyTimeout: busyTimeout)
            handle = opened.handle
            caveat = opened.caveat
        } else {
            let file = try Self.createIfMissing(path)
            self.path = file
            handle = try Self.open(
                file, flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX,
                busyTimeout: busyTimeout)
        }
        do {
            try examine(self)
            if readOnly {
                // A guard for this connection only: the file is not touched.
                try execute("PRAGMA query_only = ON")
            } else {
                try Self.retryingBusy(for: busyTimeout) { try execute("PRAGMA journal_mode = WAL") }
                try execute("PRAGMA foreign_keys = ON")
                try execute("PRAGMA synchronous = NORMAL")
            }
        } catch {
            sqlite3_close_v2(handle)
            throw error
        }
        if !readOnly { installCommitHook() }
    }

    /// Runs `body` again while it fails SQLITE_BUSY, for up to `milliseconds`.
    /// Switching a new file to WAL takes an exclusive lock, and SQLite may
    /// answer BUSY at once, without its busy handler, when another connection
    /// opening the same new file holds a lock (ConcurrentOpenTests: eight
    /// processes creating one inventory).
    static func retryingBusy(for milliseconds: Int32, _ body: () throws -> Void) throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(milliseconds))
        var pause: UInt32 = 1000
        while true {
            do {
                return try body()
            } catch let error as SQLiteError where error.code & 0xFF == SQLITE_BUSY && ContinuousClock.now < deadline {
                usleep(pause)
                pause = min(pause * 2, 50_000)
            }
        }
    }

    /// Refuses a name that is not a plain file path (see
    /// `InventoryNameError`). SQLite (built with `SQLITE_USE_URI`, as
    /// Debian's is) reads any name beginning `file:` as a URI whatever the
    /// open flags, and `:memory:` and the empty name as databases of no file.
    public static func checkName(_ name: String) throws(InventoryNameError) {
        let reason: String? =
            if name.isEmpty {
                "the inventory's path is empty: give a file's path"
            } else if name.utf8.contains(0) {
                "the inventory's path holds a NUL byte: give a file's path"
            } else if name == ":memory:" {
                "':memory:' is SQLite's in-memory database, which keeps nothing: give the inventory a file's path"
            } else if name.utf8.prefix(5).map({ (65...90).contains($0) ? $0 | 0x20 : $0 }) == Array("file:".utf8) {
                "'\(name)' is an SQLite URI: beaconbench opens only plain file paths"
                    + " (a file whose name begins with 'file:' is ./\(name))"
            } else {
                nil
            }
        if let reason { throw InventoryNameError(name: name, reason: reason) }
    }

    /// `sqlite3_open_v2`, with extended result codes and a busy timeout.
    private static func open(_ filename: String, flags: Int32, busyTimeout: Int32) throws -> OpaquePointer {
        var opened: OpaquePointer?
        let code = sqlite3_open_v2(filename, &opened, flags, nil)
        guard code == SQLITE_OK, let opened else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            if let opened { sqlite3_close_v2(opened) }
            throw SQLiteError(code: code, message: "\(filename): \(message)", sql: nil)
        }
        sqlite3_extended_result_codes(opened, 1)
        sqlite3_busy_timeout(opened, busyTimeout)
        return opened
    }

    /// The regular file `path` names: itself, or the existing regular file a
    /// symbolic link leads to; nil when nothing is there.
    /// - Throws: `InventoryPathError` for a dangling link, a link to
    ///   something else than a regular file, a directory, a device…; or a
    ///   `-wal`, `-shm` or `-journal` beside the file that is a link.
    static func resolve(_ path: String) throws(InventoryPathError) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw InventoryPathError(path, "cannot be examined: \(String(cString: strerror(errno)))")
        }
        var file = path
        if info.st_mode & S_IFMT == S_IFLNK {
            let target = (try? symbolicLinkTarget(path)) ?? "?"
            guard let resolved = realpath(path, nil) else {
                let why =
                    errno == ENOENT
                    ? "which does not exist" : "which cannot be followed (\(String(cString: strerror(errno))))"
                throw InventoryPathError(
                    path,
                    "is a symbolic link to \(target), \(why): beaconbench follows a link only to an existing"
                        + " inventory file (nothing was created)")
            }
            file = String(cString: resolved)
            free(resolved)
            guard stat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
                throw InventoryPathError(
                    path,
                    "is a symbolic link to \(file), which is \(OutputFile.kind(info.st_mode)), not a regular file:"
                        + " it cannot be an inventory")
            }
        } else if info.st_mode & S_IFMT != S_IFREG {
            throw InventoryPathError(
                path,
                "is \(OutputFile.kind(info.st_mode)), not a regular file: it cannot be an inventory (give a file's path)"
            )
        }
        // SQLite opens these without following links and would only say
        // "unable to open database file": say why.
        // Nor may they be anything but regular files: a FIFO there would
        // block the first read, a device be written to.
        for suffix in ["-wal", "-shm", "-journal"] where lstat(file + suffix, &info) == 0 {
            if info.st_mode & S_IFMT == S_IFLNK {
                throw InventoryPathError(
                    file + suffix, "is a symbolic link: beaconbench will not follow it (remove it if it is not yours)")
            }
            if info.st_mode & S_IFMT != S_IFREG {
                throw InventoryPathError(
                    file + suffix,
                    "is \(OutputFile.kind(info.st_mode)), not a regular file: it cannot be the inventory's"
                        + " (remove it if it is not yours)")
            }
        }
        return file
    }

    private static func symbolicLinkTarget(_ path: String) throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { throw SQLiteError(code: SQLITE_CANTOPEN, message: "readlink", sql: nil) }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The file to open for writing: `path` resolved, or created empty with
    /// mode 0600 (`O_EXCL | O_NOFOLLOW`, then `fchmod`, as the umask may
    /// have taken bits away) when nothing is there.
    static func createIfMissing(_ path: String) throws -> String {
        for _ in 0..<3 {
            if let existing = try resolve(path) { return existing }
            let descriptor = Glibc.open(path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if descriptor >= 0 {
                let changed = fchmod(descriptor, 0o600)
                let error = errno
                close(descriptor)
                guard changed == 0 else {
                    unlink(path)
                    throw SQLiteError(
                        code: SQLITE_CANTOPEN,
                        message: "\(path): cannot set mode 0600: \(String(cString: strerror(error)))",
                        sql: nil)
                }
                return path
            }
            // Another process made it (or a link) meanwhile: look again.
            guard errno == EEXIST else {
                throw SQLiteError(
                    code: SQLITE_CANTOPEN, message: "\(path): cannot create: \(String(cString: strerror(errno)))",
                    sql: nil)
            }
        }
        throw SQLiteError(code: SQLITE_CANTOPEN, message: "\(path): keeps changing while being opened", sql: nil)
    }

    /// Opens an existing file read-only, changing nothing and making no file
    /// beside it:
    /// - a WAL-mode file with no `-wal` beside it (no writer has it open, and
    ///   nothing waits in a log) is opened as immutable: a normal read-only
    ///   opening would make `-wal` and `-shm` files, owned by the reader,
    ///   where it may, and fails where it may not (read-only media, a
    ///   directory of another user);
    /// - otherwise normally (`SQLITE_OPEN_READONLY`), which reads a live
    ///   writer's log through its `-shm`; when that cannot be done, as
    ///   immutable, with a caveat when a log is there that this does not read.
    /// Immutable means no locking: a writer that starts while it reads may
    /// make it fail or read a mixture (never harm the file).
    static func openForReading(
        _ path: String, busyTimeout: Int32
    ) throws -> (handle: OpaquePointer, caveat: String?) {
        let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX
        var info = stat()
        let hasLog = lstat(path + "-wal", &info) == 0
        let logBytes = hasLog ? Int(info.st_size) : 0
        let walMode = isWALMode(path)
        if walMode, !hasLog {
            return (try open(immutableURI(path), flags: flags | SQLITE_OPEN_URI, busyTimeout: busyTimeout), nil)
        }
        let handle = try open(path, flags: flags, busyTimeout: busyTimeout)
        // The log and its index are opened at the first read: try one. (A
        // rollback-mode file's hot journal is an error, not a fallback: its
        // file may be half written.)
        let code = sqlite3_exec(handle, "SELECT count(*) FROM sqlite_schema", nil, nil, nil)
        guard code != SQLITE_OK, walMode, [SQLITE_CANTOPEN, SQLITE_READONLY].contains(code & 0xff) else {
            return (handle, nil)
        }
        sqlite3_close_v2(handle)
        let caveat =
            logBytes > 32
            ? "\(path)-wal holds changes that a read-only opening here cannot read (a writer has the inventory"
                + " open, or stopped without closing it): they are not shown; once no writer has it open, opening"
                + " it for writing folds them in"
            : nil
        return (try open(immutableURI(path), flags: flags | SQLITE_OPEN_URI, busyTimeout: busyTimeout), caveat)
    }

    /// Whether the file's header says WAL mode (bytes 18 and 19 are 2).
    static func isWALMode(_ path: String) -> Bool {
        let descriptor = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var header = [UInt8](repeating: 0, count: 20)
        guard pread(descriptor, &header, 20, 0) == 20 else { return false }
        return header[18] == 2 && header[19] == 2
    }

    /// `file:PATH?mode=ro&immutable=1`, the path absolute and escaped: the
    /// only URI beaconbench gives SQLite (`SQLITE_OPEN_URI` is used for it
    /// alone), built here from the resolved file; a name from the user is
    /// never read as a URI (`checkName`).
    static func immutableURI(_ path: String) -> String {
        var absolute = path
        if let resolved = realpath(path, nil) {
            absolute = String(cString: resolved)
            free(resolved)
        }
        let plain = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-._~".utf8)
        let hex = Array("0123456789ABCDEF".utf8)
        var escaped: [UInt8] = []
        for byte in absolute.utf8 {
            if plain.contains(byte) {
                escaped.append(byte)
            } else {
                escaped += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xf)]]
            }
        }
        return "file:" + String(decoding: escaped, as: UTF8.self) + "?mode=ro&immutable=1"
    }

    deinit {
        // The hook holds this object unretained; a connection kept open by
        // a statement not finalized yet must not call it.
        sqlite3_commit_hook(handle, nil, nil)
        sqlite3_close_v2(handle)
    }

    func error(_ code: Int32, _ sql: String?) -> SQLiteError {
        SQLiteError(code: code, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }

    /// Runs SQL without parameters (schema, pragmas), one or more statements.
    public func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &message)
        guard code == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(message)
            throw SQLiteError(code: code, message: text, sql: sql)
        }
    }

    /// Prepares a statement (`sqlite3_prepare_v3`).
    public func prepare(_ sql: String) throws -> Statement {
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(handle, sql, -1, 0, &statement, nil)
        guard code == SQLITE_OK, let statement else {
            var failure = error(code, sql)
            // A missing table or column, in a file not migrated yet.
            if let olderSchema, code & 0xff == SQLITE_ERROR { failure.message += " (\(olderSchema))" }
            throw failure
        }
        return Statement(connection: handle, handle: statement, sql: sql)
    }

    /// Statements prepared once and kept, by their SQL: the same few
    /// statements run for every step of every device.
    private var cache: [String: Statement] = [:]

    private func cached(_ sql: String) throws -> Statement {
        if let statement = cache[sql] { return statement }
        let statement = try prepare(sql)
        if cache.count > 64 { cache = [:] }
        cache[sql] = statement
        return statement
    }

    /// Runs one statement with bound parameters; returns the rows changed.
    @discardableResult
    public func run(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> Int {
        let statement = try cached(sql)
        if try ledgerNeedsATransaction(statement) {
            // The change and its ledger entry commit together.
            return try inTransaction { try run(sql, parameters) }
        }
        defer { sqlite3_reset(statement.handle) }
        try statement.bind(parameters)
        while try statement.step() {}
        return Int(sqlite3_changes(handle))
    }

    /// Every row of a query, as column values.
    public func rows(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> [[SQLiteValue]] {
        let statement = try cached(sql)
        if try ledgerNeedsATransaction(statement) {
            return try inTransaction { try self.rows(sql, parameters) }
        }
        var rows: [[SQLiteValue]] = []
        try each(statement, parameters) { rows.append($0) }
        return rows
    }

    /// Each row of a query that only reads, handed to `body` one at a time
    /// and not kept: for a scan whose rows are mostly skipped.
    public func forEachRow(
        _ sql: String, _ parameters: [SQLiteValue] = [], _ body: ([SQLiteValue]) throws -> Void
    ) throws {
        let statement = try cached(sql)
        guard !statement.writes else { throw error(SQLITE_MISUSE, sql) }
        try each(statement, parameters, body)
    }

    /// `statement` run with `parameters` bound, each row to `body`; reset after.
    private func each(
        _ statement: Statement, _ parameters: [SQLiteValue], _ body: ([SQLiteValue]) throws -> Void
    ) throws {
        defer { sqlite3_reset(statement.handle) }
        try statement.bind(parameters)
        while try statement.step() { try body(statement.row()) }
    }

    /// Whether `statement` writes outside a transaction while the ledger
    /// records (it is then given one, so its entries commit with it). A
    /// transaction opened by hand is left alone; its `COMMIT` appends the
    /// entries first.
    private func ledgerNeedsATransaction(_ statement: Statement) throws -> Bool {
        guard let ledger, !ledger.suspended else { return false }
        switch statement.verb {
        case .commit:
            try ledger.flush(self)
            return false
        case .control: return false
        case .other: return sqlite3_get_autocommit(handle) != 0 && statement.writes
        }
    }

    /// Runs `body` in an IMMEDIATE transaction: commits when it returns,
    /// rolls back and rethrows the first error when it throws.
    public func inTransaction<Result>(_ body: () throws -> Result) throws -> Result {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try ledger?.flush(self)
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// `PRAGMA user_version`: the schema version.
    public var userVersion: Int {
        get throws { Int(try rows("PRAGMA user_version").first?.first?.integer ?? 0) }
    }

    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
}

/// A prepared statement; finalized when released. It holds its
/// connection's handle, not the `Database` (which caches statements): a
/// connection closed with `sqlite3_close_v2` lives on until its last
/// statement is finalized.
public final class Statement {
    let connection: OpaquePointer
    let handle: OpaquePointer
    public let sql: String
    /// What the statement is to the ledger (`Database.ledgerNeedsATransaction`), found once.
    enum Verb { case commit, control, other }
    lazy var verb: Verb = {
        let word = sql.drop { $0.isWhitespace }.prefix(8).uppercased()
        if word.hasPrefix("COMMIT") || word.hasPrefix("END") { return .commit }
        // Transaction control, and pragmas (they change no row).
        if ["BEGIN", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA"].contains(where: { word.hasPrefix($0) }) {
            return .control
        }
        return .other
    }()
    /// Whether it may write (`sqlite3_stmt_readonly`), found once.
    lazy var writes: Bool = sqlite3_stmt_readonly(handle) == 0

    init(connection: OpaquePointer, handle: OpaquePointer, sql: String) {
        self.connection = connection
        self.handle = handle
        self.sql = sql
    }

    func error(_ code: Int32, _ sql: String?) -> SQLiteError {
        SQLiteError(code: code, message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }

    deinit {
        sqlite3_finalize(handle)
    }

    /// Binds parameters by position (1…n), after a reset.
    public func bind(_ values: [SQLiteValue]) throws {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        let expected = Int(sqlite3_bind_parameter_count(handle))
        guard values.count == expected else {
            throw SQLiteError(
                code: SQLITE_RANGE, message: "\(values.count) parameters given, \(expected) expected", sql: sql)
        }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(handle, index)
            case .integer(let v): code = sqlite3_bind_int64(handle, index, v)
            case .real(let v): code = sqlite3_bind_double(handle, index, v)
            case .text(let v):
                // With its byte length, so a NUL inside the text is kept.
                var text = v
                code = text.withUTF8 { buffer in
                    sqlite3_bind_text64(
                        handle, index,
                        UnsafeRawPointer(buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!)
                            .assumingMemoryBound(to: CChar.self), sqlite3_uint64(buffer.count),
                        beaconbench_sqlite_transient(), UInt8(SQLITE_UTF8))
                }
            case .blob(let v):
                code = v.withUnsafeBytes { buffer in
                    sqlite3_bind_blob64(
                        handle, index, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!,
                        sqlite3_uint64(buffer.count), beaconbench_sqlite_transient())
                }
            }
            guard code == SQLITE_OK else { throw error(code, sql) }
        }
    }

    /// Steps once: true when a row is ready, false when done.
    public func step() throws -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw error(code, sql)
        }
    }

    /// The current row's columns.
    public func row() -> [SQLiteValue] {
        (0..<sqlite3_column_count(handle)).map(column)
    }

    /// One column of the current row, typed as SQLite stored it.
    public func column(_ index: Int32) -> SQLiteValue {
        switch sqlite3_column_type(handle, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, index))
        case SQLITE_TEXT:
            let count = Int(sqlite3_column_bytes(handle, index))
            guard let text = sqlite3_column_text(handle, index) else { return .text("") }
            let bytes = UnsafeRawBufferPointer(start: text, count: count)
            // Not UTF-8 (written by another program): its bytes, as a blob,
            // rather than a repaired String that would equal other text.
            guard let valid = String(validating: bytes, as: UTF8.self) else { return .blob(Array(bytes)) }
            return .text(valid)
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, index))
            guard let bytes = sqlite3_column_blob(handle, index) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default: return .null
        }
    }
}
