import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

/// One server schema migration: its name, its transaction's SQL, and
/// whether benches of the version before it may keep syncing to a server
/// that has it (`ServerSchema.migrations`).
typealias ServerMigration = (name: String, sql: String, keepsOlderBenches: Bool)

/// The server's schema and the statements that fill it: every local table
/// with the bench's id in front of its key, so that rows from many benches
/// never collide and a row sent twice is the same row. Versioned like the
/// SQLite schema: ordered, append-only migrations, each applied in one
/// transaction that records its number in `beaconbench_schema`
/// (docs/inventory.md). The SQL is written out in full; values are
/// parameters, a batch of rows travelling as one array per column.
enum ServerSchema {
    /// The migrations, in order. `keepsOlderBenches`: whether benches of the version before may keep
    /// syncing to (and the office reading from) a server that has this
    /// migration — true only of a migration that adds what an older bench
    /// neither writes nor needs (a nullable column, a table, an index, a
    /// function) and changes nothing it reads or writes. Each version
    /// records from it the oldest version that may still sync
    /// (`beaconbench_schema.compatible_from`, from version 11 on); a bench
    /// at least that new syncs to a newer server unchanged, an older one is
    /// refused (docs/office.md, "Older benches against a newer server").
    static let migrations: [ServerMigration] = [
        ("initial schema", initial, false),
        ("observation times, the merged fleet view, read indexes", mergedFleet, false),
        ("identities: claimed fleet-wide, meant per bench; step retries", identityClaims, false),
        ("forgotten devices, simulated runs", forgottenAndSimulated, false),
        ("desired state: assignments fleet-wide, their conflicts", ServerAssignments.schema, false),
        ("every bench's ledger, append-only; its checkpoints; rewrites refused", ServerLedger.schema, false),
        (
            "sync at scale: running rows indexed, each bench's sync cursors, assignments' change marks", syncAtScale,
            false
        ),
        ("office reads at fleet scale: record sort keys, read indexes, fleet pages", OfficeReads.migration, false),
        ("identity claims from blocks of minors leased per bench", ServerIdentities.blocksSchema, false),
        ("every bench's ledger stored in compressed blocks", ServerLedger.blocksSchema, false),
        // Benches of version 10 do not read compatible_from: they refuse any newer server.
        ("each version names the oldest beaconbench that may still sync", compatibleFromColumn, false),
        // Benches of version 11 write claims and convergences directly, which bench roles may not.
        (
            "per-bench authority: bench roles, row-level security, functions acting for one bench", ServerRoles.schema,
            false
        ),
    ]

    /// Version 11: from here on, each version records the oldest version
    /// whose benches may still sync to it (`compatibleFrom`).
    static let compatibleFromColumn = "ALTER TABLE beaconbench_schema ADD COLUMN IF NOT EXISTS compatible_from INTEGER"
    static let compatibleFromSince = 11

    /// The oldest version whose benches may sync to a server at `version`
    /// (one of this program's): back through every migration that keeps
    /// the benches before it, never below version 11 (older benches do not
    /// read the rule, and refuse a newer server whatever it says).
    static func compatibleFrom(_ version: Int, in migrations: [ServerMigration] = migrations) -> Int {
        var oldest = version
        while oldest > compatibleFromSince, migrations[oldest - 1].keepsOlderBenches { oldest -= 1 }
        return oldest
    }

    /// The slow parts of the migrations above, done after their
    /// transaction without blocking writes (`ServerMigrations`): index builds
    /// and batched backfills, each named once for all versions.
    static let afterwork: [ServerAfterwork] = syncAtScaleAfterwork(version: 7) + OfficeReads.afterwork(version: 8)

