import Dispatch
import FoundationEssentials
import Inventory
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The shared server as the fleet's identity registry (`identity_claims`,
/// primary key major and minor): a bench claims a device's major.minor
/// there before writing it, so that no two benches that can reach the
/// server hand out one identity.
///
/// Since server schema 9 a bench claims from blocks of minors it leased
/// (`minor_blocks`, `blockSize` minors each): one statement per claim, no
/// lock held across round trips, so benches claiming in one major do not
/// wait for one another; the primary key still makes a duplicate
/// impossible (docs/inventory.md, "Identities"; docs/office.md, "Identity
/// claims under contention"). One connection, made at the first claim (3 s
/// to connect unless PGCONNECT_TIMEOUT says otherwise) or by `connect()`,
/// used by one claim at a time.
public final class ServerIdentities: SharedIdentities, Sendable {
    /// How a claim finds its minor.
    public enum Design: String, Sendable, CaseIterable {
        /// From blocks of minors leased per bench (schema 9, the default).
        case blocks
        /// One claim per major at a time under an advisory lock (the design
        /// before schema 9), kept to compare with.
        case lock
    }

    /// Minors per leased block. The server's blocks of a major are made
    /// once, at the first lease in it, this size each.
    public static let blockSize = 64
    /// A live block with no claim of its bench for this long goes back at
    /// the bench's next sync (`returnBlocks`).
    public static let idleBlockSeconds: Double = 24 * 3_600

    public let location: String
    public let design: Design
    let conninfo: String
    let benchID: String
    private let connection = Mutex<PostgresConnection?>(nil)
    private let leases = Mutex(0)

    public init(url: String, benchID: String, design: Design = .blocks) {
        conninfo = url
        self.benchID = benchID
        self.design = design
        location = PostgresConnection.describe(url)
    }

    /// What an inventory remembers of the server it synced to: the
    /// connection string without its password.
    public static func rememberable(_ url: String) -> String? { PostgresConnection.withoutPassword(url) }

    /// Blocks this registry leased so far.
    public var blocksLeased: Int { leases.withLock { $0 } }

    /// Connects now (the schema checked or migrated, the bench recorded)
    /// rather than at the first claim.
    public func connect() async throws {
        try await offThread { try self.withConnection { _ throws(SyncError) in } }
    }

    public func claim(address: String, major: UInt16, preferred: UInt16, floor: UInt16) async throws -> UInt16 {
        try await offThread {
            try self.withConnection { server throws(SyncError) -> UInt16 in
                switch self.design {
                case .lock:
                    return try Self.claimLocked(
                        on: server, address: address, major: major, preferred: preferred, floor: floor,
                        bench: self.benchID)
                case .blocks:
                    let (minor, leased) = try Self.claimFromBlocks(
                        on: server, address: address, major: major, preferred: preferred, floor: floor,
                        bench: self.benchID)
                    if leased > 0 { self.leases.withLock { $0 += leased } }
                    return minor
                }
            }
        }
    }

    /// Gives back this bench's live blocks that still have a free minor:
    /// all of them (`idleFor` nil), or those leased and without a claim of
    /// this bench for `idleFor` seconds. Their free minors can be leased
    /// again by any bench; the minors claimed in them stay claimed.
    /// Returns how many went back.
    public func returnBlocks(idleFor: Double? = nil) async throws -> Int {
        try await offThread {
            try self.withConnection { server throws(SyncError) -> Int in
                try Self.returnBlocks(on: server, bench: self.benchID, idleFor: idleFor).count
            }
        }
    }

