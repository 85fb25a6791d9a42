import Inventory
import SBeaconProtocol

/// `require firmware>=V`: a device whose firmware is older than
/// `minimum`, or whose revision is not a version, is skipped, with its
/// later steps.
struct RequireFirmwareStep: FleetStep {
    let minimum: FirmwareVersion

    var name: String { "require firmware>=\(minimum)" }
    var reads: Set<SBeacon.Observation.Kind> { [.firmware] }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { true }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        let (text, version, fromAdvert) = try await beacon.firmware()
        let source = fromAdvert ? " (advert)" : ""
        guard let version else {
            return StepResult(
                .skipped,
                "firmware revision '\(DeviceInformationText.excerpt(text))' is not a version (MAJOR.MINOR.PATCH)"
            )
        }
        return version >= minimum
            ? StepResult(.ok, "firmware \(version)\(source)")
            : StepResult(.skipped, "firmware \(version)\(source) is older than \(minimum)")
    }
}

extension DeviceStep {
    /// `require firmware>=V`.
    public static func requireFirmware(atLeast minimum: FirmwareVersion) -> DeviceStep {
        DeviceStep(RequireFirmwareStep(minimum: minimum))
    }
}
