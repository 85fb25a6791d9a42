import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Desired state on the shared server (server schema 5): one assignment per
/// device fleet-wide (`fleet_assignments`), made by the office
/// (`--inventory postgresql://… assign`) or pushed by a bench's `sync`, and
/// pulled by every bench's `sync`; which bench converged it first, and when.
///
/// **The conflict rule.** Two assignments of one device: the one with the
/// later `assigned_at` wins; on the same instant, the greater `assigned_by`.
/// Whatever loses is never dropped silently: it is kept in
/// `assignment_conflicts` and the sync that met it says so.
public enum ServerAssignments {
    /// Server schema 5.
    static let schema = """
        CREATE TABLE IF NOT EXISTS fleet_assignments (
            address         TEXT PRIMARY KEY,
            profile         TEXT NOT NULL,
            major           BIGINT,
            minor_policy    TEXT NOT NULL,
            minor           BIGINT,
            overrides       TEXT NOT NULL DEFAULT '{}',
            assigned_at     TEXT NOT NULL,
            assigned_by     TEXT NOT NULL,
            origin          TEXT NOT NULL,
            converged_at    TEXT,
            converged_bench TEXT,
            converged_run   BIGINT
        );
        CREATE TABLE IF NOT EXISTS assignment_conflicts (
            address          TEXT NOT NULL,
            kept             TEXT NOT NULL,
            kept_assigned_at TEXT NOT NULL,
            kept_assigned_by TEXT NOT NULL,
            lost             TEXT NOT NULL,
            lost_assigned_at TEXT NOT NULL,
            lost_assigned_by TEXT NOT NULL,
            noticed_by       TEXT NOT NULL,
            noticed_at       TEXT NOT NULL,
            PRIMARY KEY (address, lost_assigned_at, lost_assigned_by)
        );
        """

    /// An assignment that lost to another under the conflict rule.
    public struct Conflict: Sendable, Equatable, CustomStringConvertible {
        public var address: String
        public var kept: Assignment
        public var lost: Assignment
        public var description: String {
            "\(address): \(lost.summary) (assigned \(lost.assignedAt) by \(lost.assignedBy)) lost to \(kept.summary)"
                + " (assigned \(kept.assignedAt) by \(kept.assignedBy)): the later assignment wins"
        }
    }

    /// What a bench's sync exchanged.
    public struct Exchange: Sendable, Equatable {
        /// This bench's assignments the server did not have.
        public var pushed = 0
        /// Assignments the bench took from the server (new or replacing its own).
        public var pulled = 0
        /// Convergences this bench reported first.
        public var converged = 0
        public var conflicts: [Conflict] = []
        /// Server rows that failed the checks (`PulledRows`): not taken,
        /// left on the server as they are.
        public var refused: [RefusedRow] = []
        /// Devices whose assignment here was not pushed: the server's row
        /// for them is refused, and a sync never writes over one.
        public var notPushed: [String] = []
        public init() {}
    }

    /// The server's assignments as read: those that pass the checks, by
    /// address, and the rows refused.
    struct Pulled {
        var valid: [String: (Assignment, bench: String?)] = [:]
        var refused: [RefusedRow] = []
        /// The devices a refused row names (when its address is one).
        var blocked: Set<String> = []
    }

    static func later(_ a: Assignment, than b: Assignment) -> Bool {
        (a.assignedAt, a.assignedBy) > (b.assignedAt, b.assignedBy)
    }

    static func same(_ a: Assignment, _ b: Assignment) -> Bool {
        a.assignedAt == b.assignedAt && a.assignedBy == b.assignedBy
    }

    /// Every column as text (integers too: they are range-checked, never
    /// narrowed), in the order `PulledRows.assignment` reads.
    static let columns = """
        SELECT address, profile, major::text, minor_policy, minor::text, overrides, assigned_at, assigned_by,
               converged_at, converged_bench
        FROM fleet_assignments ORDER BY address
        """

