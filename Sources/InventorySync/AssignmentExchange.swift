import FoundationEssentials
import Inventory
import SBeaconProtocol

/// A bench's exchange of assignments with the server, O(changes) each way
/// (docs/office.md, "Sync at scale"): it pushes the bench's own
/// assignments changed since its last exchange (found in its ledger from
/// `benches.assignments_seq`), under row locks taken in address order, not
/// a lock over the whole fleet; and it pulls the rows written since its
/// last pull (`fleet_assignments.changed_xid` at or after the oldest
/// transaction still running then, `benches.assignments_xmin`), plus the
/// rows it refused before, which it checks again each time.
extension ServerAssignments {
    /// The columns `PulledRows.assignment` reads, for a `WHERE` to follow.
    static let selectColumns = """
        SELECT address, profile, major::text, minor_policy, minor::text, overrides, assigned_at, assigned_by,
               converged_at, converged_bench
        FROM fleet_assignments
        """

    /// `rows` checked as local input is: by device (rows naming one device
    /// in other letter cases refused together), with the raw addresses of
    /// the rows refused (to check them again next time).
    static func grouped(
        _ rows: [[String?]], profiles: Set<String>
    ) -> (pulled: Pulled, refusedAddresses: [String]) {
        var pulled = Pulled()
        var refusedAddresses: [String] = []
        var byDevice: [String: [(Assignment, bench: String?, key: String)]] = [:]
        for row in rows {
            switch PulledRows.assignment(row, profiles: profiles) {
            case .success(let entry):
                byDevice[entry.assignment.address, default: []].append(
                    (entry.assignment, entry.bench, row.first.flatMap { $0 } ?? ""))
            case .failure(let refused):
                pulled.refused.append(refused)
                if let raw = row.first.flatMap({ $0 }) { refusedAddresses.append(raw) }
                if let address = row.first.flatMap({ $0 }).flatMap({ MACEnding.address($0) }) {
                    pulled.blocked.insert(address)
                }
            }
        }
        for (address, entries) in byDevice {
            guard entries.count == 1 else {
                for entry in entries {
                    pulled.refused.append(
                        PulledRows.refusal(
                            "fleet_assignments", key: entry.key,
                            PulledRows.Problem(
                                "address", "names the same device as another row (\(entries.count) rows: one is meant)",
                                entry.key)))
                    refusedAddresses.append(entry.key)
                }
                pulled.blocked.insert(address)
                continue
            }
            pulled.valid[address] = (entries[0].0, entries[0].bench)
        }
        for address in pulled.blocked { pulled.valid[address] = nil }
        pulled.refused.sort { ($0.key, $0.field) < ($1.key, $1.field) }
        return (pulled, refusedAddresses)
    }

    /// This bench's cursors: the ledger size its last exchange read its own
    /// changes up to, the transaction horizon of its last pull, and the
    /// raw addresses of the rows it refused then.
    struct Cursors {
        var ledgerSeq: Int?
        var xmin: String?
        var refused: [String] = []
    }

    static func cursors(_ server: PostgresConnection, bench: String) throws(SyncError) -> Cursors {
        var cursors = Cursors()
        guard
            let row = try server.exec(
                "SELECT assignments_seq::text, assignments_xmin FROM benches WHERE bench_id = $1", [bench]
            ).first
        else { return cursors }
        cursors.ledgerSeq = (row.first ?? nil).flatMap { Int($0) }.flatMap { $0 >= 0 ? $0 : nil }
        // An xid8 is a whole number; anything else is not one this wrote.
        cursors.xmin = (row.count > 1 ? row[1] : nil).flatMap { text in
            UInt64(text).map { _ in text }
        }
        cursors.refused = try server.exec(
            "SELECT unnest(assignments_refused) FROM benches WHERE bench_id = $1", [bench]
        ).compactMap { $0.first ?? nil }
        return cursors
    }

