import FoundationEssentials
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The bench's memory: devices, runs, each step's outcome, readings and
/// pulled records, in one SQLite file. One actor owns the connection.
///
/// Durability: a step's outcome is committed when it ends, in one
/// transaction with what the beacon told during it and the next step's
/// `running` row (`endStep`), so a kill -9 at any moment loses at most the
/// step in flight, and leaves exactly that step `running` (or the one due
/// next, when it lands between two steps); at open, runs left `running`
/// by a process that no longer exists are marked `interrupted`, with
/// those steps (docs/inventory.md, "Durability").
public actor Inventory {
    let database: Database
    public nonisolated let path: String

    /// What the user should be told about how the file was opened (a
    /// read-only opening that cannot read a log left beside it), or nil.
    public nonisolated let caveat: String?

    /// Stored values that failed their checks, since the last `takeStoredFindings` (StoredValues.swift).
    var storedFindingLog = StoredFindingLog()

    /// The time this inventory stamps on what it writes: the rows' times
    /// and the ledger's entries. The wall clock, except for the fleet
    /// generator (`init(path:clock:benchID:)`, InventoryImport.swift).
    let clock: @Sendable () -> Date

    /// Opens (creating and migrating) the inventory at `path`: a new file is
    /// made mode 0600, a symbolic link is followed only to an existing
    /// regular file (`path` is then that file's).
    ///
    /// With `readOnly` (the read commands), an existing file is opened with
    /// `SQLITE_OPEN_READONLY` and nothing is written: no journal mode, no
    /// migration, no interrupted runs marked, no file made beside it. A
    /// file of an older schema is read as it is; a query it cannot answer
    /// says to open it once for writing. A missing file is created as by a
    /// writer (an empty inventory).
    ///
    /// Either way, an existing file is examined read-only before anything
    /// is written to it (`Schema.examine`): another program's database, or
    /// a schema version this program does not know, is refused and left
    /// exactly as it was (no journal mode, no migration, no file beside it).
    ///
    /// `recordsLedger` false (for benchmarks only: `BEACONBENCH_LEDGER=off`
    /// in the environment) opens it without the ledger: no ledger is begun
    /// and no change is appended, so the rows written meanwhile are not in
    /// it and `ledger verify` says so (docs/ledger.md, "Measuring without
    /// the ledger").
    /// - Throws: `InventoryNameError` when `path` is not a plain file path
    ///   (`:memory:`, `file:…`), `InventoryPathError` when it is no
    ///   inventory file (nothing is created or changed), else `SQLiteError`.
    public init(path: String, readOnly: Bool = false) throws {
        try self.init(path: path, readOnly: readOnly, recordsLedger: Self.ledgerSwitch)
    }

    /// Whether the environment leaves the ledger on: anything but
    /// `BEACONBENCH_LEDGER=off`.
    static var ledgerSwitch: Bool { recordsLedger(environment: ProcessInfo.processInfo.environment) }

    static func recordsLedger(environment: [String: String]) -> Bool { environment["BEACONBENCH_LEDGER"] != "off" }

    init(
        path: String, readOnly: Bool, recordsLedger: Bool, clock: @escaping @Sendable () -> Date = { Date() },
        benchID: String? = nil
    ) throws {
        self.clock = clock
        try Database.checkName(path)
        if readOnly, try Database.resolve(path) != nil {
            database = try Database(path: path, readOnly: true)
            self.path = database.path
            caveat = database.caveat
            let version = try Schema.examine(database)
            let known = Schema.migrations.count
            if version < known {
                database.olderSchema =
                    "\(database.path) has schema version \(version), this beaconbench \(known), and it was opened"
                    + " read-only: open it once for writing to migrate it"
            }
            return
        }
        if let existing = try Database.resolve(path) {
            // Read-only first: a read-write connection may make a -wal and
            // -shm beside a WAL-mode file, or roll back a hot journal. (An
            // immutable reading races a writer that starts meanwhile: tried
            // again when it reads a mixture or meets a lock.)
            for attempt in 1... {
                do {
                    _ = try Schema.examine(try Database(path: existing, readOnly: true))
                    break
                } catch let error as SQLiteError
                    where attempt < 3 && [11, 5].contains(error.primaryCode) /* SQLITE_CORRUPT, SQLITE_BUSY */
                {
                    continue
                }
            }
        }
        // Again on the connection that writes, before its first write (the
        // file may have been replaced meanwhile).
        database = try Database(path: path) { _ = try Schema.examine($0) }
        self.path = database.path
        caveat = nil
        try Schema.migrate(database)
        // The reserve as soon as the schema is in place, while there is room.
        Self.makeReserve(at: database.path + "-reserve")
        try database.run(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('bench_id', ?)",
            [.text(benchID ?? UUID().uuidString.lowercased())])
        let bench = try database.rows("SELECT value FROM meta WHERE key = 'bench_id'").first?.first?.text ?? ""
        if recordsLedger {
            try LedgerRecorder.begin(database, bench: bench, at: Self.timestamp(clock()))
            try LedgerRecorder.recordKeptCheckpoints(database, bench: bench, at: Self.timestamp(clock()))
            database.ledger = LedgerRecorder { Self.timestamp(clock()) }
        }
        try Self.markInterrupted(database, now: clock())
    }

    /// Marks runs whose process is gone as interrupted, with their running steps.
    static func markInterrupted(_ database: Database, now date: Date) throws {
        let host = ProcessInfo.processInfo.hostName
        let open = try database.rows("SELECT id, host, pid FROM runs WHERE status = 'running'")
        let now = timestamp(date)
        for row in open {
            guard let id = row[0].integer else { continue }
            let sameHost = row[1].text == host
            if sameHost, let pid = row[2].integer.flatMap(pid_t.init(exactly:)), pid > 0,
                kill(pid, 0) == 0 || errno == EPERM
            {
                continue  // still running here
            }
            try database.inTransaction {
                try database.run(
                    "UPDATE outcomes SET status = 'interrupted', ended_at = ?, error = 'the run was interrupted' WHERE run_id = ? AND status = 'running'",
                    [.text(now), .integer(id)])
                try database.run(
                    "UPDATE runs SET status = 'interrupted', ended_at = ? WHERE id = ?", [.text(now), .integer(id)])
            }
        }
    }

    /// The bench's identity, generated once per inventory.
    public func benchID() throws -> String {
        try database.rows("SELECT value FROM meta WHERE key = 'bench_id'").first?.first?.text ?? ""
    }

    public func schemaVersion() throws -> Int { try database.userVersion }

    /// A setting kept in the inventory (`meta`): `server`, the shared
    /// server last synced to (without its password).
    public func setting(_ key: String) throws -> String? {
        try database.rows("SELECT value FROM meta WHERE key = ?", [.text(key)]).first?.first?.text
    }

    public func setSetting(_ key: String, _ value: String) throws {
        try database.run(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [.text(key), .text(value)])
    }

    // MARK: Runs and steps

    public struct RunInfo: Sendable {
        public var command: String
        public var sha256: String?
        public var options: String?
        public var adapter: String?
        public var operatorName: String
        /// The run worked on simulated beacons (`--sim`): stored in
        /// `runs.simulated`, and not pushed by a sync unless asked.
        public var simulated: Bool
        public init(
            command: String, sha256: String? = nil, options: String? = nil, adapter: String? = nil,
            operatorName: String = ProcessInfo.processInfo.environment["USER"] ?? "unknown", simulated: Bool = false
        ) {
            self.command = command
            self.sha256 = sha256
            self.options = options
            self.adapter = adapter
            self.operatorName = operatorName
            self.simulated = simulated
        }
    }

    /// Starts a run (committed at once) and returns its id.
    public func beginRun(_ info: RunInfo) throws -> Int64 {
        try database.run(
            """
            INSERT INTO runs(started_at, command, sha256, operator, host, pid, adapter, options, status, simulated)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?)
            """,
            [
                .text(Self.timestamp(clock())), .text(info.command), SQLiteValue(info.sha256), .text(info.operatorName),
                .text(ProcessInfo.processInfo.hostName), .integer(Int64(getpid())), SQLiteValue(info.adapter),
                SQLiteValue(info.options), .integer(info.simulated ? 1 : 0),
            ])
        return database.lastInsertRowID
    }

    public enum RunStatus: String, Sendable { case finished, failed, interrupted }

    /// Ends a run, with the steps still in flight under it. When the disk
    /// is full, the space kept in reserve for this (see `keepSpaceInReserve`)
    /// is given back first, so the run is not left `running`.
    public func endRun(_ id: Int64, _ status: RunStatus, reason: String? = nil) throws {
        func end() throws {
            try database.inTransaction {
                try database.run(
                    "UPDATE outcomes SET status = 'interrupted', ended_at = ?, error = ? WHERE run_id = ? AND status = 'running'",
                    [.text(Self.timestamp(clock())), .text(reason ?? "the run ended"), .integer(id)])
                try database.run(
                    "UPDATE runs SET status = ?, ended_at = ? WHERE id = ?",
                    [.text(status.rawValue), .text(Self.timestamp(clock())), .integer(id)])
            }
        }
        do {
            try end()
        } catch let error as SQLiteError where error.primaryCode == 13 /* SQLITE_FULL */ {
            releaseReserve()
            try end()
        }
        if let file = getenv("BEACONBENCH_STATS") {
            Self.appendStats(run: id, commits: commits, to: String(cString: file))
        }
    }

    /// Transactions this process committed on the inventory so far (see
    /// `Database.commits`).
    public var commits: Int { database.commits }

    /// `BEACONBENCH_STATS=FILE` (benchmarks only): at the end of each run,
    /// one line `{"run":ID,"commits":N}` is appended to FILE, N counting
    /// every commit of this process on the inventory since it opened it
    /// (the migration and the run's begin and end included). A file that
    /// cannot be written is not an error.
    static func appendStats(run: Int64, commits: Int, to path: String) {
        let fd = open(path, O_CREAT | O_APPEND | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let line = Array("{\"run\":\(run),\"commits\":\(commits)}\n".utf8)
        _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// The file kept beside the inventory so that, when the disk fills up
    /// mid-run, deleting it leaves room to record how the run ended.
    nonisolated var reservePath: String { path + "-reserve" }
    static let reserveBytes = 256 * 1024

    /// Makes sure the reserve file exists (mode 0600); a failure is not an
    /// error (the disk may be full already).
    public func keepSpaceInReserve() {
        Self.makeReserve(at: reservePath)
    }

    /// Writes the reserve file at `reservePath` unless it exists.
    static func makeReserve(at reservePath: String) {
        guard access(reservePath, F_OK) != 0 else { return }
        let fd = open(reservePath, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let zeros = [UInt8](repeating: 0, count: 64 * 1024)
        var written = 0
        while written < Self.reserveBytes {
            let count = zeros.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard count > 0 else {
                unlink(reservePath)
                return
            }
            written += count
        }
    }

    /// Gives the reserve's space back to the file system.
    public func releaseReserve() { unlink(reservePath) }

    public enum StepStatus: String, Sendable, CaseIterable {
        case ok, changed, unchanged, skipped, failed, interrupted
    }

    /// Records that a step has started (committed), so a crash leaves it
    /// marked interrupted at the next open.
    public func beginStep(run: Int64, device: String?, step: String) throws -> Int64 {
        try database.run(
            "INSERT INTO outcomes(run_id, device, step, status, started_at) VALUES (?, ?, ?, 'running', ?)",
            [.integer(run), SQLiteValue(device), .text(step), .text(Self.timestamp(clock()))])
        return database.lastInsertRowID
    }

    /// Records a step's outcome, committed before this returns. `retries`:
    /// the attempts before the last (a step that succeeded after a transient
    /// failure is one row, with its status and this count).
    public func finishStep(
        _ id: Int64, _ status: StepStatus, detail: String? = nil, error: String? = nil, before: String? = nil,
        after: String? = nil, durationMilliseconds: Int64? = nil, retries: Int = 0
    ) throws {
        try database.run(
            """
            UPDATE outcomes SET status = ?, detail = ?, error = ?, before = ?, after = ?, ended_at = ?, duration_ms = ?,
                retries = ?
            WHERE id = ?
            """,
            [
                .text(status.rawValue), SQLiteValue(detail), SQLiteValue(error), SQLiteValue(before),
                SQLiteValue(after), .text(Self.timestamp(clock())), SQLiteValue(durationMilliseconds),
                .integer(Int64(retries)), .integer(id),
            ])
    }

    /// How a step ended: what `finishStep` records.
    public struct StepEnd: Sendable {
        public var status: StepStatus
        public var detail: String?
        public var error: String?
        public var before: String?
        public var after: String?
        public var durationMilliseconds: Int64?
        /// The attempts before the last.
        public var retries: Int

        public init(
            _ status: StepStatus, detail: String? = nil, error: String? = nil, before: String? = nil,
            after: String? = nil, durationMilliseconds: Int64? = nil, retries: Int = 0
        ) {
            self.status = status
            self.detail = detail
            self.error = error
            self.before = before
            self.after = after
            self.durationMilliseconds = durationMilliseconds
            self.retries = retries
        }
    }

    /// What follows a step that ends, in the same transaction.
    public enum StepNext: Sendable, Equatable {
        /// Nothing: the device's last step, or one that failed.
        case none
        /// The next step's `running` row (same run and device), begun now:
        /// a kill before it ends leaves it `interrupted` at the next open.
        case begin(String)
        /// These steps will not be done: each gets a finished `skipped` row
        /// with `reason` as its detail (a `require` not met).
        case skip([String], reason: String?)
    }

    /// A reading for trends, taken during a step (`recordReading`).
    public struct StepReading: Sendable {
        public var battery: UInt8?
        public var rssi: Int16?
        public var firmware: String?
        public init(battery: UInt8?, rssi: Int16?, firmware: String?) {
            self.battery = battery
            self.rssi = rssi
            self.firmware = firmware
        }
    }

    /// Ends step `id` in one transaction, in this order: what the beacon
    /// told during it (`observed`, and `reading` of the same device), the
    /// step's outcome, then `next` — the next step's `running` row, or the
    /// remaining steps `skipped`. With the ledger, their entries are
    /// appended at the commit (the `running` row makes none). Nothing of it
    /// is stored unless all of it is.
    /// - Returns: the `running` row's id for `.begin`, else nil.
    /// - Throws: `SQLiteError` (a sealed row: the ledger's trigger refuses
    ///   to change it), or `InventoryStepError` when there is no outcome row
    ///   `id`; nothing of it is then stored.
    @discardableResult
    public func endStep(
        _ id: Int64, _ end: StepEnd, observed: DeviceRecord? = nil, reading: StepReading? = nil,
        next: StepNext = .none
    ) throws -> Int64? {
        try database.inTransaction {
            if let observed {
                try recordDevice(observed)
                if let reading {
                    try recordReading(
                        address: observed.address, at: observed.seenAt, battery: reading.battery, rssi: reading.rssi,
                        firmware: reading.firmware)
                }
            }
            let now = Self.timestamp(clock())
            let changed = try database.run(
                """
                UPDATE outcomes SET status = ?, detail = ?, error = ?, before = ?, after = ?, ended_at = ?,
                    duration_ms = ?, retries = ?
                WHERE id = ?
                """,
                [
                    .text(end.status.rawValue), SQLiteValue(end.detail), SQLiteValue(end.error),
                    SQLiteValue(end.before), SQLiteValue(end.after), .text(now),
                    SQLiteValue(end.durationMilliseconds), .integer(Int64(end.retries)), .integer(id),
                ])
            guard changed == 1 else { throw InventoryStepError(id: id) }
            switch next {
            case .none:
                return nil
            case .begin(let step):
                try database.run(
                    """
                    INSERT INTO outcomes(run_id, device, step, status, started_at)
                    SELECT run_id, device, ?, 'running', ? FROM outcomes WHERE id = ?
                    """, [.text(step), .text(now), .integer(id)])
                return database.lastInsertRowID
            case .skip(let steps, let reason):
                for step in steps {
                    try database.run(
                        """
                        INSERT INTO outcomes(run_id, device, step, status, detail, started_at, ended_at)
                        SELECT run_id, device, ?, 'skipped', ?, ?, ? FROM outcomes WHERE id = ?
                        """, [.text(step), SQLiteValue(reason), .text(now), .text(now), .integer(id)])
                }
                return nil
            }
        }
    }

    /// Records an outcome that is finished when first written (one row,
    /// one commit): a step with nothing in flight to be found after a kill.
    @discardableResult
    public func recordStep(run: Int64, device: String?, step: String, _ end: StepEnd) throws -> Int64 {
        let now = Self.timestamp(clock())
        try database.run(
            """
            INSERT INTO outcomes(run_id, device, step, status, detail, error, before, after, started_at, ended_at,
                duration_ms, retries)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .integer(run), SQLiteValue(device), .text(step), .text(end.status.rawValue), SQLiteValue(end.detail),
                SQLiteValue(end.error), SQLiteValue(end.before), SQLiteValue(end.after), .text(now), .text(now),
                SQLiteValue(end.durationMilliseconds), .integer(Int64(end.retries)),
            ])
        return database.lastInsertRowID
    }

    /// Records that a step's attempt failed and will be tried again: the
    /// row stays `running` (a kill now leaves it `interrupted`) with the
    /// last error and the count so far.
    public func noteRetry(_ id: Int64, error: String) throws {
        try database.run(
            "UPDATE outcomes SET retries = retries + 1, error = ? WHERE id = ?", [.text(error), .integer(id)])
    }

    /// Ends a run's steps still in flight (the run stopped under them).
    public func abandonSteps(run: Int64, reason: String) throws {
        try database.run(
            "UPDATE outcomes SET status = 'interrupted', ended_at = ?, error = ? WHERE run_id = ? AND status = 'running'",
            [.text(Self.timestamp(clock())), .text(reason), .integer(run)])
    }

    /// Records many finished outcomes in one transaction (imports,
    /// benchmarks); a step run live uses begin/finish instead.
    public func recordOutcomes(
        run: Int64, _ outcomes: [(device: String?, step: String, status: StepStatus, detail: String?)]
    )
        throws
    {
        let now = Self.timestamp(clock())
        try database.inTransaction {
            let statement = try database.prepare(
                "INSERT INTO outcomes(run_id, device, step, status, detail, started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            )
            for outcome in outcomes {
                try statement.bind([
                    .integer(run), SQLiteValue(outcome.device), .text(outcome.step), .text(outcome.status.rawValue),
                    SQLiteValue(outcome.detail), .text(now), .text(now),
                ])
                while try statement.step() {}
            }
        }
    }

    // MARK: Devices

    /// Creates or refreshes a device from what was seen or read; fields
    /// left nil keep their stored value. A forgotten device is remembered
    /// again (`forgotten_at` cleared).
    public func recordDevice(_ device: DeviceRecord) throws {
        let now = Self.timestamp(device.seenAt)
        // One statement, one transaction; a NULL keeps what is stored.
        try database.run(
            """
            INSERT INTO devices(
                address, mac_ending, first_seen, last_seen, major, minor, model, serial,
                hardware_revision, firmware, battery, battery_at, calibrated, calibrated_at,
                calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                config_cornering, config_braking, config_acceleration, config_duration,
                config_enable, config_read_at, identity_at, description_at, firmware_at,
                calibration_read_at, time_offset_at
            ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(address) DO UPDATE SET
                last_seen = excluded.last_seen, major = COALESCE(excluded.major, major),
                minor = COALESCE(excluded.minor, minor), model = COALESCE(excluded.model, model),
                serial = COALESCE(excluded.serial, serial),
                hardware_revision = COALESCE(excluded.hardware_revision, hardware_revision),
                firmware = COALESCE(excluded.firmware, firmware),
                battery = COALESCE(excluded.battery, battery),
                battery_at = COALESCE(excluded.battery_at, battery_at),
                calibrated = COALESCE(excluded.calibrated, calibrated),
                calibrated_at = COALESCE(excluded.calibrated_at, calibrated_at),
                calibration_x = COALESCE(excluded.calibration_x, calibration_x),
                calibration_y = COALESCE(excluded.calibration_y, calibration_y),
                calibration_z = COALESCE(excluded.calibration_z, calibration_z),
                time_offset_ms = COALESCE(excluded.time_offset_ms, time_offset_ms),
                profile = COALESCE(excluded.profile, profile),
                config_cornering = COALESCE(excluded.config_cornering, config_cornering),
                config_braking = COALESCE(excluded.config_braking, config_braking),
                config_acceleration = COALESCE(excluded.config_acceleration, config_acceleration),
                config_duration = COALESCE(excluded.config_duration, config_duration),
                config_enable = COALESCE(excluded.config_enable, config_enable),
                config_read_at = COALESCE(excluded.config_read_at, config_read_at),
                identity_at = COALESCE(excluded.identity_at, identity_at),
                description_at = COALESCE(excluded.description_at, description_at),
                firmware_at = COALESCE(excluded.firmware_at, firmware_at),
                calibration_read_at = COALESCE(excluded.calibration_read_at, calibration_read_at),
                time_offset_at = COALESCE(excluded.time_offset_at, time_offset_at),
                forgotten_at = NULL
            """,
            [
                .text(device.address), .text(device.macEnding), .text(now), .text(now),
                SQLiteValue(device.identity?.major), SQLiteValue(device.identity?.minor), SQLiteValue(device.model),
                SQLiteValue(device.serial), SQLiteValue(device.hardwareRevision),
                SQLiteValue(device.firmware?.description), SQLiteValue(device.battery),
                device.battery == nil ? .null : .text(now), SQLiteValue(device.calibration?.calibrated),
                SQLiteValue(device.calibratedAt.map(Self.timestamp)), SQLiteValue(device.calibration?.vector.x),
                SQLiteValue(device.calibration?.vector.y), SQLiteValue(device.calibration?.vector.z),
                SQLiteValue(device.timeOffset), SQLiteValue(device.profile), SQLiteValue(device.config?.cornering),
                SQLiteValue(device.config?.braking), SQLiteValue(device.config?.acceleration),
                SQLiteValue(device.config?.duration), SQLiteValue(device.config?.enable.rawValue),
                device.config == nil ? .null : .text(now),
                // When each fact was observed: the server merges benches by them.
                device.identity == nil ? .null : .text(now),
                device.model == nil && device.serial == nil && device.hardwareRevision == nil ? .null : .text(now),
                device.firmware == nil ? .null : .text(now), device.calibration == nil ? .null : .text(now),
                device.timeOffset == nil ? .null : .text(now),
            ])
    }

    /// A reading for trends (battery, RSSI, firmware).
    public func recordReading(address: String, at: Date, battery: UInt8?, rssi: Int16?, firmware: String?) throws {
        try database.run(
            "INSERT INTO readings(device, at, battery, rssi, firmware) VALUES (?, ?, ?, ?, ?)",
            [.text(address), .text(Self.timestamp(at)), SQLiteValue(battery), SQLiteValue(rssi), SQLiteValue(firmware)])
    }

    /// Stores pulled trips with their real times; those stored before are
    /// skipped. Returns how many were new.
    public func storeTrips(_ trips: [TripRecord], device: String, timeOffset: Int64, pulledAt: Date) throws -> Int {
        try database.inTransaction {
            var added = 0
            for trip in trips {
                added += try database.run(
                    "INSERT OR IGNORE INTO trips(device, start_ms, end_ms, beacon_index, pulled_at) VALUES (?, ?, ?, ?, ?)",
                    [
                        .text(device),
                        .integer(BeaconTime.epochMilliseconds(beaconSeconds: trip.start, offset: timeOffset)),
                        .integer(BeaconTime.epochMilliseconds(beaconSeconds: trip.end, offset: timeOffset)),
                        SQLiteValue(trip.index), .text(Self.timestamp(pulledAt)),
                    ])
            }
            return added
        }
    }

    /// Stores pulled driving-behaviour events with their real times; those
    /// stored before are skipped. Returns how many were new.
    public func storeEvents(_ events: [DrivingEvent], device: String, timeOffset: Int64, pulledAt: Date) throws -> Int {
        try database.inTransaction {
            var added = 0
            for event in events {
                added += try database.run(
                    """
                    INSERT OR IGNORE INTO events(device, at_ms, type, duration_ms, average_mg, maximum_mg,
                                                 x_mg, y_mg, z_mg, beacon_index, pulled_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(device),
                        .integer(BeaconTime.epochMilliseconds(beaconSeconds: event.timestamp, offset: timeOffset)),
                        .text(Self.name(of: event.type)), SQLiteValue(event.duration),
                        SQLiteValue(event.averageMagnitude), SQLiteValue(event.maximumMagnitude),
                        SQLiteValue(event.average.x), SQLiteValue(event.average.y), SQLiteValue(event.average.z),
                        SQLiteValue(event.index), .text(Self.timestamp(pulledAt)),
                    ])
            }
            return added
        }
    }

    /// Stores pulled incidents (samples as a JSON array of [x, y, z] mG);
    /// those stored before are skipped. Returns how many were new.
    public func storeIncidents(
        _ incidents: [Incident], device: String, timeOffset: Int64, pulledAt: Date
    ) throws
        -> Int
    {
        try database.inTransaction {
            var added = 0
            for incident in incidents {
                let samples = "[" + incident.samples.map { "[\($0.x),\($0.y),\($0.z)]" }.joined(separator: ",") + "]"
                added += try database.run(
                    """
                    INSERT OR IGNORE INTO incidents(device, incident_id, at_ms, max_resultant, avg_resultant,
                                                    x_mg, y_mg, z_mg, samples, pulled_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(device), SQLiteValue(incident.id),
                        .integer(BeaconTime.epochMilliseconds(beaconSeconds: incident.timestamp, offset: timeOffset)),
                        SQLiteValue(incident.maximumResultant), SQLiteValue(incident.averageResultant),
                        SQLiteValue(incident.average.x), SQLiteValue(incident.average.y),
                        SQLiteValue(incident.average.z),
                        .text(samples), .text(Self.timestamp(pulledAt)),
                    ])
            }
            return added
        }
    }

    static func name(of type: DrivingEventType) -> String {
        switch type {
        case .acceleration: "acceleration"
        case .braking: "braking"
        case .cornering: "cornering"
        case .accident: "accident"
        }
    }

    // MARK: Reading it back

    /// Runs a read-only query with bound parameters (for reports and tests).
    public func query(_ sql: String, _ parameters: [SQLiteValue] = []) throws -> [[SQLiteValue]] {
        try database.rows(sql, parameters)
    }

    /// ISO 8601 in UTC with milliseconds: `2026-11-30T09:41:07.123Z`.
    static func timestamp(_ date: Date) -> String {
        timestamp(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
    }

    /// `timestamp` of a time in epoch milliseconds (exact: no floating point).
    static func timestamp(milliseconds: Int64) -> String {
        var seconds = time_t(milliseconds / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let fraction = Int(milliseconds % 1000)
        let millis = fraction < 10 ? "00\(fraction)" : fraction < 100 ? "0\(fraction)" : "\(fraction)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(millis)Z"
    }
}

/// `Inventory.endStep` was given a row that is not there.
public struct InventoryStepError: Error, CustomStringConvertible {
    public var id: Int64
    public var description: String { "no outcome row \(id) to end" }
}

/// What is known of a device at one moment; nil fields are unknown.
public struct DeviceRecord: Sendable {
    public var address: String
    public var macEnding: String
    public var seenAt: Date
    public var identity: BeaconIdentity?
    public var model: String?
    public var serial: String?
    public var hardwareRevision: String?
    public var firmware: FirmwareVersion?
    public var battery: UInt8?
    public var calibration: CalibrationState?
    public var calibratedAt: Date?
    public var timeOffset: Int64?
    public var profile: String?
    public var config: DrivingBehaviourConfig?
    /// The benches that know the device, latest first (a server inventory
    /// only; nil for a bench's own).
    public var benches: [String]?

    public init(address: String, seenAt: Date = Date()) {
        self.address = address.uppercased()
        self.macEnding = (try? MACEnding(address: address))?.description ?? ""
        self.seenAt = seenAt
    }
}
