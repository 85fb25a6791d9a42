import FoundationEssentials
import Inventory
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// `info`: reads everything a technician checks at a glance, records it,
/// and says it in one line.
struct InfoStep: FleetStep {
    var name: String { "info" }
    var reads: Set<SBeacon.Observation.Kind> { Set(SBeacon.Observation.Kind.allCases) }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [.device] }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        let info = try await beacon.readInfo()
        // The description and the calibration's real time, beside what
        // the reads themselves record.
        let record = Self.record(context.address, info)
        try await context.remember(.device) { $0 = record }
        return StepResult(.ok, Self.describe(info))
    }

    /// `info` as one line: everything a technician checks at a glance.
    static func describe(_ info: BeaconInfo) -> String {
        let calibration = info.calibration
        let pending = info.tripInformation
        // The device's own strings, cut short for a line (the inventory
        // keeps them whole).
        let model = DeviceInformationText.excerpt(info.model, limit: 64)
        let serial = DeviceInformationText.excerpt(info.serial, limit: 64)
        let hardware = DeviceInformationText.excerpt(info.hardwareRevision, limit: 64)
        let firmware =
            info.firmware?.description
            ?? "'\(DeviceInformationText.excerpt(info.firmwareRevision))' (not a version)"
        let head: String = "\(model) \(serial) hw \(hardware), firmware \(firmware), "
        return head
            + "battery \(info.battery) %, identity \(info.identity.major).\(info.identity.minor), "
            + (calibration.calibrated
                ? "calibrated (\(calibration.vector.x), \(calibration.vector.y), \(calibration.vector.z) mG)"
                : "not calibrated")
            + ", clock " + (info.timeOffset == 0 ? "not set" : "set") + ", \(info.config), trip \(info.tripStatus), "
            + "unsynced \(pending.trips) trips \(pending.events) events \(pending.incidents) incidents"
    }

    /// Everything a full read says of a device, as its inventory record.
    static func record(_ address: String, _ info: BeaconInfo) -> DeviceRecord {
        var record = DeviceRecord(address: address)
        record.identity = info.identity
        record.model = info.model
        record.serial = info.serial
        record.hardwareRevision = info.hardwareRevision
        record.firmware = info.firmware
        record.battery = info.battery
        record.calibration = info.calibration
        if info.calibration.calibrated, info.timeOffset != 0 {
            record.calibratedAt = Date(
                timeIntervalSince1970: Double(
                    BeaconTime.epochMilliseconds(beaconSeconds: info.calibration.calibratedAt, offset: info.timeOffset))
                    / 1000)
        }
        record.timeOffset = info.timeOffset
        record.config = info.config
        return record
    }
}

extension DeviceStep {
    /// `info`: everything read, recorded and described.
    public static let info = DeviceStep(InfoStep())
}
