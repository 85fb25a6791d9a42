import DBusBinding
import Foundation
import SBeaconProtocol

/// bluetoothd as BlueZ 5.66 shows itself on D-Bus, with a fleet of SBeacons
/// in range: adapters, discovery, devices, connections and GATT, each with
/// BlueZ' property names, types, paths and errors.
public actor SimulatedBluetoothd {
    public static let busName: BusName = "org.bluez"

    let bus: BusConnection
    let options: SimulatorOptions
    private var beacons: [String: BeaconFirmware] = [:]
    private var beaconOrder: [String] = []
    /// Devices whose disconnect is still taking their GATT tree down, and
    /// the connects waiting for it (by address).
    private var tearingDown: [String: [CheckedContinuation<Void, Never>]] = [:]
    private var adapters: [Adapter] = []
    /// Separate generators, so that how often discovery updates RSSI (a
    /// matter of timing) never shifts which operation a fault strikes.
    private var faultRandom: SplitMix64
    private var driveRandom: SplitMix64
    private var jitterRandom: SplitMix64
    /// How many times each fault has fired.
    public private(set) var faultCounts: [Fault: Int] = [:]
    /// What clients asked of the radio, for benchmarks: Connect calls, ATT
    /// reads and writes, calibrations.
    public private(set) var activity = Activity()

    public struct Activity: Codable, Sendable, Equatable {
        public var connects = 0
        public var reads = 0
        public var writes = 0
        public var calibrations = 0
        /// Signals discovery sent: one InterfacesAdded per device that
        /// appeared, one PropertiesChanged per RSSI update, one
        /// InterfacesRemoved per device gone after the temporary timeout.
        public var discoverySignals = 0
    }

    struct Adapter {
        var index: Int
        var path: ObjectPath
        var address: String
        var powered = true
        var discoveryClients: Set<String> = []
        var filters: [String: [String: BusValue]] = [:]
        var connectPending = false
        var devices: [String: Device] = [:]
        var scanTask: Task<Void, Never>?
    }

    struct Device {
        var path: ObjectPath
        var connected = false
        var servicesResolved = false
        var gattPaths: [ObjectPath] = []
        var characteristics: [GattUUID: ObjectPath] = [:]
        var notifying: Set<GattUUID> = []
        /// Bumped on every connect and disconnect, so that work started for
        /// one connection does not touch the next.
        var generation = 0
        var removal: Task<Void, Never>?
        /// The RSSI last announced (PropertiesChanged).
        var reportedRSSI: Int16?
    }

    public init(bus: BusConnection, options: SimulatorOptions, fleet: [BeaconState]) {
        self.bus = bus
        self.options = options
        self.faultRandom = SplitMix64(seed: options.seed ^ 0xFA17)
        self.driveRandom = SplitMix64(seed: options.seed ^ 0xD21E)
        self.jitterRandom = SplitMix64(seed: options.seed ^ 0x5EED)
        for state in fleet {
            beacons[state.address] = BeaconFirmware(state: state)
            beaconOrder.append(state.address)
        }
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private var saveScheduled = false

    /// Saves the state file soon (changes within 200 ms are saved together).
    private func markChanged() {
        guard options.statePath != nil, !saveScheduled else { return }
        saveScheduled = true
        Task { [self] in
            try? await Task.sleep(for: .milliseconds(200))
            saveNow()
        }
    }

    /// Writes the state file now, if there is one.
    public func saveNow() {
        saveScheduled = false
        guard let path = options.statePath else { return }
        do {
            try StateFile.save(fleet(), to: path)
        } catch {
            FileHandle.standardError.write(Data("beaconbench-sim: cannot save the state: \(error)\n".utf8))
        }
    }

    /// Draws whether `fault` strikes now, and counts it when it does.
    /// The beacon's own fault rate (set through `Update`) wins over the
    /// command line's.
    private func fires(_ fault: Fault, _ address: String) -> Bool {
        let probability = beacons[address]?.state.faults[fault.rawValue] ?? options.faults[fault] ?? 0
        guard faultRandom.chance(probability) else { return false }
        faultCounts[fault, default: 0] += 1
        return true
    }

    /// The beacon leaves radio range for the outage time: its connections drop.
    private func vanish(_ address: String) async {
        beacons[address]?.state.inRange = false
        for index in adapters.indices where adapters[index].devices[address]?.connected == true {
            await disconnect(index, address, reason: "out of range")
        }
        let outage = options.outage
        Task { [self] in
            try? await Task.sleep(for: outage)
            returnToRange(address)
        }
    }

    /// The beacon was taken out of range (`Update` with `inRange` false):
    /// its connections drop, as a link lost does.
    func leftRange(_ address: String) async {
        for index in adapters.indices where adapters[index].devices[address]?.connected == true {
            await disconnect(index, address, reason: "out of range")
        }
    }

    private func returnToRange(_ address: String) { beacons[address]?.state.inRange = true }

    /// The adapter powers off for the outage time, then on again.
    private func switchOffForAWhile(_ index: Int) async {
        try? await setPowered(index, false)
        let outage = options.outage
        Task { [self] in
            try? await Task.sleep(for: outage)
            try? await setPowered(index, true)
        }
    }

    // MARK: Starting

    /// Exports `/org/bluez`, the adapters and the object manager, and takes
    /// the name `org.bluez`.
    /// - Throws: when `org.bluez` is already owned (a real bluetoothd).
    public func start() async throws {
        if let owner = try await bus.nameOwner(of: Self.busName) {
            throw BusError(.failed, "org.bluez is already owned by \(owner) on this bus: a bluetoothd is running there")
        }
        await bus.addObjectManager(at: .root)
        try await bus.export(agentManager, at: "/org/bluez")
        for index in 0..<options.adapters {
            let path = try ObjectPath("/org/bluez/hci\(index)")
            let address = String(format: "00:1A:7D:DA:71:%02X", 0x10 + index)
            adapters.append(Adapter(index: index, path: path, address: address))
            try await bus.export(adapterInterface(index), at: path, properties: adapterProperties(index))
        }
        guard try await bus.requestName(Self.busName) == .primaryOwner else {
            throw BusError(.failed, "could not take the name org.bluez")
        }
    }

    public var beaconCount: Int { beacons.count }
    public var adapterCount: Int { adapters.count }

    /// The fleet as it is now (ground truth).
    public func fleet() -> [BeaconState] { beaconOrder.compactMap { beacons[$0]?.state } }

    public func isConnected(_ address: String) -> Bool {
        adapters.contains { $0.devices[address]?.connected == true }
    }

    // MARK: /org/bluez

    private var agentManager: BusInterface {
        BusInterface(
            name: "org.bluez.AgentManager1",
            methods: [
                .init(name: "RegisterAgent", inputs: [.init("agent", .objectPath), .init("capability", .string)]) {
                    _ in []
                },
                .init(name: "UnregisterAgent", inputs: [.init("agent", .objectPath)]) { _ in [] },
                .init(name: "RequestDefaultAgent", inputs: [.init("agent", .objectPath)]) { _ in [] },
            ])
    }

    // MARK: Adapters

    private func adapterProperties(_ index: Int) -> [String: BusValue] {
        let adapter = adapters[index]
        return [
            "Address": .string(adapter.address), "AddressType": "public", "Name": .string("bench-hci\(index)"),
            "Alias": .string("bench-hci\(index)"), "Class": .uint32(0x000000), "Powered": .boolean(adapter.powered),
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

    private func adapterInterface(_ index: Int) -> BusInterface {
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
                    try await setPowered(index, value.bool ?? false)
                },
                .init("PowerState", .string),
                .init("Discoverable", .boolean, access: .readwrite),
                .init("DiscoverableTimeout", .uint32, access: .readwrite),
                .init("Pairable", .boolean, access: .readwrite), .init("PairableTimeout", .uint32, access: .readwrite),
                .init("Discovering", .boolean), .init("UUIDs", .array(.string)), .init("Modalias", .string),
                .init("Roles", .array(.string)),
            ])
    }

    private func setAdapterProperties(_ index: Int, _ changes: [String: BusValue?]) async {
        try? await bus.setProperties(changes, interface: "org.bluez.Adapter1", at: adapters[index].path)
    }

    private func setPowered(_ index: Int, _ powered: Bool) async throws {
        adapters[index].powered = powered
        if !powered {
            for address in adapters[index].devices.keys where adapters[index].devices[address]?.connected == true {
                await disconnect(index, address, reason: "adapter powered off")
            }
            adapters[index].discoveryClients = []
            adapters[index].scanTask?.cancel()
            adapters[index].scanTask = nil
            await setAdapterProperties(index, ["Discovering": false])
        }
        await setAdapterProperties(
            index, ["Powered": .boolean(powered), "PowerState": .string(powered ? "on" : "off")])
    }

    private func startDiscovery(_ index: Int, client: String) async throws {
        guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
        guard !adapters[index].discoveryClients.contains(client) else {
            throw BusError(.bluez.inProgress, "Operation already in progress")
        }
        adapters[index].discoveryClients.insert(client)
        watchDiscoveryClient(index, client)
        guard adapters[index].scanTask == nil else { return }
        await setAdapterProperties(index, ["Discovering": true])
        adapters[index].scanTask = Task { [self] in await scan(index) }
    }

    /// As bluetoothd does: a client that leaves the bus stops its discovery.
    private func watchDiscoveryClient(_ index: Int, _ client: String) {
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

    private func stopDiscovery(_ index: Int, client: String) async throws {
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

    private func setDiscoveryFilter(_ index: Int, client: String, _ filter: [String: BusValue]) async throws {
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
    private func passesFilters(_ index: Int, _ state: BeaconState) -> Bool {
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
    private func scan(_ index: Int) async {
        while !Task.isCancelled {
            for address in beaconOrder {
                guard let state = beacons[address]?.state, state.inRange, passesFilters(index, state) else { continue }
                if let device = adapters[index].devices[address] {
                    adapters[index].devices[address]?.removal?.cancel()
                    adapters[index].devices[address]?.removal = nil
                    let jitter = Int16(Int(jitterRandom.next() % 7) - 3)
                    let rssi = state.rssi + jitter
                    // As bluetoothd: every change while some client has a
                    // discovery filter (DuplicateData and the like), else
                    // only changes of 8 dBm or more.
                    let filtered = adapters[index].discoveryClients.contains { adapters[index].filters[$0] != nil }
                    guard filtered || abs(Int(rssi) - Int(device.reportedRSSI ?? -127)) >= 8 else { continue }
                    // An unchanged value sends no signal.
                    guard rssi != device.reportedRSSI else { continue }
                    adapters[index].devices[address]?.reportedRSSI = rssi
                    activity.discoverySignals += 1
                    try? await bus.setProperties(
                        ["RSSI": .int16(rssi)], interface: "org.bluez.Device1", at: device.path)
                } else {
                    activity.discoverySignals += 1
                    await exportDevice(index, address)
                }
            }
            try? await Task.sleep(for: options.latency.advertInterval)
        }
    }

    private func scheduleRemoval(_ index: Int, _ address: String) {
        adapters[index].devices[address]?.removal?.cancel()
        let timeout = options.temporaryTimeout
        adapters[index].devices[address]?.removal = Task { [self] in
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            await removeIfTemporary(index, address)
        }
    }

    private func removeIfTemporary(_ index: Int, _ address: String) async {
        guard let device = adapters[index].devices[address], !device.connected,
            adapters[index].discoveryClients.isEmpty
        else { return }
        adapters[index].devices[address] = nil
        activity.discoverySignals += 1
        try? await bus.unexport(at: device.path)
    }

    private func removeDevice(_ index: Int, path: ObjectPath) async throws {
        guard let (address, _) = adapters[index].devices.first(where: { $0.value.path == path }) else {
            throw BusError(.bluez.doesNotExist, "Does Not Exist")
        }
        if adapters[index].devices[address]?.connected == true {
            await disconnect(index, address, reason: "removed")
        }
        adapters[index].devices[address]?.removal?.cancel()
        adapters[index].devices[address] = nil
        try? await bus.unexport(at: path)
    }

    // MARK: Devices

    static func devicePath(_ adapter: ObjectPath, _ address: String) -> ObjectPath {
        try! adapter.appending("dev_" + address.replacingOccurrences(of: ":", with: "_"))
    }

    private func manufacturerData(_ state: BeaconState) -> BusValue {
        .dictionary(
            key: .uint16, value: .variant,
            [
                .init(.uint16(SBeaconUUID.appleCompanyID), .variant(.bytes(state.iBeacon.bytes))),
                .init(.uint16(SBeaconUUID.nordicCompanyID), .variant(.bytes(state.benchSummary.bytes))),
            ])
    }

    private func exportDevice(_ index: Int, _ address: String) async {
        guard let state = beacons[address]?.state else { return }
        let path = Self.devicePath(adapters[index].path, address)
        adapters[index].devices[address] = Device(path: path, reportedRSSI: state.rssi)
        // Name and Alias as bluetoothd makes them of the advertised name
        // (BlueZName): no Name at all when it comes to nothing.
        var properties: [String: BusValue] = [
            "Address": .string(address), "AddressType": "random", "Alias": .string(state.bluezAlias),
            "Paired": false, "Bonded": false, "Trusted": false, "Blocked": false, "LegacyPairing": false,
            "RSSI": .int16(state.rssi), "TxPower": .int16(state.txPower), "Connected": false,
            "UUIDs": .strings([]), "Adapter": .objectPath(adapters[index].path),
            "ManufacturerData": manufacturerData(state), "ServicesResolved": false,
        ]
        if let name = state.bluezName { properties["Name"] = .string(name) }
        try? await bus.export(deviceInterface(index, address), at: path, properties: properties)
    }

    private func deviceInterface(_ index: Int, _ address: String) -> BusInterface {
        BusInterface(
            name: "org.bluez.Device1",
            methods: [
                .init(name: "Connect") { [self] _ in
                    try await connect(index, address)
                    return []
                },
                .init(name: "Disconnect") { [self] _ in
                    await disconnect(index, address, reason: "requested")
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

    private func setDeviceProperties(_ index: Int, _ address: String, _ changes: [String: BusValue?]) async {
        guard let path = adapters[index].devices[address]?.path else { return }
        try? await bus.setProperties(changes, interface: "org.bluez.Device1", at: path)
    }

    /// The advert changed (identity, config, calibration, records): every
    /// adapter that shows the device sees the new ManufacturerData.
    private func advertChanged(_ address: String) async {
        guard let state = beacons[address]?.state else { return }
        for index in adapters.indices where adapters[index].devices[address] != nil {
            await setDeviceProperties(index, address, ["ManufacturerData": manufacturerData(state)])
        }
    }

    private func connect(_ index: Int, _ address: String) async throws {
        activity.connects += 1
        guard adapters[index].powered else { throw BusError(.bluez.notReady, "Resource Not Ready") }
        guard let device = adapters[index].devices[address] else {
            throw BusError(.bluez.doesNotExist, "Does Not Exist")
        }
        if device.connected { throw BusError(.bluez.alreadyConnected, "Already Connected") }
        if fires(.adapterOff, address) {
            await switchOffForAWhile(index)
            throw BusError(.bluez.notReady, "Resource Not Ready")
        }
        if fires(.connectInProgress, address) { throw BusError(.bluez.inProgress, "In Progress") }
        if fires(.vanish, address) { await vanish(address) }
        guard !adapters[index].connectPending else { throw BusError(.bluez.inProgress, "In Progress") }
        let connectedCount = adapters[index].devices.values.filter(\.connected).count
        guard connectedCount < options.connectionsPerAdapter else {
            throw BusError(.bluez.failed, "le-connection-abort-by-local")
        }
        adapters[index].connectPending = true
        adapters[index].devices[address]?.removal?.cancel()
        try? await Task.sleep(for: options.latency.connect)
        adapters[index].connectPending = false
        // A disconnect still removing the last connection's GATT objects
        // (its awaits let this connect in): wait for it, or its removals
        // would take this connection's new objects with them.
        if tearingDown[address] != nil {
            await withCheckedContinuation { tearingDown[address, default: []].append($0) }
        }
        guard adapters[index].powered, adapters[index].devices[address] != nil, beacons[address]?.state.inRange == true,
            !fires(.connectAbort, address)
        else { throw BusError(.bluez.failed, "le-connection-abort-by-local") }
        adapters[index].devices[address]?.connected = true
        adapters[index].devices[address]?.generation += 1
        beacons[address]?.drain(BeaconFirmware.Drain.connection)
        guard let generation = adapters[index].devices[address]?.generation else {
            throw BusError(.bluez.failed, "le-connection-abort-by-local")
        }
        await setDeviceProperties(index, address, ["Connected": true])

        // Connected, but service discovery never finishes: the client is
        // left waiting for ServicesResolved.
        if fires(.servicesNeverResolved, address) { return }
        try? await Task.sleep(for: options.latency.serviceResolution)
        guard adapters[index].devices[address]?.generation == generation,
            let devicePath = adapters[index].devices[address]?.path
        else { throw BusError(.bluez.failed, "Software caused connection abort") }
        // The GATT tree is exported before ServicesResolved turns true.
        let (nodes, characteristics) = GattLayout.nodes(under: devicePath)
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
    }

    /// Drops a connection: ServicesResolved false, GATT objects removed,
    /// Connected false — BlueZ' order.
    private func disconnect(_ index: Int, _ address: String, reason: String) async {
        guard var device = adapters[index].devices[address], device.connected else { return }
        device.generation += 1
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
        await setDeviceProperties(index, address, ["Connected": false])
        for waiting in tearingDown.removeValue(forKey: address) ?? [] { waiting.resume() }
        if adapters[index].discoveryClients.isEmpty { scheduleRemoval(index, address) }
    }

    // MARK: GATT

    private func exportGattNode(_ index: Int, _ address: String, _ node: GattLayout.Node) async {
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

    private func characteristicInterface(
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

    private func requireConnection(_ index: Int, _ address: String) throws {
        guard let device = adapters[index].devices[address], device.connected, device.servicesResolved else {
            throw BusError(.bluez.failed, "Not connected")
        }
    }

    private func isNotifying(_ index: Int, _ address: String, characteristicPath: ObjectPath) -> Bool {
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

    private func readValue(_ index: Int, _ address: String, _ uuid: GattUUID, offset: UInt16) async throws -> [UInt8] {
        activity.reads += 1
        try requireConnection(index, address)
        let generation = adapters[index].devices[address]?.generation ?? -1
        try? await Task.sleep(for: options.latency.attRequest)
        try await operationFaults(index, address, generation)
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

    /// The faults that strike a read or write before it is answered.
    private func operationFaults(
        _ index: Int, _ address: String, _ generation: Int, includingDisconnect: Bool = true
    )
        async throws
    {
        if fires(.stalledReply, address) { try? await Task.sleep(for: options.stall) }
        guard adapters[index].devices[address]?.generation == generation else {
            throw BusError(.bluez.failed, "Not connected")
        }
        if includingDisconnect, fires(.disconnectMidOperation, address) {
            await disconnect(index, address, reason: "link lost")
            throw BusError(.bluez.failed, "Not connected")
        }
        if fires(.attError, address) { throw Self.busError(.unlikelyError) }
    }

    private func writeValue(
        _ index: Int, _ address: String, _ uuid: GattUUID, _ value: [UInt8], withResponse: Bool
    )
        async throws
    {
        activity.writes += 1
        try requireConnection(index, address)
        let generation = adapters[index].devices[address]?.generation ?? -1
        if withResponse { try? await Task.sleep(for: options.latency.attRequest) }
        if fires(.disconnectMidOperation, address) {
            // The link drops around the write: whether the beacon got it
            // first is a toss, as on a real radio; the client only knows it
            // got no answer.
            if faultRandom.chance(0.5), var firmware = beacons[address],
                let _ = try? firmware.write(uuid, value, now: Self.now())
            {
                beacons[address] = firmware
            }
            await disconnect(index, address, reason: "link lost")
            throw BusError(.bluez.failed, "Not connected")
        }
        try await operationFaults(index, address, generation, includingDisconnect: false)
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
        // The write's response goes first; what it causes follows.
        Task { [self] in await perform(effects, index, address, generation) }
    }

    private func perform(_ effects: [FirmwareEffect], _ index: Int, _ address: String, _ generation: Int) async {
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
                await disconnect(index, address, reason: "reboot")
                await advertChanged(address)
            }
        }
    }

    /// A notification: PropertiesChanged on the characteristic's Value, if
    /// a client subscribed.
    private func notify(_ index: Int, _ address: String, _ uuid: GattUUID, _ value: [UInt8]) async {
        guard let device = adapters[index].devices[address], device.notifying.contains(uuid),
            let path = device.characteristics[uuid], !fires(.droppedNotification, address)
        else { return }
        try? await bus.setProperties(["Value": .bytes(value)], interface: "org.bluez.GattCharacteristic1", at: path)
    }

    private func setNotifying(_ index: Int, _ address: String, _ uuid: GattUUID, _ on: Bool) async throws {
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

    // MARK: Control

    /// bluetoothd restarting: the name `org.bluez` goes, and with it every
    /// object and connection; after `downtime` it comes back with its
    /// adapters and no devices, as after a real restart.
    public func restart(downtime: Duration = .milliseconds(500)) async throws {
        try await bus.releaseName(Self.busName)
        for index in adapters.indices {
            adapters[index].scanTask?.cancel()
            for (_, device) in adapters[index].devices {
                device.removal?.cancel()
                for path in device.gattPaths.reversed() { try? await bus.unexport(at: path) }
                try? await bus.unexport(at: device.path)
            }
            try? await bus.unexport(at: adapters[index].path)
        }
        try? await bus.unexport(at: "/org/bluez")
        // Fresh adapters in place (never fewer: work still in flight may
        // hold an adapter's index), with no devices and nothing connected.
        for index in adapters.indices {
            adapters[index] = Adapter(index: index, path: adapters[index].path, address: adapters[index].address)
        }
        try? await Task.sleep(for: downtime)
        try await bus.export(agentManager, at: "/org/bluez")
        for index in adapters.indices {
            try await bus.export(
                adapterInterface(index), at: adapters[index].path, properties: adapterProperties(index))
        }
        guard try await bus.requestName(Self.busName) == .primaryOwner else {
            throw BusError(.failed, "could not take the name org.bluez back")
        }
    }

    /// The adapter at `index` unplugged for `downtime`, then plugged back:
    /// its objects go (InterfacesRemoved: its devices, then itself), its
    /// links and its clients' discovery with them; it comes back powered,
    /// not discovering, knowing no device — as a USB dongle pulled out and
    /// put back.
    public func unplug(_ index: Int, downtime: Duration) async throws {
        guard adapters.indices.contains(index) else {
            throw BusError(.invalidArgs, "Unplug: no adapter \(index) (there are \(adapters.count))")
        }
        adapters[index].scanTask?.cancel()
        for (_, device) in adapters[index].devices {
            device.removal?.cancel()
            for path in device.gattPaths.reversed() { try? await bus.unexport(at: path) }
            try? await bus.unexport(at: device.path)
        }
        try? await bus.unexport(at: adapters[index].path)
        // A fresh adapter in place (work in flight may hold its index).
        adapters[index] = Adapter(index: index, path: adapters[index].path, address: adapters[index].address)
        Task { [self] in
            try? await Task.sleep(for: downtime)
            await self.plugBack(index)
        }
    }

    private func plugBack(_ index: Int) async {
        try? await bus.export(adapterInterface(index), at: adapters[index].path, properties: adapterProperties(index))
    }

    /// Changes a beacon's ground truth (battery, moving, range…).
    public func update(_ address: String, _ change: (inout BeaconState) -> Void) async throws {
        guard var firmware = beacons[address] else {
            throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)")
        }
        change(&firmware.state)
        beacons[address] = firmware
        markChanged()
        await advertChanged(address)
    }

    /// Simulates a trip with harsh events.
    public func drive(_ address: String, minutes: UInt32, harshEvents: Int) async throws {
        guard var firmware = beacons[address] else {
            throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)")
        }
        firmware.drive(minutes: minutes, harshEvents: harshEvents, now: Self.now(), random: &driveRandom)
        beacons[address] = firmware
        markChanged()
        // Subscribers see the trip pass through the state machine.
        for status in firmware.lastTripStates {
            for index in adapters.indices {
                await notify(index, address, SBeaconUUID.tripStatus, [status.rawValue])
            }
        }
        await advertChanged(address)
    }

    /// A real-time event now, on every connection that subscribed.
    public func shake(_ address: String, type: DrivingEventType) async throws {
        guard beacons[address] != nil else { throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)") }
        let axis: RealTimeEvent.Axis = type == .cornering ? .lateral : type == .accident ? .radial : .longitudinal
        let flags: RealTimeEvent.StateFlags =
            switch type {
            case .acceleration: .harshAcceleration
            case .braking: .harshBraking
            case .cornering: .normalCornering
            case .accident: [.accidentX, .accidentY]
            }
        let event = RealTimeEvent(type: type, axis: axis, flags: flags)
        for index in adapters.indices {
            await notify(index, address, SBeaconUUID.realTimeEvent, event.bytes)
        }
    }
}
