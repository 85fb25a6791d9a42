import BlueZClient
import DBusBinding
import Foundation
import Inventory
import Profiles
import SBeaconProtocol

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

/// The workbench as the console meets it: the adapters of one bluetoothd,
/// the inventory, discovery, device selection, fleet runs and watching.
public actor Bench {
    public nonisolated let client: BluetoothClient
    public nonisolated let inventory: Inventory
    /// The adapter asked for (`--adapter`), or nil for all of them.
    public nonisolated let adapterName: String?
    private var discoveryUsers = 0
    /// How long `select` discovers to find a MAC ending not seen yet.
    public var endingSearch: Duration = .seconds(10)

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
        return Bench(client: client, inventory: inventory, adapterName: adapter)
    }

    public func close() async {
        await client.stop()
        await client.bus.close()
    }

    public func adapter() async throws -> Adapter {
        try await client.waitForAdapter(named: adapterName, timeout: .seconds(5))
    }

    /// The adapters once bluetoothd has read them again (10 s at most).
    func adaptersAfterRestart() async throws -> [Adapter] {
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
    /// Cancellation ends the scan early, without an error.
    public func scan(
        seconds: Double, rssiFloor: Int16? = nil, onFound: @Sendable (SeenBeacon) -> Void = { _ in }
    ) async throws -> [SeenBeacon] {
        for adapter in try await adapters() where !adapter.powered { try await client.setPowered(adapter, true) }
        try await beginDiscovery(rssiFloor: rssiFloor)
        var reported = Set<String>()
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while ContinuousClock.now < deadline, !Task.isCancelled {
            for beacon in await seen() where reported.insert(beacon.address).inserted {
                if rssiFloor.map({ (beacon.rssi ?? -128) >= $0 }) ?? true { onFound(beacon) }
            }
            try? await Task.sleep(for: min(.milliseconds(200), deadline - ContinuousClock.now))
        }
        // Stopped even when the scan was cancelled (Ctrl-C).
        try await Task { try await self.endDiscovery() }.value
        return await seen().filter { beacon in rssiFloor.map { (beacon.rssi ?? -128) >= $0 } ?? true }
    }

    /// Discovery stays on while any scan or fleet run needs it: a device
    /// that vanished for a moment is found again, and BlueZ does not drop
    /// the devices it found while it runs.
    public func beginDiscovery(rssiFloor: Int16? = nil, everyAdvert: Bool = true) async throws {
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

    /// The SBeacons bluetoothd knows on this bench's adapter, by address.
    public func seen() async -> [SeenBeacon] {
        let paths = Set(((try? await adapters()) ?? []).map(\.path))
        // One entry per beacon, however many adapters see it: the strongest.
        var strongest: [String: SeenBeacon] = [:]
        for device in await client.devices() where device.adapter.map(paths.contains) ?? false {
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
        var seen = await seen()
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
                seen = await self.seen()
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
        let runner = FleetRunner(
            client: client, inventory: inventory, run: run, concurrency: concurrency, dryRun: dryRun,
            profiles: profiles, adapters: try await adapters().map(\.path), sharedIdentities: sharedIdentities,
            progress: progress)
        let result = await runner.runFleet(steps, on: addresses)
        if discovering { try? await Task { try await self.endDiscovery() }.value }
        return result
    }

    /// Connects to each of `addresses` (several at once) and reports their
    /// real-time events and trip status for `seconds`, or until cancelled.
    /// - Returns: per address, the error that ended its watch, if any.
    public func watch(
        _ addresses: [String], seconds: Double, onEvent: @escaping @Sendable (WatchEvent) -> Void
    ) async -> [String: String] {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        let client = self.client
        return await withTaskGroup(of: (String, String?).self) { group in
            for address in addresses {
                group.addTask {
                    do {
                        try await client.withConnection(
                            to: address, policy: ConnectPolicy(requiredServices: SBeacon.requiredServices)
                        ) { session in
                            let beacon = try await SBeacon(session)
                            let events = try await beacon.watchRealTimeEvents()
                            let trips = try await beacon.watchTripStatus()
                            onEvent(.connected(address: address))
                            while ContinuousClock.now < deadline, !Task.isCancelled {
                                if let bytes = try? await events.next(
                                    timeout: min(.milliseconds(200), deadline - ContinuousClock.now),
                                    step: "watch")
                                {
                                    do {
                                        onEvent(.realTime(address: address, try RealTimeEvent(bytes: bytes)))
                                    } catch { onEvent(.malformed(address: address, "\(error)")) }
                                }
                                for bytes in await trips.drain() {
                                    if bytes.count == 1, let status = TripStatus(rawValue: bytes[0]) {
                                        onEvent(.tripStatus(address: address, status))
                                    } else {
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
                        return (address, nil)
                    } catch {
                        return (address, "\(error)")
                    }
                }
            }
            var failures: [String: String] = [:]
            for await (address, failure) in group { failures[address] = failure }
            return failures
        }
    }
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
