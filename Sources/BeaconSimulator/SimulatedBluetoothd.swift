import DBusBinding
import Foundation
import SBeaconProtocol

/// bluetoothd as BlueZ 5.66 shows itself on D-Bus, with a fleet of SBeacons
/// in range: adapters, discovery, devices, connections and GATT, each with
/// BlueZ' property names, types, paths and errors.
///
/// One actor; its concerns live in one file each (docs/simulator.md,
/// "Where the code is"):
/// - this file: the state, start-up, restart;
/// - `Adapters.swift`: adapters, power, unplug and replug, wedging;
/// - `Discovery.swift`: discovery sessions, filters, adverts, device objects
///   appearing and expiring, RemoveDevice;
/// - `Links.swift`: Connect and Disconnect, connection slots, stale devices;
/// - `GattServer.swift`: the GATT objects, reads, writes, notifications;
/// - `StateSaving.swift`: the state file;
/// - `FaultHooks.swift`: asking the fault plan at each hook, holds;
/// - `ControlInterface.swift`, `ControlWaits.swift`: the control interface;
/// - `FaultPlan.swift`, `FaultPlanJSON.swift`: the fault plan, a pure value.
///
/// The actor runs on its bus connection's own thread (its executor is the
/// connection's), never on Swift's cooperative pool: a simulator in a
/// test process keeps answering while other tests block pool threads,
/// and its adverts, timers and replies go out in order without a hop.
public actor SimulatedBluetoothd {
    public static let busName: BusName = "org.bluez"

    let bus: BusConnection
    public nonisolated var unownedExecutor: UnownedSerialExecutor { bus.executor }
    let options: SimulatorOptions
    var beacons: [String: BeaconFirmware] = [:]
    var beaconOrder: [String] = []
    /// Devices whose disconnect is still taking their GATT tree down, and
    /// the connects waiting for it (by address).
    var tearingDown: [String: [CheckedContinuation<Void, Never>]] = [:]
    /// Connects waiting for their adapter's pending one (the kernel queues
    /// LE connects: one at a time per controller), by adapter index.
    var connectQueue: [Int: [CheckedContinuation<Void, Never>]] = [:]
    /// Devices with a Connect under way: a second Connect of the same
    /// device is answered InProgress, as bluetoothd does.
    var connecting: Set<String> = []
    /// Adapters in the order they started: a plan's `adapter: N` is the Nth,
    /// whatever path it has now (a replug changes the path, not the slot).
    var adapters: [Adapter] = []
    /// Separate generators, so that how often discovery updates RSSI (a
    /// matter of timing) never shifts which operation a fault strikes.
    var driveRandom: SplitMix64
    var jitterRandom: SplitMix64
    /// The toss of a write that lands or not when its link drops.
    var tossRandom: SplitMix64
    /// What goes wrong, and when (`--fault-plan`, `--faults`, SetFaultPlan).
    var plan: FaultPlan
    let started = ContinuousClock.now
    /// What clients asked of the radio, for benchmarks: Connect calls, ATT
    /// reads and writes, calibrations.
    public internal(set) var activity = Activity()
    /// What the recovery tests count (`Counters()`).
    public internal(set) var counters = Counters()
    /// Steps held by a `stall` until released, by hold name.
    var holds: [String: [CheckedContinuation<Void, Never>]] = [:]
    /// The last link generation given (`Device.generation`): daemon-wide,
    /// so a device object made again after RemoveDevice never reuses one,
    /// and a request held past its link never lands on a later link.
    var lastGeneration = 0
    /// `WaitFor` calls waiting for their condition.
    var waiters: [Int: Waiter] = [:]
    var nextWaiter = 0
    /// Devices made stale (mode 1), by address, until RemoveDevice.
    var stale: [String: StaleDevice] = [:]
    /// Handle offsets of each beacon's GATT table (shift-gatt), by address:
    /// `pending` applies at the next connection.
    var gattOffset: [String: UInt16] = [:]
    var pendingGattShift: [String: Int] = [:]
    var saveScheduled = false
    /// The highest hci index any adapter has had (a replug to "next" takes one more).
    var highestHci: Int

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

    /// What a client did that recovery policies bound.
    public struct Counters: Codable, Sendable, Equatable {
        /// Adapter1.RemoveDevice calls that removed a device, by device address.
        public var removeDevice: [String: Int] = [:]
        /// Powered false → true, by adapter address.
        public var powerCycles: [String: Int] = [:]
        /// Device1.Connect calls.
        public var connects = 0
        /// StartDiscovery calls refused (InProgress, NotReady).
        public var startDiscoveryRefusals = 0
        /// Connects refused because every LE slot of the adapter was taken.
        public var slotRefusals = 0
        /// Connects that failed because the device was stale.
        public var staleRefusals = 0

        public init() {}
    }

    struct StaleDevice {
        var flap: Bool
        var afterMs: Int?
    }

    struct Wedge {
        var discoveryError: FaultPlan.DiscoveryError
        var abortAfterMs: Int
        var sticky: Bool
        /// Connect answers NotReady at once (the controller refuses it).
        var connectNotReady = false
        /// Adverts are still heard (discovery unaffected).
        var hearsAdverts: Bool { discoveryError == .none }
    }

    struct Adapter {
        /// Its place in `adapters` (never changes).
        var index: Int
        var path: ObjectPath
        var address: String
        var powered = true
        /// False while unplugged (between InterfacesRemoved and InterfacesAdded).
        var present = true
        var discoveryClients: Set<String> = []
        var filters: [String: [String: BusValue]] = [:]
        var connectPending = false
        var devices: [String: Device] = [:]
        var scanTask: Task<Void, Never>?
        var wedge: Wedge?
        /// Devices ever connected on this adapter: bluetoothd stores them
        /// (keyed by the adapter's address) and reloads them on replug.
        var remembered: Set<String> = []
    }

    struct Device {
        var path: ObjectPath
        var connected = false
        var servicesResolved = false
        var gattPaths: [ObjectPath] = []
        var characteristics: [GattUUID: ObjectPath] = [:]
        var notifying: Set<GattUUID> = []
        /// A new value (`nextGeneration()`) on every connect and disconnect,
        /// so that work started for one connection does not touch the next
        /// (nor one after the object is removed and made again).
        var generation = 0
        var removal: Task<Void, Never>?
        /// The RSSI last announced (PropertiesChanged).
        var reportedRSSI: Int16?
        /// When its last advert was heard (or the object made).
        var lastHeard = ContinuousClock.now
        /// BlueZ keeps a temporary device for its temporary timeout after
        /// its last advert; a Connect makes it permanent (src/device.c
        /// btd_device_set_temporary; our addresses are static random).
        var temporary = true
        /// Reports heard with DuplicateData on: even ones are adverts
        /// (ADV_IND), odd ones scan responses (Discovery.swift, `scan`).
        var reports = 0
    }

    public init(bus: BusConnection, options: SimulatorOptions, fleet: [BeaconState]) {
        self.bus = bus
        self.options = options
        self.driveRandom = SplitMix64(seed: options.seed ^ 0xD21E)
        self.jitterRandom = SplitMix64(seed: options.seed ^ 0x5EED)
        self.tossRandom = SplitMix64(seed: options.seed ^ 0x7055)
        self.plan = options.effectivePlan
        self.highestHci = options.adapters - 1
        for state in fleet {
            beacons[state.address] = BeaconFirmware(state: state)
            beaconOrder.append(state.address)
        }
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Milliseconds since the daemon started.
    var elapsedMs: Int { (ContinuousClock.now - started).wholeMilliseconds }

    /// How many times each `--faults` kind has fired.
    public var faultCounts: [Fault: Int] {
        var counts: [Fault: Int] = [:]
        for (id, count) in plan.fired {
            if let fault = Fault.of(ruleID: id) { counts[fault, default: 0] += count }
        }
        return counts
    }

    // MARK: Starting

    /// Exports `/org/bluez`, the adapters and the object manager, and takes
    /// the name `org.bluez`; then puts the plan's preheard devices in place
    /// and arms its `time` rules.
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
        await armTimeRules()
    }

    public var beaconCount: Int { beacons.count }
    public var adapterCount: Int { adapters.count }

    /// The fleet as it is now (ground truth).
    public func fleet() -> [BeaconState] { beaconOrder.compactMap { beacons[$0]?.state } }

    public func isConnected(_ address: String) -> Bool {
        adapters.contains { $0.devices[address]?.connected == true }
    }

    /// The beacon's place in the fleet (a plan's `beacon: N`).
    func beaconIndex(_ address: String) -> Int? { beaconOrder.firstIndex(of: address) }

    // MARK: /org/bluez

    var agentManager: BusInterface {
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

    // MARK: Restart

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
            if adapters[index].present { try? await bus.unexport(at: adapters[index].path) }
        }
        try? await bus.unexport(at: "/org/bluez")
        // Fresh adapters in place (never fewer: work still in flight may
        // hold an adapter's index), with no devices and nothing connected.
        for index in adapters.indices {
            adapters[index] = Adapter(index: index, path: adapters[index].path, address: adapters[index].address)
            wakeQueuedConnects(index)
        }
        stale = [:]
        try? await Task.sleep(for: downtime)
        try await bus.export(agentManager, at: "/org/bluez")
        for index in adapters.indices {
            try await bus.export(
                adapterInterface(index), at: adapters[index].path, properties: adapterProperties(index))
        }
        guard try await bus.requestName(Self.busName) == .primaryOwner else {
            throw BusError(.failed, "could not take the name org.bluez back")
        }
        checkWaiters()
    }
}
