import DBusBinding
import Foundation

/// Links: Device1.Connect and Disconnect, one connect at a time per
/// adapter, the adapter's LE slots, stale devices (mode 1), wedged
/// adapters and absent beacons failing their connects, and the order in
/// which a link goes down.
extension SimulatedBluetoothd {
    static let abortByLocal = BusError(.bluez.failed, "le-connection-abort-by-local")

    /// The LE links adapter `index` holds (`--slots`, or the plan's
    /// `adapters[].slots`), and what a connect beyond them gets.
    func slots(_ index: Int) -> (limit: Int, failure: FaultPlan.SlotFailure) {
        let limit = plan.limit(forAdapter: index)
        return (limit?.slots ?? options.connectionsPerAdapter, limit?.slotFailure ?? .abort)
    }

    /// A link generation never given before (`Device.generation`).
    func nextGeneration() -> Int {
        lastGeneration += 1
        return lastGeneration
    }

    /// The adapter's pending connect ended: the queued ones go on.
    func endConnect(_ index: Int) {
        adapters[index].connectPending = false
        wakeQueuedConnects(index)
    }

    /// Wakes the connects queued on adapter `index` (each looks again).
    func wakeQueuedConnects(_ index: Int) {
        for waiting in connectQueue.removeValue(forKey: index) ?? [] { waiting.resume() }
    }

    func connect(_ index: Int, _ address: String) async throws {
        activity.connects += 1
        counters.connects += 1
        guard adapters[index].present else { throw BusError(.bluez.doesNotExist, "Does Not Exist") }
        guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
        guard let device = adapters[index].devices[address] else {
            throw BusError(.bluez.doesNotExist, "Does Not Exist")
        }
        if device.connected { throw BusError(.bluez.alreadyConnected, "Already Connected") }
        // bluetoothd: a Connect of a device already connecting is InProgress.
        guard connecting.insert(address).inserted else { throw BusError(.bluez.inProgress, "In Progress") }
        defer { connecting.remove(address) }
        if let failure = try await ask(.connectRequested, adapter: index, address: address).failure { throw failure }
        guard adapters[index].present, adapters[index].devices[address] != nil else {
            throw BusError(.bluez.doesNotExist, "Does Not Exist")
        }
        // The kernel queues the connects of other devices, one at a time per
        // controller.
        while adapters[index].connectPending {
            await withCheckedContinuation { connectQueue[index, default: []].append($0) }
        }
        guard adapters[index].present, let queued = adapters[index].devices[address] else {
            throw BusError(.bluez.doesNotExist, "Does Not Exist")
        }
        guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
        if queued.connected { throw BusError(.bluez.alreadyConnected, "Already Connected") }
        adapters[index].connectPending = true
        adapters[index].devices[address]?.removal?.cancel()
        adapters[index].devices[address]?.removal = nil
        adapters[index].devices[address]?.temporary = false

        // Mode 1, as batmon-ha#333 logged it: Connected true, the abort,
        // Connected false — until RemoveDevice.
        if let stale = stale[address] {
            counters.staleRefusals += 1
            if stale.flap { await setDeviceProperties(index, address, ["Connected": true]) }
            try? await Task.sleep(for: stale.afterMs.map { .milliseconds($0) } ?? options.latency.connect)
            if stale.flap { await setDeviceProperties(index, address, ["Connected": false]) }
            endConnect(index)
            throw Self.abortByLocal
        }
        // A wedged controller never completes the connection (or refuses
        // it outright: NotReady while Powered reads true).
        if let wedge = adapters[index].wedge, wedge.connectNotReady {
            endConnect(index)
            throw BusError(.bluez.notReady, "Resource Not Ready")
        }
        if let wedge = adapters[index].wedge {
            try? await Task.sleep(for: .milliseconds(wedge.abortAfterMs))
            endConnect(index)
            throw Self.abortByLocal
        }
        // A beacon that is not there: the kernel's LE connect timeout.
        if beacons[address]?.state.inRange != true {
            try? await Task.sleep(for: options.latency.absentConnect)
            endConnect(index)
            throw Self.abortByLocal
        }
        try? await Task.sleep(for: options.latency.connect)
        endConnect(index)
        let (limit, slotFailure) = slots(index)
        if linksUp(index) >= limit {
            counters.slotRefusals += 1
            switch slotFailure {
            case .abort: throw Self.abortByLocal
            case .limitedResources:
                throw BusError(.bluez.failed, "Connection Rejected due to Limited Resources (0x0d)")
            case .vanish:
                // bleak-retry-connector's observation: out of slots, the
                // device drops off the bus until its next advert.
                if let gone = adapters[index].devices.removeValue(forKey: address) {
                    gone.removal?.cancel()
                    try? await bus.unexport(at: gone.path)
                }
                throw Self.abortByLocal
            }
        }
        // A disconnect still removing the last connection's GATT objects
        // (its awaits let this connect in): wait for it, or its removals
        // would take this connection's new objects with them.
        if tearingDown[address] != nil {
            await withCheckedContinuation { tearingDown[address, default: []].append($0) }
        }
        guard adapters[index].present, adapters[index].powered, adapters[index].devices[address] != nil,
            beacons[address]?.state.inRange == true
        else { throw Self.abortByLocal }
        adapters[index].devices[address]?.connected = true
        adapters[index].devices[address]?.generation = nextGeneration()
        adapters[index].remembered.insert(address)
        beacons[address]?.drain(BeaconFirmware.Drain.connection)
        guard let generation = adapters[index].devices[address]?.generation else { throw Self.abortByLocal }
        await setDeviceProperties(index, address, ["Connected": true])
        checkWaiters()

        // The link is up; BlueZ would reply here (Part 4 of
        // docs/bluez-failures.md: this simulator replies after
        // ServicesResolved).
        let up = try await ask(.linkUp, adapter: index, address: address)
        if let drop = up.drop {
            await disconnect(index, address, reason: drop.reason)
            throw BusError(.bluez.failed, "br-connection-canceled")
        }
        let resolving = try await ask(.servicesResolved, adapter: index, address: address)
        // Connected, but service discovery never finishes: the client is
        // left waiting for ServicesResolved.
        if resolving.withhold { return }
        if let drop = resolving.drop {
            await disconnect(index, address, reason: drop.reason)
            throw BusError(.bluez.failed, "br-connection-canceled")
        }
        if let failure = resolving.failure {
            await disconnect(index, address, reason: .local)
            throw failure
        }
        try? await Task.sleep(for: options.latency.serviceResolution)
        guard adapters[index].devices[address]?.generation == generation,
            let devicePath = adapters[index].devices[address]?.path
        else { throw BusError(.bluez.failed, "Software caused connection abort") }
        // A changed GATT database (shift-gatt) shows at this resolution.
        if let delta = pendingGattShift.removeValue(forKey: address) {
            gattOffset[address, default: 0] &+= UInt16(truncatingIfNeeded: delta)
        }
        // The GATT tree is exported before ServicesResolved turns true.
        let (nodes, characteristics) = GattLayout.nodes(under: devicePath, offset: gattOffset[address] ?? 0)
        for node in nodes {
            await exportGattNode(index, address, node)
        }
        // The link (or bluetoothd) may have gone while the tree was exported.
        guard adapters[index].devices[address]?.generation == generation else {
            for node in nodes.reversed() { try? await bus.unexport(at: node.path) }
            throw BusError(.bluez.failed, "Software caused connection abort")
        }
        adapters[index].devices[address]?.gattPaths = nodes.map(\.path)
        adapters[index].devices[address]?.characteristics = characteristics
        adapters[index].devices[address]?.servicesResolved = true
        let uuids =
            GattLayout.services.map(\.uuid.rawValue) + [
                "00001800-0000-1000-8000-00805f9b34fb",
                "00001801-0000-1000-8000-00805f9b34fb",
            ]
        // bluetoothd's battery plugin: Battery1 on the device while the
        // Battery Service is resolved.
        try? await bus.export(
            BusInterface(
                name: "org.bluez.Battery1", properties: [.init("Percentage", .byte), .init("Source", .string)]),
            at: devicePath,
            properties: [
                "Percentage": .byte(beacons[address]?.state.batteryPercent ?? 0), "Source": "org.bluez.Battery1",
            ])
        await setDeviceProperties(index, address, ["UUIDs": .strings(uuids.sorted()), "ServicesResolved": true])
        checkWaiters()
    }

