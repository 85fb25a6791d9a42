import FoundationEssentials
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// What a device is meant to hold: a profile, an identity rule and
/// per-device threshold overrides (schema 5, table `assignments`). Recorded
/// by `assign` without touching a beacon; a bench converges the beacon to it
/// when it sees it (`station`), and `drift` compares it with what was last
/// read back. docs/office.md.
public struct Assignment: Sendable, Equatable {
    /// How the minor is chosen.
    public enum MinorPolicy: String, Sendable, CaseIterable {
        /// The next free minor under the major (as a profile's `sequential`).
        case auto
        /// The minor the beacon holds, unless another device has it.
        case keep
        /// This minor (`minor`).
        case fixed
    }

    /// Where the assignment was made: on this bench, or pulled from the
    /// shared server (the office).
    public enum Source: String, Sendable, CaseIterable {
        case local, server
    }

    public var address: String
    public var profile: String
    /// nil: the profile's major.
    public var major: UInt16?
    public var minorPolicy: MinorPolicy
    /// Set when `minorPolicy` is `fixed`.
    public var minor: UInt16?
    public var overrides: ConfigOverrides
    public var assignedAt: String
    public var assignedBy: String
    public var source: Source
    /// When a bench last brought the beacon to it, and in which run.
    public var convergedAt: String?
    public var convergedRun: Int64?

    public init(
        address: String, profile: String, major: UInt16? = nil, minorPolicy: MinorPolicy = .auto,
        minor: UInt16? = nil, overrides: ConfigOverrides = ConfigOverrides(), assignedAt: String,
        assignedBy: String, source: Source = .local
    ) {
        self.address = address.uppercased()
        self.profile = profile
        self.major = major
        self.minorPolicy = minorPolicy
        self.minor = minor
        self.overrides = overrides
        self.assignedAt = assignedAt
        self.assignedBy = assignedBy
        self.source = source
    }

    /// `car 100.auto`, `van 250.7 cornering=300`.
    public var summary: String {
        let majorText = major.map(String.init) ?? "profile"
        let minorText = minorPolicy == .fixed ? minor.map(String.init) ?? "?" : minorPolicy.rawValue
        let extra = overrides.isEmpty ? "" : " " + overrides.description
        return "\(profile) major=\(majorText) minor=\(minorText)\(extra)"
    }

    /// The thresholds it means: the profile's with the overrides.
    public func config(_ profile: Profile) -> DrivingBehaviourConfig { overrides.applied(to: profile.config) }

    /// The identity it means, as the fleet runner reserves and writes it;
    /// nil when neither it nor the profile names a major.
    public func identityPlan(_ profile: Profile) -> IdentityPlan? {
        guard let chosen = major ?? profile.identity?.major else { return nil }
        let plan: IdentityPlan.Minor =
            switch minorPolicy {
            case .auto: .next
            case .keep: .keep
            case .fixed: .fixed(minor ?? 0)
            }
        return IdentityPlan(major: chosen, minor: plan, source: major == nil ? .profile(profile.name) : .explicit)
    }
}

