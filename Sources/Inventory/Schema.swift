import CSQLite

/// The inventory's schema, as ordered, append-only migrations. Each runs
/// in one IMMEDIATE transaction that also sets `PRAGMA user_version` to its
/// number, so a file is always at exactly one version. Times are ISO 8601
/// UTC text (readable in `sqlite3`); beacon record times are epoch
/// milliseconds. docs/inventory.md describes every table.
enum Schema {
    static let migrations: [(name: String, sql: String)] = [
        (
            "initial schema",
            """
            CREATE TABLE meta (
                key   TEXT PRIMARY KEY,
                value TEXT NOT NULL
            );
            CREATE TABLE devices (
                address             TEXT PRIMARY KEY,
                mac_ending          TEXT NOT NULL,
                major               INTEGER,
                minor               INTEGER,
                model               TEXT,
                serial              TEXT,
                hardware_revision   TEXT,
                firmware            TEXT,
                first_seen          TEXT NOT NULL,
                last_seen           TEXT NOT NULL,
                battery             INTEGER,
                battery_at          TEXT,
                calibrated          INTEGER,
                calibrated_at       TEXT,
                calibration_x       INTEGER,
                calibration_y       INTEGER,
                calibration_z       INTEGER,
                time_offset_ms      INTEGER,
                profile             TEXT,
                config_cornering    INTEGER,
                config_braking      INTEGER,
                config_acceleration INTEGER,
                config_duration     INTEGER,
                config_enable       INTEGER,
                config_read_at      TEXT
            );
            CREATE TABLE runs (
                id          INTEGER PRIMARY KEY,
                started_at  TEXT NOT NULL,
                ended_at    TEXT,
                command     TEXT NOT NULL,
                sha256      TEXT,
                operator    TEXT,
                host        TEXT,
                pid         INTEGER,
                adapter     TEXT,
                options     TEXT,
                status      TEXT NOT NULL
                            CHECK (status IN ('running', 'finished', 'failed', 'interrupted'))
            );
            CREATE TABLE outcomes (
                id          INTEGER PRIMARY KEY,
                run_id      INTEGER NOT NULL REFERENCES runs(id),
                device      TEXT REFERENCES devices(address),
                step        TEXT NOT NULL,
                status      TEXT NOT NULL CHECK (status IN
                            ('running', 'ok', 'changed', 'unchanged', 'skipped', 'failed', 'interrupted')),
                detail      TEXT,
                error       TEXT,
                before      TEXT,
                after       TEXT,
                started_at  TEXT NOT NULL,
                ended_at    TEXT,
                duration_ms INTEGER
            );
            CREATE INDEX outcomes_by_device ON outcomes(device, id);
            CREATE INDEX outcomes_by_run ON outcomes(run_id, id);
            CREATE TABLE readings (
                id       INTEGER PRIMARY KEY,
                device   TEXT NOT NULL REFERENCES devices(address),
                at       TEXT NOT NULL,
                battery  INTEGER,
                rssi     INTEGER,
                firmware TEXT
            );
            CREATE INDEX readings_by_device ON readings(device, at);
            CREATE TABLE trips (
                device       TEXT NOT NULL REFERENCES devices(address),
                start_ms     INTEGER NOT NULL,
                end_ms       INTEGER NOT NULL,
                beacon_index INTEGER NOT NULL,
                pulled_at    TEXT NOT NULL,
                PRIMARY KEY (device, start_ms, end_ms)
            );
            CREATE TABLE events (
                device       TEXT NOT NULL REFERENCES devices(address),
                at_ms        INTEGER NOT NULL,
                type         TEXT NOT NULL,
                duration_ms  INTEGER NOT NULL,
                average_mg   INTEGER NOT NULL,
                maximum_mg   INTEGER NOT NULL,
                x_mg         INTEGER NOT NULL,
                y_mg         INTEGER NOT NULL,
                z_mg         INTEGER NOT NULL,
                beacon_index INTEGER NOT NULL,
                pulled_at    TEXT NOT NULL,
                PRIMARY KEY (device, at_ms, type, beacon_index)
            );
            CREATE TABLE incidents (
                device        TEXT NOT NULL REFERENCES devices(address),
                incident_id   INTEGER NOT NULL,
                at_ms         INTEGER NOT NULL,
                max_resultant INTEGER NOT NULL,
                avg_resultant INTEGER NOT NULL,
                x_mg          INTEGER NOT NULL,
                y_mg          INTEGER NOT NULL,
                z_mg          INTEGER NOT NULL,
                samples       TEXT NOT NULL,
                pulled_at     TEXT NOT NULL,
                PRIMARY KEY (device, incident_id, at_ms)
            );
            """
        ),
        (
            "when each fact of a device was observed",
            """
            ALTER TABLE devices ADD COLUMN identity_at TEXT;
            ALTER TABLE devices ADD COLUMN description_at TEXT;
            ALTER TABLE devices ADD COLUMN firmware_at TEXT;
            ALTER TABLE devices ADD COLUMN calibration_read_at TEXT;
            ALTER TABLE devices ADD COLUMN time_offset_at TEXT;
            UPDATE devices SET identity_at = last_seen WHERE major IS NOT NULL AND minor IS NOT NULL;
            UPDATE devices SET description_at = last_seen
                WHERE model IS NOT NULL OR serial IS NOT NULL OR hardware_revision IS NOT NULL;
            UPDATE devices SET firmware_at = last_seen WHERE firmware IS NOT NULL;
            UPDATE devices SET calibration_read_at = last_seen WHERE calibrated IS NOT NULL;
            UPDATE devices SET time_offset_at = last_seen WHERE time_offset_ms IS NOT NULL;
            """
        ),
        (
            "identities meant for devices, device claims, step retries",
            """
            ALTER TABLE outcomes ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
            CREATE TABLE identities (
                major       INTEGER NOT NULL CHECK (major BETWEEN 0 AND 65535),
                minor       INTEGER NOT NULL CHECK (minor BETWEEN 0 AND 65535),
                device      TEXT NOT NULL UNIQUE REFERENCES devices(address),
                source      TEXT NOT NULL CHECK (source IN ('profile', 'explicit', 'found', 'server')),
                profile     TEXT,
                run_id      INTEGER REFERENCES runs(id),
                reserved_at TEXT NOT NULL,
                PRIMARY KEY (major, minor)
            );
            CREATE TABLE claims (
                device     TEXT PRIMARY KEY,
                run_id     INTEGER NOT NULL REFERENCES runs(id),
                host       TEXT NOT NULL,
                pid        INTEGER NOT NULL,
                claimed_at TEXT NOT NULL
            );
            CREATE INDEX devices_by_identity ON devices(major, minor);
            INSERT OR IGNORE INTO identities(major, minor, device, source, profile, reserved_at)
                SELECT major, minor, address, 'found', profile, COALESCE(identity_at, last_seen) FROM devices
                WHERE major IS NOT NULL AND minor IS NOT NULL
                  AND (profile IS NOT NULL OR EXISTS (
                      SELECT 1 FROM outcomes o WHERE o.device = devices.address AND o.step = 'identity'
                      AND o.status IN ('changed', 'unchanged')))
                ORDER BY COALESCE(identity_at, last_seen), address;
            """
        ),
        (
            "forgotten devices, simulated runs",
            """
            ALTER TABLE devices ADD COLUMN forgotten_at TEXT;
            ALTER TABLE runs ADD COLUMN simulated INTEGER NOT NULL DEFAULT 0;
            CREATE INDEX outcomes_by_start ON outcomes(started_at);
            CREATE INDEX runs_simulated ON runs(simulated) WHERE simulated <> 0;
            CREATE VIEW simulated_only_devices AS
                SELECT DISTINCT o.device AS address FROM runs r JOIN outcomes o ON o.run_id = r.id
                WHERE r.simulated <> 0 AND o.device IS NOT NULL
                  AND NOT EXISTS (
                    SELECT 1 FROM outcomes p JOIN runs q ON q.id = p.run_id
                    WHERE p.device = o.device AND q.simulated = 0);
            """
        ),
        (
            "desired state: assignments",
            """
            CREATE TABLE assignments (
                address       TEXT PRIMARY KEY,
                profile       TEXT NOT NULL,
                major         INTEGER CHECK (major BETWEEN 0 AND 65535),
                minor_policy  TEXT NOT NULL CHECK (minor_policy IN ('auto', 'keep', 'fixed')),
                minor         INTEGER CHECK (minor BETWEEN 0 AND 65535),
                overrides     TEXT NOT NULL DEFAULT '{}',
                assigned_at   TEXT NOT NULL,
                assigned_by   TEXT NOT NULL,
                source        TEXT NOT NULL CHECK (source IN ('local', 'server')),
                converged_at  TEXT,
                converged_run INTEGER REFERENCES runs(id),
                CHECK ((minor_policy = 'fixed') = (minor IS NOT NULL))
            );
            """
        ),
        (
            "the inventory says it is one: PRAGMA application_id",
            // `applicationID` below, written out (PRAGMA takes no parameters).
            "PRAGMA application_id = 1111649891;"
        ),
        (
            "the ledger (docs/ledger.md)",
            // The entries of sealed rows (outcomes once final, readings,
            // pulled records) are not stored twice: such a row carries its
            // entry's sequence number and leaf check, and triggers refuse to
            // change or delete it. The genesis entries are appended by
            // `LedgerRecorder.begin` on the first open after this.
            """
            CREATE TABLE ledger (
                seq    INTEGER PRIMARY KEY CHECK (seq >= 0),
                leaf   INTEGER NOT NULL,
                entry  BLOB NOT NULL
            );
            CREATE TABLE ledger_head (
                one      INTEGER PRIMARY KEY CHECK (one = 1),
                size     INTEGER NOT NULL CHECK (size >= 0),
                frontier BLOB NOT NULL,
                root     BLOB NOT NULL
            );
            CREATE TABLE ledger_nodes (
                node INTEGER PRIMARY KEY,
                hash BLOB NOT NULL
            );
            CREATE TABLE ledger_checkpoints (
                size    INTEGER PRIMARY KEY,
                root    BLOB NOT NULL,
                note    TEXT NOT NULL,
                made_at TEXT NOT NULL
            );
            CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: an entry cannot be changed'); END;
            CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: an entry cannot be deleted'); END;
            CREATE TRIGGER ledger_append_at_head BEFORE INSERT ON ledger
                WHEN NEW.seq < COALESCE((SELECT size FROM ledger_head), 0)
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: entries are added at its head'); END;
            CREATE TRIGGER ledger_head_grows BEFORE UPDATE ON ledger_head WHEN NEW.size < OLD.size
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: its head cannot go back'); END;
            CREATE TRIGGER ledger_head_kept BEFORE DELETE ON ledger_head
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: its head cannot be deleted'); END;
            CREATE TRIGGER ledger_nodes_no_update BEFORE UPDATE ON ledger_nodes
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: a tree node cannot be changed'); END;
            CREATE TRIGGER ledger_nodes_no_delete BEFORE DELETE ON ledger_nodes
                BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: a tree node cannot be deleted'); END;
            CREATE TRIGGER ledger_checkpoints_no_update BEFORE UPDATE ON ledger_checkpoints
                BEGIN SELECT RAISE(ABORT, 'a checkpoint cannot be changed'); END;
            CREATE TRIGGER ledger_checkpoints_no_delete BEFORE DELETE ON ledger_checkpoints
                BEGIN SELECT RAISE(ABORT, 'a checkpoint cannot be deleted'); END;
            ALTER TABLE outcomes ADD COLUMN ledger_seq INTEGER;
            ALTER TABLE outcomes ADD COLUMN ledger_leaf INTEGER;
            CREATE TRIGGER outcomes_sealed_update BEFORE UPDATE ON outcomes WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'outcomes: a row in the ledger cannot be changed'); END;
            CREATE TRIGGER outcomes_sealed_delete BEFORE DELETE ON outcomes WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'outcomes: a row in the ledger cannot be deleted'); END;
            ALTER TABLE readings ADD COLUMN ledger_seq INTEGER;
            ALTER TABLE readings ADD COLUMN ledger_leaf INTEGER;
            CREATE TRIGGER readings_sealed_update BEFORE UPDATE ON readings WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'readings: a row in the ledger cannot be changed'); END;
            CREATE TRIGGER readings_sealed_delete BEFORE DELETE ON readings WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'readings: a row in the ledger cannot be deleted'); END;
            ALTER TABLE trips ADD COLUMN ledger_seq INTEGER;
            ALTER TABLE trips ADD COLUMN ledger_leaf INTEGER;
            CREATE TRIGGER trips_sealed_update BEFORE UPDATE ON trips WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'trips: a row in the ledger cannot be changed'); END;
            CREATE TRIGGER trips_sealed_delete BEFORE DELETE ON trips WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'trips: a row in the ledger cannot be deleted'); END;
            ALTER TABLE events ADD COLUMN ledger_seq INTEGER;
            ALTER TABLE events ADD COLUMN ledger_leaf INTEGER;
            CREATE TRIGGER events_sealed_update BEFORE UPDATE ON events WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'events: a row in the ledger cannot be changed'); END;
            CREATE TRIGGER events_sealed_delete BEFORE DELETE ON events WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'events: a row in the ledger cannot be deleted'); END;
            ALTER TABLE incidents ADD COLUMN ledger_seq INTEGER;
            ALTER TABLE incidents ADD COLUMN ledger_leaf INTEGER;
            CREATE TRIGGER incidents_sealed_update BEFORE UPDATE ON incidents WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'incidents: a row in the ledger cannot be changed'); END;
            CREATE TRIGGER incidents_sealed_delete BEFORE DELETE ON incidents WHEN OLD.ledger_seq IS NOT NULL
                BEGIN SELECT RAISE(ABORT, 'incidents: a row in the ledger cannot be deleted'); END;
            """
        ),
    ]

