import BlueZClient
import SBeaconProtocol
import Synchronization

/// Why an operation on a beacon failed, beyond the radio's own errors
/// (`BlueZError`).
public enum OperationError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The device is not an SBeacon: nothing is written to it.
    case notAnSBeacon(address: String, reason: String)
    /// The beacon sent bytes that do not follow the contract.
    case malformed(address: String, step: String, ProtocolError)
    /// Calibration ended without success.
    case calibrationFailed(address: String, CalibrationResult.Outcome)
    /// What was read back is not what was written.
    case verificationFailed(address: String, what: String, wrote: String, readBack: String)
    /// A record transfer ended short or garbled; nothing was cleared.
    case transferIncomplete(address: String, kind: String, expected: Int, received: Int)
    /// The beacon refused a record request.
    case transferRefused(address: String, kind: String, result: String)
    /// A destructive operation was asked for without its confirmation.
    case confirmationRequired(String)

    public var description: String {
        switch self {
        case .notAnSBeacon(let address, let reason): "\(address): not an SBeacon (\(reason)); nothing written"
        case .malformed(let address, let step, let error): "\(address): \(step): malformed answer: \(error)"
        case .calibrationFailed(let address, let outcome):
            "\(address): calibration failed: \(outcome == .motionDetected ? "motion detected (the beacon must be at rest)" : "sensor fault")"
        case .verificationFailed(let address, let what, let wrote, let readBack):
            "\(address): \(what) read back as \(readBack) after writing \(wrote)"
        case .transferIncomplete(let address, let kind, let expected, let received):
            "\(address): \(kind) transfer incomplete: \(received) of \(expected) records; nothing cleared"
        case .transferRefused(let address, let kind, let result): "\(address): \(kind) transfer refused: \(result)"
        case .confirmationRequired(let what): "\(what) needs an explicit confirmation"
        }
    }
}

/// Everything a beacon tells about itself, read in one go.
public struct BeaconInfo: Sendable, Equatable {
    public var manufacturer: String
    public var model: String
    public var serial: String
    public var hardwareRevision: String
    /// The Firmware Revision string as sent (up to a NUL, 512 bytes at most).
    public var firmwareRevision: String
    /// That string as a version; nil when it is not MAJOR.MINOR.PATCH.
    public var firmware: FirmwareVersion?
    public var battery: UInt8
    public var uptime: UInt32
    public var timeOffset: Int64
    public var calibration: CalibrationState
    public var config: DrivingBehaviourConfig
    public var identity: BeaconIdentity
    public var tripStatus: TripStatus
    public var tripInformation: TripInformation
}

/// A value before and after an operation, and whether it was written.
public struct Change<Value: Sendable & Equatable>: Sendable, Equatable {
    public var before: Value
    public var after: Value
    /// False when the beacon already held the value: nothing was written.
    public var written: Bool
}

/// The operations on one connected SBeacon. Each returns what it read, what
/// it changed and what it verified; nothing is reported as changed unless
/// it was read back.
public struct SBeacon: Sendable {
    public let session: DeviceSession
    public var address: String { session.address }
    /// Told every value read from the beacon, as it is read — also on a
    /// path that then fails — so that what was learnt is never lost.
    let observer: (@Sendable (Observation) -> Void)?
    /// The bench-summary advert bluetoothd held when the link came up, and
    /// when the device was last heard (see `recentSummary(within:)`).
    let advertised: (summary: BenchSummary, heard: ContinuousClock.Instant)?
    /// The config last read from the beacon on this connection, while
    /// nothing has been written to it since (see `confirmedConfig`).
    private let lastConfig = LinkMemory()

    final class LinkMemory: Sendable {
        let config = Mutex<DrivingBehaviourConfig?>(nil)
    }

    /// A fact read from a beacon.
    public enum Observation: Sendable, Equatable {
        case identity(BeaconIdentity)
        case config(DrivingBehaviourConfig)
        case calibration(CalibrationState)
        case timeOffset(Int64)
        case battery(UInt8)
        case firmware(FirmwareVersion)

        /// What an observation is of, without its value: what a fleet step
        /// reads and writes (`FleetStep.reads`, `writes`), and what its
        /// failure makes the inventory forget.
        public enum Kind: Sendable, Hashable, CaseIterable {
            case identity, config, calibration, timeOffset, battery, firmware
        }

        public var kind: Kind {
            switch self {
            case .identity: .identity
            case .config: .config
            case .calibration: .calibration
            case .timeOffset: .timeOffset
            case .battery: .battery
            case .firmware: .firmware
            }
        }
    }

