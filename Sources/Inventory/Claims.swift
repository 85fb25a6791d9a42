import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// A process working on a device: the run, host and pid of its claim.
public struct ClaimHolder: Sendable, Equatable, CustomStringConvertible {
    public var run: Int64
    public var host: String
    public var pid: Int64

    public var description: String {
        "run \(run), pid \(pid)" + (host == ProcessInfo.processInfo.hostName ? "" : " on \(host)")
    }
}

extension Inventory {
    public enum Claim: Sendable, Equatable {
        /// This run holds the device now; `from` is a process that had it
        /// and is gone (it may have left the beacon connected).
        case claimed(from: ClaimHolder?)
        /// Another process that is still running works on it.
        case heldBy(ClaimHolder)
    }

    /// Claims a device for `run` under the write lock, so that two
    /// processes on one inventory never work on one beacon at once. A claim
    /// of a process that is gone (killed) is taken over.
    public func claimDevice(_ device: String, run: Int64) throws -> Claim {
        try claimDevice(device, run: run, beginning: nil).claim
    }

    /// `claimDevice`; when the device is claimed and `step` is given, that
    /// step's `running` row is begun in the claim's transaction (one commit
    /// for both; a kill after it leaves the step `interrupted` at the next
    /// open). Returns the row's id, nil when none was begun.
    public func claimDevice(
        _ device: String, run: Int64, beginning step: String?
    ) throws -> (claim: Claim, row: Int64?) {
        let address = device.uppercased()
        let host = ProcessInfo.processInfo.hostName
        let pid = Int64(getpid())
        return try database.inTransaction {
            let row = try database.rows(
                """
                SELECT c.run_id, c.host, c.pid, r.status FROM claims c LEFT JOIN runs r ON r.id = c.run_id
                WHERE c.device = ?
                """, [.text(address)]
            ).first
            var previous: ClaimHolder?
            if let row, let holderRun = row[0].integer, let holderPID = row[2].integer {
                let holder = ClaimHolder(run: holderRun, host: row[1].text ?? "", pid: holderPID)
                if holderRun != run, Self.isAlive(holder), row[3] == .text("running") { return (.heldBy(holder), nil) }
                if holderRun != run { previous = holder }
            }
            try ensureDeviceRow(address)
            try database.run(
                """
                INSERT INTO claims(device, run_id, host, pid, claimed_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT(device) DO UPDATE SET run_id = excluded.run_id, host = excluded.host, pid = excluded.pid,
                    claimed_at = excluded.claimed_at
                """, [.text(address), .integer(run), .text(host), .integer(pid), .text(Self.timestamp(clock()))])
            guard let step else { return (.claimed(from: previous), nil) }
            try database.run(
                "INSERT INTO outcomes(run_id, device, step, status, started_at) VALUES (?, ?, ?, 'running', ?)",
                [.integer(run), .text(address), .text(step), .text(Self.timestamp(clock()))])
            return (.claimed(from: previous), database.lastInsertRowID)
        }
    }

    /// A `devices` row for an address (the rows that name it refer to it),
    /// made with nothing known but the address when there is none. A
    /// forgotten device worked on again is remembered (`forgotten_at`
    /// cleared).
    func ensureDeviceRow(_ address: String) throws {
        let now = Self.timestamp(clock())
        try database.run(
            """
            INSERT INTO devices(address, mac_ending, first_seen, last_seen) VALUES (?, ?, ?, ?)
            ON CONFLICT(address) DO UPDATE SET forgotten_at = NULL WHERE forgotten_at IS NOT NULL
            """, [.text(address), .text(DeviceRecord(address: address).macEnding), .text(now), .text(now)])
    }

    /// Ends this run's claim on a device.
    public func releaseDevice(_ device: String, run: Int64) throws {
        try database.run(
            "DELETE FROM claims WHERE device = ? AND run_id = ?", [.text(device.uppercased()), .integer(run)])
    }

    /// Claims left by processes that are gone: their devices may still be
    /// connected (bluetoothd keeps a dead client's links).
    public func abandonedClaims() throws -> [String: ClaimHolder] {
        var result: [String: ClaimHolder] = [:]
        for row in try database.rows(
            "SELECT c.device, c.run_id, c.host, c.pid, r.status FROM claims c LEFT JOIN runs r ON r.id = c.run_id")
        {
            guard let device = row[0].text, let run = row[1].integer, let pid = row[3].integer else { continue }
            let holder = ClaimHolder(run: run, host: row[2].text ?? "", pid: pid)
            if row[4] != .text("running") || !Self.isAlive(holder) { result[device] = holder }
        }
        return result
    }

    /// Whether the process of a claim or run still exists (same host: its
    /// pid answers; another host: assumed alive).
    static func isAlive(_ holder: ClaimHolder) -> Bool {
        guard holder.host == ProcessInfo.processInfo.hostName else { return true }
        if holder.pid == Int64(getpid()) { return true }
        // A stored pid that is no pid (out of pid_t's range) names no process.
        guard holder.pid > 0, let pid = pid_t(exactly: holder.pid) else { return false }
        return kill(pid, 0) == 0 || errno == EPERM
    }
}
