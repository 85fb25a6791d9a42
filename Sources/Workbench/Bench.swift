import BlueZClient
import DBusBinding
import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A beacon as the adverts show it, without connecting.
public struct SeenBeacon: Sendable, Equatable {
    public var address: String
    public var macEnding: String
    public var adapter: String?
    public var rssi: Int16?
    public var connected: Bool
    /// The iBeacon advert's major and minor.
    public var identity: BeaconIdentity?
    /// The bench summary advert: battery, status bits, firmware, config CRC.
    public var summary: BenchSummary?

    /// The beacon's view of a BlueZ device; nil when its adverts do not say
    /// SBeacon (another iBeacon UUID, or neither advert).
    init?(_ device: Device) {
        let identity = device.manufacturerData[SBeaconUUID.appleCompanyID].flatMap { try? IBeaconAdvert(bytes: $0) }
        let summary = device.manufacturerData[SBeaconUUID.nordicCompanyID].flatMap { try? BenchSummary(bytes: $0) }
        guard identity != nil || summary != nil else { return nil }
        address = device.address.uppercased()
        macEnding = (try? MACEnding(address: device.address).description) ?? ""
        adapter = device.adapter.map { String($0.components.last ?? "") }
        rssi = device.rssi
        connected = device.connected
        self.identity = identity?.identity
        self.summary = summary
    }
}

/// One way to choose devices (`select`): several combine. Addresses and MAC
/// endings name devices (any of them); the other selectors filter (all must
/// hold).
public enum DeviceSelector: Sendable, Equatable {
    case all, new, unprovisioned, inRange
    case profile(String)
    case batteryBelow(UInt8)
    case firmwareBelow(FirmwareVersion)
    case minorRange(UInt16, UInt16)
    case address(String)
    case macEnding(String)
}

/// Something a watched beacon said (`watch`, the bench shake test).
public enum WatchEvent: Sendable, Equatable {
    case connected(address: String)
    case realTime(address: String, RealTimeEvent)
    case tripStatus(address: String, TripStatus)
    case malformed(address: String, String)
}

/// An adapter that went away and did not come back in time.
public struct AdapterGone: Error, CustomStringConvertible {
    public var text: String
    public var description: String { text }
}

/// An adapter that reads Powered but will not discover, after what the
/// policy allows (docs/reliability.md, "Wedged adapter").
public struct AdapterWedged: Error, CustomStringConvertible {
    public var text: String
    public var description: String { text }
}