    /// A bench's sync: pushes its own assignments changed since its last
    /// exchange (the later one wins each device), reports which of those it
    /// converged (the server keeps the earliest convergence of the
    /// assignment in force, with its bench), and pulls every assignment
    /// written since its last pull that it lacks or holds an older one of.
    /// Each server row is checked as local input is (`PulledRows`, against
    /// `profiles`, the profiles this bench loaded): one that fails is not
    /// taken, never written over, listed in `refused`, and checked again at
    /// the next exchange. `full`: every assignment each way, as a first
    /// exchange does.
    public static func exchange(
        _ inventory: Inventory, url: String, profiles: Set<String>, full: Bool = false, stop: SyncStop? = nil,
        page: Int = 5_000
    ) async throws(SyncError) -> Exchange {
        let bench: String
        let ledgerSize: Int?
        do {
            // The ledger's size before the assignments are read: a change
            // made after it is found by the next exchange.
            ledgerSize = try await inventory.hasLedger() ? try await inventory.ledgerTreeHead().size : nil
            bench = try await inventory.benchID()
        } catch {
            throw SyncError("the local inventory: \(error)")
        }
        let server = try PostgresConnection(url, stop: stop)
        try InventorySync.prepareSchema(server, creating: true)
        let cursors = full ? Cursors() : try cursors(server, bench: bench)
        // This bench's assignments changed since its last exchange (nil: all).
        var changed: Set<String>?
        if let from = cursors.ledgerSeq, let size = ledgerSize, from <= size {
            let changes = try await SyncChanges.collect(inventory, from..<size, tables: ["assignments"])
            changed = Set((changes.keys["assignments"] ?? []).compactMap { SyncChanges.address($0) })
        }
        // Only those read here when they are known (a bench holds every
        // assignment of the fleet it pulled: reading them all is O(fleet)).
        // A pull writes no entry (the ledger does not cover an assignment
        // pulled and not converged here: docs/ledger.md, "What is
        // covered"), so these are the bench's own changes: assignments made
        // here, convergences here, and its own or converged rows a pull
        // replaced.
        let local: [Assignment]
        do {
            if let changed, changed.count <= 1_000 {
                local = try await inventory.assignments(of: changed.map { $0.uppercased() }.sorted())
            } else {
                // Many (a large `assign` here): the covered ones, one query.
                local = try await inventory.coveredAssignments().filter { changed?.contains($0.address) ?? true }
            }
        } catch {
            throw SyncError("the local inventory: \(error)")
        }
        var exchange = Exchange()
        let own = local.filter { $0.source == .local && changed?.contains($0.address) ?? true }
        var start = 0
        while start < own.count {
            let chunk = Array(own[start..<min(own.count, start + 500)])
            try server.transaction { () throws(SyncError) in
                try push(chunk, bench: bench, profiles: profiles, server, into: &exchange)
            }
            start += chunk.count
        }
        let converged = local.filter { $0.convergedAt != nil && changed?.contains($0.address) ?? true }
        if !converged.isEmpty {
            exchange.converged = try server.transaction { () throws(SyncError) in
                try reportConverged(converged, bench: bench, server)
            }
        }
        // The pull: what was written since the last one. The horizon is
        // read first: a transaction still running then writes rows at or
        // after it, found next time.
        let horizon = try server.exec("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").first?.first ?? nil
        let pull: (sql: String, parameters: [String?])
        if let xmin = cursors.xmin {
            // Every row of a device written since (all its letter cases),
            // and of the devices refused last time: by index, not a scan.
            pull = (
                """
                WITH wanted AS (
                    SELECT upper(address) AS device FROM fleet_assignments WHERE changed_xid >= $1::xid8
                    UNION SELECT upper(a) FROM unnest($2::text[]) AS a)
                """ + selectColumns + " WHERE upper(address) IN (SELECT device FROM wanted) " + pullOrder,
                [xmin, PostgresArray.literal(cursors.refused.map { Optional($0) })]
            )
        } else {
            pull = (selectColumns + " " + pullOrder, [])
        }
        var refusedAddresses: [String] = []
        try await server.streamingRead { (snapshot) async throws(SyncError) in
            var pages = PulledPages(try snapshot.cursor(pull.sql, pull.parameters, batch: page), size: page)
            while let rows = try pages.next() {
                let (pulled, refused) = grouped(rows, profiles: profiles)
                exchange.refused += pulled.refused
                refusedAddresses += refused
                exchange.pulled += try await take(pulled, into: inventory)
            }
        }
        exchange.refused.sort { ($0.key, $0.field) < ($1.key, $1.field) }
        // Taken: the cursors move (were this not reached, the next
        // exchange does this one's work again, harmlessly).
        try server.exec(
            """
            UPDATE benches SET assignments_seq = $2::bigint, assignments_xmin = $3, assignments_refused = $4::text[]
            WHERE bench_id = $1
            """,
            [
                bench, ledgerSize.map { String($0) }, horizon,
                PostgresArray.literal(refusedAddresses.map { Optional($0) }),
            ])
        return exchange
    }

    /// The pull's order: the rows of one device (its address in every
    /// letter case) next to each other, so that a page holds all of them
    /// (`PulledPages`) and `grouped` judges them together; by the index
    /// `fleet_assignments_by_device`.
    static let pullOrder = "ORDER BY upper(address), address"

    /// Takes one page of the pull: of the valid rows, those this bench
    /// lacks or holds another assignment of (its own that lost, or an
    /// older pull), in one local transaction; how many.
    static func take(_ pulled: Pulled, into inventory: Inventory) async throws(SyncError) -> Int {
        do {
            let held = Dictionary(
                try await inventory.assignments(of: pulled.valid.keys.sorted()).map { ($0.address, $0) }
            ) { first, _ in first }
            let wanted = pulled.valid.values.map(\.0).filter { there in
                held[there.address].map { !same($0, there) } ?? true
            }
            .sorted { $0.address < $1.address }
            try await inventory.takeAssignments(wanted)
            return wanted.count
        } catch {
            throw SyncError("the local inventory: \(error)")
        }
    }

