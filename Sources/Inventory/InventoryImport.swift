import CSQLite
import FoundationEssentials
import Ledger

/// Bulk writers with explicit times, for the fleet generator
/// (`beaconbench-bench office generate`, docs/office.md "The fleet
/// generator"): whole runs, finished step outcomes and readings written
/// as history, many rows per transaction.
///
/// They write through the inventory's own connection, so the ledger's
/// preupdate hook records every row exactly as it records a live write,
/// in the same transaction (docs/ledger.md): the history made this way is
/// proven entry by entry, never a genesis over unproven rows. Package
/// access only: no user command writes history with made-up times.
extension Inventory {
    /// Opens (creating and migrating) the inventory at `path` for the fleet
    /// generator: `clock` gives the time stamped on what is written (rows
    /// that take "now", and the ledger's entries), and `benchID` is the
    /// bench's id when the file is new (an existing file keeps its own).
    /// The ledger is always recorded: `BEACONBENCH_LEDGER` is not read.
    package init(path: String, clock: @escaping @Sendable () -> Date, benchID: String) throws {
        try self.init(path: path, readOnly: false, recordsLedger: true, clock: clock, benchID: benchID)
    }

    /// The most rows `importHistory` takes in one call (one transaction):
    /// the ledger's recorder holds a transaction's changes until it commits.
    package static let importLimit = 10_000

    /// A run as history: already ended, with its own id (so that the
    /// outcomes of the same batch can name it).
    package struct ImportedRun: Sendable {
        package var id: Int64
        package var startedAt: Int64
        package var endedAt: Int64
        package var command: String
        package var sha256: String?
        package var operatorName: String
        package var host: String
        package var pid: Int64
        package var adapter: String?
        package var options: String?
        package var status: RunStatus

        /// Times in epoch milliseconds.
        package init(
            id: Int64, startedAt: Int64, endedAt: Int64, command: String, sha256: String? = nil,
            operatorName: String, host: String, pid: Int64, adapter: String? = nil, options: String? = nil,
            status: RunStatus
        ) {
            self.id = id
            self.startedAt = startedAt
            self.endedAt = endedAt
            self.command = command
            self.sha256 = sha256
            self.operatorName = operatorName
            self.host = host
            self.pid = pid
            self.adapter = adapter
            self.options = options
            self.status = status
        }
    }

    /// A step outcome as history: finished (a final status), with its times.
    package struct ImportedOutcome: Sendable {
        package var run: Int64
        package var device: String?
        package var step: String
        package var end: StepEnd
        /// Epoch milliseconds.
        package var startedAt: Int64
        package var endedAt: Int64

        package init(run: Int64, device: String?, step: String, _ end: StepEnd, startedAt: Int64, endedAt: Int64) {
            self.run = run
            self.device = device
            self.step = step
            self.end = end
            self.startedAt = startedAt
            self.endedAt = endedAt
        }
    }

    /// A reading as history (`recordReading`'s row), at `at` epoch milliseconds.
    package struct ImportedReading: Sendable {
        package var device: String
        package var at: Int64
        package var battery: UInt8?
        package var rssi: Int16?
        package var firmware: String?

        package init(device: String, at: Int64, battery: UInt8?, rssi: Int16?, firmware: String?) {
            self.device = device
            self.at = at
            self.battery = battery
            self.rssi = rssi
            self.firmware = firmware
        }
    }

    /// What one `importHistory` writes, in this order: runs, devices
    /// (each as `recordDevice` records it), outcomes, readings.
    package struct ImportBatch: Sendable {
        package var runs: [ImportedRun] = []
        package var devices: [DeviceRecord] = []
        package var outcomes: [ImportedOutcome] = []
        package var readings: [ImportedReading] = []

        package init() {}

        package var count: Int { runs.count + devices.count + outcomes.count + readings.count }
        package var isEmpty: Bool { count == 0 }
    }

