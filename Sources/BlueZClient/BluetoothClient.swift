import DBusBinding

/// A client of bluetoothd: the adapters, a live registry of every object
/// bluetoothd exports (kept current by its signals, never by polling), and
/// discovery. Devices are connected through `connect(_:)`.
///
/// When bluetoothd leaves the bus the registry is emptied and everything
/// waiting on it fails with `bluetoothdGone`; when it comes back the
/// registry is read again and devices are found by address as before.
public actor BluetoothClient {
    public static let bluez: BusName = "org.bluez"

    public let bus: BusConnection
    /// Path → interface → property → value, as bluetoothd exports them.
    private var objects: [ObjectPath: [String: [String: BusValue]]] = [:]
    private var waiters: [Int: Waiter] = [:]
    private var nextWaiter = 0
    private var listeners: [Task<Void, Never>] = []
    /// Bumped whenever bluetoothd leaves or comes back.
    public private(set) var bluetoothdGeneration = 0
    private var connectLocks: [ObjectPath: AsyncLock] = [:]
    /// Connect calls under way and ended (see `connectCall`).
    var nextConnectCall = 0
    var endedConnectCalls: Set<Int> = []
    /// Indexes over `objects`, so that finding a device by address or a
    /// characteristic under a device does not scan every object.
    private var devicePathsByAddress: [String: Set<ObjectPath>] = [:]
    private var addressByDevicePath: [ObjectPath: String] = [:]
    private var attributesByDevice: [ObjectPath: Set<ObjectPath>] = [:]
    /// When each device object last showed a sign of the device in range:
    /// it appeared, or its RSSI, advertising data or TX power changed (an
    /// advert). With a discovery filter (`startDiscovery(everyAdvert:)`)
    /// bluetoothd announces every advert's RSSI; without one only changes
    /// of 8 dBm or more.
    private var heardAt: [ObjectPath: ContinuousClock.Instant] = [:]
    private static let advertProperties: Set<String> = [
        "RSSI", "ManufacturerData", "ServiceData", "TxPower", "AdvertisingData", "AdvertisingFlags",
    ]

    private struct Waiter {
        var isSatisfied: () -> Bool
        var continuation: CheckedContinuation<Void, any Error>
        var generation: Int
    }

    /// Timeouts of the calls this client makes.
    public struct Timeouts: Sendable {
        public var call: Duration = .seconds(10)
        public var connect: Duration = .seconds(20)
        public var servicesResolved: Duration = .seconds(10)
        public var gatt: Duration = .seconds(10)
        public init() {}
    }
    public let timeouts: Timeouts

    public init(bus: BusConnection, timeouts: Timeouts = Timeouts()) {
        self.bus = bus
        self.timeouts = timeouts
    }

    /// Subscribes to bluetoothd's signals, then reads its objects.
    /// - Throws: `BlueZError` when bluetoothd is not on the bus.
    public func start() async throws {
        let signals = try await bus.signals(matching: MatchRule(sender: Self.bluez))
        let owners = try await bus.nameOwnerChanges(of: Self.bluez)
        // The loops run on this actor: a burst of signals (a connect brings
        // some thirty InterfacesAdded) costs no hop per signal.
        listeners.append(Task { [weak self] in await self?.follow(signals) })
        listeners.append(Task { [weak self] in await self?.follow(owners) })
        try await reload()
    }

    /// Stops listening.
    public func stop() {
        for listener in listeners { listener.cancel() }
        listeners = []
        failWaiters(BlueZError(.bluetoothdGone, step: "stop"))
    }

    private func follow(_ signals: AsyncStream<BusSignal>) async {
        for await signal in signals { apply(signal) }
    }

    private func follow(_ changes: AsyncCompactMapSequence<AsyncStream<BusSignal>, NameOwnerChanged>) async {
        for await change in changes { await ownerChanged(change) }
    }

    private func reload() async throws {
        do {
            objects = try await bus.managedObjects(of: Self.bluez, timeout: timeouts.call)
            rebuildIndexes()
            let now = ContinuousClock.now
            heardAt = [:]
            for (path, interfaces) in objects where interfaces["org.bluez.Device1"] != nil { heardAt[path] = now }
        } catch let error as BusError {
            throw BlueZError(.bus(error), step: "read bluetoothd's objects")
        }
        checkWaiters()
    }

    // MARK: Keeping the registry current

    private func apply(_ signal: BusSignal) {
        switch (signal.interface, signal.member.rawValue) {
        case (.objectManager, "InterfacesAdded"):
            guard let added = try? InterfacesAdded(signal) else { return }
            objects[added.path, default: [:]].merge(added.interfaces) { $1 }
            if added.interfaces["org.bluez.Device1"] != nil { heardAt[added.path] = .now }
            index(added.path)
        case (.objectManager, "InterfacesRemoved"):
            guard let removed = try? InterfacesRemoved(signal) else { return }
            for name in removed.interfaces { objects[removed.path]?[name] = nil }
            if objects[removed.path]?.keys.allSatisfy({ $0.hasPrefix("org.freedesktop.DBus.") }) ?? false {
                objects[removed.path] = nil
            }
            if objects[removed.path]?["org.bluez.Device1"] == nil { heardAt[removed.path] = nil }
            unindex(removed.path)
            index(removed.path)
        case (.properties, "PropertiesChanged"):
            guard let change = try? PropertiesChanged(signal), objects[change.path]?[change.interface] != nil else {
                return
            }
            objects[change.path]?[change.interface]?.merge(change.changed) { $1 }
            for name in change.invalidated { objects[change.path]?[change.interface]?[name] = nil }
            if change.interface == "org.bluez.Device1", !Self.advertProperties.isDisjoint(with: change.changed.keys) {
                heardAt[change.path] = .now
            }
            if change.interface == "org.bluez.Device1", change.changed["Address"] != nil {
                unindex(change.path)
                index(change.path)
            }
        default:
            return
        }
        checkWaiters()
    }

    private func ownerChanged(_ change: NameOwnerChanged) async {
        bluetoothdGeneration += 1
        objects = [:]
        heardAt = [:]
        rebuildIndexes()
        failWaiters(BlueZError(.bluetoothdGone, step: "wait"))
        if change.newOwner != nil { try? await reload() }
    }

    // MARK: Indexes

    /// The device a GATT object belongs to: `/org/bluez/hciN/dev_…`.
    static func deviceAncestor(of path: ObjectPath) -> ObjectPath? {
        let components = path.components
        guard components.count > 4, components[3].hasPrefix("dev_") else { return nil }
        return try? ObjectPath("/" + components.prefix(4).joined(separator: "/"))
    }

    private func index(_ path: ObjectPath) {
        guard let interfaces = objects[path] else { return }
        if let address = interfaces["org.bluez.Device1"]?["Address"]?.string?.uppercased(),
            Device.isValidAddress(address)
        {
            devicePathsByAddress[address, default: []].insert(path)
            addressByDevicePath[path] = address
        }
        if let device = Self.deviceAncestor(of: path),
            interfaces.keys.contains(where: { $0.hasPrefix("org.bluez.Gatt") })
        {
            attributesByDevice[device, default: []].insert(path)
        }
    }

    private func unindex(_ path: ObjectPath) {
        if let address = addressByDevicePath.removeValue(forKey: path) {
            devicePathsByAddress[address]?.remove(path)
            if devicePathsByAddress[address]?.isEmpty == true { devicePathsByAddress[address] = nil }
        }
        if let device = Self.deviceAncestor(of: path) { attributesByDevice[device]?.remove(path) }
    }

    private func rebuildIndexes() {
        devicePathsByAddress = [:]
        addressByDevicePath = [:]
        attributesByDevice = [:]
        for path in objects.keys { index(path) }
    }

    /// The GATT objects of one interface under a device: path and UUID.
    func gattObjects(under device: ObjectPath, interface: String) -> [(path: ObjectPath, uuid: String)] {
        (attributesByDevice[device] ?? []).compactMap { path in
            guard let uuid = objects[path]?[interface]?["UUID"]?.string else { return nil }
            return (path, uuid.lowercased())
        }
    }

    /// Wakes the waiters whose condition now holds (also after a change
    /// that is not a signal: a connect call ending).
    func checkWaiters() {
        for (id, waiter) in waiters where waiter.isSatisfied() {
            waiters[id] = nil
            waiter.continuation.resume()
        }
    }

    private func failWaiters(_ error: BlueZError) {
        let pending = waiters
        waiters = [:]
        for waiter in pending.values {
            var error = error
            error.step = "wait for bluetoothd"
            waiter.continuation.resume(throwing: error)
        }
    }

    /// Waits until `condition` holds in the registry.
    /// - Throws: `timeout`, `bluetoothdGone`, or cancellation.
    func waitUntil(_ condition: @escaping () -> Bool, timeout: Duration, step: String, device: String?) async throws {
        if condition() { return }
        nextWaiter += 1
        let id = nextWaiter
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.expireWaiter(id, BlueZError(.timeout(timeout), device: device, step: step))
        }
        defer { timer.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                waiters[id] = Waiter(
                    isSatisfied: condition, continuation: continuation, generation: bluetoothdGeneration)
            }
        } onCancel: {
            Task { await self.expireWaiter(id, CancellationError()) }
        }
    }

    private func expireWaiter(_ id: Int, _ error: any Error) {
        waiters.removeValue(forKey: id)?.continuation.resume(throwing: error)
    }

    // MARK: Reading the registry

    /// The interfaces and properties of one object, as bluetoothd last said.
    public func object(_ path: ObjectPath) -> [String: [String: BusValue]]? { objects[path] }

    /// Every object bluetoothd exports.
    public func allObjects() -> [ObjectPath: [String: [String: BusValue]]] { objects }

    public func adapters() -> [Adapter] {
        objects.compactMap { path, interfaces in
            interfaces["org.bluez.Adapter1"].map { Adapter(path: path, properties: $0) }
        }.sorted { $0.path < $1.path }
    }

    /// The adapter called `name` (`hci0`), or the first powered one with the
    /// central role.
    public func adapter(named name: String?) throws -> Adapter {
        let all = adapters()
        if let name {
            guard let adapter = all.first(where: { $0.name == name }) else {
                throw BlueZError(.adapterNotFound(name), step: "choose the adapter")
            }
            return adapter
        }
        guard let adapter = all.first(where: { $0.powered && $0.roles.contains("central") }) ?? all.first else {
            throw BlueZError(.adapterNotFound("(any)"), step: "choose the adapter")
        }
        return adapter
    }

    /// Waits until the adapter is there (after bluetoothd restarted, the
    /// registry fills again only when its objects have been read).
    public func waitForAdapter(named name: String?, timeout: Duration) async throws -> Adapter {
        try await waitUntil(
            { (try? self.adapter(named: name)) != nil }, timeout: timeout, step: "wait for the adapter", device: nil)
        return try adapter(named: name)
    }

    /// Every device bluetoothd knows, on every adapter.
    public func devices() -> [Device] {
        objects.compactMap { path, interfaces in
            interfaces["org.bluez.Device1"].map { Device(path: path, properties: $0, lastHeard: heardAt[path]) }
        }.filter { Device.isValidAddress($0.address) }.sorted { $0.path < $1.path }
    }

    /// The device with `address`, on `adapter` if given.
    public func device(address: String, adapter: ObjectPath? = nil) -> Device? {
        let paths = (devicePathsByAddress[address.uppercased()] ?? []).sorted()
        return paths.lazy.compactMap { path -> Device? in
            guard let properties = self.objects[path]?["org.bluez.Device1"] else { return nil }
            let device = Device(path: path, properties: properties, lastHeard: self.heardAt[path])
            return adapter == nil || device.adapter == adapter ? device : nil
        }.first
    }

    // MARK: Adapters and discovery

    @discardableResult
    private func call(
        _ path: ObjectPath, _ interface: InterfaceName, _ member: MemberName, _ body: [BusValue] = [],
        timeout: Duration? = nil, step: String, device: String? = nil, characteristic: String? = nil
    ) async throws -> BusMessage {
        do {
            return try await bus.call(Self.bluez, path, interface, member, body, timeout: timeout ?? timeouts.call)
        } catch let error as BusError {
            throw BlueZError(
                error.name == .noReply ? .timeout(timeout ?? timeouts.call) : .bus(error), device: device, step: step,
                characteristic: characteristic)
        }
    }

    /// Powers an adapter on or off.
    public func setPowered(_ adapter: Adapter, _ on: Bool) async throws {
        try await call(
            adapter.path, .properties, "Set",
            [.string("org.bluez.Adapter1"), .string("Powered"), .variant(.boolean(on))], step: "power \(adapter.name)")
    }

    /// Filters discovery to LE with duplicates reported (so RSSI stays
    /// current) and an optional RSSI floor, then starts it. Discovery that
    /// this client already started is not an error.
    ///
    /// With `everyAdvert` false and no floor, the filter is cleared instead:
    /// bluetoothd then announces an RSSI change only when it moves by 8 dBm
    /// or more, which spares a long fleet run thousands of signals.
    public func startDiscovery(on adapter: Adapter, rssiFloor: Int16? = nil, everyAdvert: Bool = true) async throws {
        var filter: [String: BusValue] = [:]
        if everyAdvert || rssiFloor != nil { filter = ["Transport": "le", "DuplicateData": true] }
        if let rssiFloor { filter["RSSI"] = .int16(rssiFloor) }
        try await call(
            adapter.path, "org.bluez.Adapter1", "SetDiscoveryFilter", [.propertyMap(filter)],
            step: "set the discovery filter on \(adapter.name)")
        do {
            try await call(
                adapter.path, "org.bluez.Adapter1", "StartDiscovery", step: "start discovery on \(adapter.name)")
        } catch let error as BlueZError where error.busErrorName == .bluez.inProgress {
            return
        }
    }

    public func stopDiscovery(on adapter: Adapter) async throws {
        do {
            try await call(
                adapter.path, "org.bluez.Adapter1", "StopDiscovery", step: "stop discovery on \(adapter.name)")
        } catch let error as BlueZError
            where error.busErrorName == .bluez.failed && error.description.contains("No discovery started")
        {
            return
        }
    }

    /// Waits until a device with `address` is known (discovery must run).
    public func waitForDevice(address: String, adapter: ObjectPath? = nil, timeout: Duration) async throws -> Device {
        try await waitUntil(
            { self.device(address: address, adapter: adapter) != nil },
            timeout: timeout, step: "find", device: address)
        guard let found = device(address: address, adapter: adapter) else {
            throw BlueZError(.deviceNotFound, device: address, step: "find")
        }
        return found
    }

    // MARK: Internal helpers for DeviceSession

    func connectLock(for adapter: ObjectPath) -> AsyncLock {
        if let lock = connectLocks[adapter] { return lock }
        let lock = AsyncLock()
        connectLocks[adapter] = lock
        return lock
    }

    func invoke(
        _ path: ObjectPath, _ interface: InterfaceName, _ member: MemberName, _ body: [BusValue] = [],
        timeout: Duration, step: String, device: String?, characteristic: String? = nil
    ) async throws -> BusMessage {
        try await call(
            path, interface, member, body, timeout: timeout, step: step, device: device,
            characteristic: characteristic)
    }
}

