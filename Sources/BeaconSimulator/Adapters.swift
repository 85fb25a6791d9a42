import DBusBinding
import Foundation

/// Adapters and their power: Adapter1's properties and methods, Powered
/// off and on in BlueZ' order, unplug and replug (mode 4), wedging (mode 3).
extension SimulatedBluetoothd {
    func adapterProperties(_ index: Int) -> [String: BusValue] {
        let adapter = adapters[index]
        let name = adapter.path.description.split(separator: "/").last.map(String.init) ?? "hci\(index)"
        return [
            "Address": .string(adapter.address), "AddressType": "public", "Name": .string("bench-\(name)"),
            "Alias": .string("bench-\(name)"), "Class": .uint32(0x000000), "Powered": .boolean(adapter.powered),
            "PowerState": .string(adapter.powered ? "on" : "off"), "Discoverable": false,
            "DiscoverableTimeout": .uint32(180), "Pairable": true, "PairableTimeout": .uint32(0),
            "Discovering": false,
            "UUIDs": .strings([
                "00001800-0000-1000-8000-00805f9b34fb", "00001801-0000-1000-8000-00805f9b34fb",
                "0000180a-0000-1000-8000-00805f9b34fb",
            ]),
            "Modalias": "usb:v1D6Bp0246d0542", "Roles": .strings(["central", "peripheral"]),
        ]
    }

    func adapterInterface(_ index: Int) -> BusInterface {
        BusInterface(
            name: "org.bluez.Adapter1",
            methods: [
                .init(name: "StartDiscovery") { [self] call in
                    try await startDiscovery(index, client: call.sender)
                    return []
                },
                .init(name: "StopDiscovery") { [self] call in
                    try await stopDiscovery(index, client: call.sender)
                    return []
                },
                .init(name: "SetDiscoveryFilter", inputs: [.init("filter", .propertyMap)]) { [self] call in
                    try await setDiscoveryFilter(index, client: call.sender, call.body[0].stringKeyedDictionary ?? [:])
                    return []
                },
                .init(name: "GetDiscoveryFilters", outputs: [.init("filters", .array(.string))]) { _ in
                    [.strings(["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"])]
                },
                .init(name: "RemoveDevice", inputs: [.init("device", .objectPath)]) { [self] call in
                    try await removeDevice(index, path: call.body[0].objectPath!)
                    return []
                },
            ],
            properties: [
                .init("Address", .string), .init("AddressType", .string), .init("Name", .string),
                .init("Alias", .string, access: .readwrite), .init("Class", .uint32),
                .init("Powered", .boolean, access: .readwrite) { [self] value, _ in
                    try await powerWritten(index, value.bool ?? false)
                },
                .init("PowerState", .string),
                .init("Discoverable", .boolean, access: .readwrite),
                .init("DiscoverableTimeout", .uint32, access: .readwrite),
                .init("Pairable", .boolean, access: .readwrite), .init("PairableTimeout", .uint32, access: .readwrite),
                .init("Discovering", .boolean), .init("UUIDs", .array(.string)), .init("Modalias", .string),
                .init("Roles", .array(.string)),
            ])
    }

    func setAdapterProperties(_ index: Int, _ changes: [String: BusValue?]) async {
        guard adapters[index].present else { return }
        try? await bus.setProperties(changes, interface: "org.bluez.Adapter1", at: adapters[index].path)
    }

    /// Links up on the adapter.
    func linksUp(_ index: Int) -> Int { adapters[index].devices.values.filter(\.connected).count }

    /// A client wrote Powered: the plan is asked (hook adapter.power), a
    /// false → true is counted as a power cycle, and it clears a wedge that
    /// is not sticky.
    func powerWritten(_ index: Int, _ powered: Bool) async throws {
        if let failure = try await ask(.adapterPower, adapter: index).failure { throw failure }
        let wasOff = !adapters[index].powered
        try await setPowered(index, powered)
        if powered, wasOff {
            counters.powerCycles[adapters[index].address, default: 0] += 1
        }
    }

