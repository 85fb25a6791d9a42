import Inventory
import SBeaconProtocol

/// `identity`: the identity meant for the device, reserved in the
/// inventory (and on the shared server when there is one) before it is
/// written, then written and read back.
struct IdentityStep: FleetStep {
    let plan: IdentityPlan

    var name: String { "identity" }
    var reads: Set<SBeacon.Observation.Kind> { [.identity] }
    var writes: Set<SBeacon.Observation.Kind> { [.identity] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([.identity]) }
    var records: Set<StepRecord> { [.identityReservation] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        let current = try await beacon.readIdentity()
        let reservation = try await context.reserveIdentity(plan, holds: current)
        let wanted = reservation.identity
        let why = plan.source == .explicit ? "explicit" : "profile " + (plan.profileName ?? "")
        let note = reservation.note.map { "; \($0)" } ?? ""
        if context.dryRun {
            return current == wanted
                ? StepResult(.unchanged)
                : StepResult(
                    .skipped,
                    "dry run: identity: \(current.major).\(current.minor) → \(wanted.major).\(wanted.minor) (\(why))\(note)"
                )
        }
        let change = try await beacon.setIdentity(wanted)
        return change.written
            ? StepResult(
                .changed,
                "identity \(change.before.major).\(change.before.minor) → \(change.after.major).\(change.after.minor) (\(why))\(note)"
            )
            : StepResult(.unchanged, reservation.note)
    }
}

extension DeviceStep {
    /// `identity`: the identity meant for the device, reserved in the
    /// inventory (and on the shared server when there is one) before it
    /// is written.
    public static func identity(_ plan: IdentityPlan) -> DeviceStep { DeviceStep(IdentityStep(plan: plan)) }
}
