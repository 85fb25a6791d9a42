/// Trip Status (0101) values.
public enum TripStatus: UInt8, Sendable, Codable, CaseIterable, CustomStringConvertible {
    case idle = 0, start = 1, active = 2, end = 3, timeout = 4, unknown = 6
    public var description: String {
        switch self {
        case .idle: "IDLE"
        case .start: "START"
        case .active: "ACTIVE"
        case .end: "END"
        case .timeout: "TIMEOUT"
        case .unknown: "UNKNOWN"
        }
    }
}

/// Trip Information (0102): counts of records not yet synced.
public struct TripInformation: Hashable, Sendable, Codable {
    public var trips: UInt16
    public var incidents: UInt16
    public var events: UInt16
    public init(trips: UInt16, incidents: UInt16, events: UInt16) {
        self.trips = trips
        self.incidents = incidents
        self.events = events
    }
    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.u16(trips)
        writer.u16(incidents)
        writer.u16(events)
        return writer.bytes
    }
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 6 else { throw ProtocolError.length("Trip Information", expected: 6, got: bytes.count) }
        var reader = ByteReader(bytes, "Trip Information")
        trips = try reader.u16()
        incidents = try reader.u16()
        events = try reader.u16()
    }
}

/// Driving-behaviour event types (also the real-time event's type byte).
public enum DrivingEventType: UInt8, Sendable, Codable, CaseIterable {
    case acceleration = 4, braking = 5, cornering = 6, accident = 8
}

/// A trip record: index 0–99, start and end in beacon seconds.
public struct TripRecord: Hashable, Sendable, Codable {
    public var index: UInt8
    public var start: UInt32
    public var end: UInt32
    public init(index: UInt8, start: UInt32, end: UInt32) {
        self.index = index
        self.start = start
        self.end = end
    }
}

/// A driving-behaviour event: index 0–79.
public struct DrivingEvent: Hashable, Sendable, Codable {
    public var index: UInt8
    public var type: DrivingEventType
    public var timestamp: UInt32
    public var duration: UInt16
    public var averageMagnitude: UInt16
    public var maximumMagnitude: UInt16
    public var average: Vector
    public init(
        index: UInt8, type: DrivingEventType, timestamp: UInt32, duration: UInt16, averageMagnitude: UInt16,
        maximumMagnitude: UInt16, average: Vector
    ) {
        self.index = index
        self.type = type
        self.timestamp = timestamp
        self.duration = duration
        self.averageMagnitude = averageMagnitude
        self.maximumMagnitude = maximumMagnitude
        self.average = average
    }
}

/// An incident with its accelerometer samples.
public struct Incident: Hashable, Sendable, Codable {
    public var id: UInt16
    public var timestamp: UInt32
    public var maximumResultant: UInt16
    public var averageResultant: UInt16
    public var average: Vector
    public var samples: [Vector]
    public init(
        id: UInt16, timestamp: UInt32, maximumResultant: UInt16, averageResultant: UInt16, average: Vector,
        samples: [Vector]
    ) {
        self.id = id
        self.timestamp = timestamp
        self.maximumResultant = maximumResultant
        self.averageResultant = averageResultant
        self.average = average
        self.samples = samples
    }
}

/// One notification on Record Data (0104).
public enum RecordNotification: Hashable, Sendable {
    case trip(TripRecord)
    case event(DrivingEvent)
    /// Header of an incident: everything but the samples, and how many follow.
    case incidentHeader(
        id: UInt16, timestamp: UInt32, sampleCount: UInt16, maximumResultant: UInt16,
        averageResultant: UInt16, average: Vector)
    /// Up to two samples of incident `id`, chunk `sequence` (from 0).
    case incidentChunk(id: UInt16, sequence: UInt8, samples: [Vector])

    public var bytes: [UInt8] {
        var writer = ByteWriter()
        switch self {
        case .trip(let trip):
            writer.u8(0x01)
            writer.u8(trip.index)
            writer.u32(trip.start)
            writer.u32(trip.end)
        case .event(let event):
            writer.u8(0x02)
            writer.u8(event.index)
            writer.u8(event.type.rawValue)
            writer.u32(event.timestamp)
            writer.u16(event.duration)
            writer.u16(event.averageMagnitude)
            writer.u16(event.maximumMagnitude)
            event.average.write(to: &writer)
        case .incidentHeader(let id, let timestamp, let count, let maximum, let average, let vector):
            writer.u8(0x03)
            writer.u16(id)
            writer.u32(timestamp)
            writer.u16(count)
            writer.u16(maximum)
            writer.u16(average)
            vector.write(to: &writer)
        case .incidentChunk(let id, let sequence, let samples):
            writer.u8(0x04)
            writer.u16(id)
            writer.u8(sequence)
            for sample in samples { sample.write(to: &writer) }
        }
        return writer.bytes
    }

