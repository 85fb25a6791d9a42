import DBusBinding

/// A client of bluetoothd: the adapters, a live registry of every object
/// bluetoothd exports (kept current by its signals, never by polling), and
/// discovery. Devices are connected through `connect(_:)`.
///
/// When bluetoothd leaves the bus the registry is emptied and everything
/// waiting on it fails with `bluetoothdGone`; when it comes back the
/// registry is read again and devices are found by address as before.
///
/// The client runs on its bus connection's own thread (its executor is the
/// connection's): bluetoothd's signals are applied to the registry as they
/// are read, in order, with no task hop or buffer per signal. A depot's
/// thousands of adverts a second cost little more than decoding them.
public actor BluetoothClient {
    public static let bluez: BusName = "org.bluez"

    public let bus: BusConnection
    public nonisolated var unownedExecutor: UnownedSerialExecutor { bus.executor }
    /// Path → interface → property → value, as bluetoothd exports them.
    private var objects: [ObjectPath: [String: [String: BusValue]]] = [:]
    private var waiters: [Int: Waiter] = [:]
    /// The fast path's intern tables (names and object paths, bounded) and
    /// what each interned id stands for, made once.
    private let names = InternTable.blueZ()
    private let paths = InternTable(maximumNames: 65_536)
    private var nameStrings: [String?] = []
    private var pathValues: [ObjectPath?] = []
    private var wireEvents: [WireEvents.Event] = []
    /// The signal being handled on the fast path: borrowed, set and used
    /// on the connection's thread before its handler returns.
    private nonisolated(unsafe) var arrived: WireMessageView?
    private var scratch: [(String, BusValue)] = []
    private var nextWaiter = 0
    /// Reading bluetoothd's objects again after it came back.
    private var reloading: Task<Void, Never>?
    private var subscription: SignalSubscription?
    private var owners: SignalSubscription?
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
    private var adapterPaths: Set<ObjectPath> = []
    /// Devices whose Connected reads true (what `linksUp` counts).
    private var connectedDevices: Set<ObjectPath> = []
    /// Per company identifier, what each device advertises under it, by
    /// address (uppercase), and the companies each address advertises:
    /// kept as adverts change, so that a fleet run asking once per device
    /// costs nothing per device it does not touch.
    private var advertisedByCompany: [UInt16: [String: [UInt8]]] = [:]
    private var advertisedCompanies: [String: [UInt16]] = [:]
    /// Device → interface → lowercased UUID → object, built on the first
    /// lookup after the device's GATT objects changed.
    private var gattIndex: [ObjectPath: [String: [String: ObjectPath]]] = [:]
    /// Bumped when the set of devices, or what a scan shows of them
    /// (address, connection, advertised data), changes: a poller that
    /// sees the same number has nothing new to look at.
    public private(set) var deviceListVersion = 0
    private static let listedProperties: Set<String> = ["Address", "Connected", "ManufacturerData", "ServicesResolved"]
    /// When each device object last showed a sign of the device in range:
    /// it appeared, or its RSSI, advertising data or TX power changed (an
    /// advert). With a discovery filter (`startDiscovery(everyAdvert:)`)
    /// bluetoothd announces every advert's RSSI; without one only changes
    /// of 8 dBm or more.
    private var heardAt: [ObjectPath: ContinuousClock.Instant] = [:]
    /// Per adapter address: when Powered last changed to true (however
    /// briefly: a watcher looking now and then can miss it).
    private var poweredOnAt: [String: ContinuousClock.Instant] = [:]
    /// Per device: bumped whenever a connection's GATT map must be
    /// dropped (ServicesResolved false, Connected false, the device or one
    /// of its GATT objects removed). A `DeviceSession` holds the epoch it
    /// resolved under and refuses to use paths from any other.
    private var linkEpoch: [ObjectPath: Int] = [:]
    /// Per adapter: when this client asked it to discover (StartDiscovery
    /// sent); nil once Discovering reads false or the adapter went.
    private var discoveryStartedAt: [ObjectPath: ContinuousClock.Instant] = [:]
    /// Adapters' addresses seen in this client's life, and the path each
    /// had last (a replugged adapter comes back under a new index).
    private var adapterPathsByAddress: [String: ObjectPath] = [:]
    /// Bumped when an adapter goes or comes (any path).
    public private(set) var adapterListVersion = 0
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
        // Applied on the connection's thread, which is this actor's, read
        // in batches: a signal waits at most 5 ms when no call is pending
        // (a registry needs no faster; replies are never delayed).
        await bus.coalesceIncoming(upTo: .milliseconds(5))
        subscription = try await bus.subscribeWire(
            MatchRule(sender: Self.bluez),
            handler: { [weak self] view in
                // Handed over in a field rather than captured: a closure
                // capturing the view would be allocated for every signal.
                guard let self else { return }
                self.arrived = view
                self.onOwnThread { $0.applyArrived() }
            },
            fallback: { [weak self] signal in self?.assumeIsolated { $0.apply(signal) } })
        // bluetoothd leaving or coming back, in order with its signals.
        owners = try await bus.subscribe(.nameOwnerChanged(Self.bluez)) { [weak self] signal in
            guard let change = try? NameOwnerChanged(signal) else { return }
            self?.assumeIsolated { $0.ownerChanged(change) }
        }
        try await reload()
    }

    /// Stops listening.
    public func stop() async {
        reloading?.cancel()
        reloading = nil
        for subscription in [subscription, owners].compactMap({ $0 }) { await subscription.cancel() }
        subscription = nil
        owners = nil
        failWaiters(BlueZError(.bluetoothdGone, step: "stop"))
    }

    private func reload() async throws {
        do {
            objects = try await bus.managedObjects(of: Self.bluez, timeout: timeouts.call)
            for (path, interfaces) in objects {
                for (name, properties) in interfaces {
                    guard let kept = Self.kept(name) else { continue }
                    objects[path]?[name] = properties.filter { kept.contains($0.key) }
                }
            }
            rebuildIndexes()
            deviceListVersion += 1
            // A cached object is not a beacon in range: bluetoothd keeps a
            // device (its last RSSI and adverts too) for its temporary
            // timeout after the beacon left. Only signals heard from now
            // on say it is here.
            heardAt = [:]
            linkEpoch = [:]
        } catch let error as BusError {
            throw BlueZError(.bus(error), step: "read bluetoothd's objects")
        }
        checkWaiters()
    }

    // MARK: Keeping the registry current

    /// A signal decoded by libdbus (the slow path: when libdbus reads the
    /// socket, or for a message the wire check refused).
    private func apply(_ signal: BusSignal) {
        switch (signal.interface, signal.member.rawValue) {
        case (.objectManager, "InterfacesAdded"):
            guard let added = try? InterfacesAdded(signal) else { return }
            var interfaces = added.interfaces
            let heard =
                interfaces["org.bluez.Device1"].map { !Self.advertProperties.isDisjoint(with: $0.keys) } ?? false
            for (name, properties) in interfaces {
                guard let kept = Self.kept(name) else { continue }
                interfaces[name] = properties.filter { kept.contains($0.key) }
            }
            interfacesAdded(added.path, interfaces, heard: heard)
        case (.objectManager, "InterfacesRemoved"):
            guard let removed = try? InterfacesRemoved(signal) else { return }
            interfacesRemoved(removed.path, removed.interfaces)
        case (.properties, "PropertiesChanged"):
            guard let change = try? PropertiesChanged(signal), objects[change.path]?[change.interface] != nil else {
                return
            }
            let kept = Self.kept(change.interface)
            var sent = SentProperties()
            var updated = takeScratch()
            for (name, value) in change.changed {
                sent.note(name, value)
                guard kept?.contains(name) ?? true else { continue }
                if objects[change.path]?[change.interface]?[name] != value { updated.append((name, value)) }
            }
            propertiesChanged(
                change.path, change.interface, sent: sent, updated: &updated, invalidated: change.invalidated)
            scratch = updated
        default:
            return
        }
    }

    /// A signal as the bytes it came in (the fast path): decoded straight
    /// into the registry, a value converted only when it differs from the
    /// one held. GATT objects keep their UUID and Flags only (the rest is
    /// never read from the registry).
    /// Runs `body` isolated to this actor from a subscription handler,
    /// which the binding calls on the connection's thread: this actor's
    /// executor. Debug builds check that, as `assumeIsolated` does; release
    /// builds skip the runtime's check, which allocated on every signal
    /// (a custom executor's `checkIsolated` is reached through the runtime).
    private nonisolated func onOwnThread(_ body: (isolated BluetoothClient) -> Void) {
        #if DEBUG
            assumeIsolated(body)
        #else
            withoutActuallyEscaping(body) { body in
                unsafeBitCast(body, to: ((BluetoothClient) -> Void).self)(self)
            }
        #endif
    }

    private func applyArrived() {
        guard let view = arrived else { return }
        arrived = nil
        applyWire(view)
    }

    private func applyWire(_ view: WireMessageView) {
        let header = view.header
        guard let shape = BlueZShape(signature: header.signature) else { return }
        switch shape {
        case .propertiesChanged:
            guard header.field(.interface, is: "org.freedesktop.DBus.Properties"),
                header.field(.member, is: "PropertiesChanged")
            else { return }
        case .interfacesAdded:
            guard header.field(.interface, is: "org.freedesktop.DBus.ObjectManager"),
                header.field(.member, is: "InterfacesAdded")
            else { return }
        case .interfacesRemoved:
            guard header.field(.interface, is: "org.freedesktop.DBus.ObjectManager"),
                header.field(.member, is: "InterfacesRemoved")
            else { return }
        case .managedObjects:
            return
        }
        var events = WireEvents(taking: &wireEvents)
        BlueZDecoder.decode(view, names: names, paths: paths, into: &events)
        defer { wireEvents = events.give() }
        guard let pathName = events.path else { return }
        let path = objectPath(pathName)
        switch shape {
        case .propertiesChanged:
            guard let interfaceName = events.firstInterface else { return }
            let interface = name(interfaceName)
            guard objects[path]?[interface] != nil else { return }
            let kept = Self.kept(interface)
            var sent = SentProperties()
            var updated = takeScratch()
            var invalidated: [String] = []
            for event in events.list {
                switch event {
                case .property(let key, let value):
                    let keyName = name(key)
                    sent.note(keyName, value)
                    guard kept?.contains(keyName) ?? true else { continue }
                    if !Self.same(value, objects[path]?[interface]?[keyName]), let converted = Self.convert(value) {
                        updated.append((keyName, converted))
                    }
                case .invalidated(let key): invalidated.append(name(key))
                default: continue
                }
            }
            propertiesChanged(path, interface, sent: sent, updated: &updated, invalidated: invalidated)
            scratch = updated
        case .interfacesAdded:
            var interfaces: [String: [String: BusValue]] = [:]
            var current: String?
            var kept: Set<String>?
            var heard = false
            for event in events.list {
                switch event {
                case .interface(let interfaceName):
                    let interface = name(interfaceName)
                    current = interface
                    kept = Self.kept(interface)
                    interfaces[interface] = interfaces[interface] ?? [:]
                case .property(let key, let value):
                    guard let current else { continue }
                    let keyName = name(key)
                    if current == "org.bluez.Device1", Self.advertProperties.contains(keyName) { heard = true }
                    guard kept?.contains(keyName) ?? true, let converted = Self.convert(value) else { continue }
                    interfaces[current, default: [:]][keyName] = converted
                default: continue
                }
            }
            interfacesAdded(path, interfaces, heard: heard)
        case .interfacesRemoved:
            var removed: [String] = []
            for case .removed(let interfaceName) in events.list { removed.append(name(interfaceName)) }
            interfacesRemoved(path, removed)
        case .managedObjects:
            return
        }
    }

    /// `heard`: the device's properties included an advert's (RSSI, data,
    /// TX power); a device reloaded from storage (an adapter back, a
    /// bluetoothd restart) carries none: not heard.
    private func interfacesAdded(_ path: ObjectPath, _ interfaces: [String: [String: BusValue]], heard: Bool) {
        objects[path, default: [:]].merge(interfaces) { $1 }
        if interfaces["org.bluez.Device1"] != nil {
            if heard { heardAt[path] = .now }
            deviceListVersion += 1
        }
        index(path)
        // Waiters wait on adapters and devices (present, connected,
        // resolved): they are looked at again only when one of those
        // changed, not for each GATT object or advert.
        if !Self.waitedInterfaces.isDisjoint(with: interfaces.keys) { checkWaiters() }
    }

    private func interfacesRemoved(_ path: ObjectPath, _ interfaces: [String]) {
        // Written through `default:` subscripts, not optional chains: a
        // chain of dictionary accessors allocates for each write (six
        // `malloc`s for three levels, measured), `default:` none.
        if objects[path] != nil {
            for name in interfaces { objects[path, default: [:]][name] = nil }
        }
        if objects[path]?.keys.allSatisfy({ $0.hasPrefix("org.freedesktop.DBus.") }) ?? false {
            objects[path] = nil
        }
        if objects[path]?["org.bluez.Device1"] == nil, heardAt.removeValue(forKey: path) != nil {
            deviceListVersion += 1
        }
        if interfaces.contains("org.bluez.Device1") {
            endLink(path)
        } else if let device = Self.deviceAncestor(of: path) {
            endLink(device)
        }
        if interfaces.contains("org.bluez.Adapter1") { adapterGone(path) }
        unindex(path)
        index(path)
        if !Self.waitedInterfaces.isDisjoint(with: interfaces) { checkWaiters() }
    }

    /// What a PropertiesChanged sent, whatever the registry held: the
    /// bookkeeping that does not depend on a value having changed.
    private struct SentProperties {
        /// Some property of an advert (RSSI, data, TX power) was sent.
        var advert = false
        /// Every property sent is an advert's.
        var onlyAdvert = true
        /// Connected or ServicesResolved sent as false: the link is down.
        var linkDown = false
        /// Adapter1's Discovering sent as false.
        var discoveringStopped = false

        mutating func note(_ name: String, _ value: BusValue) {
            note(name, isFalse: value == .boolean(false))
        }

        mutating func note(_ name: String, _ value: WireValue) {
            note(name, isFalse: value.bool == false)
        }

        private mutating func note(_ name: String, isFalse: Bool) {
            if BluetoothClient.advertProperties.contains(name) { advert = true } else { onlyAdvert = false }
            if isFalse {
                if name == "Connected" || name == "ServicesResolved" { linkDown = true }
                if name == "Discovering" { discoveringStopped = true }
            }
        }
    }

    /// Applies a PropertiesChanged: `updated` are the values that differ
    /// from the held ones (merged), `invalidated` the names dropped.
    private func propertiesChanged(
        _ path: ObjectPath, _ interface: String, sent: SentProperties, updated: inout [(String, BusValue)],
        invalidated: [String]
    ) {
        let heldData = interface == "org.bluez.Device1" ? objects[path]?[interface]?["ManufacturerData"] : nil
        // bluetoothd's ManufacturerData is what the last report carried; a
        // real beacon's advert and scan response carry different companies
        // (the contract, section 1): keep the last value heard of each.
        if let heldData, let index = updated.firstIndex(where: { $0.0 == "ManufacturerData" }) {
            let merged = Self.mergedManufacturerData(held: heldData, heard: updated[index].1)
            if merged == heldData { updated.remove(at: index) } else { updated[index].1 = merged }
        }
        // The caller found the interface held: `default:` writes in place
        // (an optional chain would allocate per write, see interfacesRemoved).
        for (name, value) in updated { objects[path, default: [:]][interface, default: [:]][name] = value }
        for name in invalidated { objects[path, default: [:]][interface, default: [:]][name] = nil }
        var waitersConcerned = false
        if interface == "org.bluez.Device1" {
            func updatedOrInvalidated(_ name: String) -> Bool {
                updated.contains { $0.0 == name } || invalidated.contains(name)
            }
            // bluetoothd announces ManufacturerData with every advert while
            // discovery reports duplicates: only a different value is news.
            var cameBack = false
            if sent.advert {
                cameBack = heardAfterSilence(path)
                heardAt[path] = .now
            }
            let listedChanged =
                updated.contains { Self.listedProperties.contains($0.0) }
                || !Self.listedProperties.isDisjoint(with: invalidated)
            if listedChanged || cameBack { deviceListVersion += 1 }
            if updatedOrInvalidated("ManufacturerData"), heldData != objects[path]?[interface]?["ManufacturerData"] {
                if let address = addressByDevicePath[path] { indexAdverts(of: address) }
            }
            if updatedOrInvalidated("Connected") { indexConnection(path) }
            if updated.contains(where: { $0.0 == "Address" }) {
                unindex(path)
                index(path)
            }
            if sent.linkDown || invalidated.contains("Connected") || invalidated.contains("ServicesResolved") {
                endLink(path)
            }
            waitersConcerned = !(invalidated.isEmpty && sent.onlyAdvert)
        } else {
            if interface == "org.bluez.Adapter1" {
                if sent.discoveringStopped { discoveryStartedAt[path] = nil }
                if updated.contains(where: { $0.0 == "Powered" && $0.1.bool == true }),
                    let address = objects[path]?[interface]?["Address"]?.string
                {
                    poweredOnAt[address.uppercased()] = .now
                }
            }
            waitersConcerned = Self.waitedInterfaces.contains(interface)
        }
        updated.removeAll(keepingCapacity: true)
        if waitersConcerned { checkWaiters() }
    }

    /// At most this many companies are kept for a device (a report holds
    /// a few; a hostile device cycling company IDs gains nothing).
    static let maximumCompanies = 8

    /// `heard` (a report's ManufacturerData) over what was `held`: each
    /// company's newest value, in company order; the heard ones always,
    /// held ones while fewer than `maximumCompanies`.
    static func mergedManufacturerData(held: BusValue, heard: BusValue) -> BusValue {
        guard case .dictionary(.uint16, let valueType, let heardEntries) = heard.unwrapped,
            case .dictionary(.uint16, _, let heldEntries) = held.unwrapped
        else { return heard }
        var entries = Array(heardEntries.prefix(maximumCompanies))
        for entry in heldEntries where entries.count < maximumCompanies {
            if !entries.contains(where: { $0.key == entry.key }) { entries.append(entry) }
        }
        entries.sort { ($0.key.uint16 ?? 0) < ($1.key.uint16 ?? 0) }
        return .dictionary(key: .uint16, value: valueType, entries)
    }

    // MARK: The fast path's helpers

    /// A reused buffer for a signal's changed values (no allocation per
    /// signal once it has grown).
    private func takeScratch() -> [(String, BusValue)] {
        var taken: [(String, BusValue)] = []
        swap(&taken, &scratch)
        taken.removeAll(keepingCapacity: true)
        return taken
    }

    /// What the registry keeps of an interface's properties (nil: all).
    /// Of a device, what `Device` and the bookkeeping read (selection,
    /// presence, links); of GATT objects, their UUID and Flags (values come
    /// by a session's notification stream, never from the registry).
    /// Nothing else is decoded or held, for devices a run never touches.
    private static func kept(_ interface: String) -> Set<String>? {
        if interface == "org.bluez.Device1" { return deviceKept }
        return interface.hasPrefix("org.bluez.Gatt") ? gattKept : nil
    }

    private static let deviceKept: Set<String> = [
        "Address", "AddressType", "Adapter", "Name", "RSSI", "TxPower", "Connected", "ServicesResolved",
        "ManufacturerData", "Paired", "Trusted",
    ]
    private static let gattKept: Set<String> = ["UUID", "Flags"]

    /// A property or interface name as text, made once per interned name.
    private func name(_ wire: WireName) -> String {
        Self.interned(wire, in: &nameStrings) { $0.string }
    }

    /// An object path, made once per interned path.
    private func objectPath(_ wire: WireName) -> ObjectPath {
        Self.interned(wire, in: &pathValues) { $0.objectPath }
    }

    /// What `make` gives for an interned name, kept by its id (made anew
    /// each time for a name the table had no room for).
    private static func interned<Value>(_ wire: WireName, in kept: inout [Value?], make: (WireName) -> Value) -> Value {
        guard let id = wire.id else { return make(wire) }
        let index = Int(id.rawValue)
        if index < kept.count, let known = kept[index] { return known }
        if index >= kept.count { kept.append(contentsOf: repeatElement(nil, count: index + 1 - kept.count)) }
        let value = make(wire)
        kept[index] = value
        return value
    }

    /// Whether a value sent is the one held (compared in place: nothing
    /// allocated for the kinds bluetoothd repeats: RSSI, flags, strings,
    /// bytes and ManufacturerData).
    static func same(_ value: WireValue, _ held: BusValue?) -> Bool {
        guard let held else { return false }
        switch (value.kind, held) {
        case (.int16, .int16(let number)): return value.int16 == number
        case (.boolean, .boolean(let flag)): return value.bool == flag
        case (.byte, .byte(let number)): return value.byte == number
        case (.uint16, .uint16(let number)): return value.uint16 == number
        case (.int32, .int32(let number)): return value.int32 == number
        case (.uint32, .uint32(let number)): return value.uint32 == number
        case (.string, .string(let text)): return value.textEquals(text)
        case (.objectPath, .objectPath(let path)): return value.textEquals(path.rawValue)
        case (.bytes, .bytes(let bytes)): return value.bytesEqual(bytes)
        case (.uint16Variants, .dictionary(key: .uint16, value: .variant, let entries)):
            var index = 0
            var equal = true
            value.forEachEntry { key, inner in
                guard equal, index < entries.count, case .uint16(let company) = entries[index].key,
                    key.uint16 == company, case .variant(.bytes(let bytes)) = entries[index].value,
                    inner.bytesEqual(bytes)
                else {
                    equal = false
                    return
                }
                index += 1
            }
            return equal && index == entries.count
        default:
            return (try? value.busValue()) == held
        }
    }

    /// RSSI values as `BusValue`s, made once (a value of an indirect enum
    /// is an allocation).
    private static let smallInt16: [BusValue] = (-128...127).map { .int16(Int16($0)) }

    /// A value sent, as the registry holds it (variants unwrapped); nil
    /// when it cannot be decoded (the message was checked, so never).
    static func convert(_ value: WireValue) -> BusValue? {
        switch value.kind {
        case .int16:
            if let number = value.int16, number >= -128, number <= 127 { return smallInt16[Int(number) + 128] }
        case .boolean:
            if let flag = value.bool { return flag ? .boolean(true) : .boolean(false) }
        default: break
        }
        return try? value.busValue()
    }

    /// Whether an advert from `device` (about to be noted) is the first
    /// since this client's discovery began on its adapter, or the first
    /// after `Self.silence`: what a scan lists changes then, although no
    /// listed property does.
    private func heardAfterSilence(_ device: ObjectPath) -> Bool {
        guard let last = heardAt[device] else { return true }
        if let adapter = objects[device]?["org.bluez.Device1"]?["Adapter"]?.objectPath,
            let since = discoveryStartedAt[adapter], last < since
        {
            return true
        }
        return ContinuousClock.now - last >= Self.silence
    }

    /// A device not heard for this long that is heard again counts as
    /// news for pollers of `deviceListVersion` (beacons advertise about
    /// once a second).
    static let silence: Duration = .seconds(3)

    /// A connection's GATT map ends: its paths are never used again.
    private func endLink(_ device: ObjectPath) {
        linkEpoch[device, default: 0] += 1
        gattIndex[device] = nil
    }

    private func adapterGone(_ path: ObjectPath) {
        discoveryStartedAt[path] = nil
        adapterListVersion += 1
    }

    /// The interfaces waiters' conditions read.
    private static let waitedInterfaces: Set<String> = ["org.bluez.Adapter1", "org.bluez.Device1"]

    private func ownerChanged(_ change: NameOwnerChanged) {
        bluetoothdGeneration += 1
        deviceListVersion += 1
        objects = [:]
        heardAt = [:]
        linkEpoch = [:]
        discoveryStartedAt = [:]
        rebuildIndexes()
        failWaiters(BlueZError(.bluetoothdGone, step: "wait"))
        if change.newOwner != nil {
            let generation = bluetoothdGeneration
            reloading?.cancel()
            reloading = Task { [weak self] in
                // Read again unless bluetoothd changed once more meanwhile.
                guard await self?.bluetoothdGeneration == generation else { return }
                try? await self?.reload()
            }
        }
    }

    // MARK: Indexes

    /// The device a GATT object belongs to: `/org/bluez/hciN/dev_…` (it
    /// runs for every object bluetoothd announces: nothing split or joined).
    static func deviceAncestor(of path: ObjectPath) -> ObjectPath? {
        guard let device = path.ancestor(depth: 4),
            device.rawValue.utf8.reversed().firstIndex(of: UInt8(ascii: "/")).map({ slash in
                device.rawValue.utf8[slash.base...].starts(with: "dev_".utf8)
            }) ?? false
        else { return nil }
        return device
    }

    private func index(_ path: ObjectPath) {
        guard let interfaces = objects[path] else { return }
        if let adapter = interfaces["org.bluez.Adapter1"] {
            adapterPaths.insert(path)
            if let address = adapter["Address"]?.string?.uppercased(), Device.isValidAddress(address) {
                if adapterPathsByAddress[address] != path { adapterListVersion += 1 }
                adapterPathsByAddress[address] = path
            }
        }
        if let address = interfaces["org.bluez.Device1"]?["Address"]?.string?.uppercased(),
            Device.isValidAddress(address)
        {
            devicePathsByAddress[address, default: []].insert(path)
            addressByDevicePath[path] = address
            indexAdverts(of: address)
        }
        indexConnection(path)
        if let device = Self.deviceAncestor(of: path),
            interfaces.keys.contains(where: { $0.hasPrefix("org.bluez.Gatt") })
        {
            attributesByDevice[device, default: []].insert(path)
            gattIndex[device] = nil
        }
    }

    private func indexConnection(_ path: ObjectPath) {
        if addressByDevicePath[path] != nil, objects[path]?["org.bluez.Device1"]?["Connected"]?.bool == true {
            connectedDevices.insert(path)
        } else {
            connectedDevices.remove(path)
        }
    }

    /// What `address` advertises under each company, from its device
    /// objects (one per adapter that sees it; the first path in order wins,
    /// as for `device(address:)`).
    private func indexAdverts(of address: String) {
        for company in advertisedCompanies.removeValue(forKey: address) ?? [] {
            advertisedByCompany[company]?[address] = nil
        }
        var companies: [UInt16] = []
        for path in (devicePathsByAddress[address] ?? []).sorted().reversed() {
            guard
                case .dictionary(_, _, let entries)? = objects[path]?["org.bluez.Device1"]?["ManufacturerData"]?
                    .unwrapped
            else { continue }
            for entry in entries {
                guard case .uint16(let company) = entry.key, let bytes = entry.value.bytes else { continue }
                advertisedByCompany[company, default: [:]][address] = bytes
                if !companies.contains(company) { companies.append(company) }
            }
        }
        if !companies.isEmpty { advertisedCompanies[address] = companies }
    }

    private func unindex(_ path: ObjectPath) {
        adapterPaths.remove(path)
        if let address = addressByDevicePath.removeValue(forKey: path) {
            devicePathsByAddress[address]?.remove(path)
            if devicePathsByAddress[address]?.isEmpty == true { devicePathsByAddress[address] = nil }
            indexAdverts(of: address)
        }
        connectedDevices.remove(path)
        if let device = Self.deviceAncestor(of: path), attributesByDevice[device]?.remove(path) != nil {
            gattIndex[device] = nil
        }
    }

    private func rebuildIndexes() {
        devicePathsByAddress = [:]
        addressByDevicePath = [:]
        connectedDevices = []
        advertisedByCompany = [:]
        advertisedCompanies = [:]
        attributesByDevice = [:]
        gattIndex = [:]
        adapterPaths = []
        for path in objects.keys { index(path) }
    }

    /// The GATT objects of one interface under a device: path and UUID.
    func gattObjects(under device: ObjectPath, interface: String) -> [(path: ObjectPath, uuid: String)] {
        (attributesByDevice[device] ?? []).compactMap { path in
            guard let uuid = objects[path]?[interface]?["UUID"]?.string else { return nil }
            return (path, uuid.lowercased())
        }
    }

    /// The GATT object of one interface under a device with `uuid`
    /// (lowercase), from the device's index.
    func gattObject(under device: ObjectPath, interface: String, uuid: String) -> ObjectPath? {
        if let index = gattIndex[device] { return index[interface]?[uuid] }
        var index: [String: [String: ObjectPath]] = [:]
        for path in attributesByDevice[device] ?? [] {
            for (name, properties) in objects[path] ?? [:] {
                if let found = properties["UUID"]?.string { index[name, default: [:]][found.lowercased()] = path }
            }
        }
        gattIndex[device] = index
        return index[interface]?[uuid]
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
        adapterPaths.compactMap { path in
            objects[path]?["org.bluez.Adapter1"].map { Adapter(path: path, properties: $0) }
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

    /// The adapter with `address`, wherever it is now (hci0 replugged
    /// comes back as hci1 with the same address); nil while it is absent.
    public func adapter(address: String) -> Adapter? {
        let address = address.uppercased()
        return adapters().first { $0.address.uppercased() == address }
    }

    /// Waits until the adapter with `address` is there (and powered, when
    /// `powered`), under whatever path.
    public func waitForAdapter(address: String, powered: Bool = false, timeout: Duration) async throws -> Adapter {
        try await waitUntil(
            { self.adapter(address: address).map { !powered || $0.powered } ?? false }, timeout: timeout,
            step: "wait for the adapter \(address)", device: nil)
        guard let found = adapter(address: address) else {
            throw BlueZError(.adapterNotFound(address), step: "wait for the adapter")
        }
        return found
    }

    /// The current epoch of a device's link (see `linkEpoch`).
    func linkEpoch(of device: ObjectPath) -> Int { linkEpoch[device, default: 0] }

    /// Whether the device's link is the one of `epoch`, and resolved.
    func linkIsCurrent(_ device: ObjectPath, epoch: Int) -> Bool {
        linkEpoch[device, default: 0] == epoch
            && objects[device]?["org.bluez.Device1"]?["ServicesResolved"]?.bool == true
    }

    /// When this client last asked `adapter` to discover (nil: it is not
    /// discovering for this client, or the adapter went since).
    public func discoveringSince(_ adapter: ObjectPath) -> ContinuousClock.Instant? { discoveryStartedAt[adapter] }

    /// Whether `device` was heard (it appeared with an advert's
    /// properties, or an advert changed its RSSI or data) since this
    /// client's discovery began on its adapter, within `within`. A cached
    /// object, its RSSI included, never counts.
    public func isPresent(_ device: Device, within: Duration) -> Bool {
        isPresent(device.path, adapter: device.adapter, within: within)
    }

    /// The devices present (see `isPresent(_:within:)`), found in one call:
    /// a scan asks this several times a second over thousands of devices.
    public func presentDevices(within: Duration) -> Set<ObjectPath> {
        var present: Set<ObjectPath> = []
        for path in addressByDevicePath.keys
        where isPresent(path, adapter: objects[path]?["org.bluez.Device1"]?["Adapter"]?.objectPath, within: within) {
            present.insert(path)
        }
        return present
    }

    private func isPresent(_ path: ObjectPath, adapter: ObjectPath?, within: Duration) -> Bool {
        guard let adapter, let since = discoveryStartedAt[adapter], let heard = heardAt[path], heard >= since
        else { return false }
        return ContinuousClock.now - heard < within
    }

    /// Links up on `adapter` (devices connected under it), `excluding` one
    /// device's address.
    public func linksUp(on adapter: ObjectPath, excluding address: String? = nil) -> Int {
        let excluded = address?.uppercased()
        var count = 0
        for path in connectedDevices where addressByDevicePath[path] != excluded {
            guard objects[path]?["org.bluez.Device1"]?["Adapter"]?.objectPath == adapter else { continue }
            count += 1
        }
        return count
    }

    /// Other links up on the adapter when this client last sent Connect to
    /// a device (the count a controller's slot refusal is about).
    private var linksAtConnect: [String: Int] = [:]

    func noteConnectSent(_ address: String, adapter: ObjectPath) {
        linksAtConnect[address.uppercased()] = linksUp(on: adapter, excluding: address)
    }

    /// Other links that were up on its adapter when this client last sent
    /// Connect to `address` (nil: it sent none).
    public func linksWhenConnectSent(_ address: String) -> Int? { linksAtConnect[address.uppercased()] }

    /// When the adapter with `address` last turned Powered true (nil: not
    /// since this client started).
    public func lastPoweredOn(address: String) -> ContinuousClock.Instant? { poweredOnAt[address.uppercased()] }

    /// Waits until every powered adapter reads Discovering, at most
    /// `timeout` (then returns all the same).
    public func waitForDiscovering(timeout: Duration) async {
        try? await waitUntil(
            { self.adapters().allSatisfy { $0.discovering || !$0.powered } }, timeout: timeout,
            step: "wait for discovery", device: nil)
    }

    /// Waits until fewer than `limit` links are up on `adapter`, at most
    /// `timeout` (then returns all the same: the caller retries).
    public func waitForLinks(below limit: Int, on adapter: ObjectPath, timeout: Duration) async {
        try? await waitUntil(
            { self.linksUp(on: adapter) < limit }, timeout: timeout, step: "wait for a free link", device: nil)
    }

    /// The last advert heard from any device on `adapter` since this
    /// client's discovery began there.
    public func lastAdvert(on adapter: ObjectPath) -> ContinuousClock.Instant? {
        guard let since = discoveryStartedAt[adapter] else { return nil }
        var last: ContinuousClock.Instant?
        for (path, heard) in heardAt where heard >= since && heard > (last ?? since - .seconds(1)) {
            guard objects[path]?["org.bluez.Device1"]?["Adapter"]?.objectPath == adapter else { continue }
            last = heard
        }
        return last
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
        // Only the objects with a valid address are indexed.
        addressByDevicePath.keys.compactMap { path in
            objects[path]?["org.bluez.Device1"].map { Device(path: path, properties: $0, lastHeard: heardAt[path]) }
        }.sorted { $0.path < $1.path }
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

    /// What each device advertises under one company identifier, by
    /// address (uppercase); built without making a `Device` of each.
    public func advertisedData(company: UInt16) -> [String: [UInt8]] {
        // Kept current as adverts change (`indexAdverts`): a fleet run asks
        // once per device.
        advertisedByCompany[company] ?? [:]
    }

    // MARK: Adapters and discovery

    @discardableResult
    private nonisolated func call(
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
        // Adverts from here on are heard since our discovery began (kept
        // if discovery was already on for this client).
        if discoveryStartedAt[adapter.path] == nil { discoveryStartedAt[adapter.path] = .now }
        do {
            try await call(
                adapter.path, "org.bluez.Adapter1", "StartDiscovery", step: "start discovery on \(adapter.name)")
        } catch let error as BlueZError where error.busErrorName == .bluez.inProgress {
            return
        }
    }

    /// Stops this client's discovery. Nothing to stop is not an error:
    /// `Failed "No discovery started"`, and `NotReady` — the adapter is
    /// powered off, and bluetoothd drops every discovery session when it
    /// powers off (src/adapter.c adapter_stop frees its discovery list), so none of
    /// ours is left. (Another process on the bench may power-cycle the
    /// adapter at any moment — its wedge recovery; a scan then failed with
    /// exit 3 on this NotReady: TrustedOutcomesTests with three processes.)
    public func stopDiscovery(on adapter: Adapter) async throws {
        discoveryStartedAt[adapter.path] = nil
        do {
            try await call(
                adapter.path, "org.bluez.Adapter1", "StopDiscovery", step: "stop discovery on \(adapter.name)")
        } catch let error as BlueZError
            where error.busErrorName == .bluez.failed && error.description.contains("No discovery started")
            || error.busErrorName == .bluez.notReady
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

    /// Waits until bluetoothd knows the device with advert data
    /// (ManufacturerData or ServiceData). A device bluetoothd reloaded from
    /// its storage (an adapter back under a new name, bluetoothd restarted)
    /// has none until its next advert while discovering: nothing can be
    /// judged of it before.
    public func waitForAdvertisedDevice(address: String, timeout: Duration) async throws -> Device {
        func advertised() -> Device? {
            guard let device = device(address: address), !device.manufacturerData.isEmpty else { return nil }
            return device
        }
        try await waitUntil({ advertised() != nil }, timeout: timeout, step: "find", device: address)
        guard let found = advertised() else { throw BlueZError(.deviceNotFound, device: address, step: "find") }
        return found
    }

    /// Adapter1.RemoveDevice: bluetoothd forgets the device (its storage
    /// and GATT cache too); it comes back on its next advert while
    /// discovering. A device already gone (`DoesNotExist`) counts as done.
    /// A connected device is disconnected first; the reply then comes after
    /// `Connected` false.
    /// - Returns: whether bluetoothd removed it (false: it was gone already).
    @discardableResult
    public func removeDevice(_ address: String, timeout: Duration? = nil) async throws -> Bool {
        guard let device = device(address: address), let adapter = device.adapter else { return false }
        do {
            try await call(
                adapter, "org.bluez.Adapter1", "RemoveDevice", [.objectPath(device.path)], timeout: timeout,
                step: "remove the device", device: address)
        } catch let error as BlueZError where error.busErrorName == .bluez.doesNotExist {
            return false
        }
        return true
    }

    /// Power-cycles an adapter: Powered false, wait until it reads false
    /// (`offTimeout`), pause `offTime`, Powered true, wait until it reads
    /// true (`onTimeout`). bluetoothd drops every discovery session on
    /// power-off: the caller sets its filter and starts discovery again.
    public func powerCycle(
        _ adapter: Adapter, offTimeout: Duration, offTime: Duration, onTimeout: Duration
    ) async throws {
        let address = adapter.address
        try await setPowered(adapter, false)
        try await waitUntil(
            { !(self.adapter(address: address)?.powered ?? false) }, timeout: offTimeout,
            step: "wait for \(adapter.name) to power off", device: nil)
        discoveryStartedAt[adapter.path] = nil
        try await Task.sleep(for: offTime)
        guard let current = self.adapter(address: address) else {
            throw BlueZError(.adapterNotFound(address), step: "power \(adapter.name) on again")
        }
        try await setPowered(current, true)
        try await waitUntil(
            { self.adapter(address: address)?.powered ?? false }, timeout: onTimeout,
            step: "wait for \(adapter.name) to power on", device: nil)
    }

    // MARK: Internal helpers for DeviceSession

    func connectLock(for adapter: ObjectPath) -> AsyncLock {
        if let lock = connectLocks[adapter] { return lock }
        let lock = AsyncLock()
        connectLocks[adapter] = lock
        return lock
    }

    /// A call to bluetoothd, made from the caller's own thread (no hop onto
    /// this actor: the registry is not needed for it).
    nonisolated func invoke(
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
    /// Powered reads false, a boolean: switched off. A Powered missing or
    /// of another type (a bluetoothd that lies) is not powered, and not
    /// known to be switched off either.
    public var poweredOff: Bool
    public var discovering: Bool
    public var roles: [String]

    init(path: ObjectPath, properties: [String: BusValue]) {
        self.path = path
        address = properties["Address"]?.string ?? ""
        powered = properties["Powered"]?.bool ?? false
        poweredOff = properties["Powered"]?.bool == false
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
