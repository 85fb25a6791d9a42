import FoundationEssentials
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Which identity a device is meant to get, and why.
public struct IdentityPlan: Sendable, Equatable {
    public enum Minor: Sendable, Equatable {
        /// The next free minor under the major (a profile's `sequential`).
        case next
        /// The minor the beacon holds, when no other device has it.
        case keep
        /// This minor, or a refusal when another device has it.
        case fixed(UInt16)
    }
    public enum Source: Sendable, Equatable {
        /// The major is the profile's (`identity car`).
        case profile(String)
        /// The command or batch named the major (`identity major=250`).
        case explicit
    }
    public var major: UInt16
    public var minor: Minor
    public var source: Source

    public init(major: UInt16, minor: Minor, source: Source) {
        self.major = major
        self.minor = minor
        self.source = source
    }

    /// The profile whose identity this is, if it is one's.
    public var profileName: String? {
        if case .profile(let name) = source { return name }
        return nil
    }

    /// As the inventory's `identities.source` and `identities.profile` hold it.
    var columns: (source: String, profile: String?) {
        switch source {
        case .profile(let name): ("profile", name)
        case .explicit: ("explicit", nil)
        }
    }
}

/// The identity reserved for a device: unique in this inventory (the
/// `identities` table's primary key is the major and minor).
public struct IdentityReservation: Sendable, Equatable {
    public var identity: BeaconIdentity
    /// Why it is not what the plan alone would give (a duplicate repaired,
    /// a minor another device has), for the step's detail line.
    public var note: String?
}

/// Why no identity could be reserved.
public struct IdentityConflict: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// What the inventory says a device was meant to have.
public struct MeantIdentity: Sendable, Equatable {
    public var identity: BeaconIdentity
    /// `profile`, `explicit`, `found` (the device held it when the inventory
    /// first kept identities) or `server` (the shared server gave it).
    public var source: String
    public var profile: String?
}