    /// Version 7 (docs/office.md, "Sync at scale"): what makes a re-sync
    /// O(changes). Partial indexes for the `running` rows a sync sends
    /// again (without them, a scan of every bench's outcomes); the bench's
    /// cursors on `benches` — `tables_seq`, the ledger size whose changes
    /// are all in the tables here, `assignments_seq` and
    /// `assignments_xmin`, how far the exchange of assignments went each
    /// way, `assignments_refused`, the server rows it refused (checked
    /// again each sync); on `fleet_assignments`, the transaction that
    /// last wrote each row (`changed_xid`, set by a trigger, indexed), so
    /// that a bench pulls only what changed since its last pull, and an
    /// index by the address's letter case for the exchange's row locks.
    /// Every statement may run again (IF NOT EXISTS, OR REPLACE).
    static let syncAtScale = """
        ALTER TABLE benches ADD COLUMN IF NOT EXISTS tables_seq BIGINT;
        ALTER TABLE benches ADD COLUMN IF NOT EXISTS assignments_seq BIGINT;
        ALTER TABLE benches ADD COLUMN IF NOT EXISTS assignments_xmin TEXT;
        ALTER TABLE benches ADD COLUMN IF NOT EXISTS assignments_refused TEXT[];
        ALTER TABLE fleet_assignments ADD COLUMN IF NOT EXISTS changed_xid xid8;
        UPDATE fleet_assignments SET changed_xid = pg_current_xact_id() WHERE changed_xid IS NULL;
        CREATE OR REPLACE FUNCTION beaconbench_assignment_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
        BEGIN
            NEW.changed_xid := pg_current_xact_id();
            RETURN NEW;
        END
        $fn$;
        DROP TRIGGER IF EXISTS changed ON fleet_assignments;
        CREATE TRIGGER changed BEFORE INSERT OR UPDATE ON fleet_assignments
            FOR EACH ROW EXECUTE FUNCTION beaconbench_assignment_changed();
        """

    /// Version 7's indexes, built after its transaction (afterwork): until
    /// they are, the `running` rows and the exchange's row locks are found
    /// by scans — slower, the same rows.
    static func syncAtScaleAfterwork(version: Int) -> [ServerAfterwork] {
        [
            (
                "runs_running",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_running ON runs (bench_id, local_id) WHERE status = 'running'"
            ),
            (
                "outcomes_running",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS outcomes_running ON outcomes (bench_id, local_id) WHERE status = 'running'"
            ),
            (
                "fleet_assignments_by_change",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS fleet_assignments_by_change ON fleet_assignments (changed_xid)"
            ),
            (
                "fleet_assignments_by_device",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS fleet_assignments_by_device ON fleet_assignments (upper(address))"
            ),
        ].map { ServerAfterwork(version: version, name: $0.0, kind: .index($0.1)) }
    }

    /// An upsert's condition that makes it a no-op for a row that has not
    /// changed: `WHERE (t.c, …) IS DISTINCT FROM (excluded.c, …)` over the
    /// columns it sets, so a row sent again unchanged writes no tuple.
    static func changedOnly(_ table: String, _ names: [String]) -> String {
        return "\n    WHERE (" + names.map { "\(table).\($0)" }.joined(separator: ", ") + ") IS DISTINCT FROM ("
            + names.map { "excluded.\($0)" }.joined(separator: ", ") + ")"
    }