    /// Every assignment on the server, each checked as local input is
    /// (`PulledRows.assignment`, against `profiles`). Rows naming one
    /// device (its address written in other letter cases) are refused
    /// together: which one is meant cannot be told.
    static func all(_ server: PostgresConnection, profiles: Set<String>) throws(SyncError) -> Pulled {
        grouped(try server.exec(columns), profiles: profiles).pulled
    }

    /// Writes `assignment` over the server's row (the caller has judged it
    /// the later one): its convergence is forgotten.
    static func write(_ assignment: Assignment, origin: String, _ server: PostgresConnection) throws(SyncError) {
        try server.exec(
            """
            INSERT INTO fleet_assignments (address, profile, major, minor_policy, minor, overrides, assigned_at,
                                           assigned_by, origin)
            VALUES ($1, $2, $3::bigint, $4, $5::bigint, $6, $7, $8, $9)
            ON CONFLICT (address) DO UPDATE SET
                profile = excluded.profile, major = excluded.major, minor_policy = excluded.minor_policy,
                minor = excluded.minor, overrides = excluded.overrides, assigned_at = excluded.assigned_at,
                assigned_by = excluded.assigned_by, origin = excluded.origin, converged_at = NULL,
                converged_bench = NULL, converged_run = NULL
            """,
            [
                assignment.address, assignment.profile, assignment.major.map { String($0) },
                assignment.minorPolicy.rawValue, assignment.minor.map { String($0) }, assignment.overrides.json,
                assignment.assignedAt, assignment.assignedBy, origin,
            ])
    }

    /// Inserts `assignment` unless the device has a row (another
    /// writer's, committed meanwhile): whether it did.
    static func insertIfNew(
        _ assignment: Assignment, origin: String, _ server: PostgresConnection
    ) throws(SyncError)
        -> Bool
    {
        !(try server.exec(
            """
            INSERT INTO fleet_assignments (address, profile, major, minor_policy, minor, overrides, assigned_at,
                                           assigned_by, origin)
            VALUES ($1, $2, $3::bigint, $4, $5::bigint, $6, $7, $8, $9)
            ON CONFLICT (address) DO NOTHING RETURNING address
            """,
            [
                assignment.address, assignment.profile, assignment.major.map { String($0) },
                assignment.minorPolicy.rawValue, assignment.minor.map { String($0) }, assignment.overrides.json,
                assignment.assignedAt, assignment.assignedBy, origin,
            ]
        ).isEmpty)
    }

    static func recordConflict(_ conflict: Conflict, by: String, _ server: PostgresConnection) throws(SyncError) {
        try server.exec(
            """
            INSERT INTO assignment_conflicts (address, kept, kept_assigned_at, kept_assigned_by, lost,
                                              lost_assigned_at, lost_assigned_by, noticed_by, noticed_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            ON CONFLICT DO NOTHING
            """,
            [
                conflict.address, conflict.kept.summary, conflict.kept.assignedAt, conflict.kept.assignedBy,
                conflict.lost.summary, conflict.lost.assignedAt, conflict.lost.assignedBy, by, Inventory.now(),
            ])
    }