    /// The services a beacon must show before anything is written to it.
    public static let requiredServices = SBeaconUUID.requiredServices.map(\.rawValue)

    /// Wraps a connected device after checking it is an SBeacon: its
    /// iBeacon advert carries the SBeacon UUID and its services are there.
    public init(_ session: DeviceSession, observer: (@Sendable (Observation) -> Void)? = nil) async throws {
        self.session = session
        self.observer = observer
        guard let device = await session.client.device(address: session.address) else {
            throw OperationError.notAnSBeacon(address: session.address, reason: "bluetoothd does not know it")
        }
        guard let advert = device.manufacturerData[SBeaconUUID.appleCompanyID] else {
            throw OperationError.notAnSBeacon(address: session.address, reason: "no iBeacon advert")
        }
        do {
            _ = try IBeaconAdvert(bytes: advert)
        } catch let error as ProtocolError {
            throw OperationError.notAnSBeacon(address: session.address, reason: error.reason)
        }
        for uuid in Self.requiredServices { try await session.requireService(uuid) }
        // Trusted only when it names this beacon (its MAC ending) and holds
        // a battery level that can be one.
        if let bytes = device.manufacturerData[SBeaconUUID.nordicCompanyID],
            let summary = try? BenchSummary(bytes: bytes), summary.battery <= 100,
            let ending = try? MACEnding(address: session.address), summary.macEnding == ending,
            let heard = device.lastHeard
        {
            advertised = (summary, heard)
        } else {
            advertised = nil
        }
    }

    /// How recent a bench-summary advert must be for its battery level and
    /// firmware version to stand for two reads (`batteryLevel(within:)`).
    public static let summaryFreshness: Duration = .seconds(10)

    /// The bench-summary advert, when bluetoothd heard the beacon within
    /// `maxAge` before the link came up and the summary names this beacon.
    public func recentSummary(within maxAge: Duration = summaryFreshness) -> BenchSummary? {
        guard let advertised, ContinuousClock.now - advertised.heard <= maxAge else { return nil }
        return advertised.summary
    }

    /// The battery level: from a recent bench-summary advert when there is
    /// one (no ATT request), else read. Recorded either way.
    /// - Returns: the level, and whether it came from the advert.
    public func batteryLevel(within maxAge: Duration = summaryFreshness) async throws -> (UInt8, fromAdvert: Bool) {
        if let summary = recentSummary(within: maxAge) {
            observer?(.battery(summary.battery))
            return (summary.battery, true)
        }
        return (try await readBattery(), false)
    }

    /// The firmware version: from a recent bench-summary advert when there
    /// is one, else the Firmware Revision string read (which may not be a
    /// version at all).
    public func firmware(
        within maxAge: Duration = summaryFreshness
    ) async throws -> (
        text: String, version: FirmwareVersion?, fromAdvert: Bool
    ) {
        if let summary = recentSummary(within: maxAge) {
            observer?(.firmware(summary.firmware))
            return (summary.firmware.description, summary.firmware, true)
        }
        let text = try await readFirmwareRevision()
        return (text, try? FirmwareVersion(text), false)
    }

    // MARK: Reading

    private func read(_ uuid: GattUUID) async throws -> [UInt8] { try await session.read(uuid.rawValue) }

    private func decode<T>(_ step: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as ProtocolError {
            throw OperationError.malformed(address: address, step: step, error)
        }
    }

    private func readString(_ uuid: GattUUID) async throws -> String {
        DeviceInformationText.decode(try await read(uuid))
    }

    /// The Firmware Revision string as the beacon sends it (up to a NUL).
    public func readFirmwareRevision() async throws -> String {
        let text = try await readString(SBeaconUUID.firmwareRevision)
        if let version = try? FirmwareVersion(text) { observer?(.firmware(version)) }
        return text
    }

    public func readConfig() async throws -> DrivingBehaviourConfig {
        let bytes = try await read(SBeaconUUID.drivingBehaviourConfig)
        let config = try decode("read the driving-behaviour config") { try DrivingBehaviourConfig(bytes: bytes) }
        observer?(.config(config))
        lastConfig.config.withLock { $0 = config }
        return config
    }

    /// The config read from the beacon on this connection (by `readConfig`
    /// or the read-back of `writeConfig`) with nothing written to it
    /// since: what the beacon holds, without another request. Nil when
    /// none was read, or after a write to the config or Device Control.
    public var confirmedConfig: DrivingBehaviourConfig? { lastConfig.config.withLock { $0 } }