    /// Pushes `chunk` (this bench's own assignments, in address order) in
    /// the caller's transaction: the server's rows for those devices
    /// locked first, in address order (benches pushing at once wait for
    /// each other row by row, and cannot deadlock on them), then each
    /// judged by the conflict rule; a device the server has no row for is
    /// inserted unless another bench inserted it meanwhile, when it is
    /// judged against that row.
    static func push(
        _ chunk: [Assignment], bench: String, profiles: Set<String>, _ server: PostgresConnection,
        into exchange: inout Exchange
    ) throws(SyncError) {
        func locked(_ addresses: [String]) throws(SyncError) -> Pulled {
            grouped(
                try server.exec(
                    selectColumns + " WHERE upper(address) = ANY($1::text[]) ORDER BY address FOR UPDATE",
                    [PostgresArray.literal(addresses.map { Optional($0.uppercased()) })]),
                profiles: profiles
            ).pulled
        }
        func judge(_ assignment: Assignment, against there: Assignment) throws(SyncError) {
            if same(assignment, there) { return }
            let wins = later(assignment, than: there)
            let conflict = Conflict(
                address: assignment.address, kept: wins ? assignment : there, lost: wins ? there : assignment)
            try recordConflict(conflict, by: bench, server)
            exchange.conflicts.append(conflict)
            guard wins else { return }
            try write(assignment, origin: bench, server)
            exchange.pushed += 1
        }
        let held = try locked(chunk.map(\.address))
        var missing: [Assignment] = []
        for assignment in chunk {
            if held.blocked.contains(assignment.address) {
                exchange.notPushed.append(assignment.address)
            } else if let (there, _) = held.valid[assignment.address] {
                try judge(assignment, against: there)
            } else {
                missing.append(assignment)
            }
        }
        for assignment in missing {
            if try insertIfNew(assignment, origin: bench, server) {
                exchange.pushed += 1
                continue
            }
            // Another bench's row came first (committed): judged against it.
            let now = try locked([assignment.address])
            if let (there, _) = now.valid[assignment.address] {
                try judge(assignment, against: there)
            } else {
                exchange.notPushed.append(assignment.address)
            }
        }
    }

    /// Reports the convergences in `converged` (the server keeps the
    /// earliest of the assignment in force), the rows locked in address
    /// order first; returns how many this bench reported first.
    static func reportConverged(
        _ converged: [Assignment], bench: String, _ server: PostgresConnection
    ) throws(SyncError) -> Int {
        let sorted = converged.sorted { $0.address < $1.address }
        let addresses = PostgresArray.literal(sorted.map { Optional($0.address) })
        // On the server, with the owner's rights, as this bench only
        // (ServerRoles): the rows are another's, only their convergence ours.
        return try server.exec(
            "SELECT beaconbench_report_converged($2, $1::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])",
            [
                addresses, bench, PostgresArray.literal(sorted.map { Optional($0.assignedAt) }),
                PostgresArray.literal(sorted.map { Optional($0.assignedBy) }),
                PostgresArray.literal(sorted.map { $0.convergedAt }),
                PostgresArray.literal(sorted.map { $0.convergedRun.map { String($0) } }),
            ]
        ).count
    }
}

/// The pull read a page at a time: `size` rows from the cursor (ordered by
/// `ServerAssignments.pullOrder`), and then the rest of the last device's
/// rows, so that a device's rows in other letter cases never straddle two
/// pages. Memory is a page, whatever the fleet (a judged bench's first
/// pull is up to 500,000 rows; held whole, 630 MB).
struct PulledPages {
    private let cursor: PostgresCursor
    private let size: Int
    /// The first row of the next page, read to find where this one ends.
    private var pending: [String?]?
    private var ended = false

    init(_ cursor: PostgresCursor, size: Int) {
        self.cursor = cursor
        self.size = max(1, size)
    }

    /// The device a row names (its address in capitals); nil when its
    /// address is not one (such a row is refused alone).
    static func device(_ row: [String?]) -> String? {
        row.first.flatMap { $0 }.flatMap { MACEnding.address($0) }
    }

    /// The next page's rows (ServerAssignments.selectColumns), nil after the last.
    mutating func next() throws(SyncError) -> [[String?]]? {
        var rows: [[String?]] = []
        if let first = pending {
            rows.append(first)
            pending = nil
        }
        while !ended {
            guard let row = try cursor.next() else {
                ended = true
                break
            }
            let cells = row.map(\.textForm)
            if rows.count >= size {
                let device = Self.device(cells)
                if device == nil || device != rows.last.flatMap(Self.device) {
                    pending = cells
                    break
                }
            }
            rows.append(cells)
        }
        return rows.isEmpty ? nil : rows
    }
}
