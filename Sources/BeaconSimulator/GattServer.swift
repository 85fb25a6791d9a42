import DBusBinding
import Foundation
import SBeaconProtocol

/// The GATT server: the objects BlueZ exports for a resolved device
/// (services, characteristics, descriptors), ReadValue, WriteValue,
/// notifications, and what a write makes the beacon do.
extension SimulatedBluetoothd {
    func exportGattNode(_ index: Int, _ address: String, _ node: GattLayout.Node) async {
        guard let devicePath = adapters[index].devices[address]?.path else { return }
        switch node.kind {
        case .service(let service):
            try? await bus.export(
                BusInterface(
                    name: "org.bluez.GattService1",
                    properties: [
                        .init("UUID", .string), .init("Device", .objectPath), .init("Primary", .boolean),
                        .init("Includes", .array(.objectPath)), .init("Handle", .uint16),
                    ]),
                at: node.path,
                properties: [
                    "UUID": .string(service.uuid.rawValue), "Device": .objectPath(devicePath), "Primary": true,
                    "Includes": .objectPaths([]), "Handle": .uint16(node.handle),
                ])
        case .characteristic(let characteristic, let service):
            var properties: [String: BusValue] = [
                "UUID": .string(characteristic.uuid.rawValue), "Service": .objectPath(service),
                "Flags": .strings(characteristic.flags), "MTU": .uint16(247), "Handle": .uint16(node.handle),
            ]
            if characteristic.notifies { properties["Notifying"] = false }
            try? await bus.export(
                characteristicInterface(index, address, characteristic), at: node.path,
                properties: properties)
        case .descriptor(let characteristic, let uuid):
            try? await bus.export(
                BusInterface(
                    name: "org.bluez.GattDescriptor1",
                    methods: [
                        .init(
                            name: "ReadValue", inputs: [.init("options", .propertyMap)],
                            outputs: [.init("value", .array(.byte))]
                        ) { [self] _ in
                            try await requireConnection(index, address)
                            let on = await isNotifying(index, address, characteristicPath: characteristic)
                            return [.bytes(on ? [0x01, 0x00] : [0x00, 0x00])]
                        },
                        .init(
                            name: "WriteValue", inputs: [.init("value", .array(.byte)), .init("options", .propertyMap)]
                        ) {
                            _ in throw BusError(.bluez.notPermitted, "Write not permitted")
                        },
                    ],
                    properties: [
                        .init("UUID", .string), .init("Characteristic", .objectPath), .init("Value", .array(.byte)),
                        .init("Handle", .uint16),
                    ]),
                at: node.path,
                properties: [
                    "UUID": .string(uuid.rawValue), "Characteristic": .objectPath(characteristic),
                    "Value": .bytes([]), "Handle": .uint16(node.handle),
                ])
        }
    }

    func characteristicInterface(
        _ index: Int, _ address: String, _ characteristic: GattLayout.Characteristic
    )
        -> BusInterface
    {
        let uuid = characteristic.uuid
        return BusInterface(
            name: "org.bluez.GattCharacteristic1",
            methods: [
                .init(
                    name: "ReadValue", inputs: [.init("options", .propertyMap)],
                    outputs: [.init("value", .array(.byte))]
                ) { [self] call in
                    let options = call.body[0].stringKeyedDictionary ?? [:]
                    return [.bytes(try await readValue(index, address, uuid, offset: options["offset"]?.uint16 ?? 0))]
                },
                .init(name: "WriteValue", inputs: [.init("value", .array(.byte)), .init("options", .propertyMap)]) {
                    [self] call in
                    let options = call.body[1].stringKeyedDictionary ?? [:]
                    try await writeValue(
                        index, address, uuid, call.body[0].bytes ?? [],
                        withResponse: options["type"]?.string != "command")
                    return []
                },
                .init(name: "StartNotify") { [self] _ in
                    try await setNotifying(index, address, uuid, true)
                    return []
                },
                .init(name: "StopNotify") { [self] _ in
                    try await setNotifying(index, address, uuid, false)
                    return []
                },
                .init(
                    name: "AcquireWrite", inputs: [.init("options", .propertyMap)],
                    outputs: [.init("fd", .unixFD), .init("mtu", .uint16)]
                ) { _ in
                    throw BusError(.bluez.notSupported, "Operation is not supported")
                },
                .init(
                    name: "AcquireNotify", inputs: [.init("options", .propertyMap)],
                    outputs: [.init("fd", .unixFD), .init("mtu", .uint16)]
                ) { _ in
                    throw BusError(.bluez.notSupported, "Operation is not supported")
                },
            ],
            properties: [
                .init("UUID", .string), .init("Service", .objectPath), .init("Value", .array(.byte)),
                .init("Notifying", .boolean), .init("Flags", .array(.string)), .init("MTU", .uint16),
                .init("Handle", .uint16),
            ])
    }