    public func readIdentity() async throws -> BeaconIdentity {
        let bytes = try await read(SBeaconUUID.identity)
        let identity = try decode("read the identity") { try BeaconIdentity(bytes: bytes) }
        observer?(.identity(identity))
        return identity
    }

    public func readCalibration() async throws -> CalibrationState {
        let bytes = try await read(SBeaconUUID.calibrationState)
        let state = try decode("read the calibration state") { try CalibrationState(bytes: bytes) }
        observer?(.calibration(state))
        return state
    }

    public func readUptime() async throws -> UInt32 {
        let bytes = try await read(SBeaconUUID.uptime)
        return try decode("read the uptime") { try BeaconTime.uptime(bytes: bytes) }
    }

    public func readTimeOffset() async throws -> Int64 {
        let bytes = try await read(SBeaconUUID.timeOffset)
        let offset = try decode("read the time offset") { try BeaconTime.offset(bytes: bytes) }
        observer?(.timeOffset(offset))
        return offset
    }

    public func readBattery() async throws -> UInt8 {
        let bytes = try await read(SBeaconUUID.batteryLevel)
        let battery = try decode("read the battery level") {
            guard bytes.count == 1, bytes[0] <= 100 else {
                throw ProtocolError("Battery Level", "expected one byte 0–100, got \(bytes.hexString)")
            }
            return bytes[0]
        }
        observer?(.battery(battery))
        return battery
    }

    /// Model, serial, revisions, battery, time, calibration, config,
    /// identity, trip status and counts.
    public func readInfo() async throws -> BeaconInfo {
        let firmwareText = try await readFirmwareRevision()
        let statusBytes = try await read(SBeaconUUID.tripStatus)
        let informationBytes = try await read(SBeaconUUID.tripInformation)
        return BeaconInfo(
            manufacturer: try await readString(SBeaconUUID.manufacturerName),
            model: try await readString(SBeaconUUID.modelNumber),
            serial: try await readString(SBeaconUUID.serialNumber),
            hardwareRevision: try await readString(SBeaconUUID.hardwareRevision),
            firmwareRevision: firmwareText, firmware: try? FirmwareVersion(firmwareText),
            battery: try await readBattery(),
            uptime: try await readUptime(),
            timeOffset: try await readTimeOffset(),
            calibration: try await readCalibration(),
            config: try await readConfig(),
            identity: try await readIdentity(),
            tripStatus: try decode("read the trip status") { try TripStatus(bytes: statusBytes) },
            tripInformation: try decode("read the trip information") { try TripInformation(bytes: informationBytes) })
    }

    // MARK: Writing, verified

    /// Writes the power-on offset when it is unset or more than 2 s off,
    /// and reads it back.
    /// - Parameter now: the real time, epoch milliseconds.
    public func syncTime(now: Int64) async throws -> Change<Int64> {
        try await syncTime(clock: { now })
    }

    /// The same, with the time taken from `clock` right after the uptime
    /// is read: on a slow link (or a loaded machine) the reads take a
    /// while, and a time taken before them would be off by that much.
    public func syncTime(clock: @Sendable () -> Int64) async throws -> Change<Int64> {
        let stored = try await readTimeOffset()
        let uptime = try await readUptime()
        let computed = BeaconTime.offset(uptime: uptime, now: clock())
        guard BeaconTime.needsSync(stored: stored, computed: computed) else {
            return Change(before: stored, after: stored, written: false)
        }
        try await session.write(SBeaconUUID.timeOffset.rawValue, BeaconTime.offsetBytes(computed))
        let readBack = try await readTimeOffset()
        guard readBack == computed else {
            throw OperationError.verificationFailed(
                address: address, what: "time offset", wrote: "\(computed)", readBack: "\(readBack)")
        }
        return Change(before: stored, after: readBack, written: true)
    }

    /// Writes the driving-behaviour config unless the beacon holds it
    /// already, and reads it back.
    public func writeConfig(_ config: DrivingBehaviourConfig) async throws -> Change<DrivingBehaviourConfig> {
        try await writeVerified(
            config, bytes: config.bytes, to: SBeaconUUID.drivingBehaviourConfig, what: "driving-behaviour config",
            read: readConfig, describe: \.description)
    }

    /// Sets major and minor unless already set, and reads them back.
    public func setIdentity(_ identity: BeaconIdentity) async throws -> Change<BeaconIdentity> {
        try await writeVerified(
            identity, bytes: identity.bytes, to: SBeaconUUID.identity, what: "identity", read: readIdentity,
            describe: { "\($0.major).\($0.minor)" })
    }

