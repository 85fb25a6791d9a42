import DBusBinding
import Foundation
import SBeaconProtocol

/// `org.beaconbench.Simulator1` at `/org/beaconbench/Simulator`: the ground
/// truth of the simulated fleet, and levers on it, for tests, benchmarks and
/// demos. Answers are JSON (see docs/simulator.md).
public enum SimulatorControl {
    public static let busName: BusName = "org.beaconbench.Simulator"
    public static let path: ObjectPath = "/org/beaconbench/Simulator"
    public static let interfaceName: InterfaceName = "org.beaconbench.Simulator1"

    /// One beacon as the control interface reports it.
    public struct Report: Codable, Sendable, Equatable {
        public var address: String
        public var major: UInt16
        public var minor: UInt16
        public var serial: String
        public var model: String
        public var firmware: String
        public var battery: Int
        public var config: Config
        public var calibration: Calibration
        public var timeOffset: Int64
        public var uptime: UInt32
        public var factoryDefault: Bool
        public var moving: Bool
        public var inRange: Bool
        public var rssi: Int
        public var tripStatus: String
        public var records: Records
        public var connected: Bool
        /// `Name` as bluetoothd shows it; nil when it shows none.
        public var name: String?
        /// What the beacon sends, byte for byte, in hex: `name` (the
        /// advertised local name), `manufacturer`, `model`, `serial`,
        /// `hardwareRevision`, `firmwareRevision`.
        public var hex: [String: String]?

        public struct Config: Codable, Sendable, Equatable {
            public var cornering, braking, acceleration, duration, enable: UInt16
        }
        public struct Calibration: Codable, Sendable, Equatable {
            public var calibrated: Bool
            public var calibratedAt: UInt32
            public var x, y, z: Int16
        }
        public struct Records: Codable, Sendable, Equatable {
            public var trips, events, incidents: Int
        }

        init(_ state: BeaconState, connected: Bool, now: Int64) {
            address = state.address
            major = state.identity.major
            minor = state.identity.minor
            serial = state.serial
            model = state.model.lossyText
            firmware = state.firmware.description
            battery = Int(state.batteryPercent)
            config = Config(
                cornering: state.config.cornering, braking: state.config.braking,
                acceleration: state.config.acceleration, duration: state.config.duration,
                enable: state.config.enable.rawValue)
            calibration = Calibration(
                calibrated: state.calibration.calibrated, calibratedAt: state.calibration.calibratedAt,
                x: state.calibration.vector.x, y: state.calibration.vector.y, z: state.calibration.vector.z)
            timeOffset = state.timeOffset
            uptime = state.uptime(at: now)
            factoryDefault = state.factoryDefault
            moving = state.moving
            inRange = state.inRange
            rssi = Int(state.rssi)
            tripStatus = state.tripStatus.description
            records = Records(trips: state.trips.count, events: state.events.count, incidents: state.incidents.count)
            self.connected = connected
            name = state.bluezName
            hex = [
                "name": ByteString(state.nameBytes).hex, "manufacturer": state.manufacturer.hex,
                "model": state.model.hex, "serial": ByteString(state.serialNumberBytes).hex,
                "hardwareRevision": state.hardwareRevision.hex,
                "firmwareRevision": ByteString(state.firmwareRevisionBytes).hex,
            ]
        }
    }

