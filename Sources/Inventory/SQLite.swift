import CSQLite
import Glibc

/// An SQLite error: the result code, SQLite's message and the SQL.
public struct SQLiteError: Error, Sendable, CustomStringConvertible {
    public var code: Int32
    public var message: String
    public var sql: String?

    public var description: String {
        "SQLite error \(code): \(message)" + (sql.map { " (in: \($0.prefix(200)))" } ?? "")
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

    /// The value written out as text: numbers in decimal, a blob in hex;
    /// nil for NULL. (Exports, and values sent to another database.)
    public var textForm: String? {
        switch self {
        case .null: nil
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .text(let v): v
        case .blob(let v): v.map { String(format: "%02x", $0) }.joined()
        }
    }
}

/// One SQLite connection. Not thread-safe: its owner (the `Inventory`
/// actor) confines it. Every value reaches SQL as a bound parameter.
public final class Database {
    let handle: OpaquePointer
    public let path: String

    /// Opens (creating it mode 0600 when missing) with WAL, foreign keys
    /// and a busy timeout.
    /// - Throws: `SQLiteError` with SQLite's message.
    public init(path: String, busyTimeout: Int32 = 15000) throws {
        self.path = path
        if path != ":memory:" && access(path, F_OK) != 0 {
            // Created here so the mode is 0600 whatever the umask; SQLite gives
            // the WAL and SHM files the database's mode.
            let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            if fd >= 0 { close(fd) }
        }
        var opened: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &opened, flags, nil)
        guard code == SQLITE_OK, let opened else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            if let opened { sqlite3_close_v2(opened) }
            throw SQLiteError(code: code, message: "\(path): \(message)", sql: nil)
        }
        handle = opened
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, busyTimeout)
        do {
            try execute("PRAGMA journal_mode = WAL")
            try execute("PRAGMA foreign_keys = ON")
            try execute("PRAGMA synchronous = NORMAL")
        } catch {
            sqlite3_close_v2(handle)
            throw error
        }
    }

    deinit {
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
        guard code == SQLITE_OK, let statement else { throw error(code, sql) }
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
        defer { sqlite3_reset(statement.handle) }
        try statement.bind(parameters)
        while try statement.step() {}
        return Int(sqlite3_changes(handle))
    }

    /// Every row of a query, as column values.
    public func rows(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> [[SQLiteValue]] {
        let statement = try cached(sql)
        defer { sqlite3_reset(statement.handle) }
        try statement.bind(parameters)
        var rows: [[SQLiteValue]] = []
        while try statement.step() { rows.append(statement.row()) }
        return rows
    }

    /// Runs `body` in an IMMEDIATE transaction: commits when it returns,
    /// rolls back and rethrows the first error when it throws.
    public func inTransaction<Result>(_ body: () throws -> Result) throws -> Result {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
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
            return .text(String(decoding: UnsafeRawBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, index))
            guard let bytes = sqlite3_column_blob(handle, index) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default: return .null
        }
    }
}
