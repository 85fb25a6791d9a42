import DBusBinding
import Foundation
import SBeaconProtocol

/// Discovery and adverts: sessions per client, filters, the scan that
/// makes beacons appear and their RSSI move, device objects (Device1) and
/// their expiry, RemoveDevice, beacons leaving range (vanish, preheard).
extension SimulatedBluetoothd {
    func startDiscovery(_ index: Int, client: String) async throws {
        guard adapters[index].present else { throw BusError(.bluez.doesNotExist, "Does Not Exist") }
        do {
            if let failure = try await ask(.discoveryStart, adapter: index).failure { throw failure }
            guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
            // A wedged controller: mgmt Start Discovery fails, and bluetoothd
            // answers busy whatever the status (src/adapter.c
            // discovery_complete → btd_error_busy).
            if let wedge = adapters[index].wedge {
                switch wedge.discoveryError {
                case .inProgress: throw BusError(.bluez.inProgress, "Operation already in progress")
                case .notReady: throw BusError(.bluez.notReady, "Resource Not Ready")
                case .none: break
                }
            }
            guard !adapters[index].discoveryClients.contains(client) else {
                throw BusError(.bluez.inProgress, "Operation already in progress")
            }
        } catch {
            counters.startDiscoveryRefusals += 1
            throw error
        }
        adapters[index].discoveryClients.insert(client)
        watchDiscoveryClient(index, client)
        guard adapters[index].scanTask == nil else { return }
        await setAdapterProperties(index, ["Discovering": true])
        adapters[index].scanTask = Task { [self] in await scan(index) }
    }

    /// As bluetoothd does: a client that leaves the bus stops its discovery.
    func watchDiscoveryClient(_ index: Int, _ client: String) {
        guard let name = try? BusName(client) else { return }
        Task { [self] in
            guard let changes = try? await bus.nameOwnerChanges(of: name) else { return }
            if (try? await bus.nameOwner(of: name)) == .some(nil) {
                try? await stopDiscovery(index, client: client)
                return
            }
            for await change in changes where change.isVanished {
                try? await stopDiscovery(index, client: client)
                break
            }
        }
    }

    func stopDiscovery(_ index: Int, client: String) async throws {
        guard adapters[index].present else { throw BusError(.bluez.doesNotExist, "Does Not Exist") }
        guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
        guard adapters[index].discoveryClients.remove(client) != nil else {
            throw BusError(.bluez.failed, "No discovery started")
        }
        adapters[index].filters[client] = nil
        guard adapters[index].discoveryClients.isEmpty else { return }
        adapters[index].scanTask?.cancel()
        adapters[index].scanTask = nil
        await setAdapterProperties(index, ["Discovering": false])
        // Devices that were only seen, not connected, go after the
        // temporary timeout.
        for (address, device) in adapters[index].devices where !device.connected {
            scheduleRemoval(index, address)
        }
    }

    func setDiscoveryFilter(_ index: Int, client: String, _ filter: [String: BusValue]) async throws {
        let types: [String: BusType] = [
            "UUIDs": .array(.string), "RSSI": .int16, "Pathloss": .uint16, "Transport": .string,
            "DuplicateData": .boolean, "Discoverable": .boolean, "Pattern": .string,
        ]
        for (key, value) in filter {
            guard let type = types[key], value.type == type else {
                throw BusError(.bluez.invalidArguments, "Invalid arguments in method call")
            }
        }
        if filter["RSSI"] != nil, filter["Pathloss"] != nil {
            throw BusError(.bluez.invalidArguments, "Invalid arguments in method call")
        }
        if let transport = filter["Transport"]?.string, !["auto", "bredr", "le"].contains(transport) {
            throw BusError(.bluez.invalidArguments, "Invalid arguments in method call")
        }
        adapters[index].filters[client] = filter.isEmpty ? nil : filter
    }

    /// Whether any discovering client's filter lets `state` through.
    func passesFilters(_ index: Int, _ state: BeaconState) -> Bool {
        let filters = adapters[index].discoveryClients.map { adapters[index].filters[$0] ?? [:] }
        if filters.isEmpty { return true }
        return filters.contains { filter in
            if let floor = filter["RSSI"]?.int16, state.rssi < floor { return false }
            if let uuids = filter["UUIDs"]?.stringArray, !uuids.isEmpty { return false }
            if let transport = filter["Transport"]?.string, transport == "bredr" { return false }
            if let pattern = filter["Pattern"]?.string, !pattern.isEmpty,
                !state.address.hasPrefix(pattern), state.bluezName?.hasPrefix(pattern) != true
            {
                return false
            }
            return true
        }
    }

