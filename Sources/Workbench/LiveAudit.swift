import FoundationEssentials
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

extension AuditSubject {
    /// An audit subject from a live read of a connected beacon.
    /// - Parameter now: the real time of the read (for the calibration's age).
    public init(address: String, info: BeaconInfo, now: Date = Date()) {
        self.init(address: address)
        battery = info.battery
        firmware = info.firmware
        if info.firmware == nil { unreadableFirmware = info.firmwareRevision }
        calibrated = info.calibration.calibrated
        if info.calibration.calibrated, info.timeOffset != 0 {
            let epochMilliseconds = BeaconTime.epochMilliseconds(
                beaconSeconds: info.calibration.calibratedAt, offset: info.timeOffset)
            calibratedAt = Date(timeIntervalSince1970: Double(epochMilliseconds) / 1000)
        }
        calibrationVector = info.calibration.calibrated ? info.calibration.vector : nil
        config = info.config
        configReadAt = now
        lastSeen = now
        identity = info.identity
    }
}
