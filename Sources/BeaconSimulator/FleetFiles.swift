import Foundation
import SBeaconProtocol
import SafeText

/// Why a fleet or state file was refused: the file, the beacon's position
/// and the field.
public struct FleetFileError: Error, CustomStringConvertible, Equatable {
    public let description: String
    init(_ file: String, _ message: String) { description = "\(file): \(message)" }
}

/// `--fleet FILE.json`: a fleet described beacon by beacon.
///
/// ```json
/// [{"address": "C1:67:5E:0B:B9:80", "serial": "SB1-0001", "firmware": "1.0.7", "battery": 35,
///   "factoryDefault": true, "calibrated": false, "moving": false, "rssi": -62,
///   "major": 1, "minor": 7, "config": {"cornering": 300, "braking": 300, "acceleration": 300,
///   "duration": 500, "enable": 1}}]
/// ```
/// Only `address` is required; the rest defaults to a factory-fresh beacon
/// on firmware 1.0.8 with a full battery.
///
/// What the beacon says about itself may be any bytes (`ByteString`: a JSON
/// string, `{"hex": …}`, `{"base64": …}`, `{"text": …, "repeat": N}` or an
/// array of them): `name` (the advertised local name, default `SBeacon`;
/// bluetoothd makes Name and Alias of it as `BlueZName` says),
/// `manufacturer`, `model`, `serial`, `hardwareRevision` and
/// `firmwareRevision` (what 0x2A26 sends; `firmware` stays the version the
/// advert carries). A Device Information value longer than 512 bytes, the
/// most an attribute holds, is refused unless the beacon has
/// `"allowOversize": true`. `note` is free text, ignored. Any other field
/// is refused.
public enum FleetFile {
    struct Entry: Decodable {
        var address: String
        var serial: ByteString?
        var firmware: String?
        var battery: Double?
        var factoryDefault: Bool?
        var calibrated: Bool?
        var moving: Bool?
        var rssi: Int16?
        var major: UInt16?
        var minor: UInt16?
        var config: ConfigEntry?
        var name: ByteString?
        var manufacturer: ByteString?
        var model: ByteString?
        var hardwareRevision: ByteString?
        var firmwareRevision: ByteString?
        var allowOversize: Bool?
        var note: String?

        static let fields = [
            "address", "serial", "firmware", "battery", "factoryDefault", "calibrated", "moving", "rssi", "major",
            "minor", "config", "name", "manufacturer", "model", "hardwareRevision", "firmwareRevision",
            "allowOversize", "note",
        ]
    }

    struct ConfigEntry: Decodable {
        var cornering, braking, acceleration, duration, enable: UInt16
    }

    /// The longest attribute value ATT carries (Core spec, Vol 3, Part F, 3.2.9).
    public static let maximumValueLength = 512

    /// The largest fleet file read (docs/simulator.md, "Fleet files and
    /// state"): 100,000 beacons of 2.5 KiB each.
    public static let maxFile = 256 << 20