    /// While discovering: beacons in range appear, and their RSSI moves.
    /// Each advert is a `discovery.advert` hook; a wedged adapter hears
    /// nothing.
    func scan(_ index: Int) async {
        while !Task.isCancelled {
            for address in beaconOrder {
                guard adapters[index].wedge?.hearsAdverts ?? true, let state = beacons[address]?.state, state.inRange,
                    passesFilters(index, state)
                else { continue }
                if (try? await ask(.discoveryAdvert, adapter: index, address: address))?.withhold == true { continue }
                // The hook may have changed the world (a replug, a vanish).
                guard !Task.isCancelled, adapters[index].present, beacons[address]?.state.inRange == true else {
                    continue
                }
                if let device = adapters[index].devices[address] {
                    adapters[index].devices[address]?.removal?.cancel()
                    adapters[index].devices[address]?.removal = nil
                    adapters[index].devices[address]?.lastHeard = .now
                    let jitter = Int16(Int(jitterRandom.next() % 7) - 3)
                    let rssi = state.rssi + jitter
                    // As bluetoothd: every change while some client has a
                    // discovery filter (DuplicateData and the like), else
                    // only changes of 8 dBm or more.
                    let filtered = adapters[index].discoveryClients.contains { adapters[index].filters[$0] != nil }
                    var changes: [String: BusValue] = [:]
                    // An unchanged value sends no signal.
                    if filtered || abs(Int(rssi) - Int(device.reportedRSSI ?? -127)) >= 8, rssi != device.reportedRSSI {
                        adapters[index].devices[address]?.reportedRSSI = rssi
                        changes["RSSI"] = .int16(rssi)
                    }
                    // DuplicateData in some client's filter: bluetoothd
                    // announces the advert's data on every advert, changed
                    // or not (doc/org.bluez.Adapter.rst) — how a client
                    // tells a beacon in range from a cached object. It
                    // replaces ManufacturerData with what each report
                    // carried (src/device.c, device_set_manufacturer_data),
                    // and a real SBeacon's advert carries the iBeacon data,
                    // its scan response the bench summary: the property
                    // alternates (the contract, section 1).
                    if adapters[index].discoveryClients.contains(where: {
                        adapters[index].filters[$0]?["DuplicateData"]?.bool == true
                    }) {
                        let report = device.reports
                        adapters[index].devices[address]?.reports = report &+ 1
                        let part: AdvertPart =
                            !options.splitAdverts ? .both : report % 2 == 0 ? .advert : .scanResponse
                        changes["ManufacturerData"] = manufacturerData(state, part: part)
                    }
                    guard !changes.isEmpty else { continue }
                    activity.discoverySignals += 1
                    try? await bus.setProperties(
                        changes, interface: "org.bluez.Device1", at: device.path, announcing: ["ManufacturerData"])
                } else {
                    activity.discoverySignals += 1
                    await exportDevice(index, address, rssi: state.rssi)
                }
            }
            await expireUnheard(index)
            try? await Task.sleep(for: options.latency.advertInterval)
        }
    }

    /// While discovering: a temporary device (never given Connect) not
    /// heard for the temporary timeout goes (BlueZ' per-device timer,
    /// restarted by every advert). One with a removal already scheduled (a
    /// preheard one) keeps to it.
    func expireUnheard(_ index: Int) async {
        guard adapters[index].present else { return }
        let now = ContinuousClock.now
        for (address, device) in adapters[index].devices
        where device.temporary && !device.connected && device.removal == nil
            && now - device.lastHeard >= options.temporaryTimeout
        {
            adapters[index].devices[address] = nil
            activity.discoverySignals += 1
            try? await bus.unexport(at: device.path)
        }
    }

