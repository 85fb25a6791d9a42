import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

/// The office's reads at fleet scale (issue 31): the server schema
/// migration that gives each read an index, and the reads' SQL that uses
/// them, in one place — the EXPLAIN guard test runs every query of
/// `queries` against a seeded server and checks its plan, and
/// docs/office.md ("The indexes") lists the same.
enum OfficeReads {
    /// The server schema migration "office reads at fleet scale". Written
    /// to apply at any position among the migrations (`IF NOT EXISTS`,
    /// `CREATE OR REPLACE`): every statement can run again.
    ///
    /// - `listed_ms` on trips, events and incidents: the time a pulled
    ///   record lists by (`records list`), stored rather than computed per
    ///   row by every read — the record's own time when it is a wall-clock
    ///   time (at or after `RecordTime.wallClockFloor`), else its
    ///   `pulled_at` read from its digits (a text that is no time gives
    ///   NULL). Backfilled here; kept by a trigger on every insert and
    ///   update, so that a sync of any beaconbench version fills it. Not
    ///   called `sort_ms`: an older beaconbench's `records list` selects
    ///   `*, … AS sort_ms` and would find the name twice.
    /// - `*_by_sort` (the listing order) and `*_by_key` (the key a record
    ///   two benches pulled is listed once by, with the tie-break).
    /// - `outcomes_problems`: failed and skipped outcomes, by start.
    /// - `readings_by_device_at`: battery readings in (device, time) order,
    ///   a stream without a sort (the report).
    /// - `fleet_device_rows(after, n)`: `fleet_devices` rows for the first
    ///   `n` addresses after `after` (NULL: from the start), in address
    ///   order — the page's addresses by an index scan, then the merge per
    ///   address (`OFFSET 0` keeps the planner from merging the whole fleet
    ///   to join it). Its columns are the view's, named rather than taken
    ///   as the view's row type, so that a later migration may still drop
    ///   and remake the view.
    static let migration = """
        CREATE OR REPLACE FUNCTION beaconbench_listed_ms(own_ms BIGINT, pulled_at TEXT) RETURNS BIGINT
        LANGUAGE sql STABLE SET timezone TO 'UTC' AS $body$
            SELECT CASE WHEN own_ms >= \(RecordTime.wallClockFloor) THEN own_ms
                ELSE (extract(epoch FROM (m[1] || '-01-01T00:00:00Z')::timestamptz
                    + make_interval(months => m[2]::int - 1, days => m[3]::int - 1, hours => m[4]::int,
                        mins => m[5]::int, secs => (m[6] || '.' || coalesce(m[7], '0'))::float8)) * 1000)::bigint
                END
            FROM (SELECT regexp_match(pulled_at,
                '^([1-9][0-9]{3})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.]([0-9]{1,9}))?Z$') AS m)
                AS matched
        $body$;
        CREATE OR REPLACE FUNCTION beaconbench_trips_listed() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            NEW.listed_ms := beaconbench_listed_ms(NEW.start_ms, NEW.pulled_at);
            RETURN NEW;
        END
        $body$;
        CREATE OR REPLACE FUNCTION beaconbench_records_listed() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            NEW.listed_ms := beaconbench_listed_ms(NEW.at_ms, NEW.pulled_at);
            RETURN NEW;
        END
        $body$;
        ALTER TABLE trips ADD COLUMN IF NOT EXISTS listed_ms BIGINT;
        ALTER TABLE events ADD COLUMN IF NOT EXISTS listed_ms BIGINT;
        ALTER TABLE incidents ADD COLUMN IF NOT EXISTS listed_ms BIGINT;
        DROP TRIGGER IF EXISTS trips_listed ON trips;
        CREATE TRIGGER trips_listed BEFORE INSERT OR UPDATE ON trips
            FOR EACH ROW EXECUTE FUNCTION beaconbench_trips_listed();
        DROP TRIGGER IF EXISTS events_listed ON events;
        CREATE TRIGGER events_listed BEFORE INSERT OR UPDATE ON events
            FOR EACH ROW EXECUTE FUNCTION beaconbench_records_listed();
        DROP TRIGGER IF EXISTS incidents_listed ON incidents;
        CREATE TRIGGER incidents_listed BEFORE INSERT OR UPDATE ON incidents
            FOR EACH ROW EXECUTE FUNCTION beaconbench_records_listed();
        DROP FUNCTION IF EXISTS fleet_device_rows(TEXT, BIGINT);
        CREATE FUNCTION fleet_device_rows(after TEXT, n BIGINT) RETURNS TABLE (
            address TEXT, mac_ending TEXT, major BIGINT, minor BIGINT, model TEXT, serial TEXT,
            hardware_revision TEXT, firmware TEXT, first_seen TEXT, last_seen TEXT, battery BIGINT, battery_at TEXT,
            calibrated BIGINT, calibrated_at TEXT, calibration_x BIGINT, calibration_y BIGINT, calibration_z BIGINT,
            time_offset_ms BIGINT, profile TEXT, config_cornering BIGINT, config_braking BIGINT,
            config_acceleration BIGINT, config_duration BIGINT, config_enable BIGINT, config_read_at TEXT,
            identity_at TEXT, description_at TEXT, firmware_at TEXT, calibration_read_at TEXT, time_offset_at TEXT,
            benches TEXT
        )
        LANGUAGE sql STABLE AS $body$
            SELECT f.address, f.mac_ending, f.major, f.minor, f.model, f.serial, f.hardware_revision, f.firmware,
                f.first_seen, f.last_seen, f.battery, f.battery_at, f.calibrated, f.calibrated_at, f.calibration_x,
                f.calibration_y, f.calibration_z, f.time_offset_ms, f.profile, f.config_cornering, f.config_braking,
                f.config_acceleration, f.config_duration, f.config_enable, f.config_read_at, f.identity_at,
                f.description_at, f.firmware_at, f.calibration_read_at, f.time_offset_at, f.benches
            FROM (
                SELECT DISTINCT d.address AS at FROM devices d
                WHERE (after IS NULL OR d.address > after) AND d.forgotten_at IS NULL ORDER BY d.address LIMIT n
            ) AS page
            CROSS JOIN LATERAL (SELECT * FROM fleet_devices v WHERE v.address = page.at OFFSET 0) AS f
            ORDER BY page.at
        $body$;
        """