    /// Reads; writes only when the value differs; reads back and compares.
    private func writeVerified<Value: Equatable & Sendable>(
        _ value: Value, bytes: [UInt8], to uuid: GattUUID, what: String, read: () async throws -> Value,
        describe: (Value) -> String
    ) async throws -> Change<Value> {
        let before = try await read()
        guard before != value else { return Change(before: before, after: before, written: false) }
        if uuid == SBeaconUUID.drivingBehaviourConfig { lastConfig.config.withLock { $0 = nil } }
        try await session.write(uuid.rawValue, bytes)
        let after = try await read()
        guard after == value else {
            throw OperationError.verificationFailed(
                address: address, what: what, wrote: describe(value), readBack: describe(after))
        }
        return Change(before: before, after: after, written: true)
    }

    /// Calibrates at rest: subscribes, starts, waits for the result, and
    /// reads the state back. "Motion detected" and "sensor fault" are
    /// distinct failures.
    public func calibrate(timeout: Duration = .seconds(10)) async throws -> CalibrationState {
        let notifications = try await session.notifications(SBeaconUUID.calibrationControlPoint.rawValue)
        let result: CalibrationResult
        do {
            try await session.write(SBeaconUUID.calibrationControlPoint.rawValue, [CalibrationResult.startOpcode])
            let bytes = try await notifications.next(timeout: timeout, step: "wait for the calibration result")
            result = try decode("calibrate") { try CalibrationResult(bytes: bytes) }
        } catch {
            await notifications.stop()
            throw error
        }
        await notifications.stop()
        guard result.outcome == .success else {
            throw OperationError.calibrationFailed(address: address, result.outcome)
        }
        let state = try await readCalibration()
        guard state.calibrated, state.vector == result.vector else {
            throw OperationError.verificationFailed(
                address: address, what: "calibration state", wrote: "calibrated at \(result.vector)",
                readBack: state.calibrated ? "vector \(state.vector)" : "not calibrated")
        }
        return state
    }

    // MARK: Records

    /// The records of one kind, checked against the count the beacon
    /// announces at the end; nothing is cleared.
    public func pullTrips(timeout: Duration = .seconds(30)) async throws -> [TripRecord] {
        try await transfer(.sendTrips, kind: "trip", timeout: timeout).compactMap {
            if case .trip(let trip) = $0 { trip } else { nil }
        }
    }

    public func pullEvents(timeout: Duration = .seconds(30)) async throws -> [DrivingEvent] {
        try await transfer(.sendEvents, kind: "driving-behaviour event", timeout: timeout).compactMap {
            if case .event(let event) = $0 { event } else { nil }
        }
    }

    public func pullIncidents(timeout: Duration = .seconds(30)) async throws -> [Incident] {
        let notifications = try await transfer(.sendIncidents, kind: "incident", timeout: timeout)
        return try Self.assembleIncidents(notifications, address: address)
    }

    /// Clears one kind of record. Call it only after the records are stored.
    public func clear(_ opcode: RecordOpcode) async throws {
        guard [.clearTrips, .clearEvents, .clearIncidents].contains(opcode) else {
            throw OperationError.confirmationRequired("clear with a send opcode")
        }
        _ = try await transfer(opcode, kind: "clear", timeout: .seconds(10))
    }

    private func transfer(_ opcode: RecordOpcode, kind: String, timeout: Duration) async throws -> [RecordNotification]
    {
        let data = try await session.notifications(SBeaconUUID.recordData.rawValue)
        let control: DeviceSession.Notifications
        do {
            control = try await session.notifications(SBeaconUUID.recordControlPoint.rawValue)
        } catch {
            await data.stop()
            throw error
        }
        // Notifications are stopped before returning, never later: a late
        // StopNotify would cut off the next transfer's.
        do {
            let records = try await transfer(opcode, kind: kind, timeout: timeout, data: data, control: control)
            await data.stop()
            await control.stop()
            return records
        } catch {
            await data.stop()
            await control.stop()
            throw error
        }
    }

