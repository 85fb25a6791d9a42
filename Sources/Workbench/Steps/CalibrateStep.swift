import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// `calibrate`: calibrates a beacon at rest, unless it holds a plausible
/// calibration already (idempotent).
struct CalibrateStep: FleetStep {
    var name: String { "calibrate" }
    var reads: Set<SBeacon.Observation.Kind> { [.calibration] }
    var writes: Set<SBeacon.Observation.Kind> { [.calibration] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure {
        .keepAll(
            because:
                "the state is read before the start and after the beacon answered: a beacon that refuses to calibrate still holds what was read"
        )
    }
    var records: Set<StepRecord> { [.calibratedAt] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        // Idempotent: a beacon that holds a plausible calibration keeps it.
        // The state read is recorded whatever follows (a beacon that
        // refuses to calibrate is still known as it is).
        let current = try await beacon.readCalibration()
        if current.calibrated, Auditor.plausibleGravity.contains(current.vector.magnitude) {
            return StepResult(.unchanged, "already calibrated")
        }
        if context.dryRun { return StepResult(.skipped, "dry run: would calibrate") }
        let state = try await beacon.calibrate()
        try await context.remember(.calibratedAt) { $0.calibratedAt = Date() }
        return StepResult(.changed, "calibrated: \(state.vector.x), \(state.vector.y), \(state.vector.z) mG")
    }
}

extension DeviceStep {
    /// `calibrate`.
    public static let calibrate = DeviceStep(CalibrateStep())
}