    /// The migration's slow part (`ServerMigrations`: after its
    /// transaction, without blocking writes): `listed_ms` backfilled in
    /// batches of 200 pages of the table (a TID range scan; rows the
    /// trigger already filled are left), then the indexes built
    /// concurrently. Until the backfill is recorded, `records list` reads
    /// the key through `coalesce` (`backfilled`).
    static func afterwork(version: Int) -> [ServerAfterwork] {
        let backfills = [
            ("trips", "start_ms"), ("events", "at_ms"), ("incidents", "at_ms"),
        ].map { table, own in
            ServerAfterwork(
                version: version, name: "\(table)_listed_ms",
                kind: .backfill(
                    """
                    WITH filled AS (
                        UPDATE \(table) SET listed_ms = beaconbench_listed_ms(\(own), pulled_at)
                        WHERE ctid >= format('(%s,0)', coalesce(nullif($1, ''), '0'))::tid
                          AND ctid < format('(%s,0)', coalesce(nullif($1, ''), '0')::bigint + 200)::tid
                          AND listed_ms IS NULL AND beaconbench_listed_ms(\(own), pulled_at) IS NOT NULL
                        RETURNING 1)
                    SELECT CASE WHEN coalesce(nullif($1, ''), '0')::bigint + 200
                        < pg_relation_size('\(table)') / current_setting('block_size')::bigint
                        THEN (coalesce(nullif($1, ''), '0')::bigint + 200)::text END
                    FROM (SELECT count(*) FROM filled) AS done
                    """))
        }
        let indexes: [(String, String)] = [
            (
                "trips_by_sort",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS trips_by_sort ON trips (listed_ms DESC, device, start_ms DESC)"
            ),
            (
                "trips_by_key",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS trips_by_key ON trips (device, start_ms, end_ms, pulled_at, bench_id)"
            ),
            (
                "events_by_sort",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_sort ON events (listed_ms DESC, device, at_ms DESC, beacon_index DESC)"
            ),
            (
                "events_by_key",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_key ON events (device, at_ms, type, beacon_index, pulled_at, bench_id)"
            ),
            (
                "incidents_by_sort",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS incidents_by_sort ON incidents (listed_ms DESC, device, at_ms DESC, incident_id DESC)"
            ),
            (
                "incidents_by_key",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS incidents_by_key ON incidents (device, incident_id, at_ms, pulled_at, bench_id)"
            ),
            (
                "outcomes_problems",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS outcomes_problems ON outcomes (started_at) INCLUDE (device, step, status, error, detail) WHERE status IN ('failed', 'skipped')"
            ),
            (
                "readings_by_device_at",
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS readings_by_device_at ON readings (device, at) INCLUDE (battery) WHERE battery IS NOT NULL"
            ),
        ]
        return backfills + indexes.map { ServerAfterwork(version: version, name: $0.0, kind: .index($0.1)) }
    }