    /// libpq blocks (connecting, waiting for the server): on a thread of
    /// its own, never on the caller's — a fleet run's is the bus
    /// connection's, which must keep reading bluetoothd.
    private func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(with: Result { try body() })
            }
        }
    }

    private func withConnection<T: Sendable>(_ body: (PostgresConnection) throws(SyncError) -> T) throws -> T {
        try connection.withLock { held throws(SyncError) -> T in
            if held == nil {
                let server = try PostgresConnection(conninfo, connectTimeout: 3)
                try InventorySync.prepareSchema(server, creating: true)
                try server.exec(
                    """
                    INSERT INTO benches (bench_id, host, last_sync) VALUES ($1, $2, NULL)
                    ON CONFLICT (bench_id) DO NOTHING
                    """, [benchID, ProcessInfo.processInfo.hostName])
                held = server
            }
            guard let server = held else { throw SyncError("no connection") }
            do throws(SyncError) {
                return try body(server)
            } catch {
                if error.isConnectionFailure { held = nil }
                throw error
            }
        }
    }

    /// Claims an identity as `claim(address:major:preferred:floor:)` does,
    /// on an open connection, by `design`.
    static func claim(
        on server: PostgresConnection, address: String, major: UInt16, preferred: UInt16, floor: UInt16, bench: String,
        design: Design = .blocks
    ) throws(SyncError) -> UInt16 {
        switch design {
        case .lock:
            return try claimLocked(
                on: server, address: address, major: major, preferred: preferred, floor: floor, bench: bench)
        case .blocks:
            return try claimFromBlocks(
                on: server, address: address, major: major, preferred: preferred, floor: floor, bench: bench
            ).minor
        }
    }

    /// The server's claim for the device under `major` (`cell`), checked:
    /// a minor outside 0–65535 is refused (never narrowed, never written
    /// over).
    static func existingMinor(_ cell: String?, address: String, major: UInt16) throws(SyncError) -> UInt16? {
        do throws(PulledRows.Problem) {
            return try PulledRows.identityPart(cell, "minor")
        } catch {
            throw SyncError(
                "the server's identity claim for \(address) under major \(major) is refused: minor"
                    + " '\(PulledRows.shown(error.value ?? "NULL"))' \(error.reason) (identity_claims; fix or"
                    + " delete that row)")
        }
    }

    /// One claim, one round trip (schema 9): the server's
    /// `beaconbench_claim_identity` (`blocksSchema`), which takes no lock
    /// beyond the rows it writes. A `preferred` minor one above `floor`
    /// (the bench's highest) is a `sequential` profile's next one: the
    /// bench's block gives the next minor instead. Any other (a beacon's
    /// own minor, kept) is taken where no other device has it and it is in
    /// no other bench's live block. Returns the minor and how many blocks
    /// were leased for it.
    static func claimFromBlocks(
        on server: PostgresConnection, address: String, major: UInt16, preferred: UInt16, floor: UInt16,
        bench: String
    ) throws(SyncError) -> (minor: UInt16, leased: Int) {
        let sequential = Int(preferred) == Int(floor) + 1
        let row =
            try server.exec(
                """
                SELECT claim_outcome, claim_minor::text, blocks_leased::text
                FROM beaconbench_claim_identity(
                    $1::bigint, $2::bigint, $3::text, $4::text, $5::text, $6::bigint, $7::boolean)
                """,
                [
                    String(major), String(preferred), address, bench, Date().ISO8601Format(), String(blockSize),
                    sequential ? "true" : "false",
                ]
            ).first ?? []
        let outcome = row.first ?? nil
        let cell = row.count > 1 ? row[1] : nil
        let leased = (row.count > 2 ? row[2] : nil).flatMap { Int($0) } ?? 0
        switch outcome {
        case "existing":
            if let minor = try existingMinor(cell, address: address, major: major) { return (minor, leased) }
        case "claimed":
            if let minor = cell.flatMap({ UInt16($0) }) { return (minor, leased) }
        case "full":
            throw SyncError("every minor under major \(major) is taken on the server")
        default:
            break
        }
        throw SyncError(
            "no identity could be claimed under major \(major): the server answered"
                + " \(PulledRows.shown(outcome ?? "nothing")) \(PulledRows.shown(cell ?? "NULL"))")
    }

    /// Gives back `bench`'s live blocks that still have a free minor (see
    /// `returnBlocks(idleFor:)`); returns them as (major, first minor).
    @discardableResult
    static func returnBlocks(
        on server: PostgresConnection, bench: String, idleFor: Double? = nil
    ) throws(SyncError) -> [(major: Int64, first: Int64)] {
        let cutoff = idleFor.map { Date(timeIntervalSinceNow: -$0).ISO8601Format() }
        return try server.exec(
            """
            UPDATE minor_blocks b SET returned_at = $2
            WHERE b.bench_id = $1 AND b.returned_at IS NULL AND NOT b.used_up
                AND ($3::text IS NULL OR (b.leased_at < $3 AND NOT EXISTS (
                    SELECT 1 FROM identity_claims c
                    WHERE c.major = b.major AND c.minor BETWEEN b.first_minor AND b.first_minor + b.size - 1
                        AND c.bench_id = $1 AND c.claimed_at >= $3)))
            RETURNING b.major::text, b.first_minor::text
            """, [bench, Date().ISO8601Format(), cutoff]
        ).compactMap { row in
            guard row.count == 2, let major = row[0].flatMap({ Int64($0) }), let first = row[1].flatMap({ Int64($0) })
            else { return nil }
            return (major, first)
        }
    }

    /// What the server holds of one major's claims and blocks: for the
    /// claims benchmark's checks and for the office (leaked blocks).
    public struct Census: Sendable {
        /// The minor claimed for each address that starts with the prefix asked.
        public var claims: [String: UInt16] = [:]
        /// Claims in the major, all benches.
        public var claimsInMajor = 0
        /// Minors of the major claimed for more than one address (0: the
        /// primary key forbids it; counted, not assumed).
        public var duplicateMinors = 0
        /// Addresses claimed more than once in the whole table (0: unique).
        public var duplicateAddresses = 0
        /// The major's blocks of benches whose id starts with the prefix
        /// asked, by state: `live`, `used up`, `returned`.
        public var blocks: [String: Int] = [:]
        /// The major's blocks nobody ever leased.
        public var freeBlocks = 0
    }

    /// The census of `major` on the server at `url`.
    public static func census(
        url: String, major: UInt16, addressPrefix: String, benchPrefix: String
    ) async throws
        -> Census
    {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(
                    with: Result { () throws(SyncError) -> Census in
                        let server = try PostgresConnection(url)
                        try InventorySync.prepareSchema(server, creating: true)
                        let majorText = String(major)
                        var census = Census()
                        for row in try server.exec(
                            "SELECT address, minor::text FROM identity_claims WHERE major = $1 AND starts_with(address, $2)",
                            [majorText, addressPrefix])
                        {
                            if let address = row[0], let minor = row[1].flatMap({ UInt16($0) }) {
                                census.claims[address] = minor
                            }
                        }
                        func number(_ sql: String, _ parameters: [String?]) throws(SyncError) -> Int {
                            Int((try server.exec(sql, parameters).first?.first ?? nil) ?? "") ?? -1
                        }
                        census.claimsInMajor = try number(
                            "SELECT count(*) FROM identity_claims WHERE major = $1", [majorText])
                        census.duplicateMinors = try number(
                            """
                            SELECT count(*) FROM (SELECT minor FROM identity_claims WHERE major = $1
                            GROUP BY minor HAVING count(*) > 1) d
                            """, [majorText])
                        census.duplicateAddresses = try number(
                            "SELECT count(*) FROM (SELECT address FROM identity_claims GROUP BY address HAVING count(*) > 1) d",
                            [])
                        census.freeBlocks = try number(
                            "SELECT count(*) FROM minor_blocks WHERE major = $1 AND bench_id IS NULL", [majorText])
                        for row in try server.exec(
                            """
                            SELECT CASE WHEN returned_at IS NOT NULL THEN 'returned' WHEN used_up THEN 'used up'
                                ELSE 'live' END, count(*)::text
                            FROM minor_blocks WHERE major = $1 AND starts_with(bench_id, $2) GROUP BY 1
                            """, [majorText, benchPrefix])
                        {
                            if let state = row[0], let count = row[1].flatMap({ Int($0) }) {
                                census.blocks[state] = count
                            }
                        }
                        return census
                    })
            }
        }
    }

    /// Server schema 9: blocks of minors leased per bench. Every block of a
    /// major is a row from the first lease in it: free (`bench_id` NULL),
    /// live (leased, `returned_at` NULL), used up (no free minor left:
    /// kept by its bench), or returned (leasable again).
    static let blocksSchema = """
        CREATE TABLE IF NOT EXISTS minor_blocks (
            major       BIGINT NOT NULL,
            first_minor BIGINT NOT NULL,
            size        BIGINT NOT NULL,
            bench_id    TEXT,
            leased_at   TEXT,
            returned_at TEXT,
            used_up     BOOLEAN NOT NULL DEFAULT false,
            PRIMARY KEY (major, first_minor)
        );
        CREATE INDEX IF NOT EXISTS minor_blocks_live ON minor_blocks (bench_id, major)
            WHERE returned_at IS NULL AND NOT used_up;
        CREATE INDEX IF NOT EXISTS minor_blocks_free ON minor_blocks (major, first_minor)
            WHERE (bench_id IS NULL OR returned_at IS NOT NULL) AND NOT used_up;
        -- One claim (ServerIdentities.claimFromBlocks), each statement with a
        -- snapshot of its own (READ COMMITTED), no lock held but the rows
        -- written. In order: the device's claim under the major; else the
        -- preferred minor (not a sequential next one) when no other device
        -- claimed or holds it and it is not in another bench's live block;
        -- else the next free minor of the
        -- bench's live blocks (a block with none left is marked used up);
        -- else a block leased (the lowest free one, SKIP LOCKED: benches
        -- leasing at once take different ones); else the lowest free minor
        -- anywhere. A minor taken meanwhile is tried again (ON CONFLICT DO
        -- NOTHING; the primary key decides).
        CREATE OR REPLACE FUNCTION beaconbench_claim_identity(
            p_major bigint, p_preferred bigint, p_address text, p_bench text, p_at text, p_size bigint,
            p_sequential boolean)
        RETURNS TABLE (claim_outcome text, claim_minor bigint, blocks_leased integer)
        LANGUAGE plpgsql AS $fn$
        DECLARE
            v_minor bigint;
            v_leased integer := 0;
            v_block record;
            v_high bigint;
            v_elsewhere boolean;
        BEGIN
            FOR v_attempt IN 1..200 LOOP
                SELECT c.minor INTO v_minor FROM identity_claims c WHERE c.address = p_address AND c.major = p_major;
                IF FOUND THEN
                    RETURN QUERY SELECT 'existing'::text, v_minor, v_leased;
                    RETURN;
                END IF;
                v_elsewhere := EXISTS (SELECT 1 FROM identity_claims c WHERE c.address = p_address);
                v_minor := NULL;
                IF NOT p_sequential AND p_preferred BETWEEN 0 AND 65535
                    AND NOT EXISTS (SELECT 1 FROM identity_claims c WHERE c.major = p_major AND c.minor = p_preferred)
                    AND NOT EXISTS (
                        SELECT 1 FROM devices d WHERE d.major = p_major AND d.minor = p_preferred AND d.address <> p_address)
                    AND NOT EXISTS (
                        SELECT 1 FROM (
                            SELECT b.bench_id, b.returned_at, b.first_minor, b.size FROM minor_blocks b
                            WHERE b.major = p_major AND b.first_minor <= p_preferred ORDER BY b.first_minor DESC LIMIT 1
                        ) b
                        WHERE p_preferred < b.first_minor + b.size AND b.bench_id <> p_bench AND b.returned_at IS NULL)
                THEN
                    v_minor := p_preferred;
                ELSE
                    FOR v_block IN
                        SELECT b.first_minor, b.size FROM minor_blocks b
                        WHERE b.bench_id = p_bench AND b.major = p_major AND b.returned_at IS NULL AND NOT b.used_up
                        ORDER BY b.first_minor
                    LOOP
                        -- Above the block's highest claim first (one index
                        -- probe); then any gap (a block leased again).
                        SELECT max(c.minor) INTO v_high FROM identity_claims c
                        WHERE c.major = p_major AND c.minor BETWEEN v_block.first_minor
                            AND v_block.first_minor + v_block.size - 1;
                        FOR v_candidate IN greatest(coalesce(v_high + 1, v_block.first_minor), 1)
                            .. v_block.first_minor + v_block.size - 1
                        LOOP
                            IF NOT EXISTS (
                                SELECT 1 FROM devices d
                                WHERE d.major = p_major AND d.minor = v_candidate AND d.address <> p_address)
                            THEN
                                v_minor := v_candidate;
                                EXIT;
                            END IF;
                        END LOOP;
                        IF v_minor IS NULL AND v_high IS NOT NULL THEN
                            FOR v_candidate IN greatest(v_block.first_minor, 1) .. v_high LOOP
                                IF NOT EXISTS (
                                    SELECT 1 FROM identity_claims c WHERE c.major = p_major AND c.minor = v_candidate)
                                    AND NOT EXISTS (
                                        SELECT 1 FROM devices d
                                        WHERE d.major = p_major AND d.minor = v_candidate AND d.address <> p_address)
                                THEN
                                    v_minor := v_candidate;
                                    EXIT;
                                END IF;
                            END LOOP;
                        END IF;
                        EXIT WHEN v_minor IS NOT NULL;
                        UPDATE minor_blocks b SET used_up = true
                        WHERE b.major = p_major AND b.first_minor = v_block.first_minor AND b.bench_id = p_bench;
                    END LOOP;
                END IF;
                IF v_minor IS NULL THEN
                    UPDATE minor_blocks b SET bench_id = p_bench, leased_at = p_at, returned_at = NULL
                    WHERE b.major = p_major AND b.first_minor = (
                        SELECT f.first_minor FROM minor_blocks f
                        WHERE f.major = p_major AND (f.bench_id IS NULL OR f.returned_at IS NOT NULL) AND NOT f.used_up
                        ORDER BY f.first_minor LIMIT 1 FOR UPDATE SKIP LOCKED);
                    IF FOUND THEN
                        v_leased := v_leased + 1;
                        CONTINUE;
                    END IF;
                    IF NOT EXISTS (SELECT 1 FROM minor_blocks b WHERE b.major = p_major) THEN
                        -- The major's blocks, made once, by whichever bench comes first.
                        INSERT INTO minor_blocks (major, first_minor, size)
                        SELECT p_major, f, p_size FROM generate_series(0, 65535, p_size) f ON CONFLICT DO NOTHING;
                        CONTINUE;
                    END IF;
                    -- Free blocks all being leased by others this instant: again.
                    CONTINUE WHEN EXISTS (
                        SELECT 1 FROM minor_blocks f
                        WHERE f.major = p_major AND (f.bench_id IS NULL OR f.returned_at IS NOT NULL) AND NOT f.used_up);
                    SELECT s INTO v_minor FROM generate_series(1, 65535) s
                    WHERE NOT EXISTS (SELECT 1 FROM identity_claims c WHERE c.major = p_major AND c.minor = s)
                        AND NOT EXISTS (
                            SELECT 1 FROM devices d WHERE d.major = p_major AND d.minor = s AND d.address <> p_address)
                    LIMIT 1;
                    IF v_minor IS NULL THEN
                        RETURN QUERY SELECT 'full'::text, NULL::bigint, v_leased;
                        RETURN;
                    END IF;
                END IF;
                IF v_elsewhere THEN
                    -- The device's claim is under another major: moved here
                    -- (benches have no DELETE right).
                    BEGIN
                        UPDATE identity_claims c SET major = p_major, minor = v_minor, bench_id = p_bench, claimed_at = p_at
                        WHERE c.address = p_address AND c.major <> p_major;
                        IF FOUND THEN
                            RETURN QUERY SELECT 'claimed'::text, v_minor, v_leased;
                            RETURN;
                        END IF;
                    EXCEPTION WHEN unique_violation THEN
                        NULL;
                    END;
                    CONTINUE;
                END IF;
                INSERT INTO identity_claims (major, minor, address, bench_id, claimed_at)
                VALUES (p_major, v_minor, p_address, p_bench, p_at) ON CONFLICT DO NOTHING;
                IF FOUND THEN
                    RETURN QUERY SELECT 'claimed'::text, v_minor, v_leased;
                    RETURN;
                END IF;
            END LOOP;
            RETURN QUERY SELECT 'busy'::text, NULL::bigint, v_leased;
        END
        $fn$;
        """

    /// The design before schema 9, kept for comparison (`beaconbench-bench
    /// office claims --design lock`): one claim per major at a time,
    /// fleet-wide, under `pg_advisory_xact_lock(72051900, major)` held for
    /// four round trips. Not to be mixed with block claims in one major
    /// (its next-above-the-highest choice does not look at blocks).
    static func claimLocked(
        on server: PostgresConnection, address: String, major: UInt16, preferred: UInt16, floor: UInt16, bench: String
    ) throws(SyncError) -> UInt16 {
        try server.transaction { () throws(SyncError) -> UInt16 in
            // One claim per major at a time, fleet-wide.
            try server.exec("SELECT pg_advisory_xact_lock(72051900, $1::int)", [String(major)])
            let majorText = String(major)
            // The server's claim for the device, checked: a minor outside
            // 0–65535 is refused (never narrowed, never written over).
            if let cell = try server.exec(
                "SELECT minor::text FROM identity_claims WHERE address = $1 AND major = $2", [address, majorText]
            ).first?.first {
                if let minor = try existingMinor(cell, address: address, major: major) { return minor }
            }
            func taken(_ minor: UInt16) throws(SyncError) -> Bool {
                let cell =
                    try server.exec(
                        """
                        SELECT EXISTS (SELECT 1 FROM identity_claims WHERE major = $1 AND minor = $2 AND address <> $3)
                            OR EXISTS (SELECT 1 FROM devices WHERE major = $1 AND minor = $2 AND address <> $3)
                        """, [majorText, String(minor), address]
                    ).first?.first ?? nil
                return cell == "t"
            }
            var chosen = preferred
            if try taken(preferred) {
                let cell =
                    try server.exec(
                        """
                        SELECT greatest(
                            (SELECT max(minor) FROM identity_claims WHERE major = $1),
                            (SELECT max(minor) FROM devices WHERE major = $1 AND address <> $2), $3::bigint)::text
                        """, [majorText, address, String(max(floor, preferred))]
                    ).first?.first ?? nil
                // At least the floor given. The next one up when there is
                // one; else (65535 taken, or a row no bench wrote: beyond
                // 65535) the gaps are searched.
                let highest = (try? PulledRows.integer(cell, "minor", in: 0...65534)) ?? nil
                if let highest {
                    chosen = UInt16(highest + 1)
                } else {
                    let gap =
                        try server.exec(
                            """
                            SELECT s FROM generate_series(1, 65535) s WHERE NOT EXISTS (
                                SELECT 1 FROM identity_claims c WHERE c.major = $1 AND c.minor = s)
                            AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.major = $1 AND d.minor = s AND d.address <> $2)
                            LIMIT 1
                            """, [majorText, address]
                        ).first?.first ?? nil
                    guard let minor = gap.flatMap({ UInt16($0) }) else {
                        throw SyncError("every minor under major \(major) is taken on the server")
                    }
                    chosen = minor
                }
            }
            // (No DELETE: a bench may sync with INSERT and UPDATE rights only.)
            try server.exec(
                """
                INSERT INTO identity_claims (major, minor, address, bench_id, claimed_at)
                VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (address) DO UPDATE SET major = excluded.major, minor = excluded.minor,
                    bench_id = excluded.bench_id, claimed_at = excluded.claimed_at
                """, [majorText, String(chosen), address, bench, Date().ISO8601Format()])
            return chosen
        }
    }
}
