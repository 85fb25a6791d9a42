import Inventory
import Profiles
import SBeaconProtocol

/// `audit --live [--profile P]`: reads everything, records it, and audits
/// it against `profile` (else the device's assigned one) and the identity
/// meant for it.
struct AuditLiveStep: FleetStep {
    let profile: Profile?

    var name: String { "audit --live" }
    var reads: Set<SBeacon.Observation.Kind> { Set(SBeacon.Observation.Kind.allCases) }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [.device] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        let address = beacon.address
        let info = try await beacon.readInfo()
        // (Recorded with the step's outcome; what is read back below —
        // the assigned profile, the identity meant — is not in it.)
        let record = InfoStep.record(address, info)
        try await context.remember(.device) { $0 = record }
        let profiles = profile.map { [$0.name: $0] } ?? context.profiles
        var subject = AuditSubject(address: address, info: info)
        subject.assignedProfile = try await context.read { try await $0.device(address)?.profile }
        let meant = try await context.read { try await $0.meantIdentity(address) }
        subject.meantIdentity = meant?.identity
        subject.meantIdentitySource = meant.map {
            $0.source == "profile" ? "profile \($0.profile ?? "")" : $0.source
        }
        let report = Auditor.audit(subject, profiles: profiles, profile: profile?.name)
        return StepResult(
            .ok, report.findings.isEmpty ? "clean" : report.findings.map(\.description).joined(separator: "; "))
    }
}

extension DeviceStep {
    /// `audit --live`: against `profile`, else each device's assigned one.
    public static func auditLive(_ profile: Profile?) -> DeviceStep { DeviceStep(AuditLiveStep(profile: profile)) }
}
