import FoundationEssentials

/// A live block of minors on the server (`minor_blocks`, schema 9): leased
/// by a bench, neither used up nor returned. What the office lists
/// (`identities blocks`) and gives back (`identities return-blocks`).
public struct LiveMinorBlock: Sendable, Equatable {
    /// The bench that holds it (as stored, made safe to show: `StoredText`).
    public var bench: String
    public var major: Int64
    public var firstMinor: Int64
    public var size: Int64
    /// Minors of the block claimed on the server (`identity_claims`), by
    /// any bench: they stay claimed when the block goes back.
    public var claimed: Int
    /// When it was leased (as stored, made safe to show), nil when unset.
    public var leasedAt: String?

    public init(bench: String, major: Int64, firstMinor: Int64, size: Int64, claimed: Int, leasedAt: String?) {
        self.bench = bench
        self.major = major
        self.firstMinor = firstMinor
        self.size = size
        self.claimed = claimed
        self.leasedAt = leasedAt
    }
}

/// The office's hand on leased blocks of minors (docs/office.md, "Identity
/// claims under contention", "Leaked blocks"): a bench killed, retired or
/// never synced again keeps its live blocks until they are given back.
///
/// Giving a block back is safe at any moment, even while its bench claims
/// from it: nothing here relies on the bench being idle. A claim is a row
/// of `identity_claims`, whose primary key (major, minor) lets no second
/// device have a minor, and a bench that leases a returned block claims
/// above the block's highest claimed minor, or in a gap where
/// `identity_claims` holds no row (`beaconbench_claim_identity`). A claim
/// the old bench committed before the return is seen by the next lessee
/// and skipped; one in flight (inserted, not committed) makes the next
/// lessee's insert of that minor wait for it and, once committed, find it
/// taken (`ON CONFLICT DO NOTHING`) and take the next. So no row lock is
/// taken beyond the UPDATE's own, and a bench mid-claim is not waited for.
public enum ServerMinorBlocks {
    /// The outcome of `giveBack`.
    public struct Return: Sendable {
        /// The bench asked about, as given.
        public var bench: String
        /// Its live blocks: returned, or (a dry run) those that would be.
        public var blocks: [LiveMinorBlock]
        /// The time written as their `returned_at` (nil: a dry run).
        public var returnedAt: String?

        public init(bench: String, blocks: [LiveMinorBlock], returnedAt: String?) {
            self.bench = bench
            self.blocks = blocks
            self.returnedAt = returnedAt
        }
    }

    /// The server's live blocks, by bench, major and first minor: every
    /// bench's, or `bench`'s alone. Reads only.
    public static func live(url: String, bench: String? = nil) throws(SyncError) -> [LiveMinorBlock] {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        return try readBlocks(
            server,
            """
            SELECT b.bench_id, b.major::text, b.first_minor::text, b.size::text, b.leased_at, (
                SELECT count(*) FROM identity_claims c
                WHERE c.major = b.major AND c.minor BETWEEN b.first_minor AND b.first_minor + b.size - 1)::text
            FROM minor_blocks b
            WHERE b.bench_id IS NOT NULL AND b.returned_at IS NULL AND NOT b.used_up
                AND ($1::text IS NULL OR b.bench_id = $1)
            ORDER BY b.bench_id, b.major, b.first_minor
            """, [bench])
    }

    /// Gives back `bench`'s live blocks, in one statement in one
    /// transaction: `returned_at` set on every block of the bench that is
    /// neither returned nor used up. Their free minors can be leased again
    /// by any bench; the minors claimed in them stay claimed (see the type's
    /// note on claims under way). A dry run reads the same blocks and
    /// changes nothing.
    /// - Returns: nil when the server knows no bench of that id (in
    ///   `benches` or `minor_blocks`): nothing was changed.
    public static func giveBack(url: String, bench: String, dryRun: Bool) throws(SyncError) -> Return? {
        let server = try PostgresConnection(url)
        try InventorySync.prepareSchema(server, creating: false)
        return try server.transaction { () throws(SyncError) -> Return? in
            let known =
                try server.exec(
                    """
                    SELECT EXISTS (SELECT 1 FROM benches WHERE bench_id = $1)
                        OR EXISTS (SELECT 1 FROM minor_blocks WHERE bench_id = $1)
                    """, [bench]
                ).first?.first ?? nil
            guard known == "t" else { return nil }
            if dryRun {
                let blocks = try readBlocks(
                    server,
                    """
                    SELECT r.bench_id, r.major::text, r.first_minor::text, r.size::text, r.leased_at,
                        (SELECT count(*) FROM identity_claims c
                        WHERE c.major = r.major AND c.minor BETWEEN r.first_minor AND r.first_minor + r.size - 1)::text
                    FROM minor_blocks r WHERE r.bench_id = $1 AND r.returned_at IS NULL AND NOT r.used_up
                    ORDER BY r.major, r.first_minor
                    """, [bench])
                return Return(bench: bench, blocks: blocks, returnedAt: nil)
            }
            let now = Date().ISO8601Format()
            let blocks = try readBlocks(
                server,
                """
                WITH r AS (
                    UPDATE minor_blocks b SET returned_at = $2
                    WHERE b.bench_id = $1 AND b.returned_at IS NULL AND NOT b.used_up
                    RETURNING b.bench_id, b.major, b.first_minor, b.size, b.leased_at)
                SELECT r.bench_id, r.major::text, r.first_minor::text, r.size::text, r.leased_at,
                    (SELECT count(*) FROM identity_claims c
                        WHERE c.major = r.major AND c.minor BETWEEN r.first_minor AND r.first_minor + r.size - 1)::text
                FROM r ORDER BY r.major, r.first_minor
                """, [bench, now])
            return Return(bench: bench, blocks: blocks, returnedAt: now)
        }
    }

    /// The rows of a block query (bench, major, first minor, size,
    /// leased_at, claimed), each cell checked; a row that is not a block
    /// beaconbench wrote (a minor outside 0–65535, a size outside 1–65536)
    /// is refused, naming it.
    static func readBlocks(
        _ server: PostgresConnection, _ sql: String, _ parameters: [String?]
    ) throws(SyncError) -> [LiveMinorBlock] {
        var blocks: [LiveMinorBlock] = []
        for row in try server.exec(sql, parameters) {
            let cell = { (index: Int) in index < row.count ? row[index] : nil }
            let bench = StoredText.shown(cell(0) ?? "", limit: 120)
            guard let major = cell(1).flatMap({ Int64($0) }), (0...65535).contains(major),
                let first = cell(2).flatMap({ Int64($0) }), (0...65535).contains(first),
                let size = cell(3).flatMap({ Int64($0) }), (1...65536).contains(size),
                let claimed = cell(5).flatMap({ Int($0) })
            else {
                throw SyncError(
                    "minor_blocks holds a block of bench \(bench) that beaconbench did not write: major"
                        + " \(PulledRows.shown(cell(1) ?? "NULL")), first minor \(PulledRows.shown(cell(2) ?? "NULL")),"
                        + " size \(PulledRows.shown(cell(3) ?? "NULL")) (nothing was changed)")
            }
            blocks.append(
                LiveMinorBlock(
                    bench: bench, major: major, firstMinor: first, size: size, claimed: claimed,
                    leasedAt: cell(4).map { StoredText.shown($0, limit: 64) }))
        }
        return blocks
    }
}