    /// Version 4: a device a bench forgot (`devices.forgotten_at`, SQLite
    /// schema 4) leaves `fleet_devices` unless another bench still knows
    /// it; runs say whether they were simulated (a sync sends those only
    /// when asked). Indexes for listing pulled records.
    static let forgottenAndSimulated = """
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS forgotten_at TEXT;
        ALTER TABLE runs ADD COLUMN IF NOT EXISTS simulated BIGINT NOT NULL DEFAULT 0;
        CREATE INDEX IF NOT EXISTS trips_by_device ON trips (device);
        CREATE INDEX IF NOT EXISTS events_by_device ON events (device);
        CREATE INDEX IF NOT EXISTS incidents_by_device ON incidents (device);
        DROP VIEW IF EXISTS fleet_devices;
        CREATE VIEW fleet_devices AS
        SELECT
            address, seen[3] AS mac_ending, identity[3]::bigint AS major, identity[4]::bigint AS minor,
            description[3] AS model, description[4] AS serial, description[5] AS hardware_revision,
            firmware[3] AS firmware, first_seen, last_seen, battery[3]::bigint AS battery,
            battery[1] AS battery_at, calibration[3]::bigint AS calibrated, calibration[4] AS calibrated_at,
            calibration[5]::bigint AS calibration_x, calibration[6]::bigint AS calibration_y,
            calibration[7]::bigint AS calibration_z, time_offset[3]::bigint AS time_offset_ms,
            profile[3] AS profile, config[3]::bigint AS config_cornering, config[4]::bigint AS config_braking,
            config[5]::bigint AS config_acceleration, config[6]::bigint AS config_duration,
            config[7]::bigint AS config_enable, config[1] AS config_read_at, identity[1] AS identity_at,
            description[1] AS description_at, firmware[1] AS firmware_at, calibration[1] AS calibration_read_at,
            time_offset[1] AS time_offset_at, benches
        FROM (
            -- Each fact: the greatest [when observed, bench, values…] of the
            -- rows that know it, so the latest observation wins (ties: the
            -- greater bench id), in one pass without sorting each group.
            SELECT
                address,
                max(ARRAY[last_seen, bench_id, mac_ending]) AS seen,
                max(ARRAY[coalesce(identity_at, last_seen), bench_id, major::text, minor::text])
                    FILTER (WHERE major IS NOT NULL AND minor IS NOT NULL) AS identity,
                max(ARRAY[coalesce(description_at, last_seen), bench_id, model, serial, hardware_revision])
                    FILTER (WHERE model IS NOT NULL OR serial IS NOT NULL OR hardware_revision IS NOT NULL)
                    AS description,
                max(ARRAY[coalesce(firmware_at, last_seen), bench_id, firmware])
                    FILTER (WHERE firmware IS NOT NULL) AS firmware,
                min(first_seen) AS first_seen,
                max(last_seen) AS last_seen,
                max(ARRAY[battery_at, bench_id, battery::text])
                    FILTER (WHERE battery IS NOT NULL AND battery_at IS NOT NULL) AS battery,
                max(ARRAY[coalesce(calibration_read_at, last_seen), bench_id, calibrated::text, calibrated_at,
                    calibration_x::text, calibration_y::text, calibration_z::text])
                    FILTER (WHERE calibrated IS NOT NULL) AS calibration,
                max(ARRAY[coalesce(time_offset_at, last_seen), bench_id, time_offset_ms::text])
                    FILTER (WHERE time_offset_ms IS NOT NULL) AS time_offset,
                max(ARRAY[coalesce(config_read_at, ''), bench_id, profile]) FILTER (WHERE profile IS NOT NULL)
                    AS profile,
                max(ARRAY[config_read_at, bench_id, config_cornering::text, config_braking::text,
                    config_acceleration::text, config_duration::text, config_enable::text])
                    FILTER (WHERE config_read_at IS NOT NULL) AS config,
                string_agg(bench_id, ' ' ORDER BY last_seen DESC, bench_id DESC) AS benches
            FROM devices WHERE forgotten_at IS NULL GROUP BY address
        ) AS merged;
        """

    /// One identity per device fleet-wide: a bench claims a minor here
    /// before it writes it (the primary key makes a duplicate impossible).
    static let identityClaims = """
        CREATE TABLE IF NOT EXISTS identity_claims (
            major      BIGINT NOT NULL,
            minor      BIGINT NOT NULL,
            address    TEXT NOT NULL UNIQUE,
            bench_id   TEXT NOT NULL,
            claimed_at TEXT NOT NULL,
            PRIMARY KEY (major, minor)
        );
        CREATE INDEX IF NOT EXISTS devices_by_identity ON devices (major, minor);
        CREATE TABLE IF NOT EXISTS identities (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            device TEXT,
            major BIGINT,
            minor BIGINT,
            source TEXT,
            profile TEXT,
            run_id BIGINT,
            reserved_at TEXT,
            PRIMARY KEY (bench_id, device)
        );
        ALTER TABLE outcomes ADD COLUMN IF NOT EXISTS retries BIGINT NOT NULL DEFAULT 0;
        """

    static var version: Int { migrations.count }

