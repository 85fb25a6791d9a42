import Inventory
import SBeaconProtocol

/// `reboot`: the beacon restarts and drops the link.
struct RebootStep: FleetStep {
    var name: String { "reboot" }
    var reads: Set<SBeacon.Observation.Kind> { [] }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        if context.dryRun { return StepResult(.skipped, "dry run: would reboot") }
        try await beacon.reboot()
        return StepResult(.changed, "rebooted")
    }
}

extension DeviceStep {
    /// `reboot`.
    public static let reboot = DeviceStep(RebootStep())
}