/// An adapter as the registry shows it.
public struct Adapter: Sendable, Equatable {
    public var path: ObjectPath
    public var name: String { String(path.components.last ?? "") }
    public var address: String
    public var powered: Bool
    public var discovering: Bool
    public var roles: [String]

    init(path: ObjectPath, properties: [String: BusValue]) {
        self.path = path
        address = properties["Address"]?.string ?? ""
        powered = properties["Powered"]?.bool ?? false
        discovering = properties["Discovering"]?.bool ?? false
        roles = properties["Roles"]?.stringArray ?? []
    }
}

/// A device as the registry shows it.
public struct Device: Sendable, Equatable {
    public var path: ObjectPath
    public var address: String
    public var adapter: ObjectPath?
    public var name: String?
    public var rssi: Int16?
    public var connected: Bool
    public var servicesResolved: Bool
    /// Company identifier → payload.
    public var manufacturerData: [UInt16: [UInt8]]
    /// When this client last had a sign of the device in range (its object
    /// appeared, or an advert changed its RSSI or data); nil when unknown.
    public var lastHeard: ContinuousClock.Instant?

    init(path: ObjectPath, properties: [String: BusValue], lastHeard: ContinuousClock.Instant? = nil) {
        self.path = path
        self.lastHeard = lastHeard
        address = properties["Address"]?.string ?? ""
        adapter = properties["Adapter"]?.objectPath
        name = properties["Name"]?.string.map(Self.bounded)
        rssi = properties["RSSI"]?.int16
        connected = properties["Connected"]?.bool ?? false
        servicesResolved = properties["ServicesResolved"]?.bool ?? false
        manufacturerData = (properties["ManufacturerData"]?.uint16KeyedDictionary ?? [:]).compactMapValues(\.bytes)
    }
}