extension Assignment {
    /// An `assignments` row (address, profile, major, minor_policy, minor,
    /// overrides, assigned_at, assigned_by, source, converged_at,
    /// converged_run) as stored, checked: a row with any value that fails
    /// is left out (a bench never converges a beacon to part of an
    /// assignment) and each failure added to `findings`.
    public static func stored(_ row: [SQLiteValue], findings: inout [StoredFinding]) -> Assignment? {
        var check = RowCheck("assignments", key: [row[0]])
        defer { findings += check.findings }
        let address = check.text(row[0], "address", required: true)
        let profile = check.text(row[1], "profile", required: true)
        let major = check.integer(row[2], "major", as: UInt16.self)
        let policy = check.text(row[3], "minor_policy", required: true).flatMap(MinorPolicy.init(rawValue:))
        let minor = check.integer(row[4], "minor", as: UInt16.self)
        var overrides: ConfigOverrides?
        if let json = check.text(row[5], "overrides", required: true) {
            switch ConfigOverrides.checked(json: json) {
            case .success(let value): overrides = value
            case .failure(let error): check.fail("overrides", row[5], error.description)
            }
        }
        let assignedAt = check.text(row[6], "assigned_at", required: true)
        let assignedBy = check.text(row[7], "assigned_by", required: true)
        let source = check.text(row[8], "source", required: true).flatMap(Source.init(rawValue:))
        let convergedAt = check.text(row[9], "converged_at")
        let convergedRun = check.integer(row[10], "converged_run")
        if let policy, (policy == .fixed) != (minor != nil), check.isClean {
            check.fail(
                "minor", row[4],
                policy == .fixed ? "is missing for minor_policy fixed" : "is set, minor_policy is not fixed")
        }
        guard check.isClean, let address, let profile, let policy, let overrides, let assignedAt, let assignedBy,
            let source
        else { return nil }
        var assignment = Assignment(
            address: address, profile: profile, major: major, minorPolicy: policy, minor: minor, overrides: overrides,
            assignedAt: assignedAt, assignedBy: assignedBy, source: source)
        assignment.convergedAt = convergedAt
        assignment.convergedRun = convergedRun
        return assignment
    }
}

/// Per-device thresholds that replace a profile's (`cornering=300`).
public struct ConfigOverrides: Sendable, Equatable, CustomStringConvertible {
    public var cornering: UInt16?
    public var braking: UInt16?
    public var acceleration: UInt16?
    public var duration: UInt16?

    public init(cornering: UInt16? = nil, braking: UInt16? = nil, acceleration: UInt16? = nil, duration: UInt16? = nil)
    {
        self.cornering = cornering
        self.braking = braking
        self.acceleration = acceleration
        self.duration = duration
    }

    /// The keys `assign` takes, with their ranges (the profiles' rule).
    public static var keys: [(name: String, range: ClosedRange<UInt16>, unit: String)] { ProfileLoader.overrideKeys }

    public var isEmpty: Bool { cornering == nil && braking == nil && acceleration == nil && duration == nil }

    var pairs: [(String, UInt16?)] {
        [("cornering", cornering), ("braking", braking), ("acceleration", acceleration), ("duration", duration)]
    }

    /// Sets `key` (one of `keys`); false for another key.
    public mutating func set(_ key: String, _ value: UInt16) -> Bool {
        switch key {
        case "cornering": cornering = value
        case "braking": braking = value
        case "acceleration": acceleration = value
        case "duration": duration = value
        default: return false
        }
        return true
    }

    public func applied(to config: DrivingBehaviourConfig) -> DrivingBehaviourConfig {
        var result = config
        result.cornering = cornering ?? result.cornering
        result.braking = braking ?? result.braking
        result.acceleration = acceleration ?? result.acceleration
        result.duration = duration ?? result.duration
        return result
    }

    /// `cornering=300 duration=400`.
    public var description: String {
        pairs.compactMap { name, value in value.map { "\(name)=\($0)" } }.joined(separator: " ")
    }

    /// As stored: a JSON object of the keys set, in a fixed order
    /// (`{"cornering":300}`).
    public var json: String {
        "{" + pairs.compactMap { name, value in value.map { "\"\(name)\":\($0)" } }.joined(separator: ",") + "}"
    }

    /// Reads stored JSON strictly (`ProfileLoader.parseOverrides`): what
    /// a value from outside the bench (the shared server) must pass.
    /// - Throws: `ProfileError` naming the key and the rule.
    public init(checkedJSON json: String, source: String) throws(ProfileError) {
        self.init()
        for (key, value) in try ProfileLoader.parseOverrides(json, source: source) { _ = set(key, value) }
    }

    /// Reads the stored JSON; anything that fails `checked(json:)` reads
    /// as no override.
    public init(json: String) {
        self = (try? Self.checked(json: json).get()) ?? ConfigOverrides()
    }

    /// Reads the stored JSON strictly, by the one rule for overrides
    /// (`ProfileLoader.parseOverrides`: a profile's JSON syntax, known keys
    /// once each, whole numbers in their ranges); else why not.
    public static func checked(json: String) -> Result<ConfigOverrides, OverridesError> {
        do {
            return .success(try ConfigOverrides(checkedJSON: json, source: "overrides"))
        } catch {
            return .failure(
                OverridesError(
                    description: error.keyPath.isEmpty ? error.message : "\(error.keyPath): \(error.message)"))
        }
    }