    /// Removes the device, unless connected, `timeout` (default: the
    /// temporary timeout) from now; `whileDiscovering`: even if the adapter
    /// discovers then (BlueZ' per-device timer, for a preheard device).
    func scheduleRemoval(
        _ index: Int, _ address: String, after timeout: Duration? = nil, whileDiscovering: Bool = false
    ) {
        adapters[index].devices[address]?.removal?.cancel()
        let timeout = timeout ?? options.temporaryTimeout
        adapters[index].devices[address]?.removal = Task { [self] in
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            await removeIfTemporary(index, address, whileDiscovering: whileDiscovering)
        }
    }

    func removeIfTemporary(_ index: Int, _ address: String, whileDiscovering: Bool = false) async {
        guard let device = adapters[index].devices[address], !device.connected,
            whileDiscovering || adapters[index].discoveryClients.isEmpty
        else { return }
        adapters[index].devices[address] = nil
        activity.discoverySignals += 1
        try? await bus.unexport(at: device.path)
    }

    /// Adapter1.RemoveDevice (src/adapter.c remove_device): a connected
    /// device is disconnected first; the device goes (InterfacesRemoved)
    /// and is forgotten — a stale device (mode 1) is cured. Counted per
    /// address.
    func removeDevice(_ index: Int, path: ObjectPath) async throws {
        guard adapters[index].present else { throw BusError(.bluez.doesNotExist, "Does Not Exist") }
        guard let (address, _) = adapters[index].devices.first(where: { $0.value.path == path }) else {
            throw BusError(.bluez.doesNotExist, "Does Not Exist")
        }
        guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
        if adapters[index].devices[address]?.connected == true {
            await disconnect(index, address, reason: .local)
        }
        counters.removeDevice[address, default: 0] += 1
        stale[address] = nil
        adapters[index].remembered.remove(address)
        guard let device = adapters[index].devices.removeValue(forKey: address) else { return }
        device.removal?.cancel()
        for path in device.gattPaths.reversed() { try? await bus.unexport(at: path) }
        try? await bus.unexport(at: path)
        checkWaiters()
    }

    // MARK: Device objects

    static func devicePath(_ adapter: ObjectPath, _ address: String) -> ObjectPath {
        try! adapter.appending("dev_" + address.replacingOccurrences(of: ":", with: "_"))
    }

    /// Which of a beacon's reports ManufacturerData is made of: the advert
    /// (iBeacon), the scan response (bench summary), or both (the first
    /// report of an active scan, where the kernel joins the two).
    enum AdvertPart { case advert, scanResponse, both }

    func manufacturerData(_ state: BeaconState, part: AdvertPart = .both) -> BusValue {
        var entries: [BusValue.DictEntry] = []
        if part != .scanResponse {
            entries.append(.init(.uint16(SBeaconUUID.appleCompanyID), .variant(.bytes(state.iBeacon.bytes))))
        }
        if part != .advert {
            entries.append(.init(.uint16(SBeaconUUID.nordicCompanyID), .variant(.bytes(state.benchSummary.bytes))))
        }
        return .dictionary(key: .uint16, value: .variant, entries)
    }

    /// Exports the device's object (InterfacesAdded); `rssi` nil: without
    /// RSSI (a device reloaded from storage, not heard).
    func exportDevice(_ index: Int, _ address: String, rssi: Int16?) async {
        guard let state = beacons[address]?.state, adapters[index].present else { return }
        let path = Self.devicePath(adapters[index].path, address)
        adapters[index].devices[address] = Device(path: path, reportedRSSI: rssi)
        // Reloaded from storage (no RSSI): a device once given Connect.
        if rssi == nil { adapters[index].devices[address]?.temporary = false }
        // Name and Alias as bluetoothd makes them of the advertised name
        // (BlueZName): no Name at all when it comes to nothing.
        var properties: [String: BusValue] = [
            "Address": .string(address), "AddressType": "random", "Alias": .string(state.bluezAlias),
            "Paired": false, "Bonded": false, "Trusted": false, "Blocked": false, "LegacyPairing": false,
            "TxPower": .int16(state.txPower), "Connected": false,
            "UUIDs": .strings([]), "Adapter": .objectPath(adapters[index].path),
            "ManufacturerData": manufacturerData(state), "ServicesResolved": false,
        ]
        if let rssi { properties["RSSI"] = .int16(rssi) }
        // Heard, with split adverts: the first report is the advert alone
        // (the iBeacon data; the scan response, with the bench summary, is
        // the next), as real bluetoothd showed a beacon first heard without
        // its scan response (docs/realstack.md).
        if rssi != nil, options.splitAdverts {
            properties["ManufacturerData"] = manufacturerData(state, part: .advert)
            adapters[index].devices[address]?.reports = 1
        }
        if let name = state.bluezName { properties["Name"] = .string(name) }
        try? await bus.export(deviceInterface(index, address), at: path, properties: properties)
    }