    private func transfer(
        _ opcode: RecordOpcode, kind: String, timeout: Duration, data: DeviceSession.Notifications,
        control: DeviceSession.Notifications
    ) async throws -> [RecordNotification] {
        try await session.write(SBeaconUUID.recordControlPoint.rawValue, [opcode.rawValue])
        let responseBytes = try await control.next(timeout: timeout, step: "wait for the end of the \(kind) transfer")
        let response = try decode("\(kind) transfer") { try RecordResponse(bytes: responseBytes) }
        guard response.opcode == opcode.rawValue else {
            throw OperationError.malformed(
                address: address, step: "\(kind) transfer",
                ProtocolError("record response", "answers opcode \(response.opcode), not \(opcode.rawValue)"))
        }
        switch response.result {
        case .success: break
        case .nothingToSend: return []
        case .busy: throw OperationError.transferRefused(address: address, kind: kind, result: "busy")
        case .notSupported:
            throw OperationError.transferRefused(address: address, kind: kind, result: "opcode not supported")
        }
        guard [.sendTrips, .sendEvents, .sendIncidents].contains(opcode) else { return [] }
        // The records were notified before the response; collect them.
        var records: [RecordNotification] = []
        var complete = 0
        var pendingSamples: [UInt16: Int] = [:]
        while complete < Int(response.count) {
            let bytes: [UInt8]
            do {
                bytes = try await data.next(timeout: .seconds(2), step: "collect the \(kind) records")
            } catch {
                throw OperationError.transferIncomplete(
                    address: address, kind: kind, expected: Int(response.count), received: complete)
            }
            let record = try decode("\(kind) transfer") { try RecordNotification(bytes: bytes) }
            records.append(record)
            switch record {
            case .trip, .event: complete += 1
            case .incidentHeader(let id, _, let count, _, _, _):
                if count == 0 { complete += 1 } else { pendingSamples[id] = Int(count) }
            case .incidentChunk(let id, _, let samples):
                guard let left = pendingSamples[id] else { continue }
                if left - samples.count <= 0 {
                    pendingSamples[id] = nil
                    complete += 1
                } else {
                    pendingSamples[id] = left - samples.count
                }
            }
        }
        return records
    }

    /// Incidents from their header and chunk notifications; chunks must come
    /// in sequence and add up to the announced sample count.
    static func assembleIncidents(_ notifications: [RecordNotification], address: String) throws -> [Incident] {
        var incidents: [Incident] = []
        var expected: [UInt16: (count: Int, next: UInt8)] = [:]
        var index: [UInt16: Int] = [:]
        for notification in notifications {
            switch notification {
            case .incidentHeader(let id, let timestamp, let count, let maximum, let average, let vector):
                index[id] = incidents.count
                expected[id] = (Int(count), 0)
                incidents.append(
                    Incident(
                        id: id, timestamp: timestamp, maximumResultant: maximum, averageResultant: average,
                        average: vector, samples: []))
            case .incidentChunk(let id, let sequence, let samples):
                guard let at = index[id], let state = expected[id], sequence == state.next else {
                    throw OperationError.malformed(
                        address: address, step: "incident transfer",
                        ProtocolError("incident chunk", "chunk \(sequence) of incident \(id) is out of order"))
                }
                incidents[at].samples += samples
                expected[id] = (state.count, state.next &+ 1)
            default:
                throw OperationError.malformed(
                    address: address, step: "incident transfer",
                    ProtocolError("Record Data", "a trip or event record in an incident transfer"))
            }
        }
        for incident in incidents where incident.samples.count != expected[incident.id]?.count {
            throw OperationError.transferIncomplete(
                address: address, kind: "incident \(incident.id) samples", expected: expected[incident.id]?.count ?? 0,
                received: incident.samples.count)
        }
        return incidents
    }

    // MARK: Watching and device control

    /// Real-time events as they come (malformed ones as errors in the
    /// stream's place: the caller decides).
    public func watchRealTimeEvents() async throws -> DeviceSession.Notifications {
        try await session.notifications(SBeaconUUID.realTimeEvent.rawValue)
    }

    public func watchTripStatus() async throws -> DeviceSession.Notifications {
        try await session.notifications(SBeaconUUID.tripStatus.rawValue)
    }

    /// Reboots: the beacon drops the connection.
    public func reboot() async throws {
        lastConfig.config.withLock { $0 = nil }
        try await session.write(SBeaconUUID.deviceControl.rawValue, DeviceCommand.reboot.bytes)
    }

    /// Factory reset: only with `confirmed`; everything goes back to defaults.
    public func factoryReset(confirmed: Bool) async throws {
        guard confirmed else { throw OperationError.confirmationRequired("factory reset of \(address)") }
        lastConfig.config.withLock { $0 = nil }
        try await session.write(SBeaconUUID.deviceControl.rawValue, DeviceCommand.factoryReset.bytes)
    }
}