extension Device {
    /// A Bluetooth device name is at most 248 bytes (Core spec, Vol 3, Part
    /// C, 3.2.2); a longer one is cut there, at a character boundary. What
    /// it holds is never trusted: it is shown only through `Visible.text`.
    static func bounded(_ name: String) -> String {
        guard name.utf8.count > 248 else { return name }
        var cut = ""
        for character in name {
            guard cut.utf8.count + character.utf8.count <= 248 else { break }
            cut.append(character)
        }
        return cut
    }

    /// Whether `address` is `XX:XX:XX:XX:XX:XX` in hex digits, as BlueZ
    /// writes one. A device with any other address (from a bluetoothd that
    /// is not what it claims) is not listed at all.
    public static func isValidAddress(_ address: String) -> Bool {
        let bytes = Array(address.utf8)
        guard bytes.count == 17 else { return false }
        for (index, byte) in bytes.enumerated() {
            if index % 3 == 2 {
                guard byte == UInt8(ascii: ":") else { return false }
            } else {
                guard (byte >= 48 && byte <= 57) || (byte >= 65 && byte <= 70) || (byte >= 97 && byte <= 102) else {
                    return false
                }
            }
        }
        return true
    }
}

/// A lock that suspends instead of blocking: one pending LE connect per
/// adapter.
actor AsyncLock {
    private var locked = false
    private var queue: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        if !locked {
            locked = true
            return
        }
        await withCheckedContinuation { queue.append($0) }
    }

    func release() {
        if queue.isEmpty {
            locked = false
        } else {
            queue.removeFirst().resume()
        }
    }
}
