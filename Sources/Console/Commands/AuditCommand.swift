import FoundationEssentials
import Inventory
import InventorySync
import Profiles
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `audit [PROFILE] [--live|--passive]`: devices judged against profiles,
/// from the inventory (default), live (a device step), or adverts alone.
public struct AuditCommand: ConsoleCommand {
    public enum Source: String, Sendable, Hashable { case inventory, live, passive }
    public var profile: String?
    public var source: Source

    public init(profile: String? = nil, source: Source = .inventory) {
        self.profile = profile
        self.source = source
    }

    public static let spec = CommandSpec(
        name: "audit", summary: "judge devices against profiles: from the inventory, live, or adverts alone",
        example: "audit --passive", operands: [.optional("PROFILE", .profile)],
        options: [
            .flag("--live", "read each device now (connects)"),
            .flag("--passive", "judge from bench-summary adverts alone (no connection)"),
        ], actsOnDevices: true,
        detail:
            "Without --live or --passive the audit reads the inventory and may run against a server inventory. Exit status 2 when any device has a finding.",
        emits: [.audit, .ledgerRewrite]
    ).runningDeviceSteps()

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        if arguments.flag("--live"), arguments.flag("--passive") {
            throw arguments.fail(at: 0, "audit takes --live or --passive, not both")
        }
        self.init(
            profile: arguments.operand(0),
            source: arguments.flag("--live") ? .live : arguments.flag("--passive") ? .passive : .inventory)
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        if source == .live {
            try await session.runDeviceSteps([located], on: located.devices.isEmpty ? nil : located.devices)
        } else {
            try await session.audit(profile: profile, source: source)
        }
    }

    public func step(profiles: [String: Profile]) -> DeviceStep? {
        source == .live ? .auditLive(profile.flatMap { profiles[$0] }) : nil
    }
    public var isDeviceStep: Bool { source == .live }
    public var liveAudit: LiveAudit? { source == .live ? LiveAudit(profile: profile) : nil }
    public var onlyReadsTheInventory: Bool { source == .inventory }
    public var stepName: String { "audit --\(source.rawValue)" }
}

extension Session {
    // MARK: Audits

    func audit(profile: String?, source: AuditCommand.Source) async throws(ConsoleFailure) {
        let subjects: [AuditSubject]
        switch source {
        case .live:
            return  // a device step, run by the fleet runner
        case .inventory:
            if invocation.inventoryIsServer, let url = invocation.inventoryPath,
                let server = try reader() as? ServerInventory
            {
                // The office's audit, streamed (OfficeStreamCommands.swift).
                let rewrites: [LedgerRewrite]
                do {
                    rewrites = try ServerLedger.rewrites(url: url)
                } catch {
                    throw ConsoleFailure(.infrastructure, "audit: the benches' ledgers: \(error.message)")
                }
                let findings: Bool
                do {
                    findings = try await streamedAudit(server, profile: profile, rewrites: rewrites)
                } catch let error as ConsoleFailure {
                    throw error
                } catch {
                    throw ConsoleFailure(.infrastructure, "audit: \(error)")
                }
                if findings { note(.devicesFailed) }
                return
            }
            subjects = try await inventorySubjects()
        case .passive:
            let bench = try await openBench()
            var seen = await bench.seen().filter { $0.summary != nil }
            if seen.isEmpty {
                do {
                    seen = try await bench.scan(seconds: 10).filter { $0.summary != nil }
                } catch {
                    throw ConsoleFailure(.infrastructure, "audit: scan: \(error)")
                }
            }
            let records = (try? await inventory().devicesByAddress()) ?? [:]
            let meant = (try? await inventory().meantIdentities()) ?? [:]
            subjects = seen.compactMap { beacon in
                guard let summary = beacon.summary else { return nil }
                var subject = Auditor.subject(address: beacon.address, summary: summary, seenAt: Date())
                subject.assignedProfile = records[beacon.address]?.profile
                subject.identity = beacon.identity
                if let meant = meant[beacon.address] {
                    subject.meantIdentity = meant.identity
                    subject.meantIdentitySource =
                        meant.source == "profile" ? "profile \(meant.profile ?? "")" : meant.source
                }
                return subject
            }
        }
        let chosen = selection.map(Set.init)
        try await reportAudit(from: subjects.filter { chosen?.contains($0.address) ?? true }, profile, source)
    }

    func inventorySubjects() async throws(ConsoleFailure) -> [AuditSubject] {
        do {
            return try await reader().auditSubjects()
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "audit: \(error)")
        }
    }

    func reportAudit(
        from subjects: [AuditSubject], _ profile: String?, _ source: AuditCommand.Source
    ) async throws(ConsoleFailure) {
        var reports = Auditor.auditFleet(subjects, profiles: profiles, profile: profile)
        if source == .inventory { reports = try await withDrift(reports) }
        // The office's audit: every bench ledger rewrite the server refused.
        var rewrites: [LedgerRewrite] = []
        if source == .inventory, invocation.inventoryIsServer, let url = invocation.inventoryPath {
            do {
                rewrites = try ServerLedger.rewrites(url: url)
            } catch {
                throw ConsoleFailure(.infrastructure, "audit: the benches' ledgers: \(error.message)")
            }
        }
        output.render(AuditDocument(reports: reports, source: source, rewrites: rewrites))
        if reports.contains(where: { !$0.isClean }) || !rewrites.isEmpty { note(.devicesFailed) }
    }
}

extension Session {
    /// The audit's reports with each assigned device's drift (`drift`)
    /// as findings, of the devices this bench saw. (The office's audit on
    /// a server streams its drift: OfficeStreamCommands.swift.) A drift
    /// that cannot be read fails the audit: a device is never reported
    /// clean for want of its drift.
    func withDrift(_ reports: [AuditReport]) async throws(ConsoleFailure) -> [AuditReport] {
        let findings: [DriftFinding]
        do {
            findings = try await inventory().drift(profiles: profiles).findings
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "audit: the desired state's drift: \(error)")
        }
        guard !findings.isEmpty else { return reports }
        return Self.merging(findings, into: reports, chosen: selection.map(Set.init))
    }

    /// `reports` with each drift finding (of a chosen device, when
    /// `chosen`) added to its device's report, or to a new report of its
    /// own. Each report is found by its address in a dictionary built once
    /// (a scan of every report per finding made a fleet's audit quadratic:
    /// minutes at 100,000 devices); the first report of an address takes
    /// the findings.
    static func merging(
        _ findings: [DriftFinding], into reports: [AuditReport], chosen: Set<String>?
    )
        -> [AuditReport]
    {
        var reports = reports
        var byAddress: [String: Int] = [:]
        byAddress.reserveCapacity(reports.count)
        for (index, report) in reports.enumerated() where byAddress[report.address] == nil {
            byAddress[report.address] = index
        }
        for finding in findings where chosen?.contains(finding.device) ?? true {
            let drift = AuditFinding.drift(
                field: finding.field, desired: finding.desired, observed: finding.observed,
                observedAt: finding.observedAt)
            if let index = byAddress[finding.device] {
                reports[index].findings.append(drift)
            } else {
                byAddress[finding.device] = reports.count
                reports.append(AuditReport(address: finding.device, profile: nil, findings: [drift]))
            }
        }
        return reports
    }
}