    /// Drops a connection in BlueZ' order (src/device.c
    /// device_remove_connection): ServicesResolved false, the GATT objects
    /// removed (as with `[GATT] Cache = no`), `Device1.Disconnected(reason,
    /// message)`, Connected false.
    func disconnect(_ index: Int, _ address: String, reason: FaultPlan.DropReason) async {
        guard var device = adapters[index].devices[address], device.connected else { return }
        device.generation = nextGeneration()
        device.connected = false
        device.servicesResolved = false
        let paths = device.gattPaths
        device.gattPaths = []
        device.characteristics = [:]
        device.notifying = []
        adapters[index].devices[address] = device
        tearingDown[address] = tearingDown[address] ?? []
        await setDeviceProperties(index, address, ["ServicesResolved": false])
        for path in paths.reversed() { try? await bus.unexport(at: path) }
        try? await bus.unexport(["org.bluez.Battery1"], at: device.path)
        let (name, message) = reason.bluez
        try? await bus.emitSignal(
            path: device.path, interface: "org.bluez.Device1", member: "Disconnected",
            body: [.string(name), .string(message)])
        await setDeviceProperties(index, address, ["Connected": false])
        for waiting in tearingDown.removeValue(forKey: address) ?? [] { waiting.resume() }
        if adapters[index].discoveryClients.isEmpty { scheduleRemoval(index, address) }
        checkWaiters()
    }
}
