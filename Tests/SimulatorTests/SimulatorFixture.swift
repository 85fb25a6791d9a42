import BeaconSimulator
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing

/// A private bus with the simulator serving `org.bluez` in this process and
/// a client connection that talks to it as any BlueZ client would.
struct SimulatorFixture {
    let bus: PrivateBus
    let simulatorConnection: BusConnection
    let daemon: SimulatedBluetoothd
    let client: BusConnection
    let fleet: [BeaconState]

    static let bluez: BusName = "org.bluez"
    static let adapter: ObjectPath = "/org/bluez/hci0"

    static func start(
        count: Int = 3, seed: UInt64 = 7, configure: (inout SimulatorOptions) -> Void = { _ in }
    )
        async throws -> SimulatorFixture
    {
        let bus = try await PrivateBus.start()
        let simulatorConnection = try await BusConnection.connect(.address(bus.address))
        var options = SimulatorOptions()
        options.seed = seed
        configure(&options)
        let fleet = FleetGenerator.make(count: count, seed: seed, now: Int64(Date().timeIntervalSince1970 * 1000))
        let daemon = SimulatedBluetoothd(bus: simulatorConnection, options: options, fleet: fleet)
        try await daemon.start()
        try await simulatorConnection.export(SimulatorControl.interface(for: daemon), at: SimulatorControl.path)
        _ = try await simulatorConnection.requestName(SimulatorControl.busName)
        let client = try await BusConnection.connect(.address(bus.address))
        return SimulatorFixture(
            bus: bus, simulatorConnection: simulatorConnection, daemon: daemon, client: client, fleet: fleet)
    }

    func stop() async {
        await client.close()
        await simulatorConnection.close()
        await bus.stop()
    }

    func devicePath(_ state: BeaconState, adapter: ObjectPath = adapter) -> ObjectPath {
        try! adapter.appending("dev_" + state.address.replacingOccurrences(of: ":", with: "_"))
    }

    /// The simulator's control interface, over the client's connection.
    var control: SimulatorControl.Client { SimulatorControl.Client(client) }

    /// Starts discovery and waits until every beacon of the fleet has a
    /// Device1 object: for its InterfacesAdded (subscribed to before
    /// StartDiscovery), unless it was there already.
    func discoverAll(adapter: ObjectPath = adapter) async throws {
        let added = try await client.signals(matching: .interfacesAdded(sender: Self.bluez))
        try await client.call(Self.bluez, adapter, "org.bluez.Adapter1", "StartDiscovery")
        let objects = try await client.managedObjects(of: Self.bluez)
        let missing = Set(fleet.map { devicePath($0, adapter: adapter) }).filter {
            objects[$0]?["org.bluez.Device1"] == nil
        }
        guard !missing.isEmpty else { return }
        _ = try await take(
            missing.count,
            from: added.filter { signal in
                guard let added = try? InterfacesAdded(signal) else { return false }
                return missing.contains(added.path) && added.interfaces["org.bluez.Device1"] != nil
            }, "InterfacesAdded of every beacon of the fleet on \(adapter)")
    }

    func connect(_ state: BeaconState, adapter: ObjectPath = adapter) async throws {
        try await client.call(
            Self.bluez, devicePath(state, adapter: adapter), "org.bluez.Device1", "Connect",
            timeout: .seconds(20))
    }

    /// The characteristic with `uuid` under a device, from GetManagedObjects.
    func characteristic(_ uuid: GattUUID, of state: BeaconState) async throws -> ObjectPath {
        let objects = try await client.managedObjects(of: Self.bluez)
        let device = devicePath(state)
        let found = objects.first { path, interfaces in
            device.isAncestor(of: path)
                && interfaces["org.bluez.GattCharacteristic1"]?["UUID"]?.string == uuid.rawValue
        }
        return try #require(found?.key, "no characteristic \(uuid)")
    }

    func read(_ uuid: GattUUID, of state: BeaconState) async throws -> [UInt8] {
        let path = try await characteristic(uuid, of: state)
        let reply = try await client.call(
            Self.bluez, path, "org.bluez.GattCharacteristic1", "ReadValue", [.propertyMap([:])])
        return try reply.body(as: "ay")[0].bytes ?? []
    }

    func write(_ uuid: GattUUID, _ value: [UInt8], of state: BeaconState) async throws {
        let path = try await characteristic(uuid, of: state)
        try await client.call(
            Self.bluez, path, "org.bluez.GattCharacteristic1", "WriteValue",
            [.bytes(value), .propertyMap(["type": "request"])])
    }

    /// StartNotify on a characteristic, and its notified values: the signal
    /// subscription is in place before StartNotify, and only changes of
    /// `Value` are kept (not the `Notifying` change StartNotify makes).
    func notifications(
        _ uuid: GattUUID, of state: BeaconState
    ) async throws
        -> AsyncCompactMapSequence<AsyncStream<BusSignal>, [UInt8]>
    {
        let path = try await characteristic(uuid, of: state)
        let signals = try await client.signals(
            matching: MatchRule(sender: Self.bluez, interface: .properties, member: "PropertiesChanged", path: path))
        try await client.call(Self.bluez, path, "org.bluez.GattCharacteristic1", "StartNotify")
        return signals.compactMap { (try? PropertiesChanged($0))?.changed["Value"]?.bytes }
    }

    /// The simulator's ground truth for one beacon.
    func report(_ state: BeaconState) async throws -> SimulatorControl.Report {
        try await control.beacon(state.address)
    }
}

func withSimulator(
    count: Int = 3, configure: (inout SimulatorOptions) -> Void = { _ in },
    _ body: (SimulatorFixture) async throws -> Void
) async throws {
    try await withResource(
        { try await SimulatorFixture.start(count: count, configure: configure) }, stop: { await $0.stop() }, body)
}
