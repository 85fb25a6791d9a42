import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// What `forget` did.
public struct ForgetReport: Sendable, Equatable {
    /// The addresses forgotten now, in the order given.
    public var forgotten: [String] = []
    /// Given names no device has (neither address nor MAC ending), as given.
    public var unknown: [String] = []
    /// Addresses already forgotten before (left as they were).
    public var alreadyForgotten: [String] = []
    /// MAC endings that several devices have, as given, with those
    /// addresses: none of them is forgotten (name the full address).
    public var ambiguous: [String: [String]] = [:]
    /// The history kept of the devices forgotten now (and already
    /// forgotten), row counts per kind: still in `log`, records and a sync.
    public var keptOutcomes = 0
    public var keptReadings = 0
    public var keptTrips = 0
    public var keptEvents = 0
    public var keptIncidents = 0
    /// Identity reservations released (the identities may be given again).
    public var releasedIdentities = 0

    public init() {}
}

extension Inventory {
    /// Forgets devices, in one transaction: they leave `devices()`,
    /// `device(_:)`, `auditSubjects()`, `deviceTable()` and the `new`
    /// selection (`devices.forgotten_at` is set), their identity
    /// reservation and claim are deleted so the identity can be given to
    /// another device, and their history — step outcomes, readings, trips,
    /// events, incidents — is kept. Seeing or working on a device again
    /// (`recordDevice`, a claim, a reservation) brings it back.
    ///
    /// Each name is an address or a MAC ending, resolved as `device(_:)`
    /// does, except that an ending several devices share is reported
    /// `ambiguous` and nothing of it is forgotten.
    public func forget(_ addresses: [String]) throws -> ForgetReport {
        let now = Self.timestamp(clock())
        return try database.inTransaction {
            var report = ForgetReport()
            var kept: [String] = []
            for name in addresses {
                let matches = try database.rows(
                    """
                    SELECT address, forgotten_at FROM devices WHERE address = upper(?1) OR mac_ending = lower(?1)
                    ORDER BY address
                    """, [.text(name)])
                let exact = matches.first { $0[0].text == name.uppercased() }
                let rows = exact.map { [$0] } ?? matches
                guard let row = rows.first, let address = row[0].text else {
                    report.unknown.append(name)
                    continue
                }
                if rows.count > 1 {
                    report.ambiguous[name] = rows.compactMap { $0[0].text }
                    continue
                }
                if kept.contains(address) { continue }
                kept.append(address)
                if row[1].text != nil {
                    report.alreadyForgotten.append(address)
                } else {
                    try database.run(
                        "UPDATE devices SET forgotten_at = ? WHERE address = ?", [.text(now), .text(address)])
                    report.forgotten.append(address)
                }
                report.releasedIdentities += try database.run(
                    "DELETE FROM identities WHERE device = ?", [.text(address)])
                try database.run("DELETE FROM claims WHERE device = ?", [.text(address)])
                let counts =
                    try database.rows(
                        """
                        SELECT (SELECT count(*) FROM outcomes WHERE device = ?1),
                               (SELECT count(*) FROM readings WHERE device = ?1),
                               (SELECT count(*) FROM trips WHERE device = ?1),
                               (SELECT count(*) FROM events WHERE device = ?1),
                               (SELECT count(*) FROM incidents WHERE device = ?1)
                        """, [.text(address)]
                    ).first?.map { Int($0.integer ?? 0) } ?? [0, 0, 0, 0, 0]
                report.keptOutcomes += counts[0]
                report.keptReadings += counts[1]
                report.keptTrips += counts[2]
                report.keptEvents += counts[3]
                report.keptIncidents += counts[4]
            }
            return report
        }
    }

    /// The devices forgotten, by address, with when (`forgotten_at`).
    public func forgottenDevices() throws -> [(address: String, forgottenAt: Date)] {
        guard try hasSchema4() else { return [] }
        return try database.rows(
            "SELECT address, forgotten_at FROM devices WHERE forgotten_at IS NOT NULL ORDER BY address"
        ).map { ($0[0].text ?? "", Self.date($0[1])) }
    }
}
