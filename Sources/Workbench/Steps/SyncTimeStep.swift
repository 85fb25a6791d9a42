import Inventory
import SBeaconProtocol

/// `sync-time`: writes the beacon's power-on offset when it is unset or
/// more than 2 s off, and reads it back.
struct SyncTimeStep: FleetStep {
    var name: String { "sync-time" }
    var reads: Set<SBeacon.Observation.Kind> { [.timeOffset] }
    var writes: Set<SBeacon.Observation.Kind> { [.timeOffset] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([.timeOffset]) }
    var records: Set<StepRecord> { [] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        if context.dryRun {
            let stored = try await beacon.readTimeOffset()
            let computed = BeaconTime.offset(uptime: try await beacon.readUptime(), now: StepContext.now())
            return BeaconTime.needsSync(stored: stored, computed: computed)
                ? StepResult(.skipped, "dry run: time offset: \(stored) → \(computed)") : StepResult(.unchanged)
        }
        let change = try await beacon.syncTime(clock: { StepContext.now() })
        return change.written
            ? StepResult(.changed, "time offset \(change.before) → \(change.after)") : StepResult(.unchanged)
    }
}

extension DeviceStep {
    /// `sync-time`.
    public static let syncTime = DeviceStep(SyncTimeStep())
}
