import SBeaconProtocol
import Testing

@Suite("SBeacon codecs: bytes in, typed values out, per the contract", .timeLimit(.minutes(2)))
struct CodecTests {
    @Test func crcIsCCITTFalse() {
        // The standard check value of CRC-16/CCITT-FALSE.
        #expect(crc16CCITTFalse(Array("123456789".utf8)) == 0x29B1)
        #expect(crc16CCITTFalse([]) == 0xFFFF)
    }

    @Test func drivingBehaviourConfigBytes() throws {
        let config = DrivingBehaviourConfig(
            cornering: 300, braking: 400, acceleration: 0x1234, duration: 500, enable: [.detection, .lowPassFilter])
        #expect(config.bytes == [0x2C, 0x01, 0x90, 0x01, 0x34, 0x12, 0xF4, 0x01, 0x05, 0x00])
        #expect(try DrivingBehaviourConfig(bytes: config.bytes) == config)
        #expect(config.firstInvalidField == nil)
        #expect(config.crc == crc16CCITTFalse(config.bytes))
        #expect(throws: ProtocolError.self) { try DrivingBehaviourConfig(bytes: [1, 2, 3]) }
    }

    @Test(arguments: [
        (UInt16(49), UInt16(300), UInt16(300), UInt16(500), UInt16(1), "cornering"),
        (300, 5001, 300, 500, 1, "braking"),
        (300, 300, 0, 500, 1, "acceleration"),
        (300, 300, 300, 0, 1, "duration"),
        (300, 300, 300, 10001, 1, "duration"),
        (300, 300, 300, 500, 8, "enable"),
    ])
    func outOfRangeFieldsAreNamed(_ c: UInt16, _ b: UInt16, _ a: UInt16, _ d: UInt16, _ e: UInt16, _ field: String) {
        let config = DrivingBehaviourConfig(
            cornering: c, braking: b, acceleration: a, duration: d, enable: .init(rawValue: e))
        #expect(config.firstInvalidField?.hasPrefix(field) == true)
    }

    @Test func limitsAreInclusive() {
        let low = DrivingBehaviourConfig(cornering: 50, braking: 50, acceleration: 50, duration: 1, enable: [])
        let high = DrivingBehaviourConfig(
            cornering: 5000, braking: 5000, acceleration: 5000, duration: 10000, enable: .all)
        #expect(low.firstInvalidField == nil)
        #expect(high.firstInvalidField == nil)
    }

    @Test func iBeaconAdvert() throws {
        let advert = IBeaconAdvert(identity: BeaconIdentity(major: 1, minor: 26268), measuredPower: -59)
        let bytes = advert.bytes
        #expect(bytes.count == 23)
        #expect(Array(bytes[0..<2]) == [0x02, 0x15])
        #expect(Array(bytes[18..<22]) == [0x00, 0x01, 0x66, 0x9C])  // major, minor big-endian
        #expect(bytes[22] == 0xC5)
        #expect(try IBeaconAdvert(bytes: bytes) == advert)
        var other = bytes
        other[2] ^= 0xFF
        #expect(throws: ProtocolError.self) { try IBeaconAdvert(bytes: other) }
        #expect(throws: ProtocolError.self) { try IBeaconAdvert(bytes: Array(bytes.dropLast())) }
    }