    public struct OverridesError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }
}

/// One field where a device's last observed state differs from its
/// desired state.
public struct DriftFinding: Sendable, Equatable {
    public var device: String
    /// `profile`, `cornering`, `braking`, `acceleration`, `duration`,
    /// `enable`, `major`, `minor`, or `config` / `identity` when never read.
    public var field: String
    public var desired: String
    /// nil: never observed.
    public var observed: String?
    /// When the observed value was read (nil: never).
    public var observedAt: String?

    public init(device: String, field: String, desired: String, observed: String?, observedAt: String?) {
        self.device = device
        self.field = field
        self.desired = desired
        self.observed = observed
        self.observedAt = observedAt
    }
}

/// What was last observed of an assigned device, with when.
public struct ObservedState: Sendable, Equatable {
    public var profile: String?
    public var config: DrivingBehaviourConfig?
    public var configReadAt: String?
    public var identity: BeaconIdentity?
    public var identityAt: String?
    /// The identity reserved for it (`identities`), if any.
    public var meant: BeaconIdentity?

    public init() {}

    /// From a row of: profile, config_cornering, config_braking,
    /// config_acceleration, config_duration, config_enable, config_read_at,
    /// major, minor, identity_at, and the major and minor meant for it
    /// (the SQLite inventory and the server select these in this order).
    ///
    /// Each value is checked (`RowCheck`): one that fails reads as unknown
    /// and is added to `findings` (the `devices` row, and the `identities`
    /// row of the meant identity, keyed by `address`).
    public init(row: [SQLiteValue], address: SQLiteValue, findings: inout [StoredFinding]) {
        var check = RowCheck("devices", key: [address])
        var reserved = RowCheck("identities", key: [address])
        defer { findings += check.findings + reserved.findings }
        profile = check.text(row[0], "profile")
        if let config = DeviceRows.config(row[1...5], &check) {
            self.config = config
            configReadAt = check.value(row[6], "config_read_at")?.text
        }
        if let identity = DeviceRows.identity(row[7], row[8], &check) {
            self.identity = identity
            identityAt = check.value(row[9], "identity_at")?.text
        }
        meant = DeviceRows.identity(row[10], row[11], &reserved)
    }

    /// As `init(row:address:findings:)`, the findings dropped.
    public init(row: [SQLiteValue]) {
        var findings: [StoredFinding] = []
        self.init(row: row, address: .null, findings: &findings)
    }
}

public enum DesiredState {
    /// The fields where `observed` differs from `assignment`, field by
    /// field. A profile that does not exist is one finding (`profile`,
    /// observed "no such profile").
    public static func drift(
        _ assignment: Assignment, _ observed: ObservedState?, profiles: [String: Profile]
    ) -> [DriftFinding] {
        let device = assignment.address
        guard let profile = profiles[assignment.profile] else {
            return [
                DriftFinding(
                    device: device, field: "profile", desired: assignment.profile,
                    observed: "no such profile here", observedAt: nil)
            ]
        }
        var findings: [DriftFinding] = []
        let observed = observed ?? ObservedState()
        func add(_ field: String, _ desired: String, _ seen: String?, _ at: String?) {
            findings.append(
                DriftFinding(device: device, field: field, desired: desired, observed: seen, observedAt: at))
        }
        let want = assignment.config(profile)
        if let config = observed.config {
            let at = observed.configReadAt
            if observed.profile != assignment.profile { add("profile", assignment.profile, observed.profile, at) }
            let pairs: [(String, UInt16, UInt16)] = [
                ("cornering", want.cornering, config.cornering), ("braking", want.braking, config.braking),
                ("acceleration", want.acceleration, config.acceleration), ("duration", want.duration, config.duration),
                ("enable", want.enable.rawValue, config.enable.rawValue),
            ]
            for (name, desired, seen) in pairs where desired != seen { add(name, "\(desired)", "\(seen)", at) }
        } else {
            add("config", "\(want)", nil, nil)
        }
        if let plan = assignment.identityPlan(profile) {
            if let identity = observed.identity {
                let at = observed.identityAt
                if identity.major != plan.major { add("major", "\(plan.major)", "\(identity.major)", at) }
                switch plan.minor {
                case .fixed(let minor) where identity.minor != minor:
                    add("minor", "\(minor)", "\(identity.minor)", at)
                case .next, .keep:
                    // Any free minor will do; the one reserved for it, when
                    // there is one, is the one meant.
                    if let meant = observed.meant, meant.major == plan.major, meant.minor != identity.minor,
                        identity.major == plan.major
                    {
                        add("minor", "\(meant.minor)", "\(identity.minor)", at)
                    }
                default: break
                }
            } else {
                add(
                    "identity", "\(plan.major).\(assignment.minorPolicy == .fixed ? "\(assignment.minor ?? 0)" : "*")",
                    nil, nil)
            }
        }
        return findings
    }
}