    /// The office: records `assignments` on the server, under the conflict
    /// rule, in one transaction, the devices' rows locked in address order
    /// (a bench's exchange pushing one of them waits, and then judges its
    /// own against the office's). Returns the assignments each replaced, and
    /// those that lost to a later one already there (none, unless clocks
    /// disagree).
    /// A row there that fails the checks (`PulledRows`) is replaced
    /// without the conflict rule: the office's assignment is the fix.
    public static func assign(
        _ assignments: [Assignment], url: String, profiles: Set<String>
    ) throws(SyncError) -> (replaced: [Assignment], conflicts: [Conflict]) {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        return try server.transaction { () throws(SyncError) in
            // The rows of these devices locked in address order, as a
            // bench's exchange locks them (no lock over the whole fleet).
            let addresses = Set(assignments.map { $0.address.uppercased() }).sorted()
            func locked(_ addresses: [String]) throws(SyncError) -> Pulled {
                grouped(
                    try server.exec(
                        selectColumns + " WHERE upper(address) = ANY($1::text[]) ORDER BY address FOR UPDATE",
                        [PostgresArray.literal(addresses.map { Optional($0) })]),
                    profiles: profiles
                ).pulled
            }
            let held = try locked(addresses)
            var replaced: [Assignment] = []
            var conflicts: [Conflict] = []
            func judge(_ assignment: Assignment, against there: Assignment) throws(SyncError) {
                guard later(assignment, than: there) else {
                    let conflict = Conflict(address: assignment.address, kept: there, lost: assignment)
                    try recordConflict(conflict, by: "office", server)
                    conflicts.append(conflict)
                    return
                }
                replaced.append(there)
                try write(assignment, origin: "office", server)
            }
            for assignment in assignments {
                if let (there, _) = held.valid[assignment.address] {
                    try judge(assignment, against: there)
                } else if held.blocked.contains(assignment.address) {
                    try write(assignment, origin: "office", server)
                } else if try !insertIfNew(assignment, origin: "office", server) {
                    // A bench's row came first (committed meanwhile): judged against it.
                    if let (there, _) = try locked([assignment.address]).valid[assignment.address] {
                        try judge(assignment, against: there)
                    } else {
                        try write(assignment, origin: "office", server)
                    }
                }
            }
            return (replaced, conflicts)
        }
    }

    // A bench's sync: `exchange`, in AssignmentExchange.swift.

    /// The fleet's drift, as the office sees it: each assignment against
    /// the merged fleet (`fleet_devices`: the latest observation of each
    /// fact across benches) and the identity claimed for the device. A row
    /// that fails the checks (`PulledRows`) is one finding, its field
    /// named, desired "unusable server row: …". `stored`: the observed
    /// values that failed their checks (read as unknown; docs/inventory.md,
    /// "Values read back"). Held in memory: the office's commands stream
    /// it instead (`OfficeStreams.drift`); this is what the tests hold the
    /// stream to (OfficeReadsTests).
    public static func drift(
        url: String, profiles: [String: Profile]
    ) throws(SyncError) -> (
        findings: [DriftFinding], assigned: Int, stored: [StoredFinding]
    ) {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        let pulled = try all(server, profiles: Set(profiles.keys))
        let assignments = pulled.valid.values.map(\.0).sorted { $0.address < $1.address }
        let rows = try server.query(driftRows).rows
        var observed: [String: ObservedState] = [:]
        var stored: [StoredFinding] = []
        for row in rows {
            guard let address = row[0].text, row[13].text != nil else { continue }
            observed[address] = ObservedState(row: Array(row[1...12]), address: row[0], findings: &stored)
        }
        let unusable = pulled.refused.map {
            DriftFinding(
                device: $0.key, field: $0.field, desired: "unusable server row: \($0.value ?? "NULL") \($0.reason)",
                observed: nil, observedAt: nil)
        }
        return (
            assignments.flatMap { DesiredState.drift($0, observed[$0.address], profiles: profiles) } + unusable,
            assignments.count + pulled.refused.count, stored
        )
    }

    /// Each assignment's device as the merged fleet observed it and the
    /// identity claimed for it, in address order (`fleet_assignments_pkey`
    /// and `devices_by_address` merged: docs/office.md, "The indexes").
    static let driftRows = """
        SELECT a.address, d.profile, d.config_cornering, d.config_braking, d.config_acceleration,
               d.config_duration, d.config_enable, d.config_read_at, d.major, d.minor, d.identity_at,
               c.major, c.minor, d.address
        FROM fleet_assignments a LEFT JOIN fleet_devices d ON d.address = a.address
        LEFT JOIN identity_claims c ON c.address = a.address
        ORDER BY a.address
        """

    /// Which bench converged each assignment first, and when (nil: none yet).
    public static func convergences(
        url: String, profiles: Set<String>
    ) throws(SyncError) -> [String: (bench: String, at: String)] {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        var found: [String: (bench: String, at: String)] = [:]
        for (address, entry) in try all(server, profiles: profiles).valid {
            if let bench = entry.bench, let at = entry.0.convergedAt { found[address] = (bench, at) }
        }
        return found
    }
}
