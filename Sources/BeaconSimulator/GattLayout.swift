import DBusBinding
import SBeaconProtocol

/// The GATT database of an SBeacon, as BlueZ exports it after service
/// discovery: services, characteristics with their flags, and a CCCD
/// (0x2902) under every characteristic that notifies. Handles are assigned
/// as a real attribute table would, and paths carry them in hex
/// (`service000a/char000b/desc000d`), which clients such as bleak rely on.
struct GattLayout {
    struct Characteristic {
        var uuid: GattUUID
        var flags: [String]
        var notifies: Bool { flags.contains("notify") }
    }

    struct Service {
        var uuid: GattUUID
        var characteristics: [Characteristic]
    }

    static let services: [Service] = [
        Service(
            uuid: SBeaconUUID.deviceInformationService,
            characteristics: [
                .init(uuid: SBeaconUUID.manufacturerName, flags: ["read"]),
                .init(uuid: SBeaconUUID.modelNumber, flags: ["read"]),
                .init(uuid: SBeaconUUID.serialNumber, flags: ["read"]),
                .init(uuid: SBeaconUUID.hardwareRevision, flags: ["read"]),
                .init(uuid: SBeaconUUID.firmwareRevision, flags: ["read"]),
            ]),
        Service(
            uuid: SBeaconUUID.batteryService,
            characteristics: [.init(uuid: SBeaconUUID.batteryLevel, flags: ["read", "notify"])]),
        Service(
            uuid: SBeaconUUID.sbeaconService,
            characteristics: [
                .init(uuid: SBeaconUUID.tripStatus, flags: ["read", "notify"]),
                .init(uuid: SBeaconUUID.tripInformation, flags: ["read"]),
                .init(uuid: SBeaconUUID.recordControlPoint, flags: ["write", "notify"]),
                .init(uuid: SBeaconUUID.recordData, flags: ["notify"]),
                .init(uuid: SBeaconUUID.realTimeEvent, flags: ["notify"]),
                .init(uuid: SBeaconUUID.uptime, flags: ["read"]),
                .init(uuid: SBeaconUUID.timeOffset, flags: ["read", "write"]),
            ]),
        Service(
            uuid: SBeaconUUID.configService,
            characteristics: [
                .init(uuid: SBeaconUUID.drivingBehaviourConfig, flags: ["read", "write"]),
                .init(uuid: SBeaconUUID.calibrationControlPoint, flags: ["write", "notify"]),
                .init(uuid: SBeaconUUID.calibrationState, flags: ["read"]),
                .init(uuid: SBeaconUUID.identity, flags: ["read", "write"]),
                .init(uuid: SBeaconUUID.deviceControl, flags: ["write"]),
            ]),
    ]

    /// One exported attribute of one device.
    struct Node {
        /// The attribute handle, also the hex in the path.
        var handle: UInt16
        enum Kind {
            case service(Service)
            case characteristic(Characteristic, service: ObjectPath)
            case descriptor(characteristic: ObjectPath, uuid: GattUUID)
        }
        var path: ObjectPath
        var kind: Kind
    }

    /// Every node of a device's tree, parents before children, and the
    /// characteristic paths by UUID. `offset` moves every handle (a changed
    /// GATT database, `shift-gatt`).
    static func nodes(
        under device: ObjectPath, offset: UInt16 = 0
    )
        -> (nodes: [Node], characteristics: [GattUUID: ObjectPath])
    {
        var nodes: [Node] = []
        var characteristics: [GattUUID: ObjectPath] = [:]
        var handle: UInt16 = 0x000A &+ min(offset, 0xF000)
        for service in services {
            let servicePath = try! device.appending("service" + hex4(handle))
            nodes.append(Node(handle: handle, path: servicePath, kind: .service(service)))
            handle += 1
            for characteristic in service.characteristics {
                let path = try! servicePath.appending("char" + hex4(handle))
                nodes.append(
                    Node(handle: handle, path: path, kind: .characteristic(characteristic, service: servicePath)))
                characteristics[characteristic.uuid] = path
                // Declaration, then value.
                handle += 2
                if characteristic.notifies {
                    nodes.append(
                        Node(
                            handle: handle, path: try! path.appending("desc" + hex4(handle)),
                            kind: .descriptor(
                                characteristic: path, uuid: SBeaconUUID.clientCharacteristicConfiguration)))
                    handle += 1
                }
            }
        }
        return (nodes, characteristics)
    }

    static func hex4(_ value: UInt16) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 4 - digits.count) + digits
    }
}
