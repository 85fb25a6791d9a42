import Inventory
import Profiles
import SBeaconProtocol

/// One of every fleet step, for the tests that check them all
/// (`FleetStepTests`): a new step adds its line here.
enum StepSamples {
    static func all(_ profile: Profile) -> [DeviceStep] {
        [
            .info,
            .requireBattery(atLeast: 30),
            .requireFirmware(atLeast: FirmwareVersion(major: 1, minor: 0, patch: 8)),
            .syncTime,
            .calibrate,
            .identity(IdentityPlan(major: 100, minor: .next, source: .profile(profile.name))),
            .apply(profile),
            .verify(profile),
            .pullTrips(clear: true),
            .pullEvents(clear: false),
            .pullIncidents(clear: true),
            .auditLive(profile),
            .reboot,
            .factoryReset,
        ]
    }
}
