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
        try await withResource({ try await PrivateBus.start() }, stop: { await $0.stop() }) { bus in
            let connection = try await BusConnection.connect(.address(bus.address))
            // The peer takes this name once the imitation is set up.
            let ready = try await connection.nameOwnerChanges(of: "org.beaconbench.DbusmockReady")
            try await withResource(
                { try ChildProcess("/usr/bin/python3", ["\(Self.peers)/dbusmock_bluez.py", bus.address]) },
                stop: { await $0.terminate() }
            ) { _ in
                _ = try await take(
                    1, from: ready.filter { $0.newOwner != nil },
                    "dbusmock's bluez5 imitation to be set up (org.beaconbench.DbusmockReady taken)")

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
            await connection.close()
        }
    }
}