    public init(bytes: [UInt8]) throws {
        var reader = ByteReader(bytes, "Record Data")
        switch try reader.u8() {
        case 0x01:
            guard bytes.count == 10 else { throw ProtocolError.length("trip record", expected: 10, got: bytes.count) }
            let index = try reader.u8()
            guard index < 100 else { throw ProtocolError("trip record", "index \(index) is outside 0–99") }
            self = .trip(TripRecord(index: index, start: try reader.u32(), end: try reader.u32()))
        case 0x02:
            guard bytes.count == 19 else { throw ProtocolError.length("driving event", expected: 19, got: bytes.count) }
            let index = try reader.u8()
            guard index < 80 else { throw ProtocolError("driving event", "index \(index) is outside 0–79") }
            let code = try reader.u8()
            guard let type = DrivingEventType(rawValue: code) else {
                throw ProtocolError("driving event", "unknown event type \(code)")
            }
            self = .event(
                DrivingEvent(
                    index: index, type: type, timestamp: try reader.u32(), duration: try reader.u16(),
                    averageMagnitude: try reader.u16(), maximumMagnitude: try reader.u16(), average: try Vector(&reader)
                ))
        case 0x03:
            guard bytes.count == 19 else {
                throw ProtocolError.length("incident header", expected: 19, got: bytes.count)
            }
            self = .incidentHeader(
                id: try reader.u16(), timestamp: try reader.u32(), sampleCount: try reader.u16(),
                maximumResultant: try reader.u16(), averageResultant: try reader.u16(), average: try Vector(&reader))
        case 0x04:
            guard bytes.count == 10 || bytes.count == 16 else {
                throw ProtocolError("incident chunk", "expected 10 or 16 bytes, got \(bytes.count)")
            }
            let id = try reader.u16()
            let sequence = try reader.u8()
            var samples: [Vector] = []
            while reader.remaining > 0 { samples.append(try Vector(&reader)) }
            self = .incidentChunk(id: id, sequence: sequence, samples: samples)
        case let other:
            throw ProtocolError("Record Data", "unknown record type 0x\(String(other, radix: 16))")
        }
    }

    /// The notifications that carry one incident: its header, then its
    /// samples two at a time.
    public static func incident(_ incident: Incident) -> [RecordNotification] {
        var out: [RecordNotification] = [
            .incidentHeader(
                id: incident.id, timestamp: incident.timestamp, sampleCount: UInt16(incident.samples.count),
                maximumResultant: incident.maximumResultant, averageResultant: incident.averageResultant,
                average: incident.average)
        ]
        var sequence: UInt8 = 0
        var start = 0
        while start < incident.samples.count {
            let end = min(start + 2, incident.samples.count)
            out.append(
                .incidentChunk(id: incident.id, sequence: sequence, samples: Array(incident.samples[start..<end])))
            sequence &+= 1
            start = end
        }
        return out
    }
}

/// Record Control Point (0103) requests and the response that ends a transfer.
public enum RecordOpcode: UInt8, Sendable, CaseIterable {
    case sendTrips = 0x01, sendEvents = 0x02, sendIncidents = 0x03
    case clearTrips = 0x11, clearEvents = 0x12, clearIncidents = 0x13
}

public struct RecordResponse: Hashable, Sendable {
    public enum Result: UInt8, Sendable {
        case success = 0, notSupported = 1, busy = 2, nothingToSend = 3
    }
    public var opcode: UInt8
    public var result: Result
    public var count: UInt16
    public init(opcode: UInt8, result: Result, count: UInt16) {
        self.opcode = opcode
        self.result = result
        self.count = count
    }
    public var bytes: [UInt8] {
        var writer = ByteWriter()
        writer.u8(0x80)
        writer.u8(opcode)
        writer.u8(result.rawValue)
        writer.u16(count)
        return writer.bytes
    }
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 5 else { throw ProtocolError.length("record response", expected: 5, got: bytes.count) }
        var reader = ByteReader(bytes, "record response")
        guard try reader.u8() == 0x80 else { throw ProtocolError("record response", "does not start with 0x80") }
        opcode = try reader.u8()
        let code = try reader.u8()
        guard let result = Result(rawValue: code) else {
            throw ProtocolError("record response", "unknown result \(code)")
        }
        self.result = result
        count = try reader.u16()
    }
}

/// A real-time event notification (0105): `AA <type> <axis> <flags>`.
public struct RealTimeEvent: Hashable, Sendable {
    public enum Axis: UInt8, Sendable, Codable {
        case lateral = 0x58, longitudinal = 0x59, vertical = 0x5A, radial = 0x52
    }
    public struct StateFlags: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let accidentX = StateFlags(rawValue: 1 << 0)
        public static let accidentY = StateFlags(rawValue: 1 << 1)
        public static let accidentZ = StateFlags(rawValue: 1 << 2)
        public static let normalBraking = StateFlags(rawValue: 1 << 3)
        public static let normalAcceleration = StateFlags(rawValue: 1 << 4)
        public static let normalCornering = StateFlags(rawValue: 1 << 5)
        public static let harshBraking = StateFlags(rawValue: 1 << 6)
        public static let harshAcceleration = StateFlags(rawValue: 1 << 7)
    }
    public var type: DrivingEventType
    public var axis: Axis
    public var flags: StateFlags
    public init(type: DrivingEventType, axis: Axis, flags: StateFlags) {
        self.type = type
        self.axis = axis
        self.flags = flags
    }
    public var bytes: [UInt8] { [0xAA, type.rawValue, axis.rawValue, flags.rawValue] }

    /// - Throws: a malformed notification (wrong marker, unknown codes) is
    ///   reported, never guessed.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 4 else { throw ProtocolError.length("real-time event", expected: 4, got: bytes.count) }
        guard bytes[0] == 0xAA else { throw ProtocolError("real-time event", "marker is not 0xAA") }
        guard let type = DrivingEventType(rawValue: bytes[1]) else {
            throw ProtocolError("real-time event", "unknown event type \(bytes[1])")
        }
        guard let axis = Axis(rawValue: bytes[2]) else {
            throw ProtocolError("real-time event", "unknown axis 0x\(String(bytes[2], radix: 16))")
        }
        self.init(type: type, axis: axis, flags: StateFlags(rawValue: bytes[3]))
    }
}