    /// Powered off as bluetoothd does it (src/adapter.c `adapter_stop`):
    /// every link goes Connected=false, discovery sessions are dropped and
    /// the RSSI of what they found invalidated, then Discovering=false,
    /// Powered=false and PowerState. Device objects stay. Powered on clears
    /// a wedge that is not sticky.
    func setPowered(_ index: Int, _ powered: Bool) async throws {
        guard adapters[index].present else { throw BusError(.bluez.doesNotExist, "Does Not Exist") }
        if !powered {
            for address in adapters[index].devices.keys where adapters[index].devices[address]?.connected == true {
                await disconnect(index, address, reason: .local)
            }
            let wasDiscovering = adapters[index].scanTask != nil
            adapters[index].discoveryClients = []
            adapters[index].filters = [:]
            adapters[index].scanTask?.cancel()
            adapters[index].scanTask = nil
            if wasDiscovering {
                for (address, device) in adapters[index].devices where device.reportedRSSI != nil {
                    adapters[index].devices[address]?.reportedRSSI = nil
                    try? await bus.setProperties(["RSSI": nil], interface: "org.bluez.Device1", at: device.path)
                }
            }
            await setAdapterProperties(index, ["Discovering": false])
        }
        adapters[index].powered = powered
        if powered, let wedge = adapters[index].wedge, !wedge.sticky { adapters[index].wedge = nil }
        await setAdapterProperties(
            index, ["Powered": .boolean(powered), "PowerState": .string(powered ? "on" : "off")])
    }

    /// The adapter powers off for `duration`, then on again (`power-off`;
    /// nil: it stays off until a client powers it on).
    func switchOffForAWhile(_ index: Int, _ duration: Duration?) async {
        try? await setPowered(index, false)
        guard let duration else { return }
        Task { [self] in
            try? await Task.sleep(for: duration)
            try? await setPowered(index, true)
        }
    }

    /// Mode 3: Powered stays true; StartDiscovery is refused, Discovering
    /// never turns true, no adverts are heard, and Connects abort, until
    /// Powered goes false and true again (unless sticky). Discovery running
    /// now stops being heard (Discovering stays as it was: the controller
    /// does not say).
    func wedge(_ index: Int, _ wedge: Wedge) {
        adapters[index].wedge = wedge
    }

    // MARK: Unplug and replug

    /// Takes the adapter's objects off the bus (InterfacesRemoved: each
    /// device's GATT children, the device, then the adapter) and forgets
    /// its links, discovery and devices; what it remembers (devices ever
    /// connected) stays.
    func takeAway(_ index: Int) async {
        guard adapters[index].present else { return }
        adapters[index].scanTask?.cancel()
        for (address, device) in adapters[index].devices {
            device.removal?.cancel()
            if device.connected { adapters[index].devices[address]?.generation = nextGeneration() }
            for path in device.gattPaths.reversed() { try? await bus.unexport(at: path) }
            try? await bus.unexport(at: device.path)
        }
        try? await bus.unexport(at: adapters[index].path)
        var fresh = Adapter(index: index, path: adapters[index].path, address: adapters[index].address)
        fresh.remembered = adapters[index].remembered
        fresh.present = false
        adapters[index] = fresh
        wakeQueuedConnects(index)
        checkWaiters()
    }

    /// The adapter at `index` unplugged for `downtime`, then plugged back:
    /// its objects go (InterfacesRemoved: its devices, then itself), its
    /// links and its clients' discovery with them; it comes back at the
    /// same path, powered, not discovering, knowing no device. (`replug`
    /// in a fault plan is the BlueZ-faithful variant: a new index, and the
    /// devices ever connected reloaded.)
    public func unplug(_ index: Int, downtime: Duration) async throws {
        guard adapters.indices.contains(index) else {
            throw BusError(.invalidArgs, "Unplug: no adapter \(index) (there are \(adapters.count))")
        }
        await takeAway(index)
        adapters[index].remembered = []
        Task { [self] in
            try? await Task.sleep(for: downtime)
            await self.plugBack(index, hci: nil)
        }
    }

    /// Mode 4: the adapter goes (as `takeAway`), and after `goneMs` comes
    /// back as /org/bluez/hci<newIndex> (nil: one past the highest index
    /// used so far) with the same Address, powered (AutoEnable), with the
    /// devices ever connected on it reloaded (no RSSI, no GATT objects).
    func replug(_ index: Int, goneMs: Int, newIndex: Int?) async {
        guard adapters[index].present else { return }
        await takeAway(index)
        let hci = newIndex ?? (highestHci + 1)
        highestHci = max(highestHci, hci)
        Task { [self] in
            try? await Task.sleep(for: .milliseconds(goneMs))
            await self.plugBack(index, hci: hci)
        }
    }

    func plugBack(_ index: Int, hci: Int?) async {
        if let hci, let path = try? ObjectPath("/org/bluez/hci\(hci)") { adapters[index].path = path }
        adapters[index].present = true
        adapters[index].powered = true
        try? await bus.export(adapterInterface(index), at: adapters[index].path, properties: adapterProperties(index))
        for address in beaconOrder where adapters[index].remembered.contains(address) {
            await exportDevice(index, address, rssi: nil)
        }
        checkWaiters()
    }
}