    /// The backfill pieces whose end `records list` waits for before it
    /// reads `listed_ms` as stored.
    static let backfills = ["trips_listed_ms", "events_listed_ms", "incidents_listed_ms"]

    /// The columns `ServerInventory.record` reads, in its order.
    static let deviceColumns = """
        address, last_seen, major, minor, model, serial, hardware_revision, firmware, battery,
            calibrated, calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
            config_cornering, config_braking, config_acceleration, config_duration, config_enable, benches
        """

    /// One page of the merged fleet: `$1` the address to start after
    /// (NULL: the first), `$2` how many devices.
    static let devicePage = "SELECT \(deviceColumns) FROM fleet_device_rows($1::text, $2::bigint)"
    /// The whole fleet in address order, for a cursor (`ServerOfficeStreams`).
    static let deviceStream = "SELECT \(deviceColumns) FROM fleet_devices ORDER BY address"

    /// The audit's subjects, every device in address order
    /// (`devices_by_address`), with the identity claimed for it; `light`:
    /// only the columns that tell a duplicate identity (address, profile,
    /// last seen, identity held and meant, benches), the rest NULL — the
    /// aggregate's other columns are then not computed.
    static func auditSubjects(light: Bool) -> String {
        let middle =
            light
            ? "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL"
            : """
            f.battery, f.firmware, f.calibrated, f.calibrated_at, f.calibration_x,
                f.calibration_y, f.calibration_z, f.config_cornering, f.config_braking, f.config_acceleration,
                f.config_duration, f.config_enable, f.config_read_at
            """
        return """
            SELECT f.address, f.profile, \(middle), f.last_seen, f.major, f.minor,
                c.major, c.minor, CASE WHEN c.major IS NULL THEN NULL ELSE 'claimed by bench ' || left(c.bench_id, 8) END,
                f.benches::text
            FROM fleet_devices f LEFT JOIN identity_claims c ON c.address = f.address ORDER BY f.address
            """
    }

    /// The columns `driftStream` and `driftIrregular` read (described there).
    static let driftColumns = """
        SELECT a.address, a.profile, a.major::text, a.minor_policy, a.minor::text, a.overrides, a.assigned_at,
               a.assigned_by, a.converged_at, a.converged_bench,
               d.profile, d.config_cornering, d.config_braking, d.config_acceleration, d.config_duration,
               d.config_enable, d.config_read_at, d.major, d.minor, d.identity_at, c.major, c.minor, d.address,
               upper(a.address)
        """

    /// `drift` streamed (`OfficeDriftStream`): each assignment's columns as
    /// `ServerAssignments.columns` reads them (0–9), its device as the
    /// merged fleet observed it and the identity claimed for it as
    /// `ServerAssignments.driftRows` does (10–22), and its address in
    /// capitals (23), in address order: the assignments' primary key
    /// merged with `devices_by_address` and `identity_claims`' address key,
    /// no sort.
    static let driftStream = """
        \(driftColumns)
        FROM fleet_assignments a LEFT JOIN fleet_devices d ON d.address = a.address
        LEFT JOIN identity_claims c ON c.address = a.address
        ORDER BY a.address
        """

