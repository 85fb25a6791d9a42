import DBusBinding
import Foundation
import SBeaconProtocol
import Testing

@testable import BeaconSimulator

/// The simulator serves every characteristic the protocol names: a UUID
/// added to `SBeaconUUIDs.swift` fails here until `GattLayout` serves it
/// (and `BeaconFirmware` answers what its flags promise).
@Suite("The simulated GATT layout serves every UUID", .timeLimit(.minutes(1)))
struct GattLayoutTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Every `static let name = GattUUID(sig16: 0x…)` or `(sbeacon: 0x…)` of
    /// `SBeaconUUID`, read from its source (a new one needs no edit here).
    static func declaredUUIDs() throws -> [String: GattUUID] {
        let source = try String(
            contentsOf: root.appendingPathComponent("Sources/SBeaconProtocol/SBeaconUUIDs.swift"), encoding: .utf8)
        let pattern = #/static let (\w+) = GattUUID\((sig16|sbeacon): 0x([0-9A-Fa-f]{4})\)/#
        var result: [String: GattUUID] = [:]
        for match in source.matches(of: pattern) {
            let value = UInt16(match.output.3, radix: 16)!
            result[String(match.output.1)] =
                match.output.2 == "sig16"
                ? GattUUID(sig16: value)
                : GattUUID(rawValue: "5342" + String(match.output.3).lowercased() + "-6561-636f-6e00-000000000000")
        }
        return result
    }

    @Test func everyUUIDIsServed() throws {
        let declared = try Self.declaredUUIDs()
        // The reading works: the table has its four services and more.
        #expect(declared.count >= 20, "\(declared.keys.sorted())")
        #expect(declared["identity"] == SBeaconUUID.identity)
        #expect(declared["batteryLevel"] == SBeaconUUID.batteryLevel)
        let services = Set(GattLayout.services.map(\.uuid))
        let characteristics = Set(GattLayout.services.flatMap(\.characteristics).map(\.uuid))
        for (name, uuid) in declared.sorted(by: { $0.key < $1.key }) {
            if uuid == SBeaconUUID.clientCharacteristicConfiguration { continue }  // a descriptor: below
            #expect(
                services.contains(uuid) || characteristics.contains(uuid), "SBeaconUUID.\(name) (\(uuid)) is not served"
            )
        }
        // Nothing is served that the protocol does not name.
        #expect(services.union(characteristics).isSubset(of: Set(declared.values)))
        #expect(Set(SBeaconUUID.requiredServices) == services)
        // A CCCD under every characteristic that notifies, and only there.
        let (nodes, paths) = GattLayout.nodes(under: "/org/bluez/hci0/dev_C1_00_00_00_00_01")
        var described: Set<ObjectPath> = []
        for node in nodes {
            if case .descriptor(let characteristic, let uuid) = node.kind {
                #expect(uuid == SBeaconUUID.clientCharacteristicConfiguration)
                described.insert(characteristic)
            }
        }
        let notifying = GattLayout.services.flatMap(\.characteristics).filter(\.notifies).compactMap { paths[$0.uuid] }
        #expect(described == Set(notifying))
    }

    /// What a characteristic's flags promise, the firmware does: every
    /// readable one answers a read, the others refuse it.
    @Test func theFirmwareAnswersWhatTheFlagsPromise() throws {
        let firmware = FirmwareTests.beacon()
        for characteristic in GattLayout.services.flatMap(\.characteristics) {
            if characteristic.flags.contains("read") {
                #expect(throws: Never.self, "\(characteristic.uuid)") {
                    _ = try firmware.read(characteristic.uuid, now: FirmwareTests.now)
                }
            } else {
                #expect(throws: ATTError.readNotPermitted, "\(characteristic.uuid)") {
                    _ = try firmware.read(characteristic.uuid, now: FirmwareTests.now)
                }
            }
        }
    }
}
