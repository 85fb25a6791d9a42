import BeaconSimulator
import BlueZClient
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing
import Workbench

/// A private bus, the simulator in this process, and a BluetoothClient on
/// its own connection with discovery running on hci0.
struct BenchFixture {
    let bus: PrivateBus
    let simulatorConnection: BusConnection
    let daemon: SimulatedBluetoothd
    let clientConnection: BusConnection
    let client: BluetoothClient
    let fleet: [BeaconState]

    static func start(
        count: Int = 3, seed: UInt64 = 21, fleet: [BeaconState]? = nil,
        configure: (inout SimulatorOptions) -> Void = { _ in }
    ) async throws -> BenchFixture {
        let bus = try await PrivateBus.start()
        let simulatorConnection = try await BusConnection.connect(.address(bus.address))
        var options = SimulatorOptions()
        options.seed = seed
        configure(&options)
        let beacons =
            fleet ?? FleetGenerator.make(count: count, seed: seed, now: Int64(Date().timeIntervalSince1970 * 1000))
        let daemon = SimulatedBluetoothd(bus: simulatorConnection, options: options, fleet: beacons)
        try await daemon.start()
        try await simulatorConnection.export(SimulatorControl.interface(for: daemon), at: SimulatorControl.path)
        _ = try await simulatorConnection.requestName(SimulatorControl.busName)
        let clientConnection = try await BusConnection.connect(.address(bus.address))
        var timeouts = BluetoothClient.Timeouts()
        timeouts.servicesResolved = .seconds(3)
        let client = BluetoothClient(bus: clientConnection, timeouts: timeouts)
        try await client.start()
        let adapter = try await client.adapter(named: nil)
        try await client.startDiscovery(on: adapter)
        for state in beacons { _ = try await client.waitForDevice(address: state.address, timeout: .seconds(120)) }
        return BenchFixture(
            bus: bus, simulatorConnection: simulatorConnection, daemon: daemon, clientConnection: clientConnection,
            client: client, fleet: beacons)
    }

    /// The simulator's control interface, over the client's connection.
    var control: SimulatorControl.Client { SimulatorControl.Client(clientConnection) }

    func stop() async {
        await client.stop()
        await clientConnection.close()
        await simulatorConnection.close()
        await bus.stop()
    }

    /// Connects to a beacon, checks it is an SBeacon, runs `body`, disconnects.
    func withBeacon<T: Sendable>(
        _ state: BeaconState, policy: ConnectPolicy = ConnectPolicy(requiredServices: SBeacon.requiredServices),
        _ body: (SBeacon) async throws -> T
    ) async throws -> T {
        try await client.withConnection(to: state.address, policy: policy) { session in
            try await body(try await SBeacon(session))
        }
    }

    func truth(_ state: BeaconState) async throws -> BeaconState {
        try #require(await daemon.fleet().first { $0.address == state.address })
    }
}

func withBench(
    count: Int = 3, seed: UInt64 = 21, fleet: [BeaconState]? = nil,
    configure: (inout SimulatorOptions) -> Void = { _ in }, _ body: (BenchFixture) async throws -> Void
) async throws {
    try await withResource(
        { try await BenchFixture.start(count: count, seed: seed, fleet: fleet, configure: configure) },
        stop: { await $0.stop() }, body)
}

/// A fleet of beacons with known traits, for tests that need them.
func knownFleet(moving: Bool = false) -> [BeaconState] {
    let now = Int64(Date().timeIntervalSince1970 * 1000)
    return (1...3).map { number in
        var state = BeaconState(
            address: "C1:00:00:00:00:0\(number)", identity: BeaconIdentity(major: 1, minor: UInt16(number)),
            serial: "SB1-T-\(number)", firmware: FirmwareVersion(major: 1, minor: 0, patch: 7), battery: 55,
            config: .factoryDefault, calibration: .uncalibrated, timeOffset: 0, poweredOnAt: now - 7_200_000,
            factoryDefault: true)
        state.moving = moving && number == 1
        return state
    }
}
