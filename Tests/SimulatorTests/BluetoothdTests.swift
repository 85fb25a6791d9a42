import BeaconSimulator
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing

@Suite("The simulated bluetoothd, driven over a private bus as a BlueZ client would", .timeLimit(.minutes(5)))
struct BluetoothdTests {
    @Test func adapterPropertiesHaveBlueZNamesAndTypes() async throws {
        try await withSimulator { fixture throws in
            let properties = try await fixture.client.getAllProperties(
                interface: "org.bluez.Adapter1", at: SimulatorFixture.adapter, of: SimulatorFixture.bluez)
            let expected: [String: BusType] = [
                "Address": .string, "AddressType": .string, "Name": .string, "Alias": .string, "Class": .uint32,
                "Powered": .boolean, "Discoverable": .boolean, "Pairable": .boolean, "Discovering": .boolean,
                "UUIDs": .array(.string), "Modalias": .string, "Roles": .array(.string),
            ]
            for (name, type) in expected { #expect(properties[name]?.type == type, "\(name)") }
            #expect(properties["Roles"]?.stringArray?.contains("central") == true)
            let filters = try await fixture.client.call(
                SimulatorFixture.bluez, SimulatorFixture.adapter, "org.bluez.Adapter1", "GetDiscoveryFilters")
            #expect(filters.body[0].stringArray?.contains("DuplicateData") == true)
        }
    }

    @Test func discoveryShowsEveryBeaconWithContractAdverts() async throws {
        try await withSimulator(count: 5) { fixture throws in
            let added = try await fixture.client.signals(matching: .interfacesAdded(sender: SimulatorFixture.bluez))
            try await fixture.client.call(
                SimulatorFixture.bluez, SimulatorFixture.adapter, "org.bluez.Adapter1", "SetDiscoveryFilter",
                [.propertyMap(["Transport": "le", "DuplicateData": true])])
            try await fixture.discoverAll()
            let announcements = try await take(5, from: added, "InterfacesAdded of the 5 beacons")
            #expect(announcements.count == 5)
            let objects = try await fixture.client.managedObjects(of: SimulatorFixture.bluez)
            for state in fixture.fleet {
                let device = try #require(objects[fixture.devicePath(state)]?["org.bluez.Device1"])
                #expect(device["Address"]?.string == state.address)
                #expect(device["Name"]?.string == "SBeacon")
                #expect(device["RSSI"]?.type == .int16)
                #expect(device["TxPower"]?.type == .int16)
                #expect(device["Adapter"]?.objectPath == SimulatorFixture.adapter)
                #expect(device["Connected"]?.bool == false)
                let data = try #require(device["ManufacturerData"]?.uint16KeyedDictionary)
                let iBeacon = try IBeaconAdvert(bytes: try #require(data[0x004C]?.bytes))
                #expect(iBeacon.identity == state.identity)
                let summary = try BenchSummary(bytes: try #require(data[0x0059]?.bytes))
                #expect(summary.macEnding == (try MACEnding(address: state.address)))
                #expect(summary.firmware == state.firmware)
                #expect(summary.configCRC == state.config.crc)
            }
            // Stopping twice: the second is BlueZ' "No discovery started".
            try await fixture.client.call(
                SimulatorFixture.bluez, SimulatorFixture.adapter, "org.bluez.Adapter1", "StopDiscovery")
            let error = await #expect(throws: BusError.self) {
                try await fixture.client.call(
                    SimulatorFixture.bluez, SimulatorFixture.adapter, "org.bluez.Adapter1", "StopDiscovery")
            }
            #expect(error?.name == .bluez.failed)
            #expect(error?.message == "No discovery started")
        }
    }

    @Test func connectExportsTheGattTreeBeforeServicesResolved() async throws {
        try await withSimulator { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            let device = fixture.devicePath(state)
            // Everything org.bluez says, in order, until ServicesResolved.
            let everything = try await fixture.client.signals(matching: MatchRule(sender: SimulatorFixture.bluez))
            try await fixture.connect(state)
            let log = try await take(
                from: everything,
                until: { signal in
                    signal.path == device && (try? PropertiesChanged(signal))?.changed["ServicesResolved"]?.bool == true
                }, "ServicesResolved true on \(device)")
            let connected = log.firstIndex { signal in
                signal.path == device && (try? PropertiesChanged(signal))?.changed["Connected"]?.bool == true
            }
            let gattAdded = log.indices.filter { index in
                guard let added = try? InterfacesAdded(log[index]), device.isAncestor(of: added.path) else {
                    return false
                }
                return added.interfaces.keys.contains { $0.hasPrefix("org.bluez.Gatt") }
            }
            let resolved = try #require(log.indices.last)
            #expect((try? PropertiesChanged(log[resolved]))?.changed["ServicesResolved"]?.bool == true)
            #expect(gattAdded.count == 28)  // 4 services, 18 characteristics, 6 CCCDs
            #expect(try #require(connected) < gattAdded.min()!)
            #expect(gattAdded.max()! < resolved)
            let objects = try await fixture.client.managedObjects(of: SimulatorFixture.bluez)
            let paths = objects.keys.filter { device.isAncestor(of: $0) }
            for path in paths {
                let last = path.components.last!
                #expect(last.hasPrefix("service") || last.hasPrefix("char") || last.hasPrefix("desc"))
                #expect(last.suffix(4).allSatisfy(\.isHexDigit) && last.suffix(4) == last.suffix(4).lowercased())
                if let handle = objects[path]?.values.first(where: { $0["Handle"] != nil })?["Handle"]?.uint16 {
                    #expect(UInt16(last.suffix(4), radix: 16) == handle)
                }
            }
            let services = Set(objects.values.compactMap { $0["org.bluez.GattService1"]?["UUID"]?.string })
            for uuid in SBeaconUUID.requiredServices { #expect(services.contains(uuid.rawValue)) }
            let cccds = objects.filter { device.isAncestor(of: $0.key) && $0.value["org.bluez.GattDescriptor1"] != nil }
            #expect(
                cccds.values.allSatisfy {
                    $0["org.bluez.GattDescriptor1"]?["UUID"]?.string == "00002902-0000-1000-8000-00805f9b34fb"
                })
            #expect(cccds.count == 6)
            #expect(
                try await fixture.read(SBeaconUUID.firmwareRevision, of: state)
                    == Array(state.firmware.description.utf8))

            // Disconnect removes the tree.
            try await fixture.client.call(SimulatorFixture.bluez, device, "org.bluez.Device1", "Disconnect")
            let after = try await fixture.client.managedObjects(of: SimulatorFixture.bluez)
            #expect(after.keys.filter { device.isAncestor(of: $0) }.isEmpty)
            #expect(after[device]?["org.bluez.Device1"]?["Connected"]?.bool == false)
        }
    }

    @Test func oneConnectAtATimePerAdapterAndALimitOfSlots() async throws {
        try await withSimulator(
            count: 4,
            configure: {
                $0.latency.connect = .milliseconds(300)
                $0.connectionsPerAdapter = 2
            }
        ) { fixture throws in
            try await fixture.discoverAll()
            // The kernel queues LE connects: the second device's Connect
            // waits for the first (both succeed); a second Connect of the
            // same device while its first is under way is InProgress.
            async let first: Void = fixture.connect(fixture.fleet[0])
            async let second: Void = fixture.connect(fixture.fleet[1])
            try await fixture.waitFor(#"{"connected": "\#(fixture.fleet[0].address)"}"#)
            try await first
            try await second
            let linked = try await fixture.client.managedObjects(of: SimulatorFixture.bluez)
            #expect(linked[fixture.devicePath(fixture.fleet[1])]?["org.bluez.Device1"]?["Connected"]?.bool == true)
            let full = await #expect(throws: BusError.self) { try await fixture.connect(fixture.fleet[2]) }
            #expect(full?.name == .bluez.failed)
            #expect(full?.message == "le-connection-abort-by-local")
            let again = await #expect(throws: BusError.self) { try await fixture.connect(fixture.fleet[0]) }
            #expect(again?.name == .bluez.alreadyConnected)
        }
    }

    @Test func writesAreCheckedAndErrorsAreBlueZ() async throws {
        try await withSimulator { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            let config = DrivingBehaviourConfig(
                cornering: 450, braking: 500, acceleration: 350, duration: 300, enable: .all)
            try await fixture.write(SBeaconUUID.drivingBehaviourConfig, config.bytes, of: state)
            #expect(try await fixture.read(SBeaconUUID.drivingBehaviourConfig, of: state) == config.bytes)
            #expect(try await fixture.report(state).config.braking == 500)

            var bad = config
            bad.cornering = 10
            let notAllowed = await #expect(throws: BusError.self) {
                try await fixture.write(SBeaconUUID.drivingBehaviourConfig, bad.bytes, of: state)
            }
            #expect(notAllowed?.name == .bluez.failed)
            #expect(notAllowed?.message == "Operation failed with ATT error: 0x13")
            let length = await #expect(throws: BusError.self) {
                try await fixture.write(SBeaconUUID.drivingBehaviourConfig, [1, 2], of: state)
            }
            #expect(length?.name == .bluez.invalidArguments)
            #expect(length?.message == "Invalid Length")
            let readOnly = await #expect(throws: BusError.self) {
                try await fixture.write(SBeaconUUID.batteryLevel, [1], of: state)
            }
            #expect(readOnly?.name == .bluez.notPermitted)
            #expect(try await fixture.read(SBeaconUUID.drivingBehaviourConfig, of: state) == config.bytes)

            // Not connected: BlueZ' "Not connected".
            let path = try await fixture.characteristic(SBeaconUUID.batteryLevel, of: state)
            try await fixture.client.call(
                SimulatorFixture.bluez, fixture.devicePath(state), "org.bluez.Device1", "Disconnect")
            let gone = await #expect(throws: BusError.self) {
                try await fixture.client.call(
                    SimulatorFixture.bluez, path, "org.bluez.GattCharacteristic1", "ReadValue",
                    [.propertyMap([:])])
            }
            #expect(gone?.name == .unknownObject || gone?.name == .bluez.failed)
        }
    }

    @Test func notificationsCarryCalibrationRecordsAndRealTimeEvents() async throws {
        try await withSimulator { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            let values = try await fixture.notifications(SBeaconUUID.calibrationControlPoint, of: state)
            try await fixture.write(SBeaconUUID.calibrationControlPoint, [0x01], of: state)
            let notified = try await take(1, from: values, "the calibration's notification")
            let result = try CalibrationResult(bytes: try #require(notified.first))
            #expect(result.outcome == (state.moving ? .motionDetected : .success))
            let calibrated = try await fixture.report(state).calibration.calibrated
            #expect(calibrated == (state.moving ? state.calibration.calibrated : true))

            // Record transfer: every record, then the response with the count.
            try await fixture.control.drive(state.address, minutes: 30, harshEvents: 3)
            let data = try await fixture.characteristic(SBeaconUUID.recordData, of: state)
            let control = try await fixture.characteristic(SBeaconUUID.recordControlPoint, of: state)
            for path in [data, control] {
                try await fixture.client.call(
                    SimulatorFixture.bluez, path, "org.bluez.GattCharacteristic1", "StartNotify")
            }
            let stream = try await fixture.client.signals(
                matching: MatchRule(
                    sender: SimulatorFixture.bluez, interface: .properties, member: "PropertiesChanged",
                    pathNamespace: fixture.devicePath(state)))
            try await fixture.write(SBeaconUUID.recordControlPoint, [0x01], of: state)
            let transfer = try await take(
                2,
                from: stream.filter { signal in
                    (signal.path == data || signal.path == control)
                        && (try? PropertiesChanged(signal))?.changed["Value"] != nil
                }, "the trip record and the transfer's response"
            ).compactMap { try? PropertiesChanged($0) }
                .compactMap { change in change.changed["Value"]?.bytes.map { (change.path, $0) } }
            try #require(transfer.count == 2)
            #expect(transfer[0].0 == data)
            guard case .trip(let trip) = try RecordNotification(bytes: transfer[0].1) else {
                Issue.record("the first notification is not a trip record")
                return
            }
            #expect(trip.index == 0)
            #expect(trip.end - trip.start == 30 * 60)
            #expect(transfer[1].0 == control)
            #expect(try RecordResponse(bytes: transfer[1].1) == RecordResponse(opcode: 1, result: .success, count: 1))
        }
    }

    @Test func aShakeIsARealTimeEventAndARebootDropsTheLink() async throws {
        try await withSimulator { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            let values = try await fixture.notifications(SBeaconUUID.realTimeEvent, of: state)
            try await fixture.control.shake(state.address, eventType: 5)
            let event = try await take(1, from: values, "the shake's real-time event").first
            #expect(
                try RealTimeEvent(bytes: try #require(event))
                    == RealTimeEvent(type: .braking, axis: .longitudinal, flags: .harshBraking))

            let config = DrivingBehaviourConfig(
                cornering: 999, braking: 999, acceleration: 999, duration: 99, enable: [])
            try await fixture.write(SBeaconUUID.drivingBehaviourConfig, config.bytes, of: state)
            let rebootSent = ContinuousClock.now
            try await fixture.write(SBeaconUUID.deviceControl, DeviceCommand.reboot.bytes, of: state)
            try await fixture.waitFor(#"{"disconnected": "\#(state.address)"}"#)
            let report = try await fixture.report(state)
            let sinceReboot = ContinuousClock.now - rebootSent
            #expect(report.connected == false)
            // Uptime counts from the reboot: no more whole seconds than
            // have passed since the reboot was written (it was hours).
            #expect(Duration.seconds(report.uptime) <= sinceReboot, "uptime \(report.uptime) s, \(sinceReboot) since")
            #expect(report.config.braking == 999)
        }
    }

    @Test func aRestartDropsTheNameAndComesBack() async throws {
        try await withSimulator { fixture throws in
            let owner = try #require(try await fixture.client.nameOwner(of: SimulatorFixture.bluez))
            let changes = try await fixture.client.nameOwnerChanges(of: SimulatorFixture.bluez)
            try await fixture.control.restart()
            let seen = try await take(2, from: changes, "org.bluez released and taken again")
            #expect(seen.map(\.newOwner) == [nil, owner])
            #expect(
                try await fixture.client.managedObjects(of: SimulatorFixture.bluez)[SimulatorFixture.adapter] != nil)
        }
    }

    @Test func itRefusesABusWhereBluezIsOwned() async throws {
        try await withSimulator { fixture throws in
            let second = SimulatedBluetoothd(bus: fixture.client, options: SimulatorOptions(), fleet: [])
            let error = await #expect(throws: BusError.self) { try await second.start() }
            #expect(error?.message.contains("already owned") == true)
        }
    }
}
