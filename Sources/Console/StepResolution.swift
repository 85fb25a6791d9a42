import Inventory
import Profiles
import Workbench

extension Command {
    /// The fleet runner's step for a device command, with its profile
    /// looked up; nil for commands that are not device steps.
    public func deviceStep(profiles: [String: Profile]) -> DeviceStep? {
        switch self {
        case .info: .info
        case .require(.battery(let minimum)): .requireBattery(atLeast: minimum)
        case .require(.firmware(let minimum)): .requireFirmware(atLeast: minimum)
        case .syncTime: .syncTime
        case .calibrate: .calibrate
        case .identity(let name, let major, let minor): Self.identityPlan(name.flatMap { profiles[$0] }, major, minor)
        case .apply(let name): profiles[name].map(DeviceStep.apply)
        case .verify(let name): profiles[name].map(DeviceStep.verify)
        case .trips(let clear): .pullTrips(clear: clear)
        case .events(let clear): .pullEvents(clear: clear)
        case .incidents(let clear): .pullIncidents(clear: clear)
        case .audit(let name, .live): .auditLive(name.flatMap { profiles[$0] })
        case .reboot: .reboot
        case .factoryReset: .factoryReset
        default: nil
        }
    }

    /// The identity a command means: the profile's major unless one is
    /// named, the profile's minor rule unless one is named (else the next
    /// free minor).
    static func identityPlan(_ profile: Profile?, _ major: UInt16?, _ minor: MinorChoice?) -> DeviceStep? {
        let rule = profile?.identity
        guard let chosenMajor = major ?? rule?.major else { return nil }
        let minorPlan: IdentityPlan.Minor =
            switch minor ?? (rule?.minor == .keep ? .keep : .auto) {
            case .auto: .next
            case .keep: .keep
            case .fixed(let value): .fixed(value)
            }
        let source: IdentityPlan.Source =
            major == nil ? .profile(profile?.name ?? "") : .explicit
        return .identity(IdentityPlan(major: chosenMajor, minor: minorPlan, source: source))
    }
}