extension Inventory {
    /// Whether the file has schema 5's `assignments`.
    func hasAssignments() throws -> Bool { try database.userVersion >= 5 }

    /// Records `assignments` in one transaction: each replaces the
    /// device's earlier one (returned, to be reported). Nothing is touched
    /// on a beacon.
    @discardableResult
    public func assign(_ assignments: [Assignment]) throws -> [Assignment] {
        try database.inTransaction {
            var replaced: [Assignment] = []
            for assignment in assignments {
                if let earlier = try assignmentRows(assignment.address).first { replaced.append(earlier) }
                try database.run(
                    """
                    INSERT INTO assignments(address, profile, major, minor_policy, minor, overrides, assigned_at,
                                            assigned_by, source, converged_at, converged_run)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)
                    ON CONFLICT(address) DO UPDATE SET
                        profile = excluded.profile, major = excluded.major, minor_policy = excluded.minor_policy,
                        minor = excluded.minor, overrides = excluded.overrides, assigned_at = excluded.assigned_at,
                        assigned_by = excluded.assigned_by, source = excluded.source, converged_at = NULL,
                        converged_run = NULL
                    """,
                    [
                        .text(assignment.address), .text(assignment.profile), SQLiteValue(assignment.major),
                        .text(assignment.minorPolicy.rawValue), SQLiteValue(assignment.minor),
                        .text(assignment.overrides.json), .text(assignment.assignedAt), .text(assignment.assignedBy),
                        .text(assignment.source.rawValue),
                    ])
            }
            return replaced
        }
    }

    /// Every assignment, by address order (none in a file before schema 5).
    public func assignments() throws -> [Assignment] {
        guard try hasAssignments() else { return [] }
        return try assignmentRows(nil)
    }

    /// The device's assignment, if it has one.
    public func assignment(for address: String) throws -> Assignment? {
        guard try hasAssignments() else { return nil }
        return try assignmentRows(address.uppercased()).first
    }

    /// The columns `Assignment.stored` reads, for a `FROM assignments …` to follow.
    private static let assignmentColumns = """
        SELECT address, profile, major, minor_policy, minor, overrides, assigned_at, assigned_by, source,
               converged_at, converged_run
        """

    /// The assignments this bench's ledger covers, by address order: those
    /// made here and those converged here (docs/ledger.md, "What is
    /// covered"), without the pulled rows it holds for the rest of the
    /// fleet, which are O(fleet).
    public func coveredAssignments() throws -> [Assignment] {
        guard try hasAssignments() else { return [] }
        let rows = try database.rows(
            Self.assignmentColumns
                + " FROM assignments WHERE source = 'local' OR converged_at IS NOT NULL ORDER BY address")
        return checked(rows, Assignment.stored)
    }