    /// `PRAGMA application_id` of an inventory: "BBnc" in ASCII. SQLite
    /// keeps it at offset 68 of the file's header (`file(1)` and others
    /// read it there); files written by other programs carry their own or 0.
    static let applicationID: Int32 = 0x4242_6E63

    /// Tables every inventory has had since version 1: a file with tables
    /// but not these is not an inventory.
    static let ownTables: Set<String> = ["meta", "devices", "runs", "outcomes"]

    /// What a file is, examined before anything is written to it (and by
    /// read commands, which write nothing): its schema version when it is
    /// an inventory of a version this program knows, or new (no tables,
    /// version 0).
    /// - Throws: `InventoryPathError` (exit 3, nothing changed) for a file
    ///   that is not an SQLite database, another program's database (another
    ///   `application_id`, or tables but not an inventory's) or a version
    ///   this program does not know (negative, newer).
    static func examine(_ database: Database) throws -> Int {
        let path = database.path
        let applicationID: Int64
        let version: Int64
        let tables: Set<String>
        do {
            // One statement, so one read transaction: the three are of the
            // same moment. Read one by one, another process creating the
            // same new inventory could commit its first migration in
            // between, and the file looked like version 0 with tables
            // (ConcurrentOpenTests found it, 2 rounds in 8, under load).
            let row = try database.rows(
                """
                SELECT (SELECT application_id FROM pragma_application_id()),
                       (SELECT user_version FROM pragma_user_version()),
                       (SELECT group_concat(name, char(31)) FROM sqlite_schema WHERE type = 'table')
                """
            ).first
            applicationID = row?[0].integer ?? 0
            version = row?[1].integer ?? 0
            tables = Set((row?[2].text ?? "").split(separator: "\u{1F}").map(String.init))
        } catch let error as SQLiteError where error.primaryCode == SQLITE_NOTADB {
            throw InventoryPathError(
                path, "is not an SQLite database: it cannot be an inventory (beaconbench leaves it as it is)")
        }
        let leftAlone = "beaconbench leaves it as it is: give --inventory a file of its own"
        if applicationID != 0 && applicationID != Int64(Self.applicationID) {
            throw InventoryPathError(
                path,
                "is an SQLite database of another program (application_id \(applicationID), 0x"
                    + String(UInt32(truncatingIfNeeded: applicationID), radix: 16)
                    + "; an inventory's is \(Self.applicationID), 0x\(String(Self.applicationID, radix: 16))): \(leftAlone)"
            )
        }
        if !tables.isEmpty && !Self.ownTables.isSubset(of: tables) {
            throw InventoryPathError(
                path,
                "is an SQLite database of another program (\(tables.count) table\(tables.count == 1 ? "" : "s"),"
                    + " not an inventory's: no \(Self.ownTables.subtracting(tables).sorted().joined(separator: ", "))):"
                    + " \(leftAlone)")
        }
        let known = migrations.count
        if tables.isEmpty ? version != 0 : !(1...Int64(known)).contains(version) {
            throw InventoryPathError(
                path,
                "has schema version \(version) (user_version), which this beaconbench does not know"
                    + " (it knows 1 to \(known)\(version > known ? "; a newer beaconbench's inventory?" : "")): \(leftAlone)"
            )
        }
        return Int(version)
    }

    /// Applies the migrations the file has not had yet.
    /// - Throws: when the file is newer than this program knows.
    static func migrate(_ database: Database) throws {
        let current = try examine(database)
        for (index, migration) in migrations.enumerated().dropFirst(current) {
            try database.inTransaction {
                // Another process may have migrated the file while this one
                // waited for the write lock: look again inside it.
                guard try database.userVersion == index else { return }
                try database.execute(migration.sql)
                // A version number is not a value from outside: it is this
                // array's index, so it can be written into the pragma.
                try database.execute("PRAGMA user_version = \(index + 1)")
            }
        }
        // A migration rewrites much of the file: give the WAL's space back
        // (a full disk must still hold the run that follows and the reserve).
        if current < migrations.count {
            _ = try? database.rows("PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }
}