    public static func load(_ path: String, now: Int64) throws -> [BeaconState] {
        // A regular file, opened without blocking, at most maxFile read.
        let data: Data
        do {
            data = Data(try BoundedFile.read(path, limit: maxFile))
        } catch {
            throw FleetFileError(path, "\(error)")
        }
        let entries: [Entry]
        do {
            entries = try JSONDecoder().decode([Entry].self, from: data)
        } catch let DecodingError.keyNotFound(key, context) {
            throw FleetFileError(path, "\(where_(context.codingPath)): '\(key.stringValue)' is missing")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context),
            let DecodingError.dataCorrupted(context)
        {
            throw FleetFileError(path, "\(where_(context.codingPath)): \(context.debugDescription)")
        } catch {
            throw FleetFileError(path, "is not a JSON array of beacons: \(error)")
        }
        let objects = (try? JSONSerialization.jsonObject(with: data)) as? [[String: Any]] ?? []
        var seen = Set<String>()
        return try entries.enumerated().map { index, entry in
            let at = "beacon \(index + 1)"
            if index < objects.count,
                let unknown = objects[index].keys.sorted().first(where: { !Entry.fields.contains($0) })
            {
                throw FleetFileError(
                    path, "\(at): unknown field '\(unknown)' (known: \(Entry.fields.joined(separator: ", ")))")
            }
            guard (try? MACEnding(address: entry.address)) != nil else {
                throw FleetFileError(path, "\(at): address '\(entry.address)' is not six hex octets")
            }
            guard seen.insert(entry.address.uppercased()).inserted else {
                throw FleetFileError(path, "\(at): address \(entry.address) appears twice")
            }
            let serial = entry.serial?.lossyText ?? "SB1-FILE-\(index + 1)"
            let values: [(String, ByteString?)] = [
                ("manufacturer", entry.manufacturer), ("model", entry.model), ("serial", entry.serial),
                ("hardwareRevision", entry.hardwareRevision), ("firmwareRevision", entry.firmwareRevision),
            ]
            for case (let field, let value?) in values
            where value.bytes.count > maximumValueLength && entry.allowOversize != true {
                throw FleetFileError(
                    path,
                    "\(at): \(field) is \(value.bytes.count) bytes, more than an attribute value holds "
                        + "(\(maximumValueLength)); give the beacon \"allowOversize\": true to serve it anyway")
            }
            var firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)
            if let text = entry.firmware {
                guard let version = try? FirmwareVersion(text) else {
                    throw FleetFileError(path, "\(at): firmware '\(text)' is not MAJOR.MINOR.PATCH")
                }
                firmware = version
            }
            let battery = entry.battery ?? 100
            guard (0...100).contains(battery) else {
                throw FleetFileError(path, "\(at): battery \(battery) is outside 0–100")
            }
            var config = DrivingBehaviourConfig.factoryDefault
            if let c = entry.config {
                config = DrivingBehaviourConfig(
                    cornering: c.cornering, braking: c.braking, acceleration: c.acceleration, duration: c.duration,
                    enable: .init(rawValue: c.enable))
                if let invalid = config.firstInvalidField { throw FleetFileError(path, "\(at): config: \(invalid)") }
            }
            var state = BeaconState(
                address: entry.address.uppercased(),
                identity: BeaconIdentity(
                    major: entry.major ?? 1, minor: entry.minor ?? BeaconState.minor(fromSerial: serial)),
                serial: serial, firmware: firmware, battery: battery, config: config, calibration: .uncalibrated,
                timeOffset: 0, poweredOnAt: now - 3_600_000, factoryDefault: entry.factoryDefault ?? true)
            if entry.calibrated == true {
                var model = BeaconFirmware(state: state)
                _ = model.finishCalibration(now: now - 60_000)
                state = model.state
                state.factoryDefault = entry.factoryDefault ?? false
            }
            state.moving = entry.moving ?? false
            state.rssi = entry.rssi ?? -60
            if let value = entry.manufacturer { state.manufacturer = value }
            if let value = entry.model { state.model = value }
            if let value = entry.hardwareRevision { state.hardwareRevision = value }
            if let value = entry.serial, value.bytes != Array(serial.utf8) { state.serialNumber = value }
            state.firmwareRevision = entry.firmwareRevision
            state.advertisedName = entry.name
            return state
        }
    }

    static func where_(_ path: [any CodingKey]) -> String {
        guard let first = path.first?.intValue else { return "the file" }
        let field = path.dropFirst().map(\.stringValue).joined(separator: ".")
        return "beacon \(first + 1)" + (field.isEmpty ? "" : ", field '\(field)'")
    }
}

/// `--state FILE`: the whole fleet's state, kept across runs. Written
/// atomically (a temporary file renamed over the old one), mode 0600.
public enum StateFile {
    struct Contents: Codable {
        var version = 1
        var beacons: [BeaconState]
    }

    public static func load(_ path: String) throws -> [BeaconState]? {
        // The file is written back (OutputFile): what cannot be written is
        // not read either (a FIFO would block here).
        let target: OutputFile.Target
        do {
            target = try OutputFile.check(path)
        } catch {
            throw FleetFileError(path, error.reason)
        }
        guard target.exists else { return nil }
        let data: Data
        do {
            data = Data(try BoundedFile.read(path, limit: FleetFile.maxFile))
        } catch {
            throw FleetFileError(path, "\(error)")
        }
        do {
            let contents = try JSONDecoder().decode(Contents.self, from: data)
            guard contents.version == 1 else {
                throw FleetFileError(path, "state format \(contents.version) is not one this simulator reads (1)")
            }
            return contents.beacons
        } catch let error as FleetFileError {
            throw error
        } catch {
            throw FleetFileError(path, "is not a simulator state file: \(error)")
        }
    }

    public static func save(_ beacons: [BeaconState], to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(Contents(beacons: beacons))
        do {
            try OutputFile.write(Array(data), to: path)
        } catch {
            throw FleetFileError(path, error.reason)
        }
    }
}
