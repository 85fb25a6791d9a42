import BlueZClient
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing

/// BlueZClient against python-dbusmock's bluez5 template: an imitation of
/// bluetoothd written by others, not the project's simulator.
@Suite("BlueZClient against python-dbusmock's bluez5", .timeLimit(.minutes(5)))
struct IndependentBlueZTests {
    static let peers = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Peers").path

    @Test func adaptersDevicesAndAdvertsFromAnotherImitation() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.stop() }
        let mock = try ChildProcess("/usr/bin/python3", ["\(Self.peers)/dbusmock_bluez.py", bus.address])
        defer { mock.terminate() }
        let connection = try await BusConnection.connect(.address(bus.address))
        defer { Task { await connection.close() } }
        var ready = false
        for _ in 0..<500 where !ready {
            let objects = try? await connection.managedObjects(of: "org.bluez")
            ready = objects?.values.contains { $0["org.bluez.Device1"]?["RSSI"]?.int16 == -55 } ?? false
            if !ready { try await Task.sleep(for: .milliseconds(20)) }
        }
        try #require(ready, "dbusmock did not come up")

        let client = BluetoothClient(bus: connection)
        try await client.start()
        let adapter = try await client.adapter(named: nil)
        #expect(adapter.name == "hci0")
        let devices = await client.devices()
        #expect(devices.count == 2)
        let beacon = try #require(await client.device(address: "c1:aa:bb:cc:dd:01"))
        let advert = try IBeaconAdvert(bytes: try #require(beacon.manufacturerData[0x004C]))
        #expect(advert.identity == BeaconIdentity(major: 100, minor: 42))
        let summary = try BenchSummary(bytes: try #require(beacon.manufacturerData[0x0059]))
        #expect(summary.battery == 77)
        #expect(summary.macEnding.description == "aabbccdd")
        #expect(summary.configCRC == 0x1234)
        let other = try #require(await client.device(address: "11:22:33:44:55:66"))
        #expect(other.manufacturerData[0x004C] == nil)
        await client.stop()
    }
}