    func requireConnection(_ index: Int, _ address: String) throws {
        guard let device = adapters[index].devices[address], device.connected, device.servicesResolved else {
            throw BusError(.bluez.failed, "Not connected")
        }
    }

    func isNotifying(_ index: Int, _ address: String, characteristicPath: ObjectPath) -> Bool {
        guard let device = adapters[index].devices[address] else { return false }
        return device.characteristics.contains { device.notifying.contains($0.key) && $0.value == characteristicPath }
    }

    /// BlueZ' mapping of an ATT error to a D-Bus error (src/gatt-client.c),
    /// as the contract's section 5 gives it.
    static func busError(_ error: ATTError) -> BusError {
        switch error {
        case .invalidAttributeValueLength: BusError(.bluez.invalidArguments, "Invalid Length")
        case .writeNotPermitted: BusError(.bluez.notPermitted, "Write not permitted")
        case .readNotPermitted: BusError(.bluez.notPermitted, "Read not permitted")
        case .insufficientAuthorization: BusError(.bluez.notAuthorized, "Operation Not Authorized")
        case .requestNotSupported: BusError(.bluez.notSupported, "Operation is not supported")
        default:
            BusError(.bluez.failed, "Operation failed with ATT error: 0x" + String(format: "%02x", error.rawValue))
        }
    }

    func readValue(_ index: Int, _ address: String, _ uuid: GattUUID, offset: UInt16) async throws -> [UInt8] {
        activity.reads += 1
        try requireConnection(index, address)
        let generation = adapters[index].devices[address]?.generation ?? -1
        try? await Task.sleep(for: options.latency.attRequest)
        let outcome = try await ask(.attRead, adapter: index, address: address, characteristic: uuid.rawValue)
        guard adapters[index].devices[address]?.generation == generation else {
            throw BusError(.bluez.failed, "Not connected")
        }
        if let drop = outcome.drop {
            await disconnect(index, address, reason: drop.reason)
            throw BusError(.bluez.failed, "Not connected")
        }
        if let failure = outcome.failure { throw failure }
        do throws(ATTError) {
            guard let firmware = beacons[address] else { throw ATTError.unlikelyError }
            let value = try firmware.read(uuid, now: Self.now())
            guard Int(offset) <= value.count else {
                throw ATTError.invalidOffset
            }
            let result = Array(value[Int(offset)...])
            if let path = adapters[index].devices[address]?.characteristics[uuid] {
                try? await bus.setProperties(
                    ["Value": .bytes(value)], interface: "org.bluez.GattCharacteristic1", at: path)
            }
            return result
        } catch {
            throw Self.busError(error)
        }
    }

