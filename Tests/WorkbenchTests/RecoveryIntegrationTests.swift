import BeaconSimulator
import BlueZClient
import DBusBinding
import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import TestSupport
import Testing

@testable import Workbench

/// The recovery policies against the simulator (in this process): the
/// client's presence, GATT paths, RemoveDevice and power cycle; the fleet
/// runner's stale and slot recoveries under fault plans, counted by the
/// simulator's `Counters`.
@Suite("Recovering without an operator, against the simulator", .timeLimit(.minutes(5)))
struct RecoveryIntegrationTests {
    /// Beacons that can all be provisioned: new, charged, current firmware, still.
    static func sound(_ count: Int, seed: UInt64) -> [BeaconState] {
        FleetGenerator.make(count: count, seed: seed, now: Int64(Date().timeIntervalSince1970 * 1000), fresh: true)
            .map { state in
                var state = state
                state.battery = 80
                state.firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)
                state.moving = false
                return state
            }
    }

    static func recoverRows(_ inventory: Inventory) async throws -> [OutcomeRecord] {
        try await inventory.outcomes(device: nil, limit: 1000).filter { $0.step == "recover" }
    }

    /// (bluetoothd's temporary timeout is an hour here: nothing is to be
    /// forgotten, so the only way to be gone is the client's presence
    /// timeout. With 30 s, a loaded machine could see a cached object
    /// removed before the test looked at it.)
    @Test func aCachedObjectIsNotABeaconInRangeAndALeavingOneIsGoneWithinSeconds() async throws {
        try await withBench(count: 3, seed: 41, configure: { $0.temporaryTimeout = .seconds(3600) }) { bench throws in
            let left = bench.fleet[0].address
            let staying = bench.fleet[1].address
            let leaving = bench.fleet[2].address
            // One beacon left before a second client (a station started
            // later) reads bluetoothd's objects: its object and RSSI remain.
            try await bench.daemon.update(left) { $0.inRange = false }
            let connection = try await BusConnection.connect(.address(bench.bus.address))
            let client = BluetoothClient(bus: connection)
            try await client.start()
            let cached = try #require(await client.device(address: left), "the cached object is on the bus")
            #expect(!(await client.isPresent(cached, within: Recovery.presenceTimeout)), "cached is not present")
            try await client.startDiscovery(on: try await client.adapter(named: nil))
            try await waitUntil("the beacons in range to be heard") {
                for address in [staying, leaving] {
                    guard let device = await client.device(address: address),
                        await client.isPresent(device, within: Recovery.presenceTimeout)
                    else { return false }
                }
                return true
            }
            // Heard others since discovery began; the cached one still not.
            if let device = await client.device(address: left) {
                #expect(!(await client.isPresent(device, within: Recovery.presenceTimeout)))
            }
            // A beacon that leaves is gone once its adverts stop for the
            // presence timeout, while its object is still on the bus.
            try await bench.daemon.update(leaving) { $0.inRange = false }
            let since = ContinuousClock.now
            try await waitUntil("the leaving beacon to be gone") {
                guard let device = await client.device(address: leaving) else { return true }
                return !(await client.isPresent(device, within: Recovery.presenceTimeout))
            }
            let took = ContinuousClock.now - since
            // Gone by the presence timeout, not by bluetoothd forgetting it:
            // its object is still there (it stays an hour).
            #expect(await client.device(address: leaving) != nil, "bluetoothd still has its object")
            print("the leaving beacon was gone \(took) after it left (presence timeout \(Recovery.presenceTimeout))")
            await client.stop()
            await connection.close()
        }
    }

    /// With DuplicateData, bluetoothd announces ManufacturerData in every
    /// advert. Only a device first heard, or data that changed, is news
    /// for a poller of `deviceListVersion`: the same data again is not
    /// (a scan over 2,000 beacons re-listed them five times a second).
    @Test func theSameAdvertAgainIsNoNewsButNewDataIs() async throws {
        try await withBench(count: 2, seed: 47) { bench throws in
            let address = bench.fleet[0].address
            let connection = try await BusConnection.connect(.address(bench.bus.address))
            let client = BluetoothClient(bus: connection)
            try await client.start()
            try await client.startDiscovery(on: try await client.adapter(named: nil), everyAdvert: true)
            try await waitUntil("both beacons to be heard since discovery began") {
                let present = await client.presentDevices(within: Recovery.presenceTimeout)
                for beacon in bench.fleet {
                    guard let device = await client.device(address: beacon.address), present.contains(device.path),
                        await client.isPresent(device, within: Recovery.presenceTimeout)
                    else { return false }
                }
                return true
            }
            let before = await client.deviceListVersion
            let counted = await bench.daemon.activity.discoverySignals
            // Several more adverts from each beacon, each with its data.
            try await waitUntil("six more adverts to be announced") {
                await bench.daemon.activity.discoverySignals >= counted + 6
            }
            let heard = try #require(await client.device(address: address)?.lastHeard)
            try await waitUntil("the client to hear a later advert") {
                await client.device(address: address)?.lastHeard.map { $0 > heard } ?? false
            }
            #expect(await client.deviceListVersion == before, "the same data again moved the device list")
            // New data in the advert (the battery in the bench summary) is news.
            try await bench.daemon.update(address) { $0.battery = 3 }
            try await waitUntil("the new advert data to reach the client") {
                await client.deviceListVersion > before
            }
            await client.stop()
            await connection.close()
        }
    }

    /// The registry's indexes follow adverts and links as they change:
    /// what each beacon advertises under a company, and the links up on an
    /// adapter (both kept per change, not rebuilt per question).
    @Test func advertsAndLinksAreIndexedAsTheyChange() async throws {
        try await withBench(count: 2, seed: 53) { bench throws in
            let client = bench.client
            let first = bench.fleet[0]
            let adapter = try await client.adapter(named: nil)
            try await client.startDiscovery(on: adapter, everyAdvert: true)
            func advertised() async -> [String: [UInt8]] {
                await client.advertisedData(company: SBeaconUUID.appleCompanyID)
            }
            try await waitUntil("both beacons' iBeacon adverts to be indexed") {
                await advertised().count == 2
            }
            #expect(
                await advertised()[first.address] == IBeaconAdvert(identity: first.identity, measuredPower: -59).bytes)
            let changed = BeaconIdentity(major: first.identity.major &+ 1, minor: first.identity.minor &+ 1)
            try await bench.daemon.update(first.address) { $0.identity = changed }
            try await waitUntil("the new identity's advert to be indexed") {
                await advertised()[first.address] == IBeaconAdvert(identity: changed, measuredPower: -59).bytes
            }
            #expect(await advertised().count == 2)
            #expect(await client.linksUp(on: adapter.path) == 0)
            let policy = ConnectPolicy(requiredServices: SBeacon.requiredServices)
            let session = try await client.connect(first.address, policy: policy)
            #expect(await client.linksUp(on: adapter.path) == 1)
            #expect(await client.linksUp(on: adapter.path, excluding: first.address.lowercased()) == 0)
            await session.disconnect()
            try await waitUntil("the link to be down") { await client.linksUp(on: adapter.path) == 0 }
            try await client.stopDiscovery(on: adapter)
        }
    }

    @Test func aGattPathIsNeverUsedBeyondItsConnection() async throws {
        try await withBench(count: 1, seed: 43) { bench throws in
            let address = bench.fleet[0].address
            let policy = ConnectPolicy(requiredServices: SBeacon.requiredServices)
            let first = try await bench.client.connect(address, policy: policy)
            _ = try await first.read(SBeaconUUID.batteryLevel.description)
            await first.disconnect()
            try await waitUntil("the first link to drop") {
                !(await bench.client.device(address: address)?.connected ?? true)
            }
            let second = try await bench.client.connect(address, policy: policy)
            #expect(try await second.read(SBeaconUUID.batteryLevel.description).count == 1)
            // The first session's paths belong to a link that is gone.
            do {
                _ = try await first.read(SBeaconUUID.batteryLevel.description)
                Issue.record("a read through the first connection's session worked on the second link")
            } catch let error as BlueZError {
                #expect(error.reason == .disconnected, "\(error)")
            }
            await second.disconnect()
        }
    }

    /// An adapter powered off takes every link on it, and their GATT
    /// trees: a service check on such a link is a disconnection (retried
    /// within the run), never "the beacon has no such service" (the fault
    /// matrix's adapter-off case failed beacons this way).
    @Test func aServiceGoneWithAPoweredOffAdapterIsADisconnection() async throws {
        try await withBench(count: 1, seed: 44) { bench throws in
            let address = bench.fleet[0].address
            let policy = ConnectPolicy(requiredServices: SBeacon.requiredServices)
            let session = try await bench.client.connect(address, policy: policy)
            for uuid in SBeacon.requiredServices { try await session.requireService(uuid) }
            let adapter = try await bench.client.adapter(named: nil)
            try await bench.client.setPowered(adapter, false)
            try await waitUntil("the link to drop with the adapter") {
                !(await bench.client.device(address: address)?.connected ?? false)
            }
            do {
                try await session.requireService(SBeacon.requiredServices[0])
                Issue.record("a service check passed on a link that went with its adapter")
            } catch let error as BlueZError {
                #expect(error.reason == .disconnected, "\(error)")
            }
            try await bench.client.setPowered(adapter, true)
        }
    }

    @Test func removeDeviceAndAPowerCycleDoWhatTheySay() async throws {
        try await withBench(count: 2, seed: 47) { bench throws in
            let address = bench.fleet[0].address
            #expect(try await bench.client.removeDevice(address))
            // Discovery runs: the next advert brings it back.
            _ = try await bench.client.waitForDevice(address: address, timeout: Recovery.reappearTimeout)
            #expect(await bench.daemon.counters.removeDevice[address] == 1)
            // Unknown to bluetoothd: nothing to remove, not an error.
            #expect(try await bench.client.removeDevice("C0:00:00:00:00:99") == false)

            let adapter = try await bench.client.adapter(named: nil)
            try await bench.client.powerCycle(
                adapter, offTimeout: Recovery.powerOffTimeout, offTime: .milliseconds(100),
                onTimeout: Recovery.powerOnTimeout)
            #expect(try await bench.client.adapter(named: nil).powered)
            #expect(await bench.client.discoveringSince(adapter.path) == nil, "power-off ends our discovery")
            #expect(await bench.daemon.counters.powerCycles[adapter.address] == 1)
        }
    }

    @Test func aStaleDeviceIsRemovedOnceAndTheFleetConverges() async throws {
        let fleet = Self.sound(4, seed: 53)
        let stale = fleet[1].address
        let plan = try FaultPlan(
            json: #"""
                {"rules": [{"id": "m1", "hook": "connect.requested", "target": {"address": "\#(stale)"},
                  "trigger": {"nth": 1}, "action": {"kind": "stale"}}]}
                """#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let inventory = try FleetRunnerTests.inventory()
            let run = try await inventory.beginRun(.init(command: "provision"))
            let result = await FleetRunner(client: bench.client, inventory: inventory, run: run, concurrency: 4)
                .runFleet(FleetRunnerTests.provision, on: fleet.map(\.address))
            for recap in result.recaps { #expect(recap.failed == 0 && recap.changed > 0, "\(recap)") }
            let counters = await bench.daemon.counters
            #expect(counters.removeDevice == [stale: 1], "\(counters.removeDevice)")
            #expect(counters.staleRefusals >= Recovery.staleLimit)
            let rows = try await Self.recoverRows(inventory)
            #expect(rows.count == 1, "\(rows)")
            #expect(rows.first?.device == stale)
            #expect(rows.first?.status == "ok")
            #expect(rows.first?.detail == "remove-device after 3 × le-connection-abort-by-local", "\(rows)")
            #expect(result.recoveries.map(\.action) == ["remove-device"])
            for state in fleet {
                #expect(try await bench.truth(state).config == FleetRunnerTests.profiles["car"]!.config)
            }
        }
    }

    @Test func nineBeaconsOnATwoSlotAdapterAllConverge() async throws {
        let fleet = Self.sound(9, seed: 59)
        let plan = try FaultPlan(
            json: #"{"adapters": [{"index": 0, "slots": 2, "slotFailure": "abort"}], "rules": []}"#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let inventory = try FleetRunnerTests.inventory()
            let run = try await inventory.beginRun(.init(command: "provision"))
            let adapter = try await bench.client.adapter(named: nil)
            let result = await FleetRunner(client: bench.client, inventory: inventory, run: run, concurrency: 5)
                .runFleet(FleetRunnerTests.provision, on: fleet.map(\.address))
            for recap in result.recaps { #expect(recap.failed == 0 && recap.changed > 0, "\(recap)") }
            let rows = try await Self.recoverRows(inventory)
            let counters = await bench.daemon.counters
            #expect(counters.slotRefusals > 0, "the adapter refused a connect beyond its 2 slots: \(counters)")
            let lowered = rows.filter { $0.detail?.hasPrefix("concurrency") == true }
            #expect(
                lowered.map(\.detail) == ["concurrency 5 → 2 on hci0 \(adapter.address.uppercased())"], "\(rows)")
            #expect(lowered.allSatisfy { $0.device == nil && $0.status == "ok" })
            #expect(await bench.daemon.counters.removeDevice.isEmpty, "slot failures are not stale")
            for state in fleet {
                #expect(try await bench.truth(state).config == FleetRunnerTests.profiles["car"]!.config)
            }
        }
    }

    /// A limit learned from plain aborts alone is a guess, and probed back
    /// up: the adapter holds one link at first (two beacons refused at one
    /// link up teach 1, as two random aborts did in a 60-beacon run at 5 %
    /// faults), then five. The run raises the limit again, says so in a
    /// `recover` row, and converges.
    @Test func aLimitTaughtByAbortsAloneIsProbedBackUp() async throws {
        let fleet = Self.sound(12, seed: 61)
        let plan = try FaultPlan(
            json: #"{"adapters": [{"index": 0, "slots": 1, "slotFailure": "abort"}], "rules": []}"#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let inventory = try FleetRunnerTests.inventory()
            let run = try await inventory.beginRun(.init(command: "provision"))
            let address = try await bench.client.adapter(named: nil).address.uppercased()
            let recovery = RecoveryCoordinator(client: bench.client, inventory: inventory, run: run, concurrency: 5)
            await recovery.start()
            let runner = FleetRunner(
                client: bench.client, inventory: inventory, run: run, concurrency: 5, recovery: recovery)
            let fleetRun = Task { await runner.runFleet(FleetRunnerTests.provision, on: fleet.map(\.address)) }
            try await waitUntil("two beacons refused at one link up to teach hci0 a limit of 1", cap: .seconds(60)) {
                await recovery.learnedLimits()[address] == 1
            }
            // From now on the adapter holds 5 (the simulator's default).
            await bench.daemon.setPlan(try FaultPlan(json: #"{"rules": []}"#))
            let result = await fleetRun.value
            await recovery.stop()
            for recap in result.recaps { #expect(recap.failed == 0 && recap.changed > 0, "\(recap)") }
            #expect(result.recaps.count == fleet.count)
            let rows = try await Self.recoverRows(inventory).compactMap(\.detail).filter {
                $0.hasPrefix("concurrency")
            }
            #expect(rows.contains("concurrency 5 → 1 on hci0 \(address)"), "\(rows)")
            #expect(rows.contains { $0.hasPrefix("concurrency 1 → ") && $0.hasSuffix("on hci0 \(address)") }, "\(rows)")
            #expect((await recovery.learnedLimits()[address] ?? 5) >= 2)
            for state in fleet {
                #expect(try await bench.truth(state).config == FleetRunnerTests.profiles["car"]!.config)
            }
        }
    }

    /// A fleet run over the fixture's client with the recovery of a bench:
    /// discovery kept on (every advert), adapters watched.
    static func provision(
        _ bench: BenchFixture, _ fleet: [BeaconState], concurrency: Int = 4
    ) async throws -> (FleetResult, Inventory) {
        let inventory = try FleetRunnerTests.inventory()
        let run = try await inventory.beginRun(.init(command: "provision"))
        let recovery = RecoveryCoordinator(
            client: bench.client, inventory: inventory, run: run, concurrency: concurrency,
            options: RecoveryOptions(adapterResets: true, keepDiscovery: true, everyAdvert: true))
        await recovery.start()
        let result = await FleetRunner(
            client: bench.client, inventory: inventory, run: run, concurrency: concurrency, recovery: recovery
        ).runFleet(FleetRunnerTests.provision, on: fleet.map(\.address))
        await recovery.stop()
        return (result, inventory)
    }

    static func expectConverged(_ bench: BenchFixture, _ fleet: [BeaconState], _ result: FleetResult) async throws {
        for recap in result.recaps { #expect(recap.failed == 0 && recap.changed > 0, "\(recap)") }
        for state in fleet {
            #expect(try await bench.truth(state).config == FleetRunnerTests.profiles["car"]!.config)
        }
    }

    @Test func connectBusyWhileDiscoveringPausesDiscoveryOnce() async throws {
        let fleet = Self.sound(4, seed: 61)
        let plan = try FaultPlan(
            json: #"""
                {"rules": [{"id": "m6", "hook": "connect.requested", "target": {"any": true},
                  "when": {"discovering": true}, "trigger": {"every": true},
                  "action": {"kind": "busy-while-discovering"}}]}
                """#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let adapter = try await bench.client.adapter(named: nil)
            let (result, inventory) = try await Self.provision(bench, fleet)
            try await Self.expectConverged(bench, fleet, result)
            let rows = try await Self.recoverRows(inventory)
            #expect(rows.map(\.detail) == ["pause-discovery hci0 \(adapter.address.uppercased())"], "\(rows)")
            #expect(rows.allSatisfy { $0.device == nil })
            #expect(await bench.daemon.counters.removeDevice.isEmpty)
        }
    }

    @Test func anAdapterReplugedAsHci1IsFollowed() async throws {
        let fleet = Self.sound(4, seed: 67)
        let plan = try FaultPlan(
            json: #"""
                {"rules": [{"id": "m4", "hook": "connect.requested", "target": {"address": "\#(fleet[2].address)"},
                  "trigger": {"nth": 1}, "action": {"kind": "replug", "goneMs": 1500, "newIndex": "next"}}]}
                """#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let adapter = try await bench.client.adapter(named: nil)
            let (result, inventory) = try await Self.provision(bench, fleet)
            try await Self.expectConverged(bench, fleet, result)
            let rows = try await Self.recoverRows(inventory)
            #expect(
                rows.map(\.detail) == ["follow-adapter \(adapter.address.uppercased()) hci0 → hci1"], "\(rows)")
            #expect(try await bench.client.adapter(named: nil).name == "hci1")
            #expect(result.adapterFailure == nil)
        }
    }

    @Test func aWedgedAdapterIsPowerCycledOnceAndTheFleetConverges() async throws {
        let fleet = Self.sound(3, seed: 71)
        let plan = try FaultPlan(
            json: #"""
                {"rules": [{"id": "m3", "hook": "connect.requested", "target": {"adapter": 0}, "trigger": {"nth": 1},
                  "action": {"kind": "wedge", "discoveryError": "in-progress", "connect": {"abortAfterMs": 500}}}]}
                """#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let adapter = try await bench.client.adapter(named: nil)
            let (result, inventory) = try await Self.provision(bench, fleet, concurrency: 3)
            try await Self.expectConverged(bench, fleet, result)
            let counters = await bench.daemon.counters
            #expect(counters.powerCycles == [adapter.address: 1], "\(counters)")
            #expect(counters.removeDevice.isEmpty, "a wedge is not a stale device: \(counters)")
            let rows = try await Self.recoverRows(inventory)
            #expect(rows.map(\.detail) == ["power-cycle hci0 \(adapter.address.uppercased())"], "\(rows)")
        }
    }

    @Test func gattHandlesThatShiftAreResolvedAfreshOnTheNextConnection() async throws {
        let fleet = Self.sound(3, seed: 73)
        let target = fleet[1].address
        let plan = try FaultPlan(
            json: #"""
                {"rules": [
                  {"id": "m5", "hook": "write.landed", "target": {"address": "\#(target)",
                    "characteristic": "\#(SBeaconUUID.drivingBehaviourConfig)"},
                   "trigger": {"nth": 1}, "action": {"kind": "shift-gatt", "delta": 16}},
                  {"id": "m5b", "hook": "write.landed", "target": {"address": "\#(target)"}, "trigger": {"nth": 1},
                   "action": {"kind": "drop-link", "reason": "remote"}}]}
                """#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let (result, inventory) = try await Self.provision(bench, fleet)
            try await Self.expectConverged(bench, fleet, result)
            #expect(try await Self.recoverRows(inventory).isEmpty, "nothing to recover: a reconnect resolves afresh")
            let fired = await bench.daemon.currentPlan.fired
            #expect(fired["m5"] == 1 && fired["m5b"] == 1, "the handles moved and the link dropped: \(fired)")
        }
    }

    @Test func connectBusyWhileDiscoveringOnTheBuiltRunnerNeverChargesABeacon() async throws {
        let fleet = Self.sound(5, seed: 79)
        let plan = try FaultPlan(
            json: #"""
                {"rules": [{"id": "m6", "hook": "connect.requested", "target": {"any": true},
                  "when": {"discovering": true}, "trigger": {"every": true},
                  "action": {"kind": "busy-while-discovering"}}]}
                """#)
        try await withBench(fleet: fleet, configure: { $0.faultPlan = plan }) { bench throws in
            let (result, _) = try await Self.provision(bench, fleet, concurrency: 5)
            try await Self.expectConverged(bench, fleet, result)
            // Busy failures are retried inside the connect, uncharged: no
            // step row records a retry for them.
            #expect(result.recaps.allSatisfy { $0.retries == 0 }, "\(result.recaps.map(\.retries))")
            #expect((await bench.daemon.currentPlan.fired["m6"] ?? 0) >= 1, "Connect was answered busy")
        }
    }
}
