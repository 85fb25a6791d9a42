import SBeaconProtocol

/// An ATT error a beacon answers a request with (Core spec Vol 3 Part F 3.4.1.1).
public enum ATTError: UInt8, Error, Sendable {
    case readNotPermitted = 0x02
    case writeNotPermitted = 0x03
    case invalidOffset = 0x07
    case requestNotSupported = 0x06
    case insufficientAuthorization = 0x08
    case invalidAttributeValueLength = 0x0D
    case unlikelyError = 0x0E
    case valueNotAllowed = 0x13
}

/// Everything one simulated SBeacon holds: the ground truth the control
/// interface reports and the state file keeps.
public struct BeaconState: Codable, Sendable, Hashable {
    public var address: String
    public var identity: BeaconIdentity
    /// Device Information strings, byte for byte as the beacon sends them
    /// (a fleet file may give any bytes: see `ByteString`).
    public var manufacturer: ByteString = "Scope Technologies"
    public var model: ByteString = "SB-1"
    /// The serial number the factory gave (the minor after a factory reset
    /// derives from it).
    public var serial: String
    public var hardwareRevision: ByteString = "B"
    /// The firmware version, as the bench-summary advert carries it.
    public var firmware: FirmwareVersion
    /// What Serial Number (0x2A25) sends, when a fleet file gives bytes that
    /// are not `serial`'s text; nil: `serial`.
    public var serialNumber: ByteString?
    /// What Firmware Revision (0x2A26) sends, when a fleet file gives it;
    /// nil: `firmware` as text. A firmware change (`Update`) clears it.
    public var firmwareRevision: ByteString?
    /// The local name the beacon advertises, byte for byte; nil: `SBeacon`.
    /// bluetoothd makes `Name` and `Alias` of it (`BlueZName`).
    public var advertisedName: ByteString?
    /// Battery in percent; fractional so that it drains slowly.
    public var battery: Double
    public var config: DrivingBehaviourConfig
    public var calibration: CalibrationState
    /// Epoch ms of power-on as last written by a client (0 = never).
    public var timeOffset: Int64
    /// Epoch ms of the real power-on, for uptime.
    public var poweredOnAt: Int64
    /// True until the first configuration, identity or calibration write.
    public var factoryDefault: Bool
    /// A moving beacon fails calibration with "motion detected".
    public var moving = false
    public var sensorFault = false
    public var tripStatus: TripStatus = .idle
    /// Unsynced records, oldest first; rings of 100 trips and 80 events.
    public var trips: [TripRecord] = []
    public var events: [DrivingEvent] = []
    public var incidents: [Incident] = []
    public var nextTripIndex: UInt8 = 0
    public var nextEventIndex: UInt8 = 0
    public var nextIncidentID: UInt16 = 1
    /// Advertised signal: RSSI at the bench and Tx power.
    public var rssi: Int16 = -60
    public var txPower: Int16 = 0
    /// Whether the beacon is within radio range.
    public var inRange = true
    /// Fault rates for this beacon only (fault kind → probability), set
    /// through the control interface's Update; they win over `--faults`.
    public var faults: [String: Double] = [:]

    public init(
        address: String, identity: BeaconIdentity, serial: String, firmware: FirmwareVersion,
        battery: Double, config: DrivingBehaviourConfig, calibration: CalibrationState,
        timeOffset: Int64, poweredOnAt: Int64, factoryDefault: Bool
    ) {
        self.address = address
        self.identity = identity
        self.serial = serial
        self.firmware = firmware
        self.battery = battery
        self.config = config
        self.calibration = calibration
        self.timeOffset = timeOffset
        self.poweredOnAt = poweredOnAt
        self.factoryDefault = factoryDefault
    }

    /// Seconds since power-on at `now` (epoch ms).
    public func uptime(at now: Int64) -> UInt32 { UInt32(clamping: max(0, (now - poweredOnAt) / 1000)) }

    public var batteryPercent: UInt8 { UInt8(max(0, min(100, battery.rounded(.down)))) }

    /// Minor from the serial number, as a factory reset sets it.
    public static func minor(fromSerial serial: String) -> UInt16 {
        UInt16(truncatingIfNeeded: serial.utf8.reduce(UInt32(0)) { ($0 &* 31) &+ UInt32($1) })
    }

