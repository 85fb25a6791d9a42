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
        case .identity(let major, .auto): .identity(major: major, minor: nil)
        case .identity(let major, .fixed(let minor)): .identity(major: major, minor: minor)
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
}
