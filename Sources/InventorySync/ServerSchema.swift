import Foundation
import Inventory

/// The server's schema and the statements that fill it: every local table
/// with the bench's id in front of its key, so that rows from many benches
/// never collide and a row sent twice is the same row. Versioned like the
/// SQLite schema (docs/inventory.md); the SQL is written out in full, values
/// are parameters.
enum ServerSchema {
    static let version = 1

    static let create = """
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

    /// A table's statements: read locally (rows after a local id, or all),
    /// write on the server.
    struct Table {
        var name: String
        /// Local SELECT; `?1` is the first local id to send (tables with ids).
        var select: String
        var upsert: String
        var hasLocalID: Bool
    }

    static let tables: [Table] = [
        Table(
            name: "devices",
            select: """
                SELECT address, mac_ending, major, minor, model, serial, hardware_revision, firmware,
                    first_seen, last_seen, battery, battery_at, calibrated, calibrated_at, calibration_x,
                    calibration_y, calibration_z, time_offset_ms, profile, config_cornering, config_braking,
                    config_acceleration, config_duration, config_enable, config_read_at FROM devices WHERE ?1
                    IS NOT NULL
                """,
            upsert: """
                INSERT INTO devices (bench_id, address, mac_ending, major, minor, model, serial,
                    hardware_revision, firmware, first_seen, last_seen, battery, battery_at, calibrated,
                    calibrated_at, calibration_x, calibration_y, calibration_z, time_offset_ms, profile,
                    config_cornering, config_braking, config_acceleration, config_duration, config_enable,
                    config_read_at)
                VALUES ($1, $2, $3, $4::bigint, $5::bigint, $6, $7, $8, $9, $10, $11, $12::bigint, $13,
                    $14::bigint, $15, $16::bigint, $17::bigint, $18::bigint, $19::bigint, $20, $21::bigint,
                    $22::bigint, $23::bigint, $24::bigint, $25::bigint, $26)
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
                    excluded.config_enable, config_read_at = excluded.config_read_at
                """,
            hasLocalID: false),
        Table(
            name: "runs",
            select: """
                SELECT id, started_at, ended_at, command, sha256, operator, host, pid, adapter, options, status
                    FROM runs WHERE id > ?1 OR id IN (SELECT value FROM json_each(?2)) ORDER BY id
                """,
            upsert: """
                INSERT INTO runs (bench_id, local_id, started_at, ended_at, command, sha256, operator, host,
                    pid, adapter, options, status)
                VALUES ($1, $2::bigint, $3, $4, $5, $6, $7, $8, $9::bigint, $10, $11, $12)
                ON CONFLICT (bench_id, local_id) DO UPDATE SET started_at = excluded.started_at, ended_at =
                    excluded.ended_at, command = excluded.command, sha256 = excluded.sha256, operator =
                    excluded.operator, host = excluded.host, pid = excluded.pid, adapter = excluded.adapter,
                    options = excluded.options, status = excluded.status
                """,
            hasLocalID: true),
        Table(
            name: "outcomes",
            select: """
                SELECT id, run_id, device, step, status, detail, error, before, after, started_at, ended_at,
                    duration_ms FROM outcomes WHERE id > ?1 OR id IN (SELECT value FROM json_each(?2)) ORDER BY
                    id
                """,
            upsert: """
                INSERT INTO outcomes (bench_id, local_id, run_id, device, step, status, detail, error, before,
                    after, started_at, ended_at, duration_ms)
                VALUES ($1, $2::bigint, $3::bigint, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::bigint)
                ON CONFLICT (bench_id, local_id) DO UPDATE SET run_id = excluded.run_id, device =
                    excluded.device, step = excluded.step, status = excluded.status, detail = excluded.detail,
                    error = excluded.error, before = excluded.before, after = excluded.after, started_at =
                    excluded.started_at, ended_at = excluded.ended_at, duration_ms = excluded.duration_ms
                """,
            hasLocalID: true),
        Table(
            name: "readings",
            select: """
                SELECT id, device, at, battery, rssi, firmware FROM readings WHERE id > ?1 OR id IN (SELECT
                    value FROM json_each(?2)) ORDER BY id
                """,
            upsert: """
                INSERT INTO readings (bench_id, local_id, device, at, battery, rssi, firmware)
                VALUES ($1, $2::bigint, $3, $4, $5::bigint, $6::bigint, $7)
                ON CONFLICT (bench_id, local_id) DO UPDATE SET device = excluded.device, at = excluded.at,
                    battery = excluded.battery, rssi = excluded.rssi, firmware = excluded.firmware
                """,
            hasLocalID: true),
        Table(
            name: "trips",
            select: """
                SELECT device, start_ms, end_ms, beacon_index, pulled_at FROM trips WHERE ?1 IS NOT NULL
                """,
            upsert: """
                INSERT INTO trips (bench_id, device, start_ms, end_ms, beacon_index, pulled_at)
                VALUES ($1, $2, $3::bigint, $4::bigint, $5::bigint, $6)
                ON CONFLICT (bench_id, device, start_ms, end_ms) DO UPDATE SET beacon_index =
                    excluded.beacon_index, pulled_at = excluded.pulled_at
                """,
            hasLocalID: false),
        Table(
            name: "events",
            select: """
                SELECT device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg, y_mg, z_mg,
                    beacon_index, pulled_at FROM events WHERE ?1 IS NOT NULL
                """,
            upsert: """
                INSERT INTO events (bench_id, device, at_ms, type, duration_ms, average_mg, maximum_mg, x_mg,
                    y_mg, z_mg, beacon_index, pulled_at)
                VALUES ($1, $2, $3::bigint, $4, $5::bigint, $6::bigint, $7::bigint, $8::bigint, $9::bigint,
                    $10::bigint, $11::bigint, $12)
                ON CONFLICT (bench_id, device, at_ms, type, beacon_index) DO UPDATE SET duration_ms =
                    excluded.duration_ms, average_mg = excluded.average_mg, maximum_mg = excluded.maximum_mg,
                    x_mg = excluded.x_mg, y_mg = excluded.y_mg, z_mg = excluded.z_mg, pulled_at =
                    excluded.pulled_at
                """,
            hasLocalID: false),
        Table(
            name: "incidents",
            select: """
                SELECT device, incident_id, at_ms, max_resultant, avg_resultant, x_mg, y_mg, z_mg, samples,
                    pulled_at FROM incidents WHERE ?1 IS NOT NULL
                """,
            upsert: """
                INSERT INTO incidents (bench_id, device, incident_id, at_ms, max_resultant, avg_resultant,
                    x_mg, y_mg, z_mg, samples, pulled_at)
                VALUES ($1, $2, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bigint, $8::bigint,
                    $9::bigint, $10, $11)
                ON CONFLICT (bench_id, device, incident_id, at_ms) DO UPDATE SET max_resultant =
                    excluded.max_resultant, avg_resultant = excluded.avg_resultant, x_mg = excluded.x_mg, y_mg
                    = excluded.y_mg, z_mg = excluded.z_mg, samples = excluded.samples, pulled_at =
                    excluded.pulled_at
                """,
            hasLocalID: false),
    ]
}