    @Test func benchSummaryAdvert() throws {
        let summary = BenchSummary(
            macEnding: try MACEnding(address: "A1:B2:A3:B5:C7:D9"), battery: 87,
            status: [.calibrated, .detectionEnabled], firmware: FirmwareVersion(major: 1, minor: 0, patch: 8),
            configCRC: 0xBEEF)
        #expect(summary.bytes == [0x53, 0x01, 0xA3, 0xB5, 0xC7, 0xD9, 87, 0x03, 1, 0, 8, 0xEF, 0xBE])
        #expect(summary.macEnding.description == "a3b5c7d9")
        #expect(try BenchSummary(bytes: summary.bytes) == summary)
        var tooFull = summary.bytes
        tooFull[6] = 101
        #expect(throws: ProtocolError.self) { try BenchSummary(bytes: tooFull) }
        #expect(throws: ProtocolError.self) {
            try BenchSummary(bytes: [0x53, 0x02] + Array(summary.bytes.dropFirst(2)))
        }
    }

    @Test func recordsRoundTrip() throws {
        let notifications: [RecordNotification] =
            [
                .trip(TripRecord(index: 99, start: 100, end: 2800)),
                .event(
                    DrivingEvent(
                        index: 79, type: .braking, timestamp: 1500, duration: 450, averageMagnitude: 380,
                        maximumMagnitude: 420, average: Vector(x: -150, y: 380, z: 50))),
            ]
            + RecordNotification.incident(
                Incident(
                    id: 7, timestamp: 99, maximumResultant: 3100, averageResultant: 1200,
                    average: Vector(x: 1, y: 2, z: 3),
                    samples: [Vector(x: 1, y: 1, z: 1), Vector(x: 2, y: 2, z: 2), Vector(x: 3, y: 3, z: 3)]))
        #expect(notifications.count == 5)  // trip, event, header, two chunks (2 + 1 samples)
        for notification in notifications {
            #expect(try RecordNotification(bytes: notification.bytes) == notification)
        }
        #expect(notifications[0].bytes.count == 10)
        #expect(notifications[1].bytes.count == 19)
        #expect(notifications[2].bytes.count == 19)
        #expect(notifications[3].bytes.count == 16)
        #expect(notifications[4].bytes.count == 10)
        #expect(throws: ProtocolError.self) { try RecordNotification(bytes: [0x01, 100, 0, 0, 0, 0, 0, 0, 0, 0]) }
        #expect(throws: ProtocolError.self) { try RecordNotification(bytes: [0x09]) }
        #expect(throws: ProtocolError.self) { try RecordNotification(bytes: []) }
    }

    @Test func responsesAndRealTimeEvents() throws {
        let response = RecordResponse(opcode: 0x01, result: .success, count: 300)
        #expect(response.bytes == [0x80, 0x01, 0x00, 0x2C, 0x01])
        #expect(try RecordResponse(bytes: response.bytes) == response)
        let event = RealTimeEvent(type: .braking, axis: .longitudinal, flags: .harshBraking)
        #expect(event.bytes == [0xAA, 0x05, 0x59, 0x40])
        #expect(try RealTimeEvent(bytes: event.bytes) == event)
        #expect(throws: ProtocolError.self) { try RealTimeEvent(bytes: [0xAB, 0x05, 0x59, 0x40]) }
        #expect(throws: ProtocolError.self) { try RealTimeEvent(bytes: [0xAA, 0x07, 0x59, 0x40]) }
        #expect(throws: ProtocolError.self) { try RealTimeEvent(bytes: [0xAA, 0x05, 0x41, 0x40]) }
        let calibration = CalibrationResult(outcome: .success, vector: Vector(x: 10, y: -5, z: 998))
        #expect(try CalibrationResult(bytes: calibration.bytes) == calibration)
        #expect(try DeviceCommand(bytes: [0x02, 0x5A, 0xA5]) == .factoryReset)
        #expect(throws: ProtocolError.self) { try DeviceCommand(bytes: [0x02, 0x00, 0x00]) }
    }

    @Test func firmwareVersions() throws {
        #expect(try FirmwareVersion("1.0.8") > FirmwareVersion("1.0.7"))
        #expect(try FirmwareVersion("2.0.0") > FirmwareVersion("1.10.10"))
        #expect(throws: ProtocolError.self) { try FirmwareVersion("1.0") }
        #expect(throws: ProtocolError.self) { try FirmwareVersion("1.0.x") }
        #expect(SBeaconUUID.batteryLevel.rawValue == "00002a19-0000-1000-8000-00805f9b34fb")
        #expect(SBeaconUUID.drivingBehaviourConfig.rawValue == "53420201-6561-636f-6e00-000000000000")
        #expect(SBeaconUUID.batteryLevel.sig16 == 0x2A19)
    }

    @Test func theSeedsExampleEventInG() throws {
        // The framework's example: max 0.42 G, average X −0.15 G (left), Y 0.38 G, Z 0.05 G.
        let bytes: [UInt8] = [
            0x02, 12, 0x05, 0x3A, 0x05, 0x00, 0x00, 0xC2, 0x01, 0x7C, 0x01, 0xA4, 0x01, 0x6A, 0xFF, 0x7C, 0x01, 0x32,
            0x00,
        ]
        guard case .event(let event) = try RecordNotification(bytes: bytes) else {
            Issue.record("not an event")
            return
        }
        #expect(event.index == 12)
        #expect(event.type == .braking)
        #expect(event.timestamp == 1338)
        #expect(event.duration == 450)
        #expect(event.averageMagnitude == 380)
        #expect(event.maximumG == 0.42)
        #expect(event.average.g.x == -0.15)
        #expect(event.average.g.y == 0.38)
        #expect(event.average.g.z == 0.05)
    }

    @Test func beaconTime() throws {
        // Power-on at 2026-01-30 10:00:00 UTC; a trip starting 2700 s later.
        let offset: Int64 = 1_769_767_200_000
        #expect(BeaconTime.epochMilliseconds(beaconSeconds: 2700, offset: offset) == 1_769_769_900_000)
        #expect(BeaconTime.offset(uptime: 3600, now: 1_769_770_800_000) == offset)
        #expect(BeaconTime.needsSync(stored: 0, computed: offset))
        #expect(!BeaconTime.needsSync(stored: offset + 2000, computed: offset))
        #expect(BeaconTime.needsSync(stored: offset + 2001, computed: offset))
        #expect(try BeaconTime.uptime(bytes: [0x10, 0x0E, 0, 0]) == 3600)
        #expect(try BeaconTime.offset(bytes: BeaconTime.offsetBytes(-5)) == -5)
        // Python: struct.pack("<q", 1769767200000)
        #expect(BeaconTime.offsetBytes(offset) == [0x00, 0x65, 0x58, 0x0E, 0x9C, 0x01, 0x00, 0x00])
        #expect(throws: ProtocolError.self) { try BeaconTime.uptime(bytes: [1, 2, 3]) }
        #expect(throws: ProtocolError.self) { try BeaconTime.offset(bytes: [1]) }
        #expect(try TripStatus(bytes: [4]) == .timeout)
        #expect(throws: ProtocolError.self) { try TripStatus(bytes: [5]) }
        #expect(throws: ProtocolError.self) { try TripStatus(bytes: []) }
        #expect(try TripInformation(bytes: [3, 0, 1, 0, 7, 0]) == TripInformation(trips: 3, incidents: 1, events: 7))
        #expect(throws: ProtocolError.self) { try TripInformation(bytes: [3, 0, 1, 0, 7]) }
        #expect(throws: ProtocolError.self) { try CalibrationState(bytes: [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) }
        #expect(throws: ProtocolError.self) { try CalibrationResult(bytes: [0x80, 0x03, 0, 0, 0, 0, 0, 0]) }
        #expect(throws: ProtocolError.self) { try RecordResponse(bytes: [0x80, 0x01, 0x04, 0, 0]) }
        #expect(throws: ProtocolError.self) { try BeaconIdentity(bytes: [1, 2, 3]) }
    }
}

@Suite("Device Information strings", .timeLimit(.minutes(2)))
struct DeviceInformationTextTests {
    @Test func endAtTheFirstNUL() {
        #expect(DeviceInformationText.decode(Array("1.0.8".utf8)) == "1.0.8")
        #expect(DeviceInformationText.decode(Array("1.0.8".utf8) + [0]) == "1.0.8")
        #expect(DeviceInformationText.decode(Array("SB-1".utf8) + [0, 0, 0, 0x41]) == "SB-1")
        #expect(DeviceInformationText.decode([0, 0x41]) == "")
        #expect(DeviceInformationText.decode(Array("Sérïal‡".utf8)) == "Sérïal‡")
    }
}