    /// The assignment rows whose address is not in capitals and the rows
    /// of the same devices (in `driftStream`'s columns), read before the
    /// stream: such rows are judged with every row of their device. None
    /// unless a row was written by hand; finding them reads every address
    /// (an index-only scan of the whole `fleet_assignments_pkey`: 0.2 s
    /// for 500,000 assignments), each device then merged alone.
    static let driftIrregular = """
        \(driftColumns)
        FROM fleet_assignments a
        LEFT JOIN LATERAL (SELECT * FROM fleet_devices v WHERE v.address = a.address OFFSET 0) d ON true
        LEFT JOIN identity_claims c ON c.address = a.address
        WHERE upper(a.address) IN (SELECT upper(address) FROM fleet_assignments WHERE address <> upper(address))
        ORDER BY upper(a.address), a.address
        """

    /// The clause that keeps the first pull of a record that several
    /// benches pulled (the least `pulled_at`, NULL last, then the least
    /// bench id), as `DISTINCT ON (key) … ORDER BY key, pulled_at, bench_id`
    /// keeps it; `key` names the record's key columns.
    static func firstPulled(_ table: String, key: [String]) -> String {
        let same = key.map { "u.\($0) = t.\($0)" }.joined(separator: " AND ")
        return """
            NOT EXISTS (SELECT 1 FROM \(table) u WHERE \(same) AND (u.pulled_at < t.pulled_at
                    OR (u.pulled_at IS NOT NULL AND t.pulled_at IS NULL)
                    OR (u.pulled_at IS NOT DISTINCT FROM t.pulled_at AND u.bench_id < t.bench_id)))
            """
    }

    /// The records a device filter (`$1`) and the time filters (`$2`
    /// since, `$3` until in ms; `$4` pulled since) keep, newest first,
    /// `$5` of them at most.
    static func recordFilter(_ table: String, key: [String], listed: String) -> String {
        """
        FROM \(table) t
        WHERE ($1::text IS NULL OR t.device = upper($1)
               OR t.device IN (SELECT address FROM devices WHERE mac_ending = lower($1)))
          AND ($2::bigint IS NULL OR \(listed) >= $2::bigint) AND ($3::bigint IS NULL OR \(listed) < $3::bigint)
          AND ($4::text IS NULL OR t.pulled_at >= $4)
          AND \(firstPulled(table, key: key))
        """
    }

    static func trips(backfilled: Bool = true) -> String {
        let listed =
            backfilled ? "t.listed_ms" : "coalesce(t.listed_ms, beaconbench_listed_ms(t.start_ms, t.pulled_at))"
        return """
            SELECT t.device, t.start_ms, t.end_ms, t.beacon_index, t.pulled_at, t.bench_id
            \(recordFilter("trips", key: ["device", "start_ms", "end_ms"], listed: listed))
            ORDER BY \(listed) DESC, t.device, t.start_ms DESC LIMIT $5::bigint
            """
    }

    static func events(backfilled: Bool = true) -> String {
        let listed = backfilled ? "t.listed_ms" : "coalesce(t.listed_ms, beaconbench_listed_ms(t.at_ms, t.pulled_at))"
        return """
            SELECT t.device, t.at_ms, t.type, t.duration_ms, t.average_mg, t.maximum_mg, t.x_mg, t.y_mg, t.z_mg,
                t.beacon_index, t.pulled_at, t.bench_id
            \(recordFilter("events", key: ["device", "at_ms", "type", "beacon_index"], listed: listed))
            ORDER BY \(listed) DESC, t.device, t.at_ms DESC, t.beacon_index DESC LIMIT $5::bigint
            """
    }

    static func incidents(backfilled: Bool = true) -> String {
        let listed = backfilled ? "t.listed_ms" : "coalesce(t.listed_ms, beaconbench_listed_ms(t.at_ms, t.pulled_at))"
        return """
            SELECT t.device, t.incident_id, t.at_ms, t.max_resultant, t.avg_resultant, t.x_mg, t.y_mg, t.z_mg,
                t.samples, t.pulled_at, t.bench_id
            \(recordFilter("incidents", key: ["device", "incident_id", "at_ms"], listed: listed))
            ORDER BY \(listed) DESC, t.device, t.at_ms DESC, t.incident_id DESC LIMIT $5::bigint
            """
    }

