import FoundationEssentials
import Inventory
import InventorySync
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The office's whole-fleet reads from a server inventory, streamed
/// (issue 31; docs/office.md, "The office's reads"): `inventory list`,
/// `drift` and `audit` read cursors of one snapshot (`OfficeStreams`) and
/// write each row as it is folded — what they hold is counters and a
/// batch of rows, not the fleet. Their output is byte for byte what the
/// array reads wrote (`OfficeReadsTests`): a table for people is measured
/// in a first pass over the same snapshot and written in a second.
extension Session {
    /// `inventory list` of a server, streamed.
    func streamedInventoryList(_ server: ServerInventory) async throws {
        let output = output
        let terminal = terminal
        let location = server.location
        try await server.withOfficeStreams { streams in
            // The columns with `benches` (shown when any device has benches).
            var sample = DeviceRecord(address: "", seenAt: Date(timeIntervalSince1970: 0))
            sample.benches = []
            let columns = DeviceLine.columns(for: [DeviceLine(record: sample)])
            var benches = false
            var count = 0
            try output.streamed(
                header: { columns.prefix(benches ? columns.count : columns.count - 1).map(\.header) },
                started: &streams.started,
                pass: { writing, item in
                    count = 0
                    let shown = writing && !benches ? columns.count - 1 : columns.count
                    let devices = try streams.devices()
                    while let record = try devices.next() {
                        count += 1
                        if record.benches != nil { benches = true }
                        let line = DeviceLine(record: record)
                        item(
                            StreamedItem(values: [line], rows: [columns.prefix(shown).map { $0.cell(line, terminal) }]))
                    }
                },
                after: { [.message("\(count) device\(count == 1 ? "" : "s") in \(location)")] })
        }
    }

    /// `drift` of a server, streamed: how many assigned devices drift, of
    /// how many assigned.
    func streamedDrift(_ server: ServerInventory) async throws -> (drifting: Int, assigned: Int) {
        let output = output
        let terminal = terminal
        let profiles = profiles
        return try await server.withOfficeStreams { streams in
            let columns = DriftRow.columns(for: [])
            var drifting = 0
            var assigned = 0
            try output.streamed(
                header: { columns.map(\.header) }, emptyShowsNothing: true, started: &streams.started,
                pass: { _, item in
                    let stream = try streams.drift(profiles: profiles, logging: true)
                    func add(_ finding: DriftFinding) {
                        let row = DriftRow(finding: finding)
                        item(StreamedItem(values: [row], rows: [columns.map { $0.cell(row, terminal) }]))
                    }
                    drifting = 0
                    var refused = Set<String>()
                    while let group = try stream.next() {
                        // A refused row's finding is listed after every assignment's.
                        if group.refused {
                            refused.insert(group.device)
                            continue
                        }
                        if !group.findings.isEmpty { drifting += 1 }
                        group.findings.forEach(add)
                    }
                    stream.unusable.forEach(add)
                    drifting += refused.count
                    assigned = stream.assigned
                }, after: { [] })
            return (drifting, assigned)
        }
    }

