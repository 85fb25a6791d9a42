import Inventory
import Profiles
import SBeaconProtocol

/// `apply PROFILE`: writes the profile's driving-behaviour config unless
/// the beacon holds it, reads it back, and records the profile.
struct ApplyStep: FleetStep {
    let profile: Profile

    var name: String { "apply \(profile.name)" }
    var reads: Set<SBeacon.Observation.Kind> { [.config] }
    var writes: Set<SBeacon.Observation.Kind> { [.config] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([.config]) }
    var records: Set<StepRecord> { [.profile] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        if context.dryRun {
            let current = try await beacon.readConfig()
            return current == profile.config
                ? StepResult(.unchanged) : StepResult(.skipped, "dry run: config: \(current) → \(profile.config)")
        }
        let change = try await beacon.writeConfig(profile.config)
        try await context.remember(.profile) { $0.profile = profile.name }
        return change.written
            ? StepResult(.changed, "config \(change.before) → \(change.after)") : StepResult(.unchanged)
    }
}

extension DeviceStep {
    /// `apply PROFILE`.
    public static func apply(_ profile: Profile) -> DeviceStep { DeviceStep(ApplyStep(profile: profile)) }
}