    /// An office query and what its plan must show.
    struct Query: Sendable {
        /// The read it serves, as docs/office.md names it.
        var read: String
        var sql: String
        var parameters: [String?]
        /// The index the plan must use (one of these, when more serve).
        var index: String
        var or: [String] = []
        /// Whether rows must come in index order, with no Sort node over
        /// the whole input (a stream or a top-N that stops early).
        var noSort: Bool
    }

    /// Every office query that must use an index, with sample parameters
    /// (`since`: an ISO time; `address`: a device address mid-fleet).
    static func queries(since: String, address: String, sinceMs: Int64) -> [Query] {
        [
            Query(
                read: "inventory list --limit (a page)", sql: devicePage, parameters: [address, "100"],
                index: "devices_by_address", noSort: true),
            Query(
                read: "inventory list --limit (the first page)", sql: devicePage, parameters: [nil, "100"],
                index: "devices_by_address", noSort: true),
            Query(
                read: "log --since",
                sql: """
                    SELECT local_id, run_id, device, step, status, detail, error, started_at, duration_ms, bench_id
                    FROM outcomes WHERE ($1::text IS NULL OR device = $1) AND ($2::text IS NULL OR started_at >= $2)
                    ORDER BY started_at DESC, bench_id, local_id DESC LIMIT $3
                    """, parameters: [nil, since, "51"], index: "outcomes_by_start", noSort: false),
            Query(
                read: "log --device",
                sql: """
                    SELECT local_id, run_id, device, step, status, detail, error, started_at, duration_ms, bench_id
                    FROM outcomes WHERE ($1::text IS NULL OR device = $1) AND ($2::text IS NULL OR started_at >= $2)
                    ORDER BY started_at DESC, bench_id, local_id DESC LIMIT $3
                    """, parameters: [address, nil, "51"], index: "outcomes_by_device", noSort: false),
            Query(
                read: "records list (trips)", sql: trips(), parameters: [nil, nil, nil, nil, "101"],
                index: "trips_by_sort", noSort: true),
            Query(
                read: "records list (events)", sql: events(), parameters: [nil, nil, nil, nil, "101"],
                index: "events_by_sort", noSort: true),
            Query(
                read: "records list (incidents)", sql: incidents(), parameters: [nil, nil, nil, nil, "101"],
                index: "incidents_by_sort", noSort: true),
            Query(
                read: "records list --since (events)", sql: events(),
                parameters: [nil, String(sinceMs), nil, nil, "101"], index: "events_by_sort", noSort: true),
            Query(
                read: "records list (one record pulled twice)", sql: trips(), parameters: [nil, nil, nil, nil, "101"],
                index: "trips_by_key", or: ["trips_by_device"], noSort: true),
            Query(
                read: "drift", sql: ServerAssignments.driftRows, parameters: [],
                index: "fleet_assignments_pkey", noSort: false),
            Query(
                read: "drift (streamed)", sql: driftStream, parameters: [],
                index: "fleet_assignments_pkey", noSort: false),
            Query(
                read: "audit, inventory list (streamed subjects)", sql: auditSubjects(light: false), parameters: [],
                index: "devices_by_address", noSort: true),
            Query(
                read: "report (battery readings)",
                sql: """
                    SELECT device, at, battery FROM readings
                    WHERE battery IS NOT NULL AND ($1::text IS NULL OR at >= $1) ORDER BY device, at
                    """, parameters: [nil], index: "readings_by_device_at", noSort: true),
            Query(
                read: "report (problems)",
                sql: """
                    SELECT device, step, status, coalesce(error, detail, '') FROM outcomes
                    WHERE status IN ('failed', 'skipped') AND ($1::text IS NULL OR started_at >= $1)
                    """, parameters: [since], index: "outcomes_problems", noSort: false),
        ]
    }
}
