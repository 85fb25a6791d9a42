import BeaconSimulator
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing

@Suite("Injected faults fire at their rates, with BlueZ' errors", .timeLimit(.minutes(5)))
struct FaultTests {
    @Test func theFaultListIsParsedAndCheckedLikeTheCommandLineSaysItIs() throws {
        #expect(try Fault.parse("connect-abort=0.1,att-error=0.25") == [.connectAbort: 0.1, .attError: 0.25])
        #expect(try Fault.parse("all=0.03").count == Fault.allCases.count)
        #expect(throws: FaultSpecificationError.self) { try Fault.parse("connect-abort=2") }
        #expect(throws: FaultSpecificationError.self) { try Fault.parse("gremlins=0.1") }
        #expect(throws: FaultSpecificationError.self) { try Fault.parse("att-error") }
        let commandLine = try SimulatorCommandLine(arguments: ["--faults", "vanish=0.5", "--seed", "9"])
        #expect(commandLine.options.faults == [.vanish: 0.5])
        #expect(throws: SimulatorCommandLine.UsageError.self) {
            try SimulatorCommandLine(arguments: ["--faults", "x=1"])
        }
    }

    @Test func connectInProgressFiresAtItsRate() async throws {
        try await withSimulator(count: 1, configure: { $0.faults = [.connectInProgress: 0.3] }) { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            var refused = 0
            for _ in 0..<200 {
                do {
                    try await fixture.connect(state)
                    try await fixture.client.call(
                        SimulatorFixture.bluez, fixture.devicePath(state), "org.bluez.Device1", "Disconnect")
                } catch let error as BusError where error.name == .bluez.inProgress {
                    refused += 1
                }
            }
            #expect(await fixture.daemon.faultCounts[.connectInProgress] == refused)
            #expect((40...80).contains(refused), "\(refused) of 200 at p = 0.3")
        }
    }

    @Test func attErrorsAndStalls() async throws {
        try await withSimulator(count: 1, configure: { $0.faults = [.attError: 0.5] }) { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            var failed = 0
            for _ in 0..<100 {
                do {
                    _ = try await fixture.read(SBeaconUUID.batteryLevel, of: state)
                } catch let error as BusError {
                    #expect(error.name == .bluez.failed)
                    #expect(error.message == "Operation failed with ATT error: 0x0e")
                    failed += 1
                }
            }
            #expect(await fixture.daemon.faultCounts[.attError] == failed)
            #expect((30...70).contains(failed), "\(failed) of 100 at p = 0.5")
        }
    }

    @Test func servicesThatNeverResolve() async throws {
        try await withSimulator(count: 1, configure: { $0.faults = [.servicesNeverResolved: 1] }) { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            let device = try await fixture.client.getAllProperties(
                interface: "org.bluez.Device1", at: fixture.devicePath(state), of: SimulatorFixture.bluez)
            #expect(device["Connected"]?.bool == true)
            #expect(device["ServicesResolved"]?.bool == false)
            let objects = try await fixture.client.managedObjects(of: SimulatorFixture.bluez)
            #expect(!objects.keys.contains { fixture.devicePath(state).isAncestor(of: $0) })
        }
    }

    @Test func aDisconnectInTheMiddleOfAnOperation() async throws {
        try await withSimulator(count: 1, configure: { $0.faults = [.disconnectMidOperation: 1] }) { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            let error = await #expect(throws: BusError.self) {
                try await fixture.read(SBeaconUUID.batteryLevel, of: state)
            }
            #expect(error?.message == "Not connected")
            #expect(try await fixture.report(state).connected == false)
        }
    }

    @Test func droppedNotificationsNeverArrive() async throws {
        try await withSimulator(count: 1, configure: { $0.faults = [.droppedNotification: 1] }) { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            try await fixture.connect(state)
            let path = try await fixture.characteristic(SBeaconUUID.calibrationControlPoint, of: state)
            let signals = try await fixture.client.signals(
                matching: MatchRule(
                    sender: SimulatorFixture.bluez, interface: .properties, member: "PropertiesChanged", path: path))
            try await fixture.client.call(SimulatorFixture.bluez, path, "org.bluez.GattCharacteristic1", "StartNotify")
            try await fixture.write(SBeaconUUID.calibrationControlPoint, [1], of: state)
            // The notification came due and was dropped…
            try await fixture.waitFor(#"{"ruleFired": "faults.dropped-notification"}"#)
            // …and nothing of it reached the client: StopNotify's Notifying
            // false is a marker sent after it by the same connection, and a
            // bus delivers one sender's messages in order, so a notification
            // sent would have come before the marker.
            try await fixture.client.call(SimulatorFixture.bluez, path, "org.bluez.GattCharacteristic1", "StopNotify")
            let log = try await take(
                from: signals, until: { (try? PropertiesChanged($0))?.changed["Notifying"]?.bool == false },
                "Notifying false after StopNotify")
            #expect(!log.contains { (try? PropertiesChanged($0))?.changed["Value"] != nil }, "\(log)")
            #expect(await fixture.daemon.faultCounts[.droppedNotification] == 1)
        }
    }

    @Test func vanishingBeaconsAndAdaptersSwitchedOff() async throws {
        try await withSimulator(
            count: 1,
            configure: {
                $0.faults = [.vanish: 1]
                $0.outage = .milliseconds(300)
            }
        ) { fixture throws in
            try await fixture.discoverAll()
            let state = fixture.fleet[0]
            let error = await #expect(throws: BusError.self) { try await fixture.connect(state) }
            #expect(error?.message == "le-connection-abort-by-local")
            // It went out of range at that Connect (the firing log says so,
            // whenever it is read: a snapshot of inRange raced the outage's
            // end), and comes back by itself.
            let fired = try await fixture.firedRules().recent.map { [$0.rule, $0.hook, $0.kind] }
            #expect(fired == [["faults.vanish", "connect.requested", "vanish"]])
            try await fixture.waitFor(#"{"inRange": "\#(state.address)"}"#)
        }
        try await withSimulator(
            count: 1,
            configure: {
                $0.faults = [.adapterOff: 1]
                $0.outage = .milliseconds(300)
            }
        ) { fixture throws in
            try await fixture.discoverAll()
            // Powered as it changes, subscribed to before the Connect: off,
            // then on again after the outage, whatever the outage's length
            // (reading Powered after the Connect raced the outage's end).
            let powered = try await fixture.client.signals(
                matching: .propertiesChanged(
                    sender: SimulatorFixture.bluez, interface: "org.bluez.Adapter1",
                    pathNamespace: SimulatorFixture.adapter)
            ).compactMap { (try? PropertiesChanged($0))?.changed["Powered"]?.bool }
            let error = await #expect(throws: BusError.self) { try await fixture.connect(fixture.fleet[0]) }
            #expect(error?.name == .bluez.notReady)
            #expect(try await take(2, from: powered, "Powered false, then true") == [false, true])
        }
    }

    @Test func aBeaconsOwnFaultsFromUpdate() async throws {
        try await withSimulator(count: 2) { fixture throws in
            try await fixture.discoverAll()
            let (sick, healthy) = (fixture.fleet[0], fixture.fleet[1])
            try await fixture.control.update(sick.address, #"{"faults": {"att-error": 1}}"#)
            try await fixture.connect(sick)
            try await fixture.connect(healthy)
            await #expect(throws: BusError.self) { try await fixture.read(SBeaconUUID.batteryLevel, of: sick) }
            #expect(try await fixture.read(SBeaconUUID.batteryLevel, of: healthy).count == 1)
            let bad = await #expect(throws: BusError.self) {
                try await fixture.control.update(sick.address, #"{"faults": {"gremlins": 1}}"#)
            }
            #expect(bad?.message == "Update: unknown fault 'gremlins'")
        }
    }
}
