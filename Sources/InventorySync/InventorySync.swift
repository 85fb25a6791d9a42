import Foundation
import Inventory

/// Pushes a bench's SQLite inventory to a shared PostgreSQL server.
///
/// Every row is keyed on the server by the bench's id (generated once per
/// inventory) and its local key, and written with an upsert, so a sync that
/// is repeated or was cut short sends rows again harmlessly: nothing is
/// duplicated, nothing lost. Rows go in transactions of `batchSize`; a sync
/// that fails part-way keeps what it committed and the next one goes on
/// from the server's highest local id per table, plus the runs and steps the
/// server still has as `running` (they may have finished since).
public enum InventorySync {
    public struct Report: Sendable, Equatable {
        public var benchID: String
        /// Rows sent per table.
        public var sent: [String: Int] = [:]
    }

    public static func push(
        _ inventory: Inventory, to url: String, batchSize: Int = 500
    ) async throws(SyncError) -> Report {
        let benchID: String
        do {
            benchID = try await inventory.benchID()
        } catch {
            throw SyncError("the local inventory: \(error)")
        }
        let server = try PostgresConnection(url)
        try server.exec("SET client_min_messages TO warning")
        try migrate(server)
        try server.exec(
            """
            INSERT INTO benches (bench_id, host, last_sync) VALUES ($1, $2, NULL)
            ON CONFLICT (bench_id) DO UPDATE SET host = excluded.host
            """, [benchID, ProcessInfo.processInfo.hostName])
        var report = Report(benchID: benchID)
        for table in ServerSchema.tables {
            var after: Int64 = 0
            var refresh: [String] = []
            if table.hasLocalID {
                after = try maxLocalID(server, table.name, benchID)
                refresh = try stillRunning(server, table.name, benchID)
            }
            let rows: [[SQLiteValue]]
            do {
                rows = try await inventory.query(
                    table.select,
                    table.hasLocalID
                        ? [.integer(after), .text("[" + refresh.joined(separator: ",") + "]")] : [.integer(after)])
            } catch {
                throw SyncError("the local inventory: \(error)")
            }
            var sent = 0
            for start in stride(from: 0, to: rows.count, by: batchSize) {
                let batch = rows[start..<min(rows.count, start + batchSize)]
                try server.transaction { () throws(SyncError) in
                    for row in batch { try server.exec(table.upsert, [benchID] + row.map(text)) }
                }
                sent += batch.count
            }
            report.sent[table.name] = sent
        }
        try server.exec(
            "UPDATE benches SET last_sync = $2 WHERE bench_id = $1",
            [benchID, ISO8601DateFormatter().string(from: Date())])
        return report
    }

    static func migrate(_ server: PostgresConnection) throws(SyncError) {
        try server.transaction { () throws(SyncError) in
            // One bench at a time creates or migrates the schema.
            try server.exec("SELECT pg_advisory_xact_lock(7205190011)")
            try server.exec(ServerSchema.create)
            let cell = try server.exec("SELECT max(version) FROM beaconbench_schema").first?.first ?? nil
            let current = cell.flatMap { Int($0) }
            if let current, current > ServerSchema.version {
                throw SyncError(
                    "the server's schema is version \(current), newer than this beaconbench knows (\(ServerSchema.version))"
                )
            }
            if current == nil {
                try server.exec("INSERT INTO beaconbench_schema (version) VALUES ($1)", [String(ServerSchema.version)])
            }
        }
    }

    static func maxLocalID(_ server: PostgresConnection, _ table: String, _ bench: String) throws(SyncError) -> Int64 {
        let sql =
            switch table {
            case "runs": "SELECT coalesce(max(local_id), 0) FROM runs WHERE bench_id = $1"
            case "outcomes": "SELECT coalesce(max(local_id), 0) FROM outcomes WHERE bench_id = $1"
            default: "SELECT coalesce(max(local_id), 0) FROM readings WHERE bench_id = $1"
            }
        let cell = try server.exec(sql, [bench]).first?.first ?? nil
        return cell.flatMap { Int64($0) } ?? 0
    }

    /// Local ids the server holds as still running (to send again).
    static func stillRunning(
        _ server: PostgresConnection, _ table: String, _ bench: String
    ) throws(SyncError)
        -> [String]
    {
        let sql =
            switch table {
            case "runs": "SELECT local_id FROM runs WHERE bench_id = $1 AND status = 'running'"
            case "outcomes": "SELECT local_id FROM outcomes WHERE bench_id = $1 AND status = 'running'"
            default: "SELECT local_id FROM readings WHERE false AND bench_id = $1"
            }
        return try server.exec(sql, [bench]).compactMap { $0.first ?? nil }
    }

    static func text(_ value: SQLiteValue) -> String? {
        switch value {
        case .null: nil
        case .integer(let number): String(number)
        case .real(let number): String(number)
        case .text(let text): text
        case .blob(let bytes): bytes.map { String(format: "%02x", $0) }.joined()
        }
    }
}