    /// `audit` of a server's inventory, streamed; whether any device has a
    /// finding. As `reportAudit` with `Auditor.auditFleet` and `withDrift`:
    /// each device judged against its profile, a duplicate identity named
    /// with its other holders, its drift added, in address order; then
    /// the drift of assigned devices without a report of their own; then
    /// the bench ledger rewrites the server refused.
    ///
    /// Duplicate identities need the whole fleet: a first pass keeps one
    /// 32-bit key per identity held (4 MB per million devices), a second
    /// (only when some identity is held twice) the holders of those.
    func streamedAudit(
        _ server: ServerInventory, profile named: String?, rewrites: [LedgerRewrite]
    ) async throws -> Bool {
        let output = output
        let terminal = terminal
        let profiles = profiles
        let chosen = selection.map(Set.init)
        let now = Date()
        return try await server.withOfficeStreams { streams in
            func key(_ identity: BeaconIdentity) -> UInt32 { UInt32(identity.major) << 16 | UInt32(identity.minor) }
            func isChosen(_ address: String) -> Bool { chosen?.contains(address) ?? true }

            // Pass 1: which identities more than one chosen device in service holds.
            var keys: [UInt32] = []
            let first = try streams.identityHolders()
            while let subject = try first.next() {
                if isChosen(subject.address), subject.isInService, let identity = subject.identity {
                    keys.append(key(identity))
                }
            }
            keys.sort()
            var duplicated = Set<UInt32>()
            for index in keys.indices.dropFirst() where keys[index] == keys[index - 1] {
                duplicated.insert(keys[index])
            }
            keys = []
            // Pass 2: their holders, in address order, as the finding names them.
            var holders: [UInt32: [String]] = [:]
            if !duplicated.isEmpty {
                let second = try streams.identityHolders()
                while let subject = try second.next() {
                    guard isChosen(subject.address), subject.isInService, let identity = subject.identity,
                        duplicated.contains(key(identity))
                    else { continue }
                    let named =
                        subject.benches.flatMap {
                            $0.isEmpty ? nil : "\(subject.address) (bench \($0.joined(separator: ", ")))"
                        }
                        ?? subject.address
                    holders[key(identity), default: []].append(named)
                }
            }

            var reports = 0
            var clean = 0
            try output.streamed(
                before: AuditDocument.title(.inventory, terminal), header: { AuditDocument.header },
                started: &streams.started,
                pass: { _, item in
                    reports = 0
                    clean = 0
                    func add(_ report: AuditReport) {
                        reports += 1
                        if report.isClean { clean += 1 }
                        item(
                            StreamedItem(
                                values: [AuditLine(report: report, source: .inventory)],
                                rows: AuditDocument.rows(report, terminal)))
                    }
                    func drift(_ finding: DriftFinding) -> AuditFinding {
                        .drift(
                            field: finding.field, desired: finding.desired, observed: finding.observed,
                            observedAt: finding.observedAt)
                    }
                    let stream = try streams.drift(profiles: profiles, logging: false)
                    var peeked: OfficeDriftGroup?
                    var ended = false
                    // The next group a report may take: of a chosen device, with
                    // findings; a refused row whose key is no address in
                    // capitals waits for the end (it names no device in order).
                    func peek() throws -> OfficeDriftGroup? {
                        while peeked == nil, !ended {
                            guard let group = try stream.next() else {
                                ended = true
                                break
                            }
                            guard !group.findings.isEmpty, isChosen(group.device) else { continue }
                            if group.refused, MACEnding.address(group.device) != group.device { continue }
                            peeked = group
                        }
                        return peeked
                    }
                    var orphans = 0
                    var taken = Set<String>()  // refused rows' keys that joined a report
                    var occurrence: [UInt32: Int] = [:]
                    let subjects = try streams.auditSubjects()
                    while let subject = try subjects.next() {
                        guard isChosen(subject.address) else { continue }
                        var report = Auditor.audit(subject, profiles: profiles, profile: named, now: now)
                        if subject.isInService, let identity = subject.identity, duplicated.contains(key(identity)) {
                            let index = occurrence[key(identity), default: 0]
                            occurrence[key(identity)] = index + 1
                            var others = holders[key(identity)] ?? []
                            if index < others.count { others.remove(at: index) }
                            report.findings.append(
                                .duplicateIdentity(identity: "\(identity.major).\(identity.minor)", others: others))
                        }
                        while let group = try peek(), group.device <= subject.address {
                            if group.device == subject.address {
                                report.findings += group.findings.map(drift)
                                if group.refused { taken.insert(group.device) }
                            } else if !group.refused {
                                orphans += 1
                            }
                            peeked = nil
                        }
                        add(report)
                    }
                    while let group = try peek() {
                        if !group.refused { orphans += 1 }
                        peeked = nil
                    }
                    // The drift of assigned devices with no report: a report
                    // each, after every device's (a second drift pass, only
                    // when there are some: they are not held meanwhile).
                    if orphans > 0 {
                        let again = try streams.drift(profiles: profiles, logging: false)
                        let known = try streams.identityHolders()
                        var next = try known.next()
                        while let group = try again.next() {
                            guard !group.refused, !group.findings.isEmpty, isChosen(group.device) else { continue }
                            while let subject = next, subject.address < group.device { next = try known.next() }
                            if next?.address == group.device { continue }
                            add(AuditReport(address: group.device, profile: nil, findings: group.findings.map(drift)))
                        }
                    }
                    var unusable: [DriftFinding] = []
                    for finding in stream.unusable where isChosen(finding.device) && !taken.contains(finding.device) {
                        if let last = unusable.last, last.device != finding.device {
                            add(AuditReport(address: last.device, profile: nil, findings: unusable.map(drift)))
                            unusable = []
                        }
                        unusable.append(finding)
                    }
                    if let last = unusable.last {
                        add(AuditReport(address: last.device, profile: nil, findings: unusable.map(drift)))
                    }
                    for rewrite in rewrites {
                        item(
                            StreamedItem(
                                values: [LedgerRewriteLine(rewrite: rewrite)],
                                rows: [AuditDocument.row(rewrite, terminal)]
                            ))
                    }
                },
                after: { [AuditDocument.count(reports: reports, clean: clean, rewrites: rewrites.count)] })
            return reports > clean || !rewrites.isEmpty
        }
    }
}