    /// Writes `batch` in one transaction: its rows and their ledger entries
    /// commit together or not at all. The entries of devices and runs are
    /// stamped with the inventory's clock as the transaction commits;
    /// those of outcomes and readings carry the rows' own times, as
    /// always (docs/ledger.md, "Entries").
    /// - Throws: `InventoryImportError` for a batch over `importLimit` rows
    ///   or an outcome that ends before it starts (nothing written), else
    ///   `SQLiteError` (nothing written).
    package func importHistory(_ batch: ImportBatch) throws {
        guard batch.count <= Self.importLimit else {
            throw InventoryImportError("\(batch.count) rows in one batch: at most \(Self.importLimit)")
        }
        if let wrong = batch.outcomes.first(where: { $0.endedAt < $0.startedAt }) {
            throw InventoryImportError("an outcome of run \(wrong.run) (\(wrong.step)) ends before it starts")
        }
        if let wrong = batch.runs.first(where: { $0.endedAt < $0.startedAt }) {
            throw InventoryImportError("run \(wrong.id) ends before it starts")
        }
        guard !batch.isEmpty else { return }
        try database.inTransaction {
            if !batch.runs.isEmpty {
                let statement = try database.prepare(
                    """
                    INSERT INTO runs(id, started_at, ended_at, command, sha256, operator, host, pid, adapter, options,
                                     status, simulated)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
                    """)
                for run in batch.runs {
                    try statement.bind([
                        .integer(run.id), .text(Self.timestamp(milliseconds: run.startedAt)),
                        .text(Self.timestamp(milliseconds: run.endedAt)), .text(run.command), SQLiteValue(run.sha256),
                        .text(run.operatorName), .text(run.host), .integer(run.pid), SQLiteValue(run.adapter),
                        SQLiteValue(run.options), .text(run.status.rawValue),
                    ])
                    while try statement.step() {}
                }
            }
            for device in batch.devices { try recordDevice(device) }
            if !batch.outcomes.isEmpty {
                let statement = try database.prepare(
                    """
                    INSERT INTO outcomes(run_id, device, step, status, detail, error, before, after, started_at,
                                         ended_at, duration_ms, retries)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """)
                for outcome in batch.outcomes {
                    let end = outcome.end
                    try statement.bind([
                        .integer(outcome.run), SQLiteValue(outcome.device), .text(outcome.step),
                        .text(end.status.rawValue), SQLiteValue(end.detail), SQLiteValue(end.error),
                        SQLiteValue(end.before), SQLiteValue(end.after),
                        .text(Self.timestamp(milliseconds: outcome.startedAt)),
                        .text(Self.timestamp(milliseconds: outcome.endedAt)),
                        SQLiteValue(end.durationMilliseconds ?? (outcome.endedAt - outcome.startedAt)),
                        .integer(Int64(end.retries)),
                    ])
                    while try statement.step() {}
                }
            }
            if !batch.readings.isEmpty {
                let statement = try database.prepare(
                    "INSERT INTO readings(device, at, battery, rssi, firmware) VALUES (?, ?, ?, ?, ?)")
                for reading in batch.readings {
                    try statement.bind([
                        .text(reading.device), .text(Self.timestamp(milliseconds: reading.at)),
                        SQLiteValue(reading.battery), SQLiteValue(reading.rssi), SQLiteValue(reading.firmware),
                    ])
                    while try statement.step() {}
                }
            }
        }
    }

    /// Sets this connection for writing history in bulk, until it closes
    /// (nothing of it is kept in the file): a page cache of 96 MiB (a
    /// bench's hot pages: the indexes that random devices' rows go into),
    /// no fsync (`synchronous = OFF`: a file cut short by a crash is
    /// generated again, from its seed), and the WAL moved into the file
    /// every 8,192 pages rather than 1,000. The file is an inventory like
    /// any other; the next opening uses the usual settings.
    package func tuneForImport() throws {
        try database.execute("PRAGMA cache_size = -98304")
        try database.execute("PRAGMA synchronous = OFF")
        try database.execute("PRAGMA wal_autocheckpoint = 8192")
    }

    /// Moves the WAL's pages into the file and empties it (a generated
    /// bench is handed over as one file).
    package func checkpoint() throws {
        _ = try database.rows("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// A table's rows and a checksum of its whole contents: every column of
    /// every row in rowid order, each value as its type and its bytes
    /// (integer and real: 8 bytes little-endian; text and blob: a 4-byte
    /// length, then the bytes), hashed with SHA-256 in 1 MiB pieces, each
    /// piece's hash taking the previous one as its prefix (32 zero bytes
    /// first). Two files give the same checksum exactly when the table holds
    /// the same values in the same rows (the fleet generator's manifest).
    /// - Throws: `InventoryImportError` when there is no such table.
    package func tableDigest(_ table: String) throws -> (rows: Int, sha256: String) {
        guard
            try !database.rows("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", [.text(table)]).isEmpty
        else { throw InventoryImportError("the inventory has no table \(table)") }
        // The name is one of the file's own tables (looked up above).
        let statement = try database.prepare("SELECT * FROM \"\(table)\" ORDER BY rowid")
        let handle = statement.handle
        let columns = sqlite3_column_count(handle)
        var chained = [UInt8](repeating: 0, count: 32)
        var piece: [UInt8] = []
        piece.reserveCapacity(1 << 20 + 4096)
        var rows = 0
        func append(_ value: UInt64) {
            for shift in stride(from: 0, to: 64, by: 8) {
                piece.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
        }
        func appendBytes(_ pointer: UnsafeRawPointer?, _ count: Int) {
            for shift in stride(from: 0, to: 32, by: 8) { piece.append(UInt8(truncatingIfNeeded: count >> shift)) }
            if let pointer, count > 0 { piece.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: count)) }
        }
        while try statement.step() {
            for column in 0..<columns {
                switch sqlite3_column_type(handle, column) {
                case SQLITE_INTEGER:
                    piece.append(UInt8(ascii: "i"))
                    append(UInt64(bitPattern: sqlite3_column_int64(handle, column)))
                case SQLITE_FLOAT:
                    piece.append(UInt8(ascii: "f"))
                    append(sqlite3_column_double(handle, column).bitPattern)
                case SQLITE_TEXT:
                    piece.append(UInt8(ascii: "t"))
                    let text = sqlite3_column_text(handle, column)
                    appendBytes(UnsafeRawPointer(text), Int(sqlite3_column_bytes(handle, column)))
                case SQLITE_BLOB:
                    piece.append(UInt8(ascii: "b"))
                    let blob = sqlite3_column_blob(handle, column)
                    appendBytes(blob, Int(sqlite3_column_bytes(handle, column)))
                default: piece.append(UInt8(ascii: "n"))
                }
            }
            rows += 1
            if piece.count >= 1 << 20 {
                chained = try Digest.sha256(prefix: chained, piece).bytes
                piece.removeAll(keepingCapacity: true)
            }
        }
        return (rows, try Digest.sha256(prefix: chained, piece).hex)
    }
}

/// A batch `importHistory` would not write.
package struct InventoryImportError: Error, CustomStringConvertible {
    package var description: String
    init(_ description: String) { self.description = description }
}
