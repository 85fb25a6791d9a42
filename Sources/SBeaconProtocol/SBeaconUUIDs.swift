// The one table of service and characteristic UUIDs (../shared/sbeacon-gatt.md
// sections 2–4). A different firmware's UUIDs are dropped in here without
// touching any logic. UUIDs are written as BlueZ shows them on D-Bus: 128-bit,
// lower case.

/// A GATT characteristic or service UUID as BlueZ shows it.
public struct GattUUID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue.lowercased() }

    /// A 16-bit SIG UUID in its 128-bit form, `0000XXXX-0000-1000-8000-00805f9b34fb`.
    public init(sig16 value: UInt16) {
        rawValue = "0000" + value.hex4 + "-0000-1000-8000-00805f9b34fb"
    }

    /// An SBeacon UUID: `5342NNNN-6561-636f-6e00-000000000000`.
    init(sbeacon value: UInt16) {
        rawValue = "5342" + value.hex4 + "-6561-636f-6e00-000000000000"
    }

    public var description: String { rawValue }

    /// The 16-bit value of a SIG UUID, or nil.
    public var sig16: UInt16? {
        guard rawValue.hasPrefix("0000"), rawValue.hasSuffix("-0000-1000-8000-00805f9b34fb") else { return nil }
        return UInt16(rawValue.dropFirst(4).prefix(4), radix: 16)
    }
}

extension UInt16 {
    var hex4: String {
        let digits = String(self, radix: 16)
        return String(repeating: "0", count: 4 - digits.count) + digits
    }
}

/// Every UUID the workbench and the simulator use.
public enum SBeaconUUID {
    /// The iBeacon proximity UUID of every SBeacon (advert, big-endian bytes).
    public static let proximity: [UInt8] = [
        0xE2, 0xC5, 0x6D, 0xB5, 0xDF, 0xFB, 0x48, 0xD2, 0xB0, 0x60, 0xD0, 0xF5, 0xA7, 0x10, 0x96, 0xE0,
    ]
    /// Apple's company identifier (iBeacon) and Nordic's (bench summary).
    public static let appleCompanyID: UInt16 = 0x004C
    public static let nordicCompanyID: UInt16 = 0x0059

    // Standard services.
    public static let deviceInformationService = GattUUID(sig16: 0x180A)
    public static let manufacturerName = GattUUID(sig16: 0x2A29)
    public static let modelNumber = GattUUID(sig16: 0x2A24)
    public static let serialNumber = GattUUID(sig16: 0x2A25)
    public static let hardwareRevision = GattUUID(sig16: 0x2A27)
    public static let firmwareRevision = GattUUID(sig16: 0x2A26)
    public static let batteryService = GattUUID(sig16: 0x180F)
    public static let batteryLevel = GattUUID(sig16: 0x2A19)
    /// Client Characteristic Configuration descriptor.
    public static let clientCharacteristicConfiguration = GattUUID(sig16: 0x2902)

    // SBeacon service.
    public static let sbeaconService = GattUUID(sbeacon: 0x0100)
    public static let tripStatus = GattUUID(sbeacon: 0x0101)
    public static let tripInformation = GattUUID(sbeacon: 0x0102)
    public static let recordControlPoint = GattUUID(sbeacon: 0x0103)
    public static let recordData = GattUUID(sbeacon: 0x0104)
    public static let realTimeEvent = GattUUID(sbeacon: 0x0105)
    public static let uptime = GattUUID(sbeacon: 0x0106)
    public static let timeOffset = GattUUID(sbeacon: 0x0107)

    // Config service.
    public static let configService = GattUUID(sbeacon: 0x0200)
    public static let drivingBehaviourConfig = GattUUID(sbeacon: 0x0201)
    public static let calibrationControlPoint = GattUUID(sbeacon: 0x0202)
    public static let calibrationState = GattUUID(sbeacon: 0x0203)
    public static let identity = GattUUID(sbeacon: 0x0204)
    public static let deviceControl = GattUUID(sbeacon: 0x0205)

    /// The services a provisioning client needs, in the order the firmware
    /// declares them.
    public static let requiredServices = [deviceInformationService, batteryService, sbeaconService, configService]
}