    /// A write: hook att.write before the beacon sees it (a dropped link
    /// there may or may not let the write land first: `writeLands`), hook
    /// write.landed after the beacon applied it, before the reply.
    func writeValue(
        _ index: Int, _ address: String, _ uuid: GattUUID, _ value: [UInt8], withResponse: Bool
    )
        async throws
    {
        activity.writes += 1
        try requireConnection(index, address)
        let generation = adapters[index].devices[address]?.generation ?? -1
        if withResponse { try? await Task.sleep(for: options.latency.attRequest) }
        let before = try await ask(.attWrite, adapter: index, address: address, characteristic: uuid.rawValue)
        if let drop = before.drop {
            // The link drops around the write: whether the beacon got it
            // first is a toss (or as the rule says), as on a real radio;
            // the client only knows it got no answer.
            let lands =
                switch drop.writeLands {
                case .always: true
                case .never: false
                case .toss: tossRandom.chance(0.5)
                }
            if lands, var firmware = beacons[address], let _ = try? firmware.write(uuid, value, now: Self.now()) {
                beacons[address] = firmware
                markChanged()
            }
            await disconnect(index, address, reason: drop.reason)
            throw BusError(.bluez.failed, "Not connected")
        }
        guard adapters[index].devices[address]?.generation == generation else {
            throw BusError(.bluez.failed, "Not connected")
        }
        if let failure = before.failure { throw failure }
        guard var firmware = beacons[address] else { throw BusError(.bluez.failed, "Not connected") }
        let effects: [FirmwareEffect]
        do throws(ATTError) {
            effects = try firmware.write(uuid, value, now: Self.now())
        } catch {
            throw Self.busError(error)
        }
        firmware.drain(BeaconFirmware.Drain.write)
        beacons[address] = firmware
        markChanged()
        let landed = try await ask(.writeLanded, adapter: index, address: address, characteristic: uuid.rawValue)
        if let drop = landed.drop {
            await disconnect(index, address, reason: drop.reason)
            throw BusError(.bluez.failed, "Not connected")
        }
        if let failure = landed.failure { throw failure }
        // The write's response goes first; what it causes follows.
        Task { [self] in await perform(effects, index, address, generation) }
    }

    func perform(_ effects: [FirmwareEffect], _ index: Int, _ address: String, _ generation: Int) async {
        let spacing = options.latency.attRequest / 4
        for effect in effects {
            guard adapters[index].devices[address]?.generation == generation else { return }
            switch effect {
            case .notify(let uuid, let value):
                await notify(index, address, uuid, value)
                if spacing > .zero { try? await Task.sleep(for: spacing) }
            case .calibrate:
                try? await Task.sleep(for: options.latency.calibration)
                guard adapters[index].devices[address]?.generation == generation, var firmware = beacons[address] else {
                    return
                }
                activity.calibrations += 1
                let result = firmware.finishCalibration(now: Self.now())
                beacons[address] = firmware
                markChanged()
                await notify(index, address, SBeaconUUID.calibrationControlPoint, result)
                await advertChanged(address)
            case .advertChanged:
                await advertChanged(address)
            case .reboot:
                await disconnect(index, address, reason: .remote)
                await advertChanged(address)
            }
        }
    }

    /// A notification: PropertiesChanged on the characteristic's Value, if
    /// a client subscribed (hook notify: `withhold` or `fail` lose it).
    func notify(_ index: Int, _ address: String, _ uuid: GattUUID, _ value: [UInt8]) async {
        guard let device = adapters[index].devices[address], device.notifying.contains(uuid),
            device.characteristics[uuid] != nil
        else { return }
        let outcome = try? await ask(.notify, adapter: index, address: address, characteristic: uuid.rawValue)
        if let drop = outcome?.drop {
            await disconnect(index, address, reason: drop.reason)
            return
        }
        guard outcome?.withhold != true, outcome?.failure == nil,
            let path = adapters[index].devices[address]?.characteristics[uuid]
        else { return }
        try? await bus.setProperties(["Value": .bytes(value)], interface: "org.bluez.GattCharacteristic1", at: path)
    }

    func setNotifying(_ index: Int, _ address: String, _ uuid: GattUUID, _ on: Bool) async throws {
        try requireConnection(index, address)
        guard let path = adapters[index].devices[address]?.characteristics[uuid] else {
            throw BusError(.bluez.failed, "Not connected")
        }
        guard GattLayout.services.flatMap(\.characteristics).first(where: { $0.uuid == uuid })?.notifies == true else {
            throw BusError(.bluez.notSupported, "Operation is not supported")
        }
        if on {
            adapters[index].devices[address]?.notifying.insert(uuid)
        } else {
            adapters[index].devices[address]?.notifying.remove(uuid)
        }
        try? await bus.setProperties(["Notifying": .boolean(on)], interface: "org.bluez.GattCharacteristic1", at: path)
    }
}
