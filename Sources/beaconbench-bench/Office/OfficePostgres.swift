// A small libpq client for the office harness: the union check reads
// every synced row from the server, in key order, through a cursor (a
// bounded number of rows in memory at once). InventorySync's own
// connection is internal to that module; this one only reads.
import CPostgres
import Foundation

struct OfficePostgresError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

final class OfficePostgres {
    let handle: OpaquePointer

    /// Connects with a `postgresql://…` URL or `key=value` string; gives up
    /// after 10 s unless the string says otherwise.
    init(_ conninfo: String) throws {
        guard beaconbench_libpq_load() == 1 else {
            let reason = beaconbench_libpq_error().map { String(cString: $0) } ?? "not found"
            throw OfficePostgresError("libpq could not be loaded (\(reason))")
        }
        let keywordNames: [String] = ["connect_timeout", "application_name", "client_encoding", "dbname"]
        let valueTexts: [String] = ["10", "beaconbench-office", "UTF8", conninfo]
        let keywords: [UnsafeMutablePointer<CChar>?] = keywordNames.map { strdup($0) } + [nil]
        let values: [UnsafeMutablePointer<CChar>?] = valueTexts.map { strdup($0) } + [nil]
        defer { for pointer in keywords + values { free(pointer) } }
        let connection = keywords.map { UnsafePointer($0) }.withUnsafeBufferPointer { keywordBuffer in
            values.map { UnsafePointer($0) }.withUnsafeBufferPointer { valueBuffer in
                PQconnectdbParams(keywordBuffer.baseAddress, valueBuffer.baseAddress, 1)
            }
        }
        guard let connection else { throw OfficePostgresError("libpq could not allocate a connection") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(connection)
            throw OfficePostgresError("cannot connect to the server: \(message)")
        }
        handle = connection
    }

    deinit { PQfinish(handle) }

    /// One statement with text parameters (nil is NULL); the rows as text.
    @discardableResult
    func exec(_ sql: String, _ parameters: [String?] = []) throws -> [[String?]] {
        let copies = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { for copy in copies { free(copy) } }
        let result: OpaquePointer? =
            parameters.isEmpty
            ? PQexec(handle, sql)
            : copies.withUnsafeBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: max(1, buffer.count)) {
                    PQexecParams(handle, sql, Int32(parameters.count), nil, $0, nil, nil, 0)
                }
            }
        guard let result else {
            throw OfficePostgresError("lost the connection: \(String(cString: PQerrorMessage(handle)))")
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK:
            return (0..<PQntuples(result)).map { row in
                (0..<PQnfields(result)).map { column in
                    guard PQgetisnull(result, row, column) == 0, let value = PQgetvalue(result, row, column) else {
                        return nil
                    }
                    let length = Int(PQgetlength(result, row, column))
                    return value.withMemoryRebound(to: UInt8.self, capacity: length) {
                        String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
                    }
                }
            }
        default:
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            throw OfficePostgresError("the server refused: \(message) (in: \(sql.prefix(120)))")
        }
    }

    /// One integer (a count).
    func integer(_ sql: String, _ parameters: [String?] = []) throws -> Int {
        guard let text = try exec(sql, parameters).first?.first ?? nil, let value = Int(text) else {
            throw OfficePostgresError("not a number from: \(sql.prefix(120))")
        }
        return value
    }

    /// The rows of `sql` in batches of `batch`, through a cursor; `body`
    /// sees each batch (empty only when there are no rows at all).
    /// Inside a REPEATABLE READ transaction the caller opened (`snapshot`).
    func stream(
        _ sql: String, _ parameters: [String?], batch: Int = 10_000, _ body: ([[String?]]) throws -> Void
    )
        throws
    {
        try exec("DECLARE office_rows NO SCROLL CURSOR FOR " + sql, parameters)
        defer { _ = try? exec("CLOSE office_rows") }
        while true {
            let rows = try exec("FETCH \(batch) FROM office_rows")
            if rows.isEmpty { break }
            try body(rows)
            if rows.count < batch { break }
        }
    }

    /// Runs `body` in one READ ONLY, REPEATABLE READ transaction: every
    /// statement sees the same snapshot.
    func snapshot<T>(_ body: () throws -> T) throws -> T {
        try exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
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
