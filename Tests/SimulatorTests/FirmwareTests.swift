import SBeaconProtocol
import Testing

@testable import BeaconSimulator

@Suite("The simulated firmware follows the contract byte for byte", .timeLimit(.minutes(2)))
struct FirmwareTests {
    static let now: Int64 = 1_800_000_000_000

    static func beacon(moving: Bool = false) -> BeaconFirmware {
        var state = BeaconState(
            address: "A1:B2:A3:B5:C7:D9", identity: BeaconIdentity(major: 1, minor: 2), serial: "SB1-TEST-1",
            firmware: FirmwareVersion(major: 1, minor: 0, patch: 8), battery: 87.6, config: .factoryDefault,
            calibration: .uncalibrated, timeOffset: 0, poweredOnAt: now - 3_600_000, factoryDefault: true)
        state.moving = moving
        return BeaconFirmware(state: state)
    }

    @Test func readsEveryReadableCharacteristic() throws {
        let firmware = Self.beacon()
        let table: [(GattUUID, [UInt8])] = [
            (SBeaconUUID.batteryLevel, [87]),
            (SBeaconUUID.firmwareRevision, Array("1.0.8".utf8)),
            (SBeaconUUID.modelNumber, Array("SB-1".utf8)),
            (SBeaconUUID.serialNumber, Array("SB1-TEST-1".utf8)),
            (SBeaconUUID.tripStatus, [0]),
            (SBeaconUUID.tripInformation, [0, 0, 0, 0, 0, 0]),
            (SBeaconUUID.uptime, [0x10, 0x0E, 0, 0]),  // 3600 s
            (SBeaconUUID.timeOffset, [0, 0, 0, 0, 0, 0, 0, 0]),
            (SBeaconUUID.drivingBehaviourConfig, [0x2C, 0x01, 0x2C, 0x01, 0x2C, 0x01, 0xF4, 0x01, 0x01, 0x00]),
            (SBeaconUUID.calibrationState, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            (SBeaconUUID.identity, [1, 0, 2, 0]),
        ]
        for (uuid, expected) in table {
            #expect(try firmware.read(uuid, now: Self.now) == expected, "\(uuid)")
        }
        for uuid in [SBeaconUUID.recordControlPoint, SBeaconUUID.recordData, SBeaconUUID.deviceControl] {
            #expect(throws: ATTError.readNotPermitted) { try firmware.read(uuid, now: Self.now) }
        }
    }

    @Test func configWritesAreCheckedAndRejectedOnesChangeNothing() throws {
        var firmware = Self.beacon()
        let good = DrivingBehaviourConfig(cornering: 350, braking: 400, acceleration: 300, duration: 400, enable: .all)
        #expect(try firmware.write(SBeaconUUID.drivingBehaviourConfig, good.bytes, now: Self.now) == [.advertChanged])
        #expect(firmware.state.config == good)
        #expect(firmware.state.factoryDefault == false)
        var outOfRange = good
        outOfRange.braking = 5001
        #expect(throws: ATTError.valueNotAllowed) {
            try firmware.write(SBeaconUUID.drivingBehaviourConfig, outOfRange.bytes, now: Self.now)
        }
        #expect(throws: ATTError.valueNotAllowed) {
            try firmware.write(
                SBeaconUUID.drivingBehaviourConfig, [0x2C, 1, 0x2C, 1, 0x2C, 1, 0xF4, 1, 0x08, 0], now: Self.now)
        }
        #expect(throws: ATTError.invalidAttributeValueLength) {
            try firmware.write(SBeaconUUID.drivingBehaviourConfig, [1, 2, 3], now: Self.now)
        }
        #expect(firmware.state.config == good)
        #expect(throws: ATTError.writeNotPermitted) {
            try firmware.write(SBeaconUUID.batteryLevel, [50], now: Self.now)
        }
    }

    @Test func timeOffsetAndIdentity() throws {
        var firmware = Self.beacon()
        let offset: Int64 = Self.now - 3_600_000
        _ = try firmware.write(
            SBeaconUUID.timeOffset, (0..<8).map { UInt8(truncatingIfNeeded: offset >> ($0 * 8)) }, now: Self.now)
        #expect(firmware.state.timeOffset == offset)
        _ = try firmware.write(SBeaconUUID.identity, [0x64, 0, 0x2A, 0], now: Self.now)
        #expect(firmware.state.identity == BeaconIdentity(major: 100, minor: 42))
        #expect(firmware.state.iBeacon.bytes[18..<22] == [0x00, 0x64, 0x00, 0x2A])
        #expect(throws: ATTError.invalidAttributeValueLength) {
            try firmware.write(SBeaconUUID.identity, [1], now: Self.now)
        }
    }

    @Test func calibrationAtRestAndMoving() throws {
        var resting = Self.beacon()
        #expect(try resting.write(SBeaconUUID.calibrationControlPoint, [0x01], now: Self.now) == [.calibrate])
        let result = try CalibrationResult(bytes: resting.finishCalibration(now: Self.now))
        #expect(result.outcome == .success)
        #expect(abs(result.vector.magnitude - 1000) < 30)
        #expect(resting.state.calibration.calibrated)
        #expect(resting.state.calibration.calibratedAt == 3600)
        #expect(try resting.read(SBeaconUUID.calibrationState, now: Self.now)[0] == 1)

        var moving = Self.beacon(moving: true)
        _ = try moving.write(SBeaconUUID.calibrationControlPoint, [0x01], now: Self.now)
        #expect(try CalibrationResult(bytes: moving.finishCalibration(now: Self.now)).outcome == .motionDetected)
        #expect(moving.state.calibration.calibrated == false)
        #expect(throws: ATTError.valueNotAllowed) {
            try moving.write(SBeaconUUID.calibrationControlPoint, [0x02], now: Self.now)
        }
    }

    @Test func recordRingsWrapAndTransfersEndWithTheirCount() throws {
        var firmware = Self.beacon()
        var random = SplitMix64(seed: 3)
        for _ in 0..<105 { firmware.drive(minutes: 10, harshEvents: 1, now: Self.now, random: &random) }
        #expect(firmware.state.trips.count == 100)
        #expect(firmware.state.events.count == 80)
        #expect(firmware.state.trips.first?.index == 5)
        #expect(firmware.state.trips.last?.index == 4)  // 104 % 100
        let effects = try firmware.write(SBeaconUUID.recordControlPoint, [0x01], now: Self.now)
        #expect(effects.count == 101)
        guard case .notify(let uuid, let last) = effects.last else { Issue.record("no response"); return }
        #expect(uuid == SBeaconUUID.recordControlPoint)
        #expect(try RecordResponse(bytes: last) == RecordResponse(opcode: 1, result: .success, count: 100))
        _ = try firmware.write(SBeaconUUID.recordControlPoint, [0x11], now: Self.now)
        #expect(firmware.state.trips.isEmpty)
        let empty = try firmware.write(SBeaconUUID.recordControlPoint, [0x01], now: Self.now)
        #expect(empty == [.notify(SBeaconUUID.recordControlPoint, [0x80, 0x01, 0x03, 0x00, 0x00])])
        let unknown = try firmware.write(SBeaconUUID.recordControlPoint, [0x42], now: Self.now)
        #expect(unknown == [.notify(SBeaconUUID.recordControlPoint, [0x80, 0x42, 0x01, 0x00, 0x00])])
    }

    @Test func rebootKeepsStateAndFactoryResetRestoresDefaults() throws {
        var firmware = Self.beacon()
        let config = DrivingBehaviourConfig(
            cornering: 1000, braking: 1000, acceleration: 1000, duration: 100, enable: [])
        _ = try firmware.write(SBeaconUUID.drivingBehaviourConfig, config.bytes, now: Self.now)
        _ = try firmware.write(SBeaconUUID.identity, BeaconIdentity(major: 9, minor: 9).bytes, now: Self.now)
        #expect(try firmware.write(SBeaconUUID.deviceControl, [0x01], now: Self.now) == [.reboot])
        #expect(firmware.state.uptime(at: Self.now) == 0)
        #expect(firmware.state.config == config)
        #expect(firmware.state.identity == BeaconIdentity(major: 9, minor: 9))
        _ = try firmware.write(SBeaconUUID.deviceControl, [0x02, 0x5A, 0xA5], now: Self.now)
        #expect(firmware.state.config == .factoryDefault)
        #expect(firmware.state.identity.major == 1)
        #expect(firmware.state.identity.minor == BeaconState.minor(fromSerial: "SB1-TEST-1"))
        #expect(firmware.state.timeOffset == 0)
        #expect(firmware.state.calibration.calibrated == false)
        #expect(firmware.state.benchSummary.status.contains(.factoryDefault))
        #expect(throws: ATTError.invalidAttributeValueLength) {
            try firmware.write(SBeaconUUID.deviceControl, [0x02], now: Self.now)
        }
    }

    @Test func benchSummaryReflectsTheState() throws {
        var firmware = Self.beacon()
        var summary = firmware.state.benchSummary
        #expect(summary.battery == 87)
        #expect(summary.status == [.detectionEnabled, .factoryDefault])
        #expect(summary.configCRC == DrivingBehaviourConfig.factoryDefault.crc)
        #expect(summary.macEnding.description == "a3b5c7d9")
        _ = try firmware.write(SBeaconUUID.calibrationControlPoint, [1], now: Self.now)
        _ = firmware.finishCalibration(now: Self.now)
        var random = SplitMix64(seed: 1)
        firmware.drive(minutes: 5, harshEvents: 0, now: Self.now, random: &random)
        summary = firmware.state.benchSummary
        #expect(summary.status == [.calibrated, .detectionEnabled, .unsyncedRecords])
    }

    @Test func fleetsAreDeterministicAndMixed() {
        let a = FleetGenerator.make(count: 200, seed: 42, now: Self.now)
        let b = FleetGenerator.make(count: 200, seed: 42, now: Self.now)
        #expect(a == b)
        #expect(Set(a.map(\.address)).count == 200)
        #expect(a.contains { $0.factoryDefault })
        #expect(a.contains { !$0.factoryDefault && !$0.calibration.calibrated })
        #expect(a.contains { $0.calibration.calibrated })
        #expect(a.contains { $0.firmware < FirmwareVersion(major: 1, minor: 0, patch: 8) })
        #expect(a.contains { $0.battery < 20 })
        #expect(a.contains { $0.moving })
        #expect(FleetGenerator.make(count: 200, seed: 43, now: Self.now) != a)
    }

    @Test func tripsPassThroughTheStateMachineAndDrainTheBattery() {
        var firmware = Self.beacon()
        var random = SplitMix64(seed: 8)
        var endings = Set<TripStatus>()
        for _ in 0..<20 {
            firmware.drive(minutes: 30, harshEvents: 0, now: Self.now, random: &random)
            let states = firmware.lastTripStates
            #expect(states.first == .start && states.dropFirst().first == .active && states.last == .idle)
            endings.insert(states[2])
        }
        #expect(endings == [.end, .timeout])
        #expect(firmware.state.tripStatus == .idle)
        // 20 trips of 30 minutes: 1.2 % of battery.
        #expect(abs(firmware.state.battery - (87.6 - 1.2)) < 0.0001)
    }
}
