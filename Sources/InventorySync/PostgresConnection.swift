import CPostgres
import Foundation

/// Why a sync could not be done; never holds a password (libpq's messages
/// do not, and the connection string is never repeated).
public struct SyncError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// One libpq connection. Values always travel as parameters
/// (`PQexecParams`), never inside the SQL text.
final class PostgresConnection {
    let handle: OpaquePointer

    /// Connects with a `postgresql://…` URL or a `key=value` string; libpq
    /// adds the `PG*` environment variables and `~/.pgpass`, and TLS as the
    /// string asks (`sslmode=…`).
    init(_ conninfo: String) throws(SyncError) {
        guard let connection = PQconnectdb(conninfo) else { throw SyncError("libpq could not allocate a connection") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(connection)
            throw SyncError("cannot connect to the server: \(message)")
        }
        handle = connection
    }

    deinit { PQfinish(handle) }

    /// Runs one statement with text parameters (nil is NULL); returns the
    /// rows as text.
    @discardableResult
    func exec(_ sql: String, _ parameters: [String?] = []) throws(SyncError) -> [[String?]] {
        let copies = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { for copy in copies { free(copy) } }
        // Without parameters (the schema: several statements) PQexec; with
        // them PQexecParams, which takes one statement.
        let result: OpaquePointer? =
            parameters.isEmpty
            ? PQexec(handle, sql)
            : copies.withUnsafeBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: max(1, buffer.count)) {
                    PQexecParams(handle, sql, Int32(parameters.count), nil, parameters.isEmpty ? nil : $0, nil, nil, 0)
                }
            }
        guard let result else { throw SyncError("the server connection failed: \(lastError)") }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK: return []
        case PGRES_TUPLES_OK:
            let rows = Int(PQntuples(result))
            let columns = Int(PQnfields(result))
            return (0..<rows).map { row in
                (0..<columns).map { column in
                    PQgetisnull(result, Int32(row), Int32(column)) == 1
                        ? nil : String(cString: PQgetvalue(result, Int32(row), Int32(column)))
                }
            }
        default:
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            throw SyncError(message.isEmpty ? "the server refused: \(lastError)" : message)
        }
    }

    var lastError: String {
        String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines)
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
