import Inventory
import SBeaconProtocol

/// `factory-reset`: everything on the beacon goes back to its defaults.
struct FactoryResetStep: FleetStep {
    var name: String { "factory-reset" }
    var reads: Set<SBeacon.Observation.Kind> { [] }
    var writes: Set<SBeacon.Observation.Kind> { [.config, .identity, .calibration, .timeOffset] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([.config, .identity, .calibration, .timeOffset]) }
    var records: Set<StepRecord> { [] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        if context.dryRun { return StepResult(.skipped, "dry run: would reset") }
        try await beacon.factoryReset(confirmed: true)
        return StepResult(.changed, "factory reset")
    }
}

extension DeviceStep {
    /// `factory-reset`.
    public static let factoryReset = DeviceStep(FactoryResetStep())
}