    static let initial = """
        CREATE TABLE IF NOT EXISTS beaconbench_schema (version INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS benches (
            bench_id  TEXT PRIMARY KEY,
            host      TEXT,
            last_sync TEXT
        );
        CREATE TABLE IF NOT EXISTS devices (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            address TEXT,
            mac_ending TEXT,
            major BIGINT,
            minor BIGINT,
            model TEXT,
            serial TEXT,
            hardware_revision TEXT,
            firmware TEXT,
            first_seen TEXT,
            last_seen TEXT,
            battery BIGINT,
            battery_at TEXT,
            calibrated BIGINT,
            calibrated_at TEXT,
            calibration_x BIGINT,
            calibration_y BIGINT,
            calibration_z BIGINT,
            time_offset_ms BIGINT,
            profile TEXT,
            config_cornering BIGINT,
            config_braking BIGINT,
            config_acceleration BIGINT,
            config_duration BIGINT,
            config_enable BIGINT,
            config_read_at TEXT,
            PRIMARY KEY (bench_id, address)
        );
        CREATE TABLE IF NOT EXISTS runs (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            local_id BIGINT,
            started_at TEXT,
            ended_at TEXT,
            command TEXT,
            sha256 TEXT,
            operator TEXT,
            host TEXT,
            pid BIGINT,
            adapter TEXT,
            options TEXT,
            status TEXT,
            PRIMARY KEY (bench_id, local_id)
        );
        CREATE TABLE IF NOT EXISTS outcomes (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            local_id BIGINT,
            run_id BIGINT,
            device TEXT,
            step TEXT,
            status TEXT,
            detail TEXT,
            error TEXT,
            before TEXT,
            after TEXT,
            started_at TEXT,
            ended_at TEXT,
            duration_ms BIGINT,
            PRIMARY KEY (bench_id, local_id)
        );
        CREATE TABLE IF NOT EXISTS readings (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            local_id BIGINT,
            device TEXT,
            at TEXT,
            battery BIGINT,
            rssi BIGINT,
            firmware TEXT,
            PRIMARY KEY (bench_id, local_id)
        );
        CREATE TABLE IF NOT EXISTS trips (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            device TEXT,
            start_ms BIGINT,
            end_ms BIGINT,
            beacon_index BIGINT,
            pulled_at TEXT,
            PRIMARY KEY (bench_id, device, start_ms, end_ms)
        );
        CREATE TABLE IF NOT EXISTS events (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            device TEXT,
            at_ms BIGINT,
            type TEXT,
            duration_ms BIGINT,
            average_mg BIGINT,
            maximum_mg BIGINT,
            x_mg BIGINT,
            y_mg BIGINT,
            z_mg BIGINT,
            beacon_index BIGINT,
            pulled_at TEXT,
            PRIMARY KEY (bench_id, device, at_ms, type, beacon_index)
        );
        CREATE TABLE IF NOT EXISTS incidents (
            bench_id TEXT NOT NULL REFERENCES benches(bench_id),
            device TEXT,
            incident_id BIGINT,
            at_ms BIGINT,
            max_resultant BIGINT,
            avg_resultant BIGINT,
            x_mg BIGINT,
            y_mg BIGINT,
            z_mg BIGINT,
            samples TEXT,
            pulled_at TEXT,
            PRIMARY KEY (bench_id, device, incident_id, at_ms)
        );
        CREATE OR REPLACE VIEW fleet_devices AS
            SELECT DISTINCT ON (address) * FROM devices ORDER BY address, last_seen DESC, bench_id;
        """

