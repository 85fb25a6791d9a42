import Inventory
import Profiles
import SBeaconProtocol

/// `verify PROFILE`: the beacon holds the profile's config, or the step
/// fails.
struct VerifyStep: FleetStep {
    let profile: Profile

    var name: String { "verify \(profile.name)" }
    var reads: Set<SBeacon.Observation.Kind> { [.config] }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        // Read on this link already (an apply's read-back) with nothing
        // written since: that is what the beacon holds; else read.
        let confirmed = beacon.confirmedConfig
        let config: DrivingBehaviourConfig
        if let confirmed { config = confirmed } else { config = try await beacon.readConfig() }
        if context.dryRun, config != profile.config {
            // Nothing was written: an apply before it would have made it hold.
            return StepResult(.unchanged, "holds \(config) now; \(profile.name) only once applied")
        }
        guard config == profile.config else {
            throw OperationError.verificationFailed(
                address: beacon.address, what: "profile \(profile.name)", wrote: "\(profile.config)",
                readBack: "\(config)")
        }
        return StepResult(.ok, "holds \(profile.name)" + (confirmed != nil ? " (read back on this connection)" : ""))
    }
}

extension DeviceStep {
    /// `verify PROFILE`.
    public static func verify(_ profile: Profile) -> DeviceStep { DeviceStep(VerifyStep(profile: profile)) }
}