    public var benchSummary: BenchSummary {
        var status: BenchSummary.Status = []
        if calibration.calibrated { status.insert(.calibrated) }
        if config.enable.contains(.detection) { status.insert(.detectionEnabled) }
        if tripStatus == .start || tripStatus == .active { status.insert(.tripInProgress) }
        if !trips.isEmpty || !events.isEmpty || !incidents.isEmpty { status.insert(.unsyncedRecords) }
        if factoryDefault { status.insert(.factoryDefault) }
        return BenchSummary(
            macEnding: (try? MACEnding(address: address)) ?? (try! MACEnding(address: "00:00:00:00:00:00")),
            battery: batteryPercent, status: status, firmware: firmware, configCRC: config.crc)
    }

    public var iBeacon: IBeaconAdvert { IBeaconAdvert(identity: identity, measuredPower: -59) }

    /// The advertised name when none is given.
    public static let defaultName: ByteString = "SBeacon"

    /// What Serial Number (0x2A25) sends.
    public var serialNumberBytes: [UInt8] { serialNumber?.bytes ?? Array(serial.utf8) }
    /// What Firmware Revision (0x2A26) sends.
    public var firmwareRevisionBytes: [UInt8] { firmwareRevision?.bytes ?? Array(firmware.description.utf8) }
    /// The local name in the beacon's adverts.
    public var nameBytes: [UInt8] { (advertisedName ?? Self.defaultName).bytes }
    /// `Name` as bluetoothd shows it (nil: no Name property).
    public var bluezName: String? { BlueZName.name(advertised: nameBytes) }
    /// `Alias` as bluetoothd shows it while no client has set one.
    public var bluezAlias: String { BlueZName.alias(advertised: nameBytes, address: address) }
}

/// What a write asks the simulated bluetoothd to do next.
public enum FirmwareEffect: Equatable, Sendable {
    /// Notify `value` on a characteristic (if the client subscribed).
    case notify(GattUUID, [UInt8])
    /// Calibrate: after the calibration time, call `finishCalibration`.
    case calibrate
    /// Drop the connection and restart (uptime from 0, state kept).
    case reboot
    /// The advert changed (identity, config, calibration…).
    case advertChanged
}

/// The SBeacon firmware as the contract describes it: pure, with the clock
/// passed in. The simulated bluetoothd turns reads and writes of GATT
/// characteristics into calls here.
public struct BeaconFirmware: Sendable {
    public var state: BeaconState
    /// The trip states the last `drive` went through, for notifications.
    public private(set) var lastTripStates: [TripStatus] = []

    public init(state: BeaconState) { self.state = state }

    /// How much battery (percent) things cost: the battery drains slowly.
    public enum Drain {
        public static let connection = 0.02
        public static let write = 0.005
        public static let perDrivingMinute = 0.002
    }

    public mutating func drain(_ percent: Double) {
        state.battery = max(0, state.battery - percent)
    }

    /// Reads a characteristic.
    /// - Throws: `ATTError.readNotPermitted` for write- or notify-only ones.
    public func read(_ uuid: GattUUID, now: Int64) throws(ATTError) -> [UInt8] {
        switch uuid {
        case SBeaconUUID.manufacturerName: state.manufacturer.bytes
        case SBeaconUUID.modelNumber: state.model.bytes
        case SBeaconUUID.serialNumber: state.serialNumberBytes
        case SBeaconUUID.hardwareRevision: state.hardwareRevision.bytes
        case SBeaconUUID.firmwareRevision: state.firmwareRevisionBytes
        case SBeaconUUID.batteryLevel: [state.batteryPercent]
        case SBeaconUUID.tripStatus: [state.tripStatus.rawValue]
        case SBeaconUUID.tripInformation:
            TripInformation(
                trips: UInt16(state.trips.count), incidents: UInt16(state.incidents.count),
                events: UInt16(state.events.count)
            ).bytes
        case SBeaconUUID.uptime: littleEndian32(state.uptime(at: now))
        case SBeaconUUID.timeOffset: littleEndian64(state.timeOffset)
        case SBeaconUUID.drivingBehaviourConfig: state.config.bytes
        case SBeaconUUID.calibrationState: state.calibration.bytes
        case SBeaconUUID.identity: state.identity.bytes
        default: throw .readNotPermitted
        }
    }