    /// The assignments this bench holds of `addresses` (in capitals), by
    /// address order, in one query.
    public func assignments(of addresses: [String]) throws -> [Assignment] {
        guard try hasAssignments(), !addresses.isEmpty else { return [] }
        let list = (try? JSONEncoder().encode(addresses)).map { String(decoding: $0, as: UTF8.self) } ?? "[]"
        let rows = try database.rows(
            Self.assignmentColumns
                + " FROM assignments WHERE address IN (SELECT value FROM json_each(?)) ORDER BY address",
            [.text(list)])
        return checked(rows, Assignment.stored)
    }

    private func assignmentRows(_ address: String?) throws -> [Assignment] {
        let rows = try database.rows(
            Self.assignmentColumns + " FROM assignments WHERE ? IS NULL OR address = ? ORDER BY address",
            [SQLiteValue(address), SQLiteValue(address)])
        return checked(rows, Assignment.stored)
    }

    /// Takes assignments pulled from the shared server in one transaction:
    /// each replaces the device's own (which lost under the conflict rule,
    /// or is older); none of them is converged here yet. The rows taken
    /// are not ledger entries (the server holds them, with their history:
    /// docs/ledger.md, "What is covered"); an own or converged row
    /// replaced is one, a `delete` (event `sync`).
    public func takeAssignments(_ assignments: [Assignment]) throws {
        guard !assignments.isEmpty else { return }
        try database.inTransaction {
            for assignment in assignments {
                try database.run(
                    """
                    INSERT INTO assignments(address, profile, major, minor_policy, minor, overrides, assigned_at,
                                            assigned_by, source, converged_at, converged_run)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'server', NULL, NULL)
                    ON CONFLICT(address) DO UPDATE SET
                        profile = excluded.profile, major = excluded.major, minor_policy = excluded.minor_policy,
                        minor = excluded.minor, overrides = excluded.overrides, assigned_at = excluded.assigned_at,
                        assigned_by = excluded.assigned_by, source = 'server', converged_at = NULL,
                        converged_run = NULL
                    """,
                    [
                        .text(assignment.address), .text(assignment.profile), SQLiteValue(assignment.major),
                        .text(assignment.minorPolicy.rawValue), SQLiteValue(assignment.minor),
                        .text(assignment.overrides.json), .text(assignment.assignedAt), .text(assignment.assignedBy),
                    ])
            }
        }
    }

    /// Records that `run` brought the device to its assignment.
    public func markConverged(_ address: String, run: Int64) throws {
        guard try hasAssignments() else { return }
        try database.run(
            "UPDATE assignments SET converged_at = ?, converged_run = ? WHERE address = ?",
            [.text(Self.timestamp(clock())), .integer(run), .text(address.uppercased())])
    }

    /// What was last observed of each assigned device, with when.
    public func observedStates() throws -> [String: ObservedState] {
        guard try hasAssignments() else { return [:] }
        let rows = try database.rows(
            """
            SELECT a.address, d.profile, d.config_cornering, d.config_braking, d.config_acceleration,
                   d.config_duration, d.config_enable, d.config_read_at, d.major, d.minor, d.identity_at,
                   i.major, i.minor, d.address
            FROM assignments a LEFT JOIN devices d ON d.address = a.address
            LEFT JOIN identities i ON i.device = a.address
            """)
        var states: [String: ObservedState] = [:]
        var findings: [StoredFinding] = []
        for row in rows {
            guard let address = row[0].text, StoredRule.isAddress(address), row[13].text != nil else { continue }
            states[address] = ObservedState(row: Array(row[1...12]), address: row[0], findings: &findings)
        }
        storedFindingLog.add(findings)
        return states
    }

    /// The drift of every assigned device this bench has seen, device by
    /// device; `unseen`: assigned devices it never saw (pending here, not
    /// drifting: another bench may have converged them).
    public func drift(profiles: [String: Profile]) throws -> (findings: [DriftFinding], assigned: Int, unseen: Int) {
        let observed = try observedStates()
        let assignments = try assignments()
        let seen = assignments.filter { observed[$0.address] != nil }
        return (
            seen.flatMap { DesiredState.drift($0, observed[$0.address], profiles: profiles) }, assignments.count,
            assignments.count - seen.count
        )
    }

    /// ISO 8601 UTC with milliseconds, as every time in the inventory.
    public static func now() -> String { timestamp(Date()) }
}
