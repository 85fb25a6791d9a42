import Inventory
import SBeaconProtocol

/// `require battery>=N`: a device whose battery is below `minimum` is
/// skipped, with its later steps.
struct RequireBatteryStep: FleetStep {
    let minimum: UInt8

    var name: String { "require battery>=\(minimum)" }
    var reads: Set<SBeacon.Observation.Kind> { [.battery] }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { true }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        // What was read is recorded (audits use it), met or not.
        // A bench-summary advert heard a moment ago says it without a read.
        let (battery, fromAdvert) = try await beacon.batteryLevel()
        let source = fromAdvert ? " (advert)" : ""
        return battery >= minimum
            ? StepResult(.ok, "battery \(battery) %\(source)")
            : StepResult(.skipped, "battery \(battery) %\(source) is below \(minimum) %")
    }
}

extension DeviceStep {
    /// `require battery>=N`.
    public static func requireBattery(atLeast minimum: UInt8) -> DeviceStep {
        DeviceStep(RequireBatteryStep(minimum: minimum))
    }
}
