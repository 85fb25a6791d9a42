import Dispatch
import FoundationEssentials
import Inventory
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The shared server as the fleet's identity registry (`identity_claims`):
/// a bench claims a device's major.minor there, under an advisory lock per
/// major, before writing it, so that no two benches that can reach the
/// server hand out one identity. One connection, made at the first claim
/// (3 s to connect unless PGCONNECT_TIMEOUT says otherwise), used by one
/// claim at a time.
public final class ServerIdentities: SharedIdentities, Sendable {
    public let location: String
    let conninfo: String
    let benchID: String
    private let connection = Mutex<PostgresConnection?>(nil)

    public init(url: String, benchID: String) {
        conninfo = url
        self.benchID = benchID
        location = PostgresConnection.describe(url)
    }

    /// What an inventory remembers of the server it synced to: the
    /// connection string without its password.
    public static func rememberable(_ url: String) -> String? { PostgresConnection.withoutPassword(url) }

    public func claim(address: String, major: UInt16, preferred: UInt16, floor: UInt16) async throws -> UInt16 {
        // libpq blocks (connecting, waiting for the advisory lock): on a
        // thread of its own, never on the caller's — a fleet run's is the
        // bus connection's, which must keep reading bluetoothd.
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                continuation.resume(
                    with: Result {
                        try self.claimNow(address: address, major: major, preferred: preferred, floor: floor)
                    })
            }
        }
    }

    private func claimNow(address: String, major: UInt16, preferred: UInt16, floor: UInt16) throws -> UInt16 {
        try connection.withLock { held throws(SyncError) -> UInt16 in
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
            do {
                return try Self.claim(
                    on: server, address: address, major: major, preferred: preferred, floor: floor, bench: benchID)
            } catch let error as SyncError {
                if error.isConnectionFailure { held = nil }
                throw error
            } catch {
                throw SyncError("\(error)")
            }
        }
    }

    static func claim(
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
                do throws(PulledRows.Problem) {
                    if let minor = try PulledRows.identityPart(cell, "minor") { return minor }
                } catch {
                    throw SyncError(
                        "the server's identity claim for \(address) under major \(major) is refused: minor"
                            + " '\(PulledRows.shown(error.value ?? "NULL"))' \(error.reason) (identity_claims; fix or"
                            + " delete that row)")
                }
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