    /// Writes a characteristic.
    /// - Returns: what the daemon must do next (notifications, calibration, reboot).
    /// - Throws: the ATT error the beacon answers with; nothing changes then.
    public mutating func write(_ uuid: GattUUID, _ value: [UInt8], now: Int64) throws(ATTError) -> [FirmwareEffect] {
        switch uuid {
        case SBeaconUUID.timeOffset:
            guard value.count == 8 else { throw .invalidAttributeValueLength }
            state.timeOffset = value.reversed().reduce(Int64(0)) { ($0 << 8) | Int64($1) }
            return []
        case SBeaconUUID.drivingBehaviourConfig:
            guard value.count == DrivingBehaviourConfig.byteCount else { throw .invalidAttributeValueLength }
            guard let config = try? DrivingBehaviourConfig(bytes: value), config.firstInvalidField == nil else {
                throw .valueNotAllowed
            }
            state.config = config
            state.factoryDefault = false
            return [.advertChanged]
        case SBeaconUUID.identity:
            guard let identity = try? BeaconIdentity(bytes: value) else { throw .invalidAttributeValueLength }
            state.identity = identity
            state.factoryDefault = false
            return [.advertChanged]
        case SBeaconUUID.calibrationControlPoint:
            guard value == [CalibrationResult.startOpcode] else {
                throw value.count == 1 ? .valueNotAllowed : .invalidAttributeValueLength
            }
            return [.calibrate]
        case SBeaconUUID.recordControlPoint:
            guard value.count == 1 else { throw .invalidAttributeValueLength }
            return recordTransfer(opcode: value[0])
        case SBeaconUUID.deviceControl:
            guard let command = try? DeviceCommand(bytes: value) else {
                throw value.first == 0x01 || value.first == 0x02 ? .invalidAttributeValueLength : .valueNotAllowed
            }
            switch command {
            case .reboot:
                state.poweredOnAt = now
                if state.tripStatus != .idle { state.tripStatus = .idle }
            case .factoryReset:
                factoryReset(now: now)
            }
            return [.reboot]
        default:
            throw .writeNotPermitted
        }
    }

    /// Finishes a calibration started by writing `01` to 0202.
    /// - Returns: the `80 <result> <vector>` notification.
    public mutating func finishCalibration(now: Int64) -> [UInt8] {
        if state.sensorFault { return CalibrationResult(outcome: .sensorFault, vector: .zero).bytes }
        if state.moving { return CalibrationResult(outcome: .motionDetected, vector: .zero).bytes }
        // Gravity as a mounted beacon measures it: mostly on Z, a little tilt
        // derived from the serial so each beacon is different but stable.
        let tilt = Int16(truncatingIfNeeded: BeaconState.minor(fromSerial: state.serial) % 120) - 60
        let vector = Vector(x: tilt, y: -tilt / 2, z: 998)
        state.calibration = CalibrationState(calibrated: true, calibratedAt: state.uptime(at: now), vector: vector)
        state.factoryDefault = false
        return CalibrationResult(outcome: .success, vector: vector).bytes
    }

    mutating func factoryReset(now: Int64) {
        state.config = .factoryDefault
        state.calibration = .uncalibrated
        state.identity = BeaconIdentity(major: 1, minor: BeaconState.minor(fromSerial: state.serial))
        state.timeOffset = 0
        state.factoryDefault = true
        state.poweredOnAt = now
        state.tripStatus = .idle
        state.trips = []
        state.events = []
        state.incidents = []
    }

    /// The notifications of a record transfer, ending with the response on
    /// the control point; clears answer with count 0.
    mutating func recordTransfer(opcode: UInt8) -> [FirmwareEffect] {
        guard let request = RecordOpcode(rawValue: opcode) else {
            return [
                .notify(
                    SBeaconUUID.recordControlPoint,
                    RecordResponse(opcode: opcode, result: .notSupported, count: 0).bytes)
            ]
        }
        func respond(_ result: RecordResponse.Result, _ count: Int) -> FirmwareEffect {
            .notify(
                SBeaconUUID.recordControlPoint,
                RecordResponse(opcode: opcode, result: result, count: UInt16(count)).bytes)
        }
        func data(_ notification: RecordNotification) -> FirmwareEffect {
            .notify(SBeaconUUID.recordData, notification.bytes)
        }
        switch request {
        case .sendTrips:
            guard !state.trips.isEmpty else { return [respond(.nothingToSend, 0)] }
            return state.trips.map { data(.trip($0)) } + [respond(.success, state.trips.count)]
        case .sendEvents:
            guard !state.events.isEmpty else { return [respond(.nothingToSend, 0)] }
            return state.events.map { data(.event($0)) } + [respond(.success, state.events.count)]
        case .sendIncidents:
            guard !state.incidents.isEmpty else { return [respond(.nothingToSend, 0)] }
            return state.incidents.flatMap { RecordNotification.incident($0).map(data) }
                + [respond(.success, state.incidents.count)]
        case .clearTrips:
            state.trips = []
            return [respond(.success, 0), .advertChanged]
        case .clearEvents:
            state.events = []
            return [respond(.success, 0), .advertChanged]
        case .clearIncidents:
            state.incidents = []
            return [respond(.success, 0), .advertChanged]
        }
    }