    /// Version 2: a beacon seen on several benches is one device in
    /// `fleet_devices`, each fact taken from the bench that observed it
    /// last — by the observation times the benches' inventories record
    /// (SQLite schema 2), not by `last_seen`, which any step refreshes
    /// without reading the fact (docs/inventory.md, "Several benches").
    /// Rows synced before have the times filled from `last_seen`. Indexes
    /// for `log` and for merging by address.
    static let mergedFleet = """
        CREATE INDEX IF NOT EXISTS devices_by_address ON devices (address, last_seen);
        CREATE INDEX IF NOT EXISTS devices_by_ending ON devices (mac_ending);
        CREATE INDEX IF NOT EXISTS outcomes_by_device ON outcomes (device, started_at);
        CREATE INDEX IF NOT EXISTS outcomes_by_start ON outcomes (started_at);
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS identity_at TEXT;
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS description_at TEXT;
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS firmware_at TEXT;
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS calibration_read_at TEXT;
        ALTER TABLE devices ADD COLUMN IF NOT EXISTS time_offset_at TEXT;
        UPDATE devices SET identity_at = last_seen WHERE major IS NOT NULL AND minor IS NOT NULL;
        UPDATE devices SET description_at = last_seen
            WHERE model IS NOT NULL OR serial IS NOT NULL OR hardware_revision IS NOT NULL;
        UPDATE devices SET firmware_at = last_seen WHERE firmware IS NOT NULL;
        UPDATE devices SET calibration_read_at = last_seen WHERE calibrated IS NOT NULL;
        UPDATE devices SET time_offset_at = last_seen WHERE time_offset_ms IS NOT NULL;
        DROP VIEW IF EXISTS fleet_devices;
        CREATE VIEW fleet_devices AS
        SELECT
            address, seen[3] AS mac_ending, identity[3]::bigint AS major, identity[4]::bigint AS minor,
            description[3] AS model, description[4] AS serial, description[5] AS hardware_revision,
            firmware[3] AS firmware, first_seen, last_seen, battery[3]::bigint AS battery,
            battery[1] AS battery_at, calibration[3]::bigint AS calibrated, calibration[4] AS calibrated_at,
            calibration[5]::bigint AS calibration_x, calibration[6]::bigint AS calibration_y,
            calibration[7]::bigint AS calibration_z, time_offset[3]::bigint AS time_offset_ms,
            profile[3] AS profile, config[3]::bigint AS config_cornering, config[4]::bigint AS config_braking,
            config[5]::bigint AS config_acceleration, config[6]::bigint AS config_duration,
            config[7]::bigint AS config_enable, config[1] AS config_read_at, identity[1] AS identity_at,
            description[1] AS description_at, firmware[1] AS firmware_at, calibration[1] AS calibration_read_at,
            time_offset[1] AS time_offset_at, benches
        FROM (
            -- Each fact: the greatest [when observed, bench, values…] of the
            -- rows that know it, so the latest observation wins (ties: the
            -- greater bench id), in one pass without sorting each group.
            SELECT
                address,
                max(ARRAY[last_seen, bench_id, mac_ending]) AS seen,
                max(ARRAY[coalesce(identity_at, last_seen), bench_id, major::text, minor::text])
                    FILTER (WHERE major IS NOT NULL AND minor IS NOT NULL) AS identity,
                max(ARRAY[coalesce(description_at, last_seen), bench_id, model, serial, hardware_revision])
                    FILTER (WHERE model IS NOT NULL OR serial IS NOT NULL OR hardware_revision IS NOT NULL)
                    AS description,
                max(ARRAY[coalesce(firmware_at, last_seen), bench_id, firmware])
                    FILTER (WHERE firmware IS NOT NULL) AS firmware,
                min(first_seen) AS first_seen,
                max(last_seen) AS last_seen,
                max(ARRAY[battery_at, bench_id, battery::text])
                    FILTER (WHERE battery IS NOT NULL AND battery_at IS NOT NULL) AS battery,
                max(ARRAY[coalesce(calibration_read_at, last_seen), bench_id, calibrated::text, calibrated_at,
                    calibration_x::text, calibration_y::text, calibration_z::text])
                    FILTER (WHERE calibrated IS NOT NULL) AS calibration,
                max(ARRAY[coalesce(time_offset_at, last_seen), bench_id, time_offset_ms::text])
                    FILTER (WHERE time_offset_ms IS NOT NULL) AS time_offset,
                max(ARRAY[coalesce(config_read_at, ''), bench_id, profile]) FILTER (WHERE profile IS NOT NULL)
                    AS profile,
                max(ARRAY[config_read_at, bench_id, config_cornering::text, config_braking::text,
                    config_acceleration::text, config_duration::text, config_enable::text])
                    FILTER (WHERE config_read_at IS NOT NULL) AS config,
                string_agg(bench_id, ' ' ORDER BY last_seen DESC, bench_id DESC) AS benches
            FROM devices GROUP BY address
        ) AS merged;
        """

    /// A table's statements. Locally, rows are read in chunks after a
    /// cursor (the local id, or the rowid for tables keyed otherwise): `?1`
    /// is the cursor, `?2` the chunk size, `?3` 1 to include what simulated
    /// runs made (else their runs, outcomes and identities, and the
    /// devices only they know — `simulated_only_devices` — with those
    /// devices' readings and records, are left out), and the first column
    /// is the cursor's value. On the server, one upsert per chunk: `$1` is the
    /// bench id, then one array per column sent.
    struct Table {
        var name: String
        var select: String
        /// Tables with local ids: the server's highest local id of the
        /// bench (`$1`), the cursor a sync resumes after. Nil: the table is
        /// sent whole, paged by rowid (which is not sent).
        var newest: String?
        /// The same table's highest id in the bench's own inventory (what a
        /// local id the server holds for this bench can be); with `newest`.
        var localNewest: String? = nil
        /// Tables whose rows can still change: the local ids the server
        /// holds as `running` (`$1` the bench), and the local rows to send
        /// again for them (`?1` a JSON array of ids).
        var running: (onServer: String, local: String)?
        var upsert: String
        /// The server column types of the columns sent, in order.
        var types: [ColumnType]