    static func json<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// The interface, bound to a daemon.
    public static func interface(for daemon: SimulatedBluetoothd) -> BusInterface {
        BusInterface(
            name: interfaceName,
            methods: [
                .init(name: "Beacons", outputs: [.init("json", .string)]) { _ in
                    [.string(try json(await daemon.reports()))]
                },
                .init(name: "Beacon", inputs: [.init("address", .string)], outputs: [.init("json", .string)]) { call in
                    let address = call.body[0].string ?? ""
                    guard let report = await daemon.reports().first(where: { $0.address == address }) else {
                        throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)")
                    }
                    return [.string(try json(report))]
                },
                .init(name: "Update", inputs: [.init("address", .string), .init("json", .string)]) { call in
                    try await daemon.update(call.body[0].string ?? "", json: call.body[1].string ?? "")
                    return []
                },
                .init(
                    name: "Drive",
                    inputs: [.init("address", .string), .init("minutes", .uint32), .init("harshEvents", .uint32)]
                ) { call in
                    try await daemon.drive(
                        call.body[0].string ?? "", minutes: call.body[1].uint32 ?? 0,
                        harshEvents: Int(call.body[2].uint32 ?? 0))
                    return []
                },
                .init(name: "Shake", inputs: [.init("address", .string), .init("eventType", .byte)]) { call in
                    guard let type = DrivingEventType(rawValue: call.body[1].byte ?? 0) else {
                        throw BusError(.invalidArgs, "eventType must be 4, 5, 6 or 8")
                    }
                    try await daemon.shake(call.body[0].string ?? "", type: type)
                    return []
                },
                .init(name: "FaultCounts", outputs: [.init("json", .string)]) { _ in
                    let counts = await daemon.faultCounts
                    return [
                        .string(try json(Dictionary(uniqueKeysWithValues: counts.map { ($0.key.rawValue, $0.value) })))
                    ]
                },
                .init(name: "Activity", outputs: [.init("json", .string)]) { _ in
                    [.string(try json(await daemon.activity))]
                },
                .init(name: "Unplug", inputs: [.init("adapter", .uint32), .init("milliseconds", .uint32)]) { call in
                    try await daemon.unplug(
                        Int(call.body[0].uint32 ?? 0), downtime: .milliseconds(Int64(call.body[1].uint32 ?? 0)))
                    return []
                },
                .init(name: "Restart") { _ in
                    try await daemon.restart()
                    return []
                },
                .init(name: "SetFaultPlan", inputs: [.init("json", .string)]) { call in
                    let plan: FaultPlan
                    do {
                        plan = try FaultPlan(json: call.body[0].string ?? "")
                    } catch let error as FaultPlanError {
                        throw BusError(.invalidArgs, "SetFaultPlan: \(error)")
                    }
                    await daemon.setPlan(plan, keepingCommandLineFaults: true)
                    return []
                },
                .init(name: "FaultPlan", outputs: [.init("json", .string)]) { _ in
                    [.string(await daemon.currentPlan.json)]
                },
                .init(name: "FiredRules", outputs: [.init("json", .string)]) { _ in
                    [.string(try json(await daemon.currentPlan.report))]
                },
                .init(name: "Release", inputs: [.init("hold", .string)], outputs: [.init("released", .uint32)]) {
                    call in
                    [.uint32(UInt32(try await daemon.release(call.body[0].string ?? "")))]
                },
                .init(
                    name: "WaitFor", inputs: [.init("condition", .string), .init("timeoutMs", .uint32)],
                    outputs: [.init("json", .string)]
                ) { call in
                    [
                        .string(
                            try await daemon.waitFor(
                                call.body[0].string ?? "", timeoutMs: Int(call.body[1].uint32 ?? 0)))
                    ]
                },
                .init(name: "Counters", outputs: [.init("json", .string)]) { _ in
                    [.string(try json(await daemon.counters))]
                },
            ])
    }
}

extension SimulatedBluetoothd {
    public func reports() -> [SimulatorControl.Report] {
        let now = Self.now()
        return fleet().map { SimulatorControl.Report($0, connected: isConnected($0.address), now: now) }
    }

    /// Applies a JSON object of changes: `battery` (0–100), `firmware`
    /// ("1.0.7"), `moving`, `sensorFault`, `inRange` (false: out of radio
    /// range, its connections drop), `rssi`, `config` (any of `cornering`,
    /// `braking`, `acceleration`, `duration`, `enable`: changed behind the
    /// tool's back), `major`, `minor`.
    public func update(_ address: String, json: String) async throws {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any] else {
            throw BusError(.invalidArgs, "Update wants a JSON object")
        }
        let known: Set = [
            "battery", "firmware", "moving", "sensorFault", "inRange", "rssi", "faults", "config", "major", "minor",
        ]
        if let unknown = object.keys.first(where: { !known.contains($0) }) {
            throw BusError(
                .invalidArgs, "Update: unknown field '\(unknown)' (known: \(known.sorted().joined(separator: ", ")))")
        }
        var firmware: FirmwareVersion?
        if let text = object["firmware"] {
            guard let text = text as? String, let version = try? FirmwareVersion(text) else {
                throw BusError(.invalidArgs, "Update: firmware must be a string like \"1.0.8\"")
            }
            firmware = version
        }
        var faults: [String: Double]?
        if let value = object["faults"] {
            guard let table = value as? [String: Any] else {
                throw BusError(.invalidArgs, "Update: faults must be an object of kind → probability")
            }
            var parsed: [String: Double] = [:]
            for (kind, probability) in table {
                guard Fault(rawValue: kind) != nil else {
                    throw BusError(.invalidArgs, "Update: unknown fault '\(kind)'")
                }
                guard let p = probability as? Double, (0...1).contains(p) else {
                    throw BusError(.invalidArgs, "Update: the probability of \(kind) must be between 0 and 1")
                }
                parsed[kind] = p
            }
            faults = parsed
        }
        var config: [String: UInt16] = [:]
        if let value = object["config"] {
            let fields: Set = ["cornering", "braking", "acceleration", "duration", "enable"]
            guard let table = value as? [String: Any], table.keys.allSatisfy(fields.contains) else {
                throw BusError(
                    .invalidArgs, "Update: config must be an object of \(fields.sorted().joined(separator: ", "))")
            }
            for (field, number) in table {
                guard let number = number as? Int, let value = UInt16(exactly: number) else {
                    throw BusError(.invalidArgs, "Update: config.\(field) must be 0–65535")
                }
                config[field] = value
            }
        }
        for key in ["major", "minor"] where object[key] != nil {
            guard let number = object[key] as? Int, UInt16(exactly: number) != nil else {
                throw BusError(.invalidArgs, "Update: \(key) must be 0–65535")
            }
        }
        try await update(address) { state in
            if let faults { state.faults = faults }
            if let value = config["cornering"] { state.config.cornering = value }
            if let value = config["braking"] { state.config.braking = value }
            if let value = config["acceleration"] { state.config.acceleration = value }
            if let value = config["duration"] { state.config.duration = value }
            if let value = config["enable"] { state.config.enable = .init(rawValue: value) }
            if let major = (object["major"] as? Int).flatMap(UInt16.init(exactly:)) { state.identity.major = major }
            if let minor = (object["minor"] as? Int).flatMap(UInt16.init(exactly:)) { state.identity.minor = minor }
            if let battery = object["battery"] as? Double { state.battery = max(0, min(100, battery)) }
            if let firmware {
                // New firmware says its own revision.
                state.firmware = firmware
                state.firmwareRevision = nil
            }
            if let moving = object["moving"] as? Bool { state.moving = moving }
            if let fault = object["sensorFault"] as? Bool { state.sensorFault = fault }
            if let inRange = object["inRange"] as? Bool { state.inRange = inRange }
            if let rssi = object["rssi"] as? Int { state.rssi = Int16(clamping: rssi) }
        }
        if let faults { ensureBeaconRateRules(for: faults.keys) }
        if object["inRange"] as? Bool == false { await leftRange(address) }
    }
}

