import FoundationEssentials
import Inventory
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// `report`'s reads from the server, each a cursor of one snapshot, each
/// ordered by device (`ReportReading`); every row goes through the same
/// checks as the array reads of `ServerInventory` (`history`,
/// `auditSubjects`, `deviceTable`), their findings logged.
///
/// Indexes: the readings stream is `readings_by_device_at` (server
/// migration 8) read in order, index only, no sort — so a reading's
/// findings name it by device and time (its key, bench and id, is not in
/// the index; the array read `history` names it by those); devices and subjects are the
/// `fleet_devices` aggregate in address order (`devices_by_address`);
/// activity is aggregated by the server to one row per device, day and
/// bench; problems are the failed and skipped outcomes by device.
final class ServerReportReading: ReportReading {
    /// Findings of the rows read, kept as `StoredFindingLog` keeps them.
    final class Log {
        var kept = StoredFindingLog()
    }

    let snapshot: PostgresSnapshot
    let log: Log

    init(snapshot: PostgresSnapshot, log: Log) {
        self.snapshot = snapshot
        self.log = log
    }

    /// A stream of `cursor`'s rows through `build` (rows it refuses are left out).
    private func stream<T>(
        _ cursor: PostgresCursor, _ build: @escaping ([SQLiteValue], inout [StoredFinding]) -> T?
    ) -> RowStream<T> {
        let log = log
        return RowStream {
            while let row = try cursor.next() {
                var findings: [StoredFinding] = []
                let built = build(row, &findings)
                if !findings.isEmpty { log.kept.add(findings) }
                if let built { return built }
            }
            return nil
        }
    }

    func devices() throws -> (columns: [String], rows: RowStream<[SQLiteValue]>) {
        // The columns come with the first fetch: ask for none to learn them.
        let columns = try snapshot.connection.query("SELECT * FROM fleet_devices LIMIT 0").columns
        let cursor = try snapshot.cursor("SELECT * FROM fleet_devices ORDER BY address", batch: 2_000)
        let log = log
        return (
            columns,
            RowStream {
                guard let row = try cursor.next() else { return nil }
                let findings = RowCheck.findings(table: "devices", columns: columns, row: row, key: "address")
                if !findings.isEmpty { log.kept.add(findings) }
                return row
            }
        )
    }

    func subjects() throws -> RowStream<AuditSubject> {
        let cursor = try snapshot.cursor(
            """
            SELECT f.address, f.profile, f.battery, f.firmware, f.calibrated, f.calibrated_at, f.calibration_x,
                f.calibration_y, f.calibration_z, f.config_cornering, f.config_braking, f.config_acceleration,
                f.config_duration, f.config_enable, f.config_read_at, f.last_seen, f.major, f.minor,
                c.major, c.minor, CASE WHEN c.major IS NULL THEN NULL ELSE 'claimed by bench ' || left(c.bench_id, 8) END,
                f.benches::text
            FROM fleet_devices f LEFT JOIN identity_claims c ON c.address = f.address ORDER BY f.address
            """, batch: 2_000)
        return stream(cursor, DeviceRows.auditSubject)
    }

    func readings(since: Date?) throws -> RowStream<BatteryReading> {
        let cursor = try snapshot.cursor(
            """
            SELECT device, at, battery, device, at FROM readings
            WHERE battery IS NOT NULL AND ($1::text IS NULL OR at >= $1) ORDER BY device, at
            """, [since.map(ServerInventory.timestamp)])
        return stream(cursor, Inventory.reading)
    }

    func activity(since: Date?) throws -> RowStream<ActivityCount> {
        let cursor = try snapshot.cursor(
            """
            SELECT substr(started_at, 1, 10), device, count(*)::bigint,
                (count(*) FILTER (WHERE status = 'failed'))::bigint,
                coalesce(sum(duration_ms) FILTER (WHERE duration_ms BETWEEN 0 AND $2::bigint), 0)::bigint,
                left(bench_id, 8) || '/' || min(local_id)::text,
                (count(*) FILTER (WHERE duration_ms IS NOT NULL AND duration_ms NOT BETWEEN 0 AND $2::bigint))::bigint,
                left(bench_id, 8)
            FROM outcomes WHERE status <> 'running' AND ($1::text IS NULL OR started_at >= $1)
            GROUP BY 2, 1, left(bench_id, 8) ORDER BY 2, 1, 8
            """, [since.map(ServerInventory.timestamp), String(FleetHistory.stepMillisecondsLimit)])
        return stream(cursor) { row, findings in
            Inventory.activity(row, bench: StoredRule.visible(row[7].text ?? "", limit: 8), findings: &findings)
        }
    }

    func problems(since: Date?) throws -> RowStream<StepProblem> {
        let cursor = try snapshot.cursor(
            """
            SELECT device, step, status, coalesce(error, detail, ''), bench_id, local_id FROM outcomes
            WHERE status IN ('failed', 'skipped') AND ($1::text IS NULL OR started_at >= $1) ORDER BY device
            """, [since.map(ServerInventory.timestamp)])
        return stream(cursor, Inventory.problem)
    }
}