    // MARK: Driving

    /// Records a trip of `minutes` ending now, with `harshEvents` events
    /// (and an incident for every accident among them), as the trip state
    /// machine would: IDLE → START → ACTIVE → END → IDLE.
    public mutating func drive(minutes: UInt32, harshEvents: Int, now: Int64, random: inout SplitMix64) {
        let end = state.uptime(at: now)
        let start = end > minutes * 60 ? end - minutes * 60 : 0
        appendTrip(TripRecord(index: state.nextTripIndex, start: start, end: end))
        for number in 0..<harshEvents {
            let type = DrivingEventType.allCases[Int(random.next() % 4)]
            let at = start + UInt32(Double(end - start) * Double(number + 1) / Double(harshEvents + 1))
            let threshold = thresholdFor(type)
            let maximum = threshold + UInt16(random.next() % 400)
            let average = Vector(x: Int16(random.next() % 600) - 300, y: Int16(random.next() % 600) - 300, z: 980)
            appendEvent(
                DrivingEvent(
                    index: state.nextEventIndex, type: type, timestamp: at,
                    duration: state.config.duration + UInt16(random.next() % 300),
                    averageMagnitude: maximum - maximum / 4, maximumMagnitude: maximum, average: average))
            if type == .accident {
                let samples = (0..<Int(3 + random.next() % 6)).map { _ in
                    Vector(
                        x: Int16(random.next() % 4000) - 2000, y: Int16(random.next() % 4000) - 2000,
                        z: Int16(random.next() % 2000))
                }
                state.incidents.append(
                    Incident(
                        id: state.nextIncidentID, timestamp: at, maximumResultant: maximum,
                        averageResultant: maximum / 2, average: average, samples: samples))
                state.nextIncidentID &+= 1
            }
        }
        // IDLE → START → ACTIVE → END → IDLE; one trip in five is closed by
        // the beacon's timeout instead: … ACTIVE → TIMEOUT → IDLE.
        lastTripStates = random.chance(0.2) ? [.start, .active, .timeout, .idle] : [.start, .active, .end, .idle]
        state.tripStatus = .idle
        drain(Double(minutes) * Drain.perDrivingMinute)
    }

    func thresholdFor(_ type: DrivingEventType) -> UInt16 {
        switch type {
        case .acceleration: state.config.acceleration
        case .braking: state.config.braking
        case .cornering: state.config.cornering
        case .accident: 2500
        }
    }

    mutating func appendTrip(_ trip: TripRecord) {
        state.trips.append(trip)
        if state.trips.count > 100 { state.trips.removeFirst(state.trips.count - 100) }
        state.nextTripIndex = (state.nextTripIndex + 1) % 100
    }

    mutating func appendEvent(_ event: DrivingEvent) {
        state.events.append(event)
        if state.events.count > 80 { state.events.removeFirst(state.events.count - 80) }
        state.nextEventIndex = (state.nextEventIndex + 1) % 80
    }
}

func littleEndian32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
func littleEndian64(_ value: Int64) -> [UInt8] {
    (0..<8).map { UInt8(truncatingIfNeeded: UInt64(bitPattern: value) >> ($0 * 8)) }
}

/// A small deterministic generator (SplitMix64), so a seed gives the same
/// fleet and the same faults on every machine.
public struct SplitMix64: RandomNumberGenerator, Sendable, Equatable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// A probability test: true with probability `p`.
    public mutating func chance(_ p: Double) -> Bool {
        p > 0 && Double(next() >> 11) / Double(1 << 53) < p
    }
}