    func deviceInterface(_ index: Int, _ address: String) -> BusInterface {
        BusInterface(
            name: "org.bluez.Device1",
            methods: [
                .init(name: "Connect") { [self] _ in
                    try await connect(index, address)
                    return []
                },
                .init(name: "Disconnect") { [self] _ in
                    await disconnect(index, address, reason: .local)
                    return []
                },
                .init(name: "ConnectProfile", inputs: [.init("UUID", .string)]) { _ in
                    throw BusError(.bluez.notSupported, "Operation is not supported")
                },
                .init(name: "DisconnectProfile", inputs: [.init("UUID", .string)]) { _ in
                    throw BusError(.bluez.notSupported, "Operation is not supported")
                },
                .init(name: "Pair") { _ in throw BusError(.bluez.notSupported, "Operation is not supported") },
                .init(name: "CancelPairing") { _ in throw BusError(.bluez.doesNotExist, "Does Not Exist") },
            ],
            properties: [
                .init("Address", .string), .init("AddressType", .string), .init("Name", .string),
                .init("Alias", .string, access: .readwrite), .init("Paired", .boolean), .init("Bonded", .boolean),
                .init("Trusted", .boolean, access: .readwrite), .init("Blocked", .boolean, access: .readwrite),
                .init("LegacyPairing", .boolean), .init("RSSI", .int16), .init("TxPower", .int16),
                .init("Connected", .boolean), .init("UUIDs", .array(.string)), .init("Adapter", .objectPath),
                .init("ManufacturerData", .dictionary(key: .uint16, value: .variant)),
                .init("ServicesResolved", .boolean),
            ])
    }

    func setDeviceProperties(_ index: Int, _ address: String, _ changes: [String: BusValue?]) async {
        guard let path = adapters[index].devices[address]?.path else { return }
        try? await bus.setProperties(changes, interface: "org.bluez.Device1", at: path)
    }

    /// The advert changed (identity, config, calibration, records): every
    /// adapter that shows the device sees the new ManufacturerData.
    func advertChanged(_ address: String) async {
        guard let state = beacons[address]?.state else { return }
        for index in adapters.indices where adapters[index].devices[address] != nil {
            await setDeviceProperties(index, address, ["ManufacturerData": manufacturerData(state)])
        }
    }

    // MARK: Leaving range

    /// The beacon stops advertising for `ms` (nil: for good): its links
    /// drop (reason timeout). Without `keepObject`, its unconnected objects
    /// go at once. `preheard`: its object is put on every adapter as if
    /// heard `agoMs` ago at `rssi`, and goes when the rest of its temporary
    /// timer runs out.
    func vanish(_ address: String, for ms: Int?, keepObject: Bool, preheard: FaultPlan.Preheard?) async {
        beacons[address]?.state.inRange = false
        checkWaiters()
        for index in adapters.indices where adapters[index].devices[address]?.connected == true {
            await disconnect(index, address, reason: .timeout)
        }
        if let preheard {
            let left = max(0, options.temporaryTimeout.wholeMilliseconds - preheard.agoMs)
            for index in adapters.indices where adapters[index].present {
                if adapters[index].devices[address] == nil {
                    await exportDevice(index, address, rssi: Int16(preheard.rssi))
                }
                scheduleRemoval(index, address, after: .milliseconds(left), whileDiscovering: true)
            }
        } else if !keepObject {
            for index in adapters.indices { await removeIfTemporary(index, address, whileDiscovering: true) }
        }
        if let ms {
            Task { [self] in
                try? await Task.sleep(for: .milliseconds(ms))
                returnToRange(address)
            }
        }
    }

    /// The beacon was taken out of range (`Update` with `inRange` false):
    /// its connections drop, as a link lost does.
    func leftRange(_ address: String) async {
        for index in adapters.indices where adapters[index].devices[address]?.connected == true {
            await disconnect(index, address, reason: .timeout)
        }
    }

    func returnToRange(_ address: String) {
        beacons[address]?.state.inRange = true
        checkWaiters()
    }
}