/// The workbench as the console meets it: the adapters of one bluetoothd,
/// the inventory, discovery, device selection, fleet runs and watching.
public actor Bench {
    public nonisolated let client: BluetoothClient
    public nonisolated let inventory: Inventory
    /// The adapter asked for (`--adapter`), or nil for all of them.
    public nonisolated let adapterName: String?
    private var discoveryUsers = 0
    /// Whether this bench has discovered (a scan, `scan on`): from then on a
    /// selection chooses among the beacons this client heard, never a
    /// device object bluetoothd kept from before (docs/reliability.md,
    /// presence).
    private var discovered = false
    /// How long `select` discovers to find a MAC ending not seen yet.
    public var endingSearch: Duration = .seconds(10)
    /// How long a run or a watch looks for a device bluetoothd does not
    /// know before it fails with "not seen".
    public var seenTimeout: Duration = .seconds(10)

    public func setSeenTimeout(_ timeout: Duration) { seenTimeout = timeout }
    /// `--no-adapter-reset` clears it: a wedged adapter is never power-cycled.
    public var adapterResets = true
    public func setAdapterResets(_ allowed: Bool) { adapterResets = allowed }
    /// The adapters' addresses when the bench opened (address → path): an
    /// adapter is followed by its address (hci0 replugged is hci1).
    private var knownAdapters: [String: ObjectPath] = [:]
    /// The address of the adapter asked for by name, once found.
    private var namedAddress: String?
    /// Power cycles done by this bench (scans and runs), by adapter
    /// address: at most one per `Recovery.resetInterval`.
    private var resets: [String: ContinuousClock.Instant] = [:]
    /// Recoveries done outside a fleet run (a scan's), for the next recap.
    private var pendingRecoveries: [RecoveryRecord] = []
    /// The recoveries done outside fleet runs since the last call.
    public func takeRecoveries() -> [RecoveryRecord] {
        defer { pendingRecoveries = [] }
        return pendingRecoveries
    }

    func noteResets(_ more: [String: ContinuousClock.Instant]) { resets.merge(more) { max($0, $1) } }

    public init(client: BluetoothClient, inventory: Inventory, adapterName: String?) {
        self.client = client
        self.inventory = inventory
        self.adapterName = adapterName
    }

    /// Connects to the bus, reads bluetoothd's objects, finds the adapter.
    /// - Throws: `BlueZError` (bluetoothd not on the bus, no such adapter)
    ///   or `BusError` (bus unusable).
    public static func open(
        bus address: BusAddress, adapter: String?, inventory: Inventory,
        timeouts: BluetoothClient.Timeouts = BluetoothClient.Timeouts()
    ) async throws -> Bench {
        let connection = try await BusConnection.connect(address)
        let client = BluetoothClient(bus: connection, timeouts: timeouts)
        do {
            try await client.start()
            _ = try await client.adapter(named: adapter)
        } catch {
            await client.stop()
            await connection.close()
            throw error
        }
        let bench = Bench(client: client, inventory: inventory, adapterName: adapter)
        await bench.learnAdapters()
        return bench
    }

    private func learnAdapters() async {
        for adapter in await client.adapters() where Device.isValidAddress(adapter.address) {
            knownAdapters[adapter.address.uppercased()] = adapter.path
        }
        if let adapterName, let named = try? await client.adapter(named: adapterName) {
            namedAddress = named.address.uppercased()
        }
    }

    /// The adapters known when the bench opened that are absent now
    /// (address → the path each had).
    public func absentAdapters() async -> [String: ObjectPath] {
        var absent: [String: ObjectPath] = [:]
        for (address, path) in knownAdapters where await client.adapter(address: address) == nil {
            absent[address] = path
        }
        return absent
    }

    /// Whether an adapter went away or came back under another path since
    /// the bench opened (a scan then may have missed beacons).
    public func adaptersChanged() async -> Bool {
        for (address, path) in knownAdapters where await client.adapter(address: address)?.path != path {
            return true
        }
        return false
    }

    /// Waits until every adapter known when the bench opened is back (by
    /// address), at most `timeout`; returns those still absent.
    public func waitForAdapters(timeout: Duration) async -> [String: ObjectPath] {
        let deadline = ContinuousClock.now + timeout
        for address in knownAdapters.keys {
            _ = try? await client.waitForAdapter(
                address: address, powered: true, timeout: max(.zero, deadline - ContinuousClock.now))
        }
        for (address, _) in knownAdapters {
            if let current = await client.adapter(address: address) { knownAdapters[address] = current.path }
        }
        return await absentAdapters()
    }

    public func close() async {
        await client.stop()
        await client.bus.close()
    }

    public func adapter() async throws -> Adapter {
        // The adapter asked for by name is followed by its address.
        if let namedAddress {
            return try await client.waitForAdapter(address: namedAddress, timeout: .seconds(5))
        }
        return try await client.waitForAdapter(named: adapterName, timeout: .seconds(5))
    }

    /// The adapters once bluetoothd has read them again (10 s at most).
    func adaptersAfterRestart() async throws -> [Adapter] {
        if let namedAddress {
            _ = try await client.waitForAdapter(address: namedAddress, timeout: .seconds(10))
            return try await adapters()
        }
        _ = try await client.waitForAdapter(named: adapterName, timeout: .seconds(10))
        return try await adapters()
    }

    /// The adapters this bench works with: the one named by `--adapter`,
    /// else every adapter with the central role (a fleet run spreads its
    /// devices over them).
    public func adapters() async throws -> [Adapter] {
        if adapterName != nil { return [try await adapter()] }
        _ = try await adapter()
        let all = await client.adapters().filter { $0.roles.isEmpty || $0.roles.contains("central") }
        return all.isEmpty ? [try await adapter()] : all
    }

    // MARK: Discovery

    /// Discovers for `seconds`, reporting each SBeacon the first time it is
    /// seen; then stops discovery (unless a fleet run still needs it).
    /// `until`: ends as soon as that many beacons (above the RSSI floor)
    /// have been heard — a bench that knows how many it holds need not
    /// wait out the duration, which is then the cap.
    /// Cancellation ends the scan early, without an error.
    public func scan(
        seconds: Double, rssiFloor: Int16? = nil, until: Int? = nil, again: Bool = true,
        onFound: @Sendable (SeenBeacon) -> Void = { _ in }
    ) async throws -> [SeenBeacon] {
        for adapter in try await adapters() where !adapter.powered { try await client.setPowered(adapter, true) }
        func floor(_ beacons: [SeenBeacon]) -> [SeenBeacon] {
            beacons.filter { beacon in rssiFloor.map { (beacon.rssi ?? -128) >= $0 } ?? true }
        }
        if try await !discoverOrRecover(seconds: seconds, rssiFloor: rssiFloor) {
            return floor(await heard())
        }
        var reported = Set<String>()
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        // A beacon is found when heard since this discovery began (an
        // advert: docs/reliability.md, presence), never from a device object
        // bluetoothd kept from before with its cached RSSI. The list is read
        // again only when the client's device list changed: a device came,
        // went, connected, changed its advertised data, or was heard for the
        // first time since discovery began (`deviceListVersion`); the same
        // advert again is no news, and what the scan returns is read at its
        // end whatever was listed on the way. Below the RSSI floor, a beacon
        // is looked at on every round until it comes close enough.
        var listed = -1
        var below = false
        while ContinuousClock.now < deadline, !Task.isCancelled {
            let version = await client.deviceListVersion
            if version != listed || below {
                listed = version
                below = false
                for beacon in await heard() where !reported.contains(beacon.address) {
                    guard rssiFloor.map({ (beacon.rssi ?? -128) >= $0 }) ?? true else {
                        below = true
                        continue
                    }
                    reported.insert(beacon.address)
                    onFound(beacon)
                }
            }
            // `until`: enough beacons heard whole, the scan's work is done.
            // A real SBeacon announces in two parts — its advert the
            // iBeacon data, its scan response the bench summary (the
            // contract, section 1) — and bluetoothd reports them apart: one
            // heard by its advert alone cannot be judged yet (`select new`,
            // `require battery>=`, a passive audit all read the summary).
            // Real bluetoothd's scans ended with 3 of 10 summaries missing
            // (docs/realstack.md). One that never sends the other part keeps
            // the scan to its duration.
            if let until, reported.count >= until {
                let whole = await heard().filter { beacon in
                    beacon.identity != nil && beacon.summary != nil
                        && (rssiFloor.map { (beacon.rssi ?? -128) >= $0 } ?? true)
                }
                if whole.count >= until { break }
            }
            try? await Task.sleep(for: min(.milliseconds(200), deadline - ContinuousClock.now))
        }
        // An adapter that went away during the scan (or came back under
        // another path) makes it no scan: wait for it (30 s), scan again.
        if !Task.isCancelled, await adaptersChanged() {
            let wentAt = Date()
            let absent = await waitForAdapters(timeout: Recovery.adapterReturnTimeout)
            try? await Task { try await self.endDiscovery() }.value
            if let (address, path) = absent.first {
                throw AdapterGone(
                    text: "adapter \(address) (\(path.components.last ?? "")) went away during the scan"
                        + " (\(RecoveryCoordinator.clock(wentAt))) and did not return within"
                        + " \(Int(Recovery.adapterReturnTimeout.components.seconds)) s")
            }
            guard again else { return await heard() }
            return try await scan(seconds: seconds, rssiFloor: rssiFloor, again: false, onFound: onFound)
        }
        // What was heard, read before discovery stops (then nothing is
        // "since discovery began" any more).
        let found = await heard()
        // Stopped even when the scan was cancelled (Ctrl-C).
        try await Task { try await self.endDiscovery() }.value
        return floor(found)
    }

    /// The SBeacons this client ever heard (an advert), or connected.
    func everHeard() async -> [SeenBeacon] {
        await beacons { $0.connected || $0.lastHeard != nil }
    }

    /// The SBeacons heard since this client's discovery began on their
    /// adapter, or connected: a device object bluetoothd kept from before
    /// (its temporary timeout, its storage), cached RSSI and all, is not.
    public func heard() async -> [SeenBeacon] {
        await present(window: .seconds(365 * 86400))
    }

    /// Starts discovery for a scan. An adapter that reads Powered but
    /// refuses discovery (or accepts it and never shows Discovering) is
    /// tried again every second for the scan's length (at least 3 times);
    /// if discovery never ran, the adapter is wedged: it is power-cycled
    /// (once per `Recovery.resetInterval`, never with
    /// `--no-adapter-reset`) and discovery started again. Returns whether
    /// discovery runs (false: a wedged adapter that could not be cycled,
    /// said in a recovery); throws what is not a refusal.
    private func discoverOrRecover(seconds: Double, rssiFloor: Int16?) async throws -> Bool {
        func refused(_ error: any Error) -> Bool {
            guard let error = error as? BlueZError, case .bus(let bus) = error.reason else { return false }
            return [.bluez.notReady, .bluez.inProgress, .bluez.failed].contains(bus.name)
        }
        func running() async throws -> Bool {
            try await adapters().allSatisfy { $0.discovering || !$0.powered }
        }
        var began = false
        do {
            try await beginDiscovery(rssiFloor: rssiFloor)
            began = true
        } catch  where refused(error) {}
        var refusals = 0
        let deadline = ContinuousClock.now + max(.seconds(3), .milliseconds(Int64(seconds * 1000)))
        while true {
            // Discovering=true follows a start that worked within moments.
            await client.waitForDiscovering(timeout: .seconds(1))
            if try await running() {
                if !began {
                    try await beginDiscovery(rssiFloor: rssiFloor)
                    began = true
                }
                return true
            }
            refusals += 1
            if ContinuousClock.now >= deadline, refusals >= Recovery.wedgeDiscoveryRefusals { break }
            if Task.isCancelled { return began }
            do {
                if began {
                    for adapter in try await adapters() where !adapter.discovering {
                        try await client.startDiscovery(on: adapter, rssiFloor: rssiFloor)
                    }
                } else {
                    try await beginDiscovery(rssiFloor: rssiFloor)
                    began = true
                }
            } catch  where refused(error) {}
        }
        // Discovery never ran on a powered adapter: wedged.
        for adapter in try await adapters() where adapter.powered && !adapter.discovering {
            let address = adapter.address.uppercased()
            let now = ContinuousClock.now
            if !adapterResets || resets[address].map({ now - $0 < Recovery.resetInterval }) ?? false {
                let why = adapterResets ? "reset already tried" : "--no-adapter-reset"
                await recordRecovery(
                    RecoveryRecord(
                        action: "adapter-wedged", ok: false, device: nil, adapter: address,
                        detail: "wedged \(adapter.name) \(address)", error: why))
                continue
            }
            resets[address] = now
            var failure: String?
            do {
                try await client.powerCycle(
                    adapter, offTimeout: Recovery.powerOffTimeout, offTime: Recovery.powerOffTime,
                    onTimeout: Recovery.powerOnTimeout)
                if let current = await client.adapter(address: address) {
                    try await client.startDiscovery(on: current, rssiFloor: rssiFloor)
                }
            } catch {
                failure = "\(error)"
            }
            await recordRecovery(
                RecoveryRecord(
                    action: "power-cycle", ok: failure == nil, device: nil, adapter: address,
                    detail: "power-cycle \(adapter.name) \(address)", error: failure))
        }
        await client.waitForDiscovering(timeout: .seconds(2))
        if !began { began = (try? await beginDiscovery(rssiFloor: rssiFloor)) != nil }
        if try await running() { return began }
        if began { try? await endDiscovery() }
        let wedged = try await adapters().filter { $0.powered && !$0.discovering }
            .map { "\($0.name) \($0.address.uppercased())" }.joined(separator: ", ")
        throw AdapterWedged(
            text: "adapter \(wedged) is wedged: discovery refused for \(Int(seconds)) s"
                + (pendingRecoveries.last.flatMap(\.error).map { "; not power-cycled (\($0))" }
                    ?? "; a power cycle did not cure it"))
    }

    /// Kept for the caller (`takeRecoveries`), which records it in its run.
    private func recordRecovery(_ record: RecoveryRecord) async {
        pendingRecoveries.append(record)
    }

    /// Discovery stays on while any scan or fleet run needs it: a device
    /// that vanished for a moment is found again, and BlueZ does not drop
    /// the devices it found while it runs.
    public func beginDiscovery(rssiFloor: Int16? = nil, everyAdvert: Bool = true) async throws {
        discovered = true
        discoveryUsers += 1
        // A fleet run joining a scan keeps the scan's filter.
        guard discoveryUsers == 1 || everyAdvert else { return }
        do {
            for adapter in try await adapters() {
                try await client.startDiscovery(on: adapter, rssiFloor: rssiFloor, everyAdvert: everyAdvert)
            }
        } catch {
            discoveryUsers -= 1
            throw error
        }
    }

    public func endDiscovery() async throws {
        discoveryUsers -= 1
        if discoveryUsers == 0 {
            for adapter in try await adapters() { try await client.stopDiscovery(on: adapter) }
        }
    }

    /// Changes when the devices bluetoothd knows, or what their adverts
    /// say, change (not their RSSI): a poller with the same number has
    /// nothing new to list.
    public var deviceListVersion: Int {
        get async { await client.deviceListVersion }
    }

    /// The SBeacons bluetoothd knows on this bench's adapter, by address.
    /// A beacon stays here as long as bluetoothd keeps its device object
    /// (while discovery runs, and for its temporary timeout after); see
    /// `inRange(window:)` for the beacons heard lately.
    public func seen() async -> [SeenBeacon] {
        await beacons { _ in true }
    }

    /// The SBeacons in range now: those bluetoothd knows (a device object
    /// it removed is gone) that are connected or were heard within
    /// `window`. Heard means an advert changed the device's RSSI or data;
    /// bluetoothd announces every advert only while discovery runs with a
    /// filter (`beginDiscovery(everyAdvert: true)`, as `scan` does), so
    /// without one a quiet beacon drops out after `window` too.
    public func inRange(window: Duration = .seconds(30)) async -> [SeenBeacon] {
        let now = ContinuousClock.now
        return await beacons { device in
            device.connected || device.lastHeard.map { now - $0 <= window } ?? false
        }
    }

    /// The SBeacons present now: connected, or heard within `window` since
    /// this client's discovery began on their adapter. A device object
    /// bluetoothd kept from before (its temporary timeout, or storage), its
    /// cached RSSI included, is not present.
    public func present(window: Duration = Recovery.presenceTimeout) async -> [SeenBeacon] {
        let heard = await client.presentDevices(within: window)
        return await beacons { $0.connected || heard.contains($0.path) }
    }

    private func beacons(where keep: (Device) -> Bool) async -> [SeenBeacon] {
        let paths = Set(((try? await adapters()) ?? []).map(\.path))
        // One entry per beacon, however many adapters see it: the strongest.
        var strongest: [String: SeenBeacon] = [:]
        for device in await client.devices() where device.adapter.map(paths.contains) ?? false && keep(device) {
            guard let beacon = SeenBeacon(device) else { continue }
            if let known = strongest[beacon.address], (known.rssi ?? -128) >= (beacon.rssi ?? -128) { continue }
            strongest[beacon.address] = beacon
        }
        return strongest.values.sorted { $0.address < $1.address }
    }

    // MARK: Selection

    /// The addresses `selectors` choose, sorted. Named addresses are chosen
    /// even when not (yet) seen; everything else is judged from the adverts
    /// and, where they are silent, from the inventory.
    public func select(_ selectors: [DeviceSelector]) async throws -> [String] {
        // After discovering: what this client heard, never a cached object.
        var seen = discovered ? await everHeard() : await seen()
        // A MAC ending not seen yet: discover for a while to find it.
        let endings = selectors.compactMap { selector -> String? in
            if case .macEnding(let ending) = selector { return ending.lowercased() }
            return nil
        }
        let missing = { (seen: [SeenBeacon]) in endings.contains { ending in !seen.contains { $0.macEnding == ending } }
        }
        if missing(seen) {
            try await beginDiscovery()
            let deadline = ContinuousClock.now + endingSearch
            while missing(seen), ContinuousClock.now < deadline, !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(200))
                seen = await self.heard()
            }
            try await Task { try await self.endDiscovery() }.value
        }
        let known = try await inventory.devicesByAddress()
        let unfinished = try await inventory.unfinishedProvisioning()
        var named: [String] = []
        var filters: [DeviceSelector] = []
        for selector in selectors {
            switch selector {
            case .address(let address): named.append(address.uppercased())
            case .macEnding(let ending):
                let matches =
                    seen.filter { $0.macEnding == ending.lowercased() }.map(\.address)
                    + known.values.filter { $0.macEnding == ending.lowercased() }.map(\.address)
                named += matches.isEmpty ? [] : Array(Set(matches))
                if matches.isEmpty { throw SelectionError.noDeviceEndingIn(ending) }
            default: filters.append(selector)
            }
        }
        let seenByAddress = Dictionary(seen.map { ($0.address, $0) }) { first, _ in first }
        let candidates = named.isEmpty ? seen.map(\.address) : named
        return Array(
            Set(
                candidates.filter { address in
                    filters.allSatisfy {
                        Self.holds($0, seenByAddress[address], known[address], unfinished: unfinished.contains(address))
                    }
                })
        ).sorted()
    }

    static func holds(
        _ selector: DeviceSelector, _ seen: SeenBeacon?, _ record: DeviceRecord?, unfinished: Bool
    ) -> Bool {
        switch selector {
        case .all: return true
        case .new:
            // Factory default, or left half provisioned by a failed run here.
            return seen?.summary?.status.contains(.factoryDefault) ?? false || unfinished
        case .unprovisioned: return record?.profile == nil
        case .inRange: return seen?.rssi != nil
        case .profile(let name): return record?.profile == name
        case .batteryBelow(let limit):
            guard let battery = seen?.summary?.battery ?? record?.battery else { return false }
            return battery < limit
        case .firmwareBelow(let limit):
            guard let firmware = seen?.summary?.firmware ?? record?.firmware else { return false }
            return firmware < limit
        case .minorRange(let low, let high):
            guard let minor = seen?.identity?.minor ?? record?.identity?.minor else { return false }
            return (low...high).contains(minor)
        case .address(let address): return seen?.address == address.uppercased()
        case .macEnding(let ending): return seen?.macEnding == ending.lowercased()
        }
    }

    // MARK: Running

    /// Runs device steps over `addresses` (see `FleetRunner`), with
    /// discovery on so that a device that vanished for a moment is found
    /// again.
    public func run(
        _ steps: [DeviceStep], on addresses: [String], run: Int64, concurrency: Int, dryRun: Bool,
        profiles: [String: Profile] = [:], sharedIdentities: (any SharedIdentities)? = nil,
        progress: @escaping @Sendable (FleetProgress) -> Void = { _ in }
    ) async throws -> FleetResult {
        // Discovery helps (a device that vanished for a moment is found
        // again) but a run goes on without it: the devices known are known.
        let discovering = (try? await beginDiscovery(everyAdvert: false)) != nil
        // bluetoothd restarting forgets discovery: start it again when it is
        // back, so that devices are found once more.
        let keeper = Task { [client] in
            var generation = await client.bluetoothdGeneration
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(200))
                let now = await client.bluetoothdGeneration
                guard now != generation else { continue }
                generation = now
                guard let adapters = try? await self.adaptersAfterRestart() else { continue }
                for adapter in adapters {
                    try? await client.startDiscovery(on: adapter, everyAdvert: false)
                }
            }
        }
        defer { keeper.cancel() }
        let recovery = RecoveryCoordinator(
            client: client, inventory: inventory, run: run, concurrency: concurrency,
            options: RecoveryOptions(adapterResets: adapterResets, keepDiscovery: discovering, everyAdvert: false),
            resets: resets, note: { progress(.note(address: "", $0)) })
        await recovery.start()
        let runner = FleetRunner(
            client: client, inventory: inventory, run: run, concurrency: concurrency, dryRun: dryRun,
            profiles: profiles, adapters: try await adapters().map(\.path), sharedIdentities: sharedIdentities,
            seenTimeout: seenTimeout, recovery: recovery, progress: progress)
        // On the bus connection's thread: each device's steps are calls and
        // signals on it, and every reply then resumes its step there, with
        // no other thread woken (the inventory's SQLite work runs there too;
        // a commit takes well under a millisecond).
        let result = await withTaskExecutorPreference(client.bus.taskExecutor) {
            await runner.runFleet(steps, on: addresses)
        }
        await recovery.stop()
        noteResets(await recovery.resets())
        if discovering { try? await Task { try await self.endDiscovery() }.value }
        return result
    }

    /// Watches `addresses` for real-time events and trip status: each for
    /// `seconds` (or until cancelled), at most `concurrency` connected at
    /// once (an adapter's connection slots: the others wait their turn),
    /// spread over the bench's adapters.
    ///
    /// A device bluetoothd does not know is looked for during
    /// `seenTimeout` first; one never found fails with "not seen". With a
    /// `run`, each device's watch is recorded as a step outcome (`watch`:
    /// `ok` with the counts, `failed` with the error, `interrupted` when
    /// cancelled under way; a device not seen gets one outcome without a
    /// device, as in a fleet run); the device is claimed for the run
    /// meanwhile, so that another process does not work on it.
    /// - Returns: one result per address, in the order given.
    public func watch(
        _ addresses: [String], seconds: Double, concurrency: Int = 5, run: Int64? = nil,
        onEvent: @escaping @Sendable (WatchEvent) -> Void
    ) async -> [WatchResult] {
        let client = self.client
        let inventory = self.inventory
        // Discovery stays on for the whole watch, as in a fleet run: a
        // device waiting for its turn would otherwise be forgotten by
        // bluetoothd (its temporary timeout, 30 s after discovery stops).
        let discovering = (try? await beginDiscovery(everyAdvert: false)) != nil
        // Devices not known yet: look for them first (all at once).
        let searchEnds = ContinuousClock.now + seenTimeout
        var unknown = Set<String>()
        for address in addresses where await client.device(address: address) == nil { unknown.insert(address) }
        while !unknown.isEmpty, ContinuousClock.now < searchEnds, !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(200))
            for address in unknown where await client.device(address: address) != nil { unknown.remove(address) }
        }
        var results: [String: WatchResult] = [:]
        for address in unknown where !Task.isCancelled {
            var result = WatchResult(address: address, state: .failed)
            result.reason = FleetRunner.notSeenReason
            if let run {
                _ = try? await inventory.recordStep(
                    run: run, device: nil, step: "watch",
                    .init(
                        .failed,
                        detail:
                            "\(address.uppercased()): not seen in \(FleetRunner.secondsText(seenTimeout)) of discovery",
                        error: FleetRunner.notSeenReason))
            }
            results[address] = result
        }
        // Adapters followed by address (hci0 back as hci1: discovery again).
        let recovery = RecoveryCoordinator(
            client: client, inventory: inventory, run: run, concurrency: concurrency,
            options: RecoveryOptions(adapterResets: adapterResets, keepDiscovery: discovering, everyAdvert: false),
            resets: resets)
        await recovery.start()
        defer { Task { await recovery.stop() } }
        let adapterPaths = ((try? await adapters()) ?? []).map(\.path)
        let slots = max(1, concurrency)
        let deadlineLength = Duration.milliseconds(Int64(seconds * 1000))
        await withTaskGroup(of: (WatchResult, ObjectPath?).self) { group in
            var pending = addresses.filter { results[$0] == nil }
            var running = 0
            var busy: [ObjectPath: Int] = [:]
            while true {
                while running < slots, !pending.isEmpty, !Task.isCancelled {
                    let address = pending.removeFirst()
                    // The least busy adapter that sees it (nil: one adapter, the client's choice).
                    var adapter: Adapter?
                    if adapterPaths.count > 1 {
                        var best: (Adapter, Int)?
                        let all = await client.adapters()
                        for path in adapterPaths {
                            guard await client.device(address: address, adapter: path) != nil,
                                let candidate = all.first(where: { $0.path == path && $0.powered })
                            else { continue }
                            let load = busy[path, default: 0]
                            if best == nil || load < best!.1 { best = (candidate, load) }
                        }
                        adapter = best?.0
                    }
                    if let path = adapter?.path { busy[path, default: 0] += 1 }
                    let chosen = adapter
                    group.addTask {
                        let result = await Self.watchOne(
                            address, on: chosen, for: deadlineLength, client: client, inventory: inventory, run: run,
                            onEvent: onEvent)
                        return (result, chosen?.path)
                    }
                    running += 1
                }
                guard running > 0, let (result, path) = await group.next() else { break }
                running -= 1
                if let path { busy[path, default: 1] -= 1 }
                results[result.address] = result
            }
        }
        if discovering { try? await Task { try await self.endDiscovery() }.value }
        return addresses.map { address in
            results[address]
                ?? {
                    var result = WatchResult(address: address, state: .notStarted)
                    result.reason = "not started: the watch was interrupted"
                    return result
                }()
        }
    }

    /// One device's watch, from its connection to its outcome.
    private static func watchOne(
        _ address: String, on adapter: Adapter?, for length: Duration, client: BluetoothClient,
        inventory: Inventory, run: Int64?, onEvent: @escaping @Sendable (WatchEvent) -> Void
    ) async -> WatchResult {
        var result = WatchResult(address: address, state: .ok)
        let device = address.uppercased()
        var outcome: Int64?
        if let run {
            switch try? await inventory.claimDevice(device, run: run) {
            case .heldBy(let holder)?:
                result.state = .failed
                result.reason = "another beaconbench works on it (\(holder))"
                return result
            case .claimed?:
                outcome = try? await inventory.beginStep(run: run, device: device, step: "watch")
            case nil:
                break
            }
        }
        let counts = WatchCounts()
        let started = ContinuousClock.now
        do {
            // Gone for a moment (out of range, bluetoothd restarting): found
            // again while discovery runs.
            if await client.device(address: address) == nil {
                _ = try await client.waitForDevice(address: address, timeout: .seconds(15))
            }
            try await client.withConnection(
                to: address, on: adapter, policy: ConnectPolicy(requiredServices: SBeacon.requiredServices)
            ) { session in
                let beacon = try await SBeacon(session)
                let events = try await beacon.watchRealTimeEvents()
                let trips = try await beacon.watchTripStatus()
                let deadline = ContinuousClock.now + length
                onEvent(.connected(address: address))
                while ContinuousClock.now < deadline, !Task.isCancelled {
                    if let bytes = try? await events.next(
                        timeout: min(.milliseconds(200), deadline - ContinuousClock.now), step: "watch")
                    {
                        do {
                            let event = try RealTimeEvent(bytes: bytes)
                            counts.add(events: 1)
                            onEvent(.realTime(address: address, event))
                        } catch {
                            counts.add(malformed: 1)
                            onEvent(.malformed(address: address, "\(error)"))
                        }
                    }
                    for bytes in await trips.drain() {
                        if bytes.count == 1, let status = TripStatus(rawValue: bytes[0]) {
                            counts.add(tripChanges: 1)
                            onEvent(.tripStatus(address: address, status))
                        } else {
                            counts.add(malformed: 1)
                            onEvent(.malformed(address: address, "trip status \(bytes)"))
                        }
                    }
                    if await client.device(address: address)?.connected == false {
                        throw BlueZError(.disconnected, device: address, step: "watch")
                    }
                }
                await events.stop()
                await trips.stop()
            }
            if Task.isCancelled {
                result.state = .interrupted
                result.reason = "interrupted"
            }
        } catch {
            if Task.isCancelled {
                result.state = .interrupted
                result.reason = "interrupted"
            } else {
                result.state = .failed
                result.reason = "\(error)"
            }
        }
        (result.events, result.tripChanges, result.malformed) = counts.values
        if let run {
            if let outcome {
                let milliseconds = FleetRunner.milliseconds(since: started)
                switch result.state {
                case .ok:
                    try? await inventory.finishStep(
                        outcome, .ok, detail: result.summary, durationMilliseconds: milliseconds)
                case .failed:
                    try? await inventory.finishStep(
                        outcome, .failed, detail: result.summary, error: result.reason,
                        durationMilliseconds: milliseconds)
                case .interrupted, .notStarted:
                    try? await inventory.finishStep(
                        outcome, .interrupted, detail: result.summary, error: result.reason,
                        durationMilliseconds: milliseconds)
                }
            }
            try? await inventory.releaseDevice(device, run: run)
        }
        return result
    }
}