extension SimulatorControl {
    /// The control interface's fault plan calls, for tests and tools that
    /// drive a simulator over the bus (docs/simulator.md, "Control
    /// interface").
    public struct Client: Sendable {
        public let connection: BusConnection

        public init(_ connection: BusConnection) { self.connection = connection }

        @discardableResult
        func call(
            _ method: MemberName, _ arguments: [BusValue] = [], timeout: Duration = .seconds(30)
        ) async throws
            -> String
        {
            let reply = try await connection.call(
                busName, path, interfaceName, method, arguments, timeout: timeout)
            return reply.body.first?.string ?? ""
        }

        /// `SetFaultPlan(s)`: replaces the plan (the `--faults` rules stay).
        public func setFaultPlan(_ json: String) async throws { try await call("SetFaultPlan", [.string(json)]) }

        /// `FaultPlan() → s`.
        public func faultPlan() async throws -> FaultPlan { try FaultPlan(json: try await call("FaultPlan")) }

        /// `FiredRules() → s`: firings per rule id and the last 100.
        public func firedRules() async throws -> FaultPlan.Report {
            try JSONDecoder().decode(FaultPlan.Report.self, from: Data(try await call("FiredRules").utf8))
        }

        /// `Release(s) → u`: how many held steps went on.
        public func release(_ hold: String) async throws -> Int {
            let reply = try await connection.call(busName, path, interfaceName, "Release", [.string(hold)])
            return Int(reply.body.first?.uint32 ?? 0)
        }

        /// `Beacons() → s`: the ground truth of every beacon.
        public func beacons() async throws -> [SimulatorControl.Report] {
            try JSONDecoder().decode([SimulatorControl.Report].self, from: Data(try await call("Beacons").utf8))
        }

        /// `Beacon(s) → s`: the ground truth of one beacon.
        public func beacon(_ address: String) async throws -> SimulatorControl.Report {
            try JSONDecoder().decode(
                SimulatorControl.Report.self, from: Data(try await call("Beacon", [.string(address)]).utf8))
        }

        /// `Update(s, s)`: changes a beacon (`{"inRange": false}`, `{"faults": {…}}`, …).
        public func update(_ address: String, _ json: String) async throws {
            try await call("Update", [.string(address), .string(json)])
        }

        /// `Drive(s, u, u)`: a trip ending now, with harsh events.
        public func drive(_ address: String, minutes: UInt32, harshEvents: UInt32) async throws {
            try await call("Drive", [.string(address), .uint32(minutes), .uint32(harshEvents)])
        }

        /// `Shake(s, y)`: a real-time event (4, 5, 6 or 8) now.
        public func shake(_ address: String, eventType: UInt8) async throws {
            try await call("Shake", [.string(address), .byte(eventType)])
        }

        /// `Restart()`: bluetoothd restarting.
        public func restart() async throws { try await call("Restart") }

        /// `WaitFor(s, u) → s`: the state reached, as JSON.
        @discardableResult
        public func waitFor(_ condition: String, timeout: Duration = .seconds(120)) async throws -> String {
            let ms = UInt32(clamping: timeout.wholeMilliseconds)
            return try await call("WaitFor", [.string(condition), .uint32(ms)], timeout: timeout + .seconds(10))
        }

        /// `Counters() → s`.
        public func counters() async throws -> SimulatedBluetoothd.Counters {
            try JSONDecoder().decode(SimulatedBluetoothd.Counters.self, from: Data(try await call("Counters").utf8))
        }
    }
}