        /// Whether the cursor is the local id, sent as `local_id`.
        var cursorIsLocalID: Bool { newest != nil }
    }

    enum ColumnType { case text, bigint }

    static let tables: [Table] = [
        Table(
            name: "devices",
            select: """
                SELECT rowid, address, mac_ending, major, minor, model, serial, hardware_revision, firmware,
                    first_seen, last_seen, battery, battery_at, calibrated, calibrated_at, calibration_x,
                    calibration_y, calibration_z, time_offset_ms, profile, config_cornering, config_braking,
                    config_acceleration, config_duration, config_enable, config_read_at, identity_at,
                    description_at, firmware_at, calibration_read_at, time_offset_at, forgotten_at
                FROM devices WHERE rowid > ?1 AND (?3 OR address NOT IN (SELECT address FROM simulated_only_devices))
                ORDER BY rowid LIMIT ?2
                """,
            upsert: """
                INSERT INTO devices (bench_id, address, mac_ending, major, minor, model, serial,
                    hardware_revision, firmware, first_seen, last_seen, battery, battery_at, calibrated,
                    calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                    config_cornering, config_braking, config_acceleration, config_duration, config_enable,
                    config_read_at, identity_at, description_at, firmware_at, calibration_read_at,
                    time_offset_at, forgotten_at)
                SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::text[],
                    $14::bigint[], $15::text[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bigint[],
                    $20::text[], $21::bigint[], $22::bigint[], $23::bigint[], $24::bigint[], $25::bigint[],
                    $26::text[], $27::text[], $28::text[], $29::text[], $30::text[], $31::text[], $32::text[])
                ON CONFLICT (bench_id, address) DO UPDATE SET mac_ending = excluded.mac_ending, major =
                    excluded.major, minor = excluded.minor, model = excluded.model, serial = excluded.serial,
                    hardware_revision = excluded.hardware_revision, firmware = excluded.firmware, first_seen =
                    excluded.first_seen, last_seen = excluded.last_seen, battery = excluded.battery, battery_at
                    = excluded.battery_at, calibrated = excluded.calibrated, calibrated_at =
                    excluded.calibrated_at, calibration_x = excluded.calibration_x, calibration_y =
                    excluded.calibration_y, calibration_z = excluded.calibration_z, time_offset_ms =
                    excluded.time_offset_ms, profile = excluded.profile, config_cornering =
                    excluded.config_cornering, config_braking = excluded.config_braking, config_acceleration =
                    excluded.config_acceleration, config_duration = excluded.config_duration, config_enable =
                    excluded.config_enable, config_read_at = excluded.config_read_at, identity_at =
                    excluded.identity_at, description_at = excluded.description_at, firmware_at =
                    excluded.firmware_at, calibration_read_at = excluded.calibration_read_at, time_offset_at =
                    excluded.time_offset_at, forgotten_at = excluded.forgotten_at
                """
                    + changedOnly(
                        "devices",
                        [
                            "mac_ending", "major", "minor", "model", "serial", "hardware_revision", "firmware",
                            "first_seen", "last_seen", "battery", "battery_at", "calibrated", "calibrated_at",
                            "calibration_x", "calibration_y", "calibration_z", "time_offset_ms", "profile",
                            "config_cornering", "config_braking", "config_acceleration", "config_duration",
                            "config_enable", "config_read_at", "identity_at", "description_at", "firmware_at",
                            "calibration_read_at", "time_offset_at", "forgotten_at",
                        ]),
            types: [
                .text, .text, .bigint, .bigint, .text, .text, .text, .text, .text, .text, .bigint, .text, .bigint,
                .text, .bigint, .bigint, .bigint, .bigint, .text, .bigint, .bigint, .bigint, .bigint, .bigint, .text,
                .text, .text, .text, .text, .text, .text,
            ],
        ),
        Table(
            name: "runs",
            select: """
                SELECT id, started_at, ended_at, command, sha256, operator, host, pid, adapter, options, status,
                    simulated
                FROM runs WHERE id > ?1 AND (?3 OR simulated = 0) ORDER BY id LIMIT ?2
                """,
            newest: "SELECT coalesce(max(local_id), 0) FROM runs WHERE bench_id = $1",
            localNewest: "SELECT coalesce(max(id), 0) FROM runs",
            running: (
                onServer: "SELECT local_id FROM runs WHERE bench_id = $1 AND status = 'running'",
                local: """
                SELECT id, started_at, ended_at, command, sha256, operator, host, pid, adapter, options, status,
                    simulated
                FROM runs WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id
                """
            ),
            upsert: """
                INSERT INTO runs (bench_id, local_id, started_at, ended_at, command, sha256, operator, host,
                    pid, adapter, options, status, simulated)
                SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::text[], $13::bigint[])
                ON CONFLICT (bench_id, local_id) DO UPDATE SET started_at = excluded.started_at, ended_at =
                    excluded.ended_at, command = excluded.command, sha256 = excluded.sha256, operator =
                    excluded.operator, host = excluded.host, pid = excluded.pid, adapter = excluded.adapter,
                    options = excluded.options, status = excluded.status, simulated = excluded.simulated
                """
                    + changedOnly(
                        "runs",
                        [
                            "started_at", "ended_at", "command", "sha256", "operator", "host", "pid", "adapter",
                            "options", "status", "simulated",
                        ]),
            types: [.bigint, .text, .text, .text, .text, .text, .text, .bigint, .text, .text, .text, .bigint],
        ),
        Table(
            name: "outcomes",
            select: """
                SELECT id, run_id, device, step, status, detail, error, before, after, started_at, ended_at,
                    duration_ms, retries
                FROM outcomes
                WHERE id > ?1 AND (?3 OR run_id NOT IN (SELECT id FROM runs WHERE simulated <> 0))
                ORDER BY id LIMIT ?2
                """,
            newest: "SELECT coalesce(max(local_id), 0) FROM outcomes WHERE bench_id = $1",
            localNewest: "SELECT coalesce(max(id), 0) FROM outcomes",
            running: (
                onServer: "SELECT local_id FROM outcomes WHERE bench_id = $1 AND status = 'running'",
                local: """
                SELECT id, run_id, device, step, status, detail, error, before, after, started_at, ended_at,
                    duration_ms, retries
                FROM outcomes WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id
                """
            ),
            upsert: """
                INSERT INTO outcomes (bench_id, local_id, run_id, device, step, status, detail, error, before,
                    after, started_at, ended_at, duration_ms, retries)
                SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::bigint[],
                    $14::bigint[])
                ON CONFLICT (bench_id, local_id) DO UPDATE SET run_id = excluded.run_id, device =
                    excluded.device, step = excluded.step, status = excluded.status, detail = excluded.detail,
                    error = excluded.error, before = excluded.before, after = excluded.after, started_at =
                    excluded.started_at, ended_at = excluded.ended_at, duration_ms = excluded.duration_ms,
                    retries = excluded.retries
                """
                    + changedOnly(
                        "outcomes",
                        [
                            "run_id", "device", "step", "status", "detail", "error", "before", "after", "started_at",
                            "ended_at", "duration_ms", "retries",
                        ]),
            types: [
                .bigint, .bigint, .text, .text, .text, .text, .text, .text, .text, .text, .text, .bigint, .bigint,
            ],
        ),
        Table(
            name: "readings",
            select: """
                SELECT id, device, at, battery, rssi, firmware FROM readings
                WHERE id > ?1 AND (?3 OR device NOT IN (SELECT address FROM simulated_only_devices))
                ORDER BY id LIMIT ?2
                """,
            newest: "SELECT coalesce(max(local_id), 0) FROM readings WHERE bench_id = $1",
            localNewest: "SELECT coalesce(max(id), 0) FROM readings",
            upsert: """
                INSERT INTO readings (bench_id, local_id, device, at, battery, rssi, firmware)
                SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[],
                    $7::text[])
                ON CONFLICT (bench_id, local_id) DO UPDATE SET device = excluded.device, at = excluded.at,
                    battery = excluded.battery, rssi = excluded.rssi, firmware = excluded.firmware
                """
                    + changedOnly("readings", ["device", "at", "battery", "rssi", "firmware"]),
            types: [.bigint, .text, .text, .bigint, .bigint, .text],
        ),
        Table(
            name: "trips",
            select: """
                SELECT rowid, device, start_ms, end_ms, beacon_index, pulled_at FROM trips
                WHERE rowid > ?1 AND (?3 OR device NOT IN (SELECT address FROM simulated_only_devices))
                ORDER BY rowid LIMIT ?2
                """,
            upsert: """
                INSERT INTO trips (bench_id, device, start_ms, end_ms, beacon_index, pulled_at)
                SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[])
                ON CONFLICT (bench_id, device, start_ms, end_ms) DO UPDATE SET beacon_index =
                    excluded.beacon_index, pulled_at = excluded.pulled_at
                """
                    + changedOnly("trips", ["beacon_index", "pulled_at"]),
            types: [.text, .bigint, .bigint, .bigint, .text],
        ),
        Table(
            name: "events",
            select: """
                SELECT rowid, device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg,
                    beacon_index, pulled_at
                FROM events WHERE rowid > ?1 AND (?3 OR device NOT IN (SELECT address FROM simulated_only_devices))
                ORDER BY rowid LIMIT ?2
                """,
            upsert: """
                INSERT INTO events (bench_id, device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg,
                    y_mg, z_mg, beacon_index, pulled_at)
                SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[],
                    $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[])
                ON CONFLICT (bench_id, device, at_ms, type, beacon_index) DO UPDATE SET duration_ms =
                    excluded.duration_ms, average_mg = excluded.average_mg, maximum_mg = excluded.maximum_mg,
                    x_mg = excluded.x_mg, y_mg = excluded.y_mg, z_mg = excluded.z_mg, pulled_at =
                    excluded.pulled_at
                """
                    + changedOnly(
                        "events", ["duration_ms", "average_mg", "maximum_mg", "x_mg", "y_mg", "z_mg", "pulled_at"]),
            types: [.text, .bigint, .text, .bigint, .bigint, .bigint, .bigint, .bigint, .bigint, .bigint, .text],
        ),
        Table(
            name: "incidents",
            select: """
                SELECT rowid, device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg,
                    samples, pulled_at
                FROM incidents
                WHERE rowid > ?1 AND (?3 OR device NOT IN (SELECT address FROM simulated_only_devices))
                ORDER BY rowid LIMIT ?2
                """,
            upsert: """
                INSERT INTO incidents (bench_id, device, incident_id, at_ms, max_resultant, avg_resultant,
                    x_mg, y_mg, z_mg, samples, pulled_at)
                SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
                    $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], $11::text[])
                ON CONFLICT (bench_id, device, incident_id, at_ms) DO UPDATE SET max_resultant =
                    excluded.max_resultant, avg_resultant = excluded.avg_resultant, x_mg = excluded.x_mg, y_mg
                    = excluded.y_mg, z_mg = excluded.z_mg, samples = excluded.samples, pulled_at =
                    excluded.pulled_at
                """
                    + changedOnly(
                        "incidents", ["max_resultant", "avg_resultant", "x_mg", "y_mg", "z_mg", "samples", "pulled_at"])
            ,
            types: [.text, .bigint, .bigint, .bigint, .bigint, .bigint, .bigint, .bigint, .text, .text],
        ),
        // Sent whole (a device's row is replaced when its identity is);
        // then registered as claims fleet-wide where no other device has
        // them (`InventorySync.registerClaims`).
        Table(
            name: "identities",
            select: """
                SELECT rowid, device, major, minor, source, profile, run_id, reserved_at FROM identities
                WHERE rowid > ?1 AND (?3 OR (device NOT IN (SELECT address FROM simulated_only_devices)
                    AND (run_id IS NULL OR run_id NOT IN (SELECT id FROM runs WHERE simulated <> 0))))
                ORDER BY rowid LIMIT ?2
                """,
            upsert: """
                INSERT INTO identities (bench_id, device, major, minor, source, profile, run_id, reserved_at)
                SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[],
                    $7::bigint[], $8::text[])
                ON CONFLICT (bench_id, device) DO UPDATE SET major = excluded.major, minor = excluded.minor,
                    source = excluded.source, profile = excluded.profile, run_id = excluded.run_id,
                    reserved_at = excluded.reserved_at
                """
                    + changedOnly("identities", ["major", "minor", "source", "profile", "run_id", "reserved_at"]),
            types: [.text, .bigint, .bigint, .text, .text, .bigint, .text],
        ),
    ]
}