/// One device's watch: how it ended and what it told.
public struct WatchResult: Sendable, Equatable, Codable {
    public enum State: String, Sendable, Codable, CaseIterable {
        /// Watched for the whole time.
        case ok
        /// The connection failed or dropped, or the device was never seen.
        case failed
        /// Cancelled (Ctrl-C) while it was watched.
        case interrupted
        /// Its turn never came (cancelled while it waited for a slot).
        case notStarted = "not-started"
    }

    public var address: String
    public var state: State
    /// Real-time events (shakes, harsh driving) it sent.
    public var events = 0
    /// Trip status changes it sent.
    public var tripChanges = 0
    /// Notifications that did not parse.
    public var malformed = 0
    /// Why it failed (or was interrupted, or not started).
    public var reason: String?

    public init(address: String, state: State) {
        self.address = address
        self.state = state
    }

    /// `3 real-time events, 1 trip status change`.
    public var summary: String {
        var text =
            "\(events) real-time event\(events == 1 ? "" : "s"), \(tripChanges) trip status change\(tripChanges == 1 ? "" : "s")"
        if malformed > 0 { text += ", \(malformed) malformed" }
        return text
    }

    /// The watch as a device's line in a run's recap: ok counts one step,
    /// a failure counts failed (never ok).
    public var recap: DeviceRecap {
        var recap = DeviceRecap(address: address)
        switch state {
        case .ok: recap.ok = 1
        case .failed:
            recap.failed = 1
            recap.reason = reason
        case .interrupted:
            recap.interrupted = true
            recap.reason = reason
        case .notStarted:
            recap.notStarted = true
            recap.reason = reason
        }
        return recap
    }
}

/// Counts shared by a watch's loop (a Sendable box).
private final class WatchCounts: Sendable {
    struct Values { var events = 0, tripChanges = 0, malformed = 0 }
    private let values_ = Mutex(Values())
    func add(events: Int = 0, tripChanges: Int = 0, malformed: Int = 0) {
        values_.withLock { values in
            values.events += events
            values.tripChanges += tripChanges
            values.malformed += malformed
        }
    }
    var values: (Int, Int, Int) { values_.withLock { ($0.events, $0.tripChanges, $0.malformed) } }
}

/// Why a selection could not be made.
public enum SelectionError: Error, Sendable, Equatable, CustomStringConvertible {
    case noDeviceEndingIn(String)

    public var description: String {
        switch self {
        case .noDeviceEndingIn(let ending): "no beacon seen or in the inventory has a MAC ending in \(ending)"
        }
    }
}
