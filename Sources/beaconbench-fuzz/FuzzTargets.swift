import Console
import DBusBinding
import Foundation
import Profiles
import SBeaconProtocol

/// What the fuzzer feeds bytes to: every decoder of input from outside
/// (files, adverts, notifications, bus messages). Each must answer with a
/// value or a typed error — never trap, never hang.
enum FuzzTarget: String, CaseIterable {
    case batch, profile, records, adverts
    case dbusValue = "dbus-value"

    func exercise(_ bytes: [UInt8]) {
        switch self {
        case .batch:
            let parser = BatchParser(file: "fuzz.batch", overrides: ["profile": "car"], profiles: ["car", "van"])
            _ = try? parser.parse(String(decoding: bytes, as: UTF8.self))
        case .profile:
            _ = try? ProfileLoader.parse(Data(bytes), name: "fuzz", file: "fuzz.json")
        case .records:
            // The first byte picks the characteristic, the rest is its value.
            let value = Array(bytes.dropFirst())
            switch bytes.first.map({ $0 % 11 }) {
            case 0: _ = try? RecordNotification(bytes: value)
            case 1: _ = try? RecordResponse(bytes: value)
            case 2: _ = try? RealTimeEvent(bytes: value)
            case 3: _ = try? TripInformation(bytes: value)
            case 4: _ = try? CalibrationState(bytes: value)
            case 5: _ = try? CalibrationResult(bytes: value)
            case 6: _ = try? DrivingBehaviourConfig(bytes: value).firstInvalidField
            case 7: _ = try? BeaconIdentity(bytes: value)
            case 8: _ = try? DeviceCommand(bytes: value)
            case 9: _ = try? BeaconTime.offset(bytes: value)
            default: _ = try? FirmwareVersion(String(decoding: value, as: UTF8.self))
            }
        case .adverts:
            let value = Array(bytes.dropFirst())
            switch bytes.first.map({ $0 % 3 }) {
            case 0: _ = try? IBeaconAdvert(bytes: value)
            case 1: _ = try? BenchSummary(bytes: value)
            default: _ = try? MACEnding(address: String(decoding: value, as: UTF8.self))
            }
        case .dbusValue:
            _ = try? WireMessage.decodeBody(marshalled: bytes)
        }
    }

    /// Valid inputs to start from, written by `beaconbench-fuzz seed`.
    func seeds() throws -> [[UInt8]] {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        func files(_ directory: String, _ suffix: String) throws -> [[UInt8]] {
            let url = repository.appendingPathComponent(directory)
            return try FileManager.default.contentsOfDirectory(atPath: url.path).filter { $0.hasSuffix(suffix) }
                .sorted().map { Array(try Data(contentsOf: url.appendingPathComponent($0))) }
        }
        let vector = Vector(x: 12, y: -7, z: 998)
        switch self {
        case .batch: return try files("batches", ".batch")
        case .profile: return try files("profiles", ".json")
        case .records:
            let event = DrivingEvent(
                index: 3, type: .braking, timestamp: 1200, duration: 350, averageMagnitude: 400,
                maximumMagnitude: 800, average: vector)
            let values: [(UInt8, [UInt8])] = [
                (0, RecordNotification.trip(TripRecord(index: 1, start: 100, end: 900)).bytes),
                (0, RecordNotification.event(event).bytes),
                (
                    0,
                    RecordNotification.incidentHeader(
                        id: 7, timestamp: 4000, sampleCount: 3, maximumResultant: 2500, averageResultant: 1200,
                        average: vector
                    ).bytes
                ),
                (0, RecordNotification.incidentChunk(id: 7, sequence: 0, samples: [vector, vector]).bytes),
                (1, RecordResponse(opcode: 1, result: .success, count: 4).bytes),
                (2, RealTimeEvent(type: .cornering, axis: .lateral, flags: [.harshBraking]).bytes),
                (3, TripInformation(trips: 2, incidents: 1, events: 5).bytes),
                (4, CalibrationState(calibrated: true, calibratedAt: 60, vector: vector).bytes),
                (5, CalibrationResult(outcome: .success, vector: vector).bytes),
                (6, DrivingBehaviourConfig.factoryDefault.bytes),
                (7, BeaconIdentity(major: 100, minor: 7).bytes),
                (8, DeviceCommand.factoryReset.bytes),
                (9, BeaconTime.offsetBytes(1_764_000_000_000)),
                (10, Array("1.0.8".utf8)),
            ]
            return values.map { [$0.0] + $0.1 }
        case .adverts:
            return [
                [0] + IBeaconAdvert(identity: BeaconIdentity(major: 100, minor: 3), measuredPower: -59).bytes,
                [1]
                    + BenchSummary(
                        macEnding: try MACEnding(address: "A1:B2:A3:B5:C7:D9"), battery: 80, status: [.calibrated],
                        firmware: FirmwareVersion(major: 1, minor: 0, patch: 8), configCRC: 0x1234
                    ).bytes,
                [2] + Array("A1:B2:A3:B5:C7:D9".utf8),
            ]
        case .dbusValue:
            let map: BusValue = .propertyMap(["RSSI": .int16(-60), "Name": .string("SBeacon")])
            return [
                try WireMessage.marshal(method: "A", body: [.string("x"), .uint32(7), .bytes([1, 2, 3])]),
                try WireMessage.marshal(
                    method: "B",
                    body: [
                        .objectPath("/org/bluez/hci0"),
                        .dictionary(
                            key: .string, value: .variant, [.init(.string("org.bluez.Device1"), .variant(map))]),
                    ]),
                try WireMessage.marshal(
                    method: "C",
                    body: [
                        .variant(.array(.int32, [.int32(1), .int32(2)])), .double(1.5), .structure([.boolean(true)]),
                    ]),
            ]
        }
    }
}