extension Inventory {
    /// Reserves the identity a device is meant to get, under the inventory's
    /// write lock, before anything is written to the beacon: several
    /// processes on one inventory never hand out one major.minor twice.
    ///
    /// - A device that already has a reservation under the plan's major
    ///   keeps it (reruns are stable).
    /// - Otherwise a beacon that already holds the plan's major keeps its
    ///   minor (`next` and `keep`), unless another device is meant to have
    ///   it, holds it in the inventory or advertises it in range: then it is
    ///   the later one and gets the next free minor, and the note says so.
    /// - `fixed` takes that minor, or is refused when another device has it.
    /// - `proposed` (from a shared server) is taken when it is free here.
    /// - Parameters:
    ///   - holds: what the beacon holds now (just read).
    ///   - advertised: identities other beacons in range advertise.
    ///   - commit: false for a dry run: nothing is reserved.
    public func reserveIdentity(
        device: String, plan: IdentityPlan, holds current: BeaconIdentity, advertised: [String: BeaconIdentity] = [:],
        proposed: UInt16? = nil, run: Int64?, commit: Bool = true
    ) throws -> IdentityReservation {
        let address = device.uppercased()
        let major = Int64(plan.major)
        let foreign = advertised.filter { $0.key.uppercased() != address && $0.value.major == plan.major }
        return try database.inTransaction(rollingBack: !commit) {
            // Who else has (major, minor): meant for, held in the inventory, advertised.
            func holder(_ minor: UInt16) throws -> String? {
                if let row = try database.rows(
                    "SELECT device FROM identities WHERE major = ? AND minor = ? AND device <> ?",
                    [.integer(major), .integer(Int64(minor)), .text(address)]
                ).first {
                    return "meant for \(row[0].text ?? "?")"
                }
                if let row = try database.rows(
                    """
                    SELECT address FROM devices
                    WHERE major = ? AND minor = ? AND address <> ? AND forgotten_at IS NULL LIMIT 1
                    """,
                    [.integer(major), .integer(Int64(minor)), .text(address)]
                ).first {
                    return "held by \(row[0].text ?? "?")"
                }
                if let other = foreign.first(where: { $0.value.minor == minor }) {
                    return "advertised by \(other.key.uppercased())"
                }
                return nil
            }
            func next() throws -> UInt16 {
                // Only minors a beacon can hold count (a stored value out of
                // range is no minor: StoredValues.swift).
                let stored = max(
                    try database.rows(
                        "SELECT max(minor) FROM identities WHERE major = ? AND typeof(minor) = 'integer' AND minor BETWEEN 0 AND 65535",
                        [.integer(major)]
                    ).first?.first?.integer ?? 0,
                    try database.rows(
                        """
                        SELECT max(minor) FROM devices
                        WHERE major = ? AND address <> ? AND forgotten_at IS NULL AND typeof(minor) = 'integer' AND minor BETWEEN 0 AND 65535
                        """,
                        [.integer(major), .text(address)]
                    ).first?.first?.integer ?? 0,
                    Int64(foreign.values.map(\.minor).max() ?? 0))
                if stored < 65535 { return UInt16(stored + 1) }
                // The top is used: the lowest gap.
                for minor in UInt16(1)...UInt16.max where try holder(minor) == nil { return minor }
                throw IdentityConflict(description: "every minor under major \(plan.major) is taken")
            }
            let existing = try database.rows(
                "SELECT major, minor FROM identities WHERE device = ?", [.text(address)]
            ).first.flatMap { row -> BeaconIdentity? in
                // A reservation out of range is none: it is replaced.
                guard let major = row[0].integer.flatMap(UInt16.init(exactly:)),
                    let minor = row[1].integer.flatMap(UInt16.init(exactly:))
                else { return nil }
                return BeaconIdentity(major: major, minor: minor)
            }
            var chosen: UInt16
            var note: String?
            if let proposed, try holder(proposed) == nil {
                chosen = proposed
            } else if case .fixed(let minor) = plan.minor {
                if let other = try holder(minor) {
                    throw IdentityConflict(description: "identity \(plan.major).\(minor) is \(other)")
                }
                chosen = minor
            } else if let existing, existing.major == plan.major {
                chosen = existing.minor
            } else if current.major == plan.major || plan.minor == .keep {
                if let other = try holder(current.minor) {
                    chosen = try next()
                    note = "\(plan.major).\(current.minor) is \(other): given \(plan.major).\(chosen)"
                } else {
                    chosen = current.minor
                }
            } else {
                chosen = try next()
            }
            if let proposed, proposed != chosen, note == nil {
                note = "\(plan.major).\(proposed) from the server is \(try holder(proposed) ?? "taken") here"
            }
            let columns = plan.columns
            if existing != BeaconIdentity(major: plan.major, minor: chosen) {
                try database.run("DELETE FROM identities WHERE device = ?", [.text(address)])
                try ensureDeviceRow(address)
                try database.run(
                    """
                    INSERT INTO identities(major, minor, device, source, profile, run_id, reserved_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .integer(major), .integer(Int64(chosen)), .text(address),
                        .text(proposed == chosen ? "server" : columns.source), SQLiteValue(columns.profile),
                        SQLiteValue(run), .text(Self.timestamp(clock())),
                    ])
            }
            return IdentityReservation(identity: BeaconIdentity(major: plan.major, minor: chosen), note: note)
        }
    }

    /// The identity reserved for a device, if any.
    public func meantIdentity(_ device: String) throws -> MeantIdentity? {
        try database.rows(
            "SELECT major, minor, source, profile, device FROM identities WHERE device = ?",
            [.text(device.uppercased())]
        ).first.flatMap { meant($0) }
    }

    /// Every reservation, by device.
    public func meantIdentities() throws -> [String: MeantIdentity] {
        var result: [String: MeantIdentity] = [:]
        for row in try database.rows("SELECT major, minor, source, profile, device FROM identities") {
            if let meant = meant(row), let device = row[4].text { result[device] = meant }
        }
        return result
    }

    /// Columns: major, minor, source, profile, and the device. A row with
    /// a value that fails its check is none (logged).
    func meant(_ row: [SQLiteValue]) -> MeantIdentity? {
        var findings: [StoredFinding] = []
        defer { storedFindingLog.add(findings) }
        var check = RowCheck("identities", key: [row.count > 4 ? row[4] : .null])
        defer { findings += check.findings }
        let identity = DeviceRows.identity(row[0], row[1], &check)
        let source = check.text(row[2], "source", required: true)
        let profile = check.text(row[3], "profile")
        guard check.isClean, let identity, let source else { return nil }
        return MeantIdentity(identity: identity, source: source, profile: profile)
    }

    /// Minors under `major` this inventory knows, for a shared server's
    /// allocation to start above.
    public func highestMinor(major: UInt16) throws -> UInt16 {
        let value = max(
            try database.rows(
                "SELECT max(minor) FROM identities WHERE major = ? AND typeof(minor) = 'integer' AND minor BETWEEN 0 AND 65535",
                [.integer(Int64(major))]
            ).first?.first?.integer ?? 0,
            try database.rows(
                "SELECT max(minor) FROM devices WHERE major = ? AND forgotten_at IS NULL AND typeof(minor) = 'integer' AND minor BETWEEN 0 AND 65535",
                [.integer(Int64(major))]
            )
            .first?.first?.integer ?? 0)
        // Within 0–65535 by the queries.
        return UInt16(exactly: value) ?? 0
    }
}

extension Database {
    /// An IMMEDIATE transaction that is rolled back even when `body`
    /// succeeds (dry runs: the same decisions, nothing kept).
    func inTransaction<Result>(rollingBack: Bool, _ body: () throws -> Result) throws -> Result {
        guard rollingBack else { return try inTransaction(body) }
        try execute("BEGIN IMMEDIATE")
        defer { try? execute("ROLLBACK") }
        return try body()
    }
}

/// A fleet-wide registry of identities — the shared server benches sync
/// to — asked before a bench hands out a minor, so that two benches never
/// give one identity to two beacons while the server can be reached.
public protocol SharedIdentities: Sendable {
    /// Where it is, for messages (never with a password).
    var location: String { get }
    /// Claims an identity for `address` under `major`: the minor the server
    /// already has for it under that major; else `preferred` when no other
    /// device has it there; else a free minor the server gives (from the
    /// bench's leased block: `ServerIdentities`; a `preferred` of `floor`
    /// + 1, a sequential next one, is left to the block). `floor` is the
    /// highest minor the bench knows under the major.
    func claim(address: String, major: UInt16, preferred: UInt16, floor: UInt16) async throws -> UInt16
}
