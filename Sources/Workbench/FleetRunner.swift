import BlueZClient
import DBusBinding
import Foundation
import Inventory
import Profiles
import SBeaconProtocol

/// One device step of a batch, checked and resolved (profiles looked up).
public enum DeviceStep: Sendable, Equatable {
    case info
    case requireBattery(atLeast: UInt8)
    case requireFirmware(atLeast: FirmwareVersion)
    case syncTime
    case calibrate
    case identity(major: UInt16, minor: UInt16?)  // nil: the next free minor under the major
    case apply(Profile)
    case verify(Profile)
    case pullTrips(clear: Bool)
    case pullEvents(clear: Bool)
    case pullIncidents(clear: Bool)
    case auditLive(Profile?)
    case reboot
    case factoryReset

    /// The name recorded in the inventory's `outcomes.step`.
    public var name: String {
        switch self {
        case .info: "info"
        case .requireBattery(let minimum): "require battery>=\(minimum)"
        case .requireFirmware(let minimum): "require firmware>=\(minimum)"
        case .syncTime: "sync-time"
        case .calibrate: "calibrate"
        case .identity: "identity"
        case .apply(let profile): "apply \(profile.name)"
        case .verify(let profile): "verify \(profile.name)"
        case .pullTrips: "trips"
        case .pullEvents: "events"
        case .pullIncidents: "incidents"
        case .auditLive: "audit --live"
        case .reboot: "reboot"
        case .factoryReset: "factory-reset"
        }
    }
}

/// What happened to one device in a fleet run.
public struct DeviceRecap: Sendable, Equatable, Codable {
    public var address: String
    public var ok = 0
    public var changed = 0
    public var unchanged = 0
    public var skipped = 0
    /// Dry runs: steps that would have written.
    public var wouldChange = 0
    /// Connections after the first (a transient failure retried).
    public var retries = 0
    public var failed = 0
    /// Why the device dropped out, or why its steps were skipped.
    public var reason: String?

    public init(address: String) { self.address = address }
}

/// What a fleet run reports as it goes, for progress lines.
public enum FleetProgress: Sendable {
    case started(address: String)
    case step(address: String, step: String, status: Inventory.StepStatus, detail: String?)
    case finished(DeviceRecap)
}

/// Runs device steps over many beacons at once: each device's steps in
/// order, several devices concurrently (connects are serialised per adapter
/// by the client, so one device's calibration overlaps others' work). A
/// device whose step fails drops out with its reason and the others go on;
/// a failing `require` skips the device's remaining steps. Every outcome is
/// committed to the inventory as it happens.
public actor FleetRunner {
    let client: BluetoothClient
    let inventory: Inventory
    let run: Int64
    let concurrency: Int
    let dryRun: Bool
    let policy: ConnectPolicy
    let progress: @Sendable (FleetProgress) -> Void
    /// How long a device that is not (or no longer) known may take to be
    /// seen again before it counts as gone.
    let findTimeout: Duration
    /// Every profile, for live audits against each device's assigned one.
    let profiles: [String: Profile]
    /// Connections per device before a transient failure counts.
    let deviceAttempts: Int
    /// No new connection for a device after this long (a peer that never
    /// answers must not hold a run for ever).
    let deviceDeadline: Duration
    let retryBackoff: Duration
    /// The adapters to spread devices over (empty: let the client choose).
    let adapters: [ObjectPath]
    /// Devices at work on each adapter.
    private var busy: [ObjectPath: Int] = [:]
    /// Minors handed out in this run, per major (auto identities).
    private var nextMinor: [UInt16: UInt16] = [:]

    public init(
        client: BluetoothClient, inventory: Inventory, run: Int64, concurrency: Int, dryRun: Bool = false,
        // The client retries a connect once; the runner's reconnects do the rest.
        policy: ConnectPolicy = ConnectPolicy(attempts: 2, requiredServices: SBeacon.requiredServices),
        findTimeout: Duration = .seconds(15), profiles: [String: Profile] = [:], deviceAttempts: Int = 4,
        deviceDeadline: Duration = .seconds(90), retryBackoff: Duration = .seconds(1), adapters: [ObjectPath] = [],
        progress: @escaping @Sendable (FleetProgress) -> Void = { _ in }
    ) {
        self.deviceAttempts = max(1, deviceAttempts)
        self.deviceDeadline = deviceDeadline
        self.adapters = adapters
        self.retryBackoff = retryBackoff
        self.profiles = profiles
        self.progress = progress
        self.findTimeout = findTimeout
        self.client = client
        self.inventory = inventory
        self.run = run
        self.concurrency = max(1, concurrency)
        self.dryRun = dryRun
        self.policy = policy
    }

    /// Runs `steps` on every device of `addresses`; returns a recap per
    /// device, in the order given.
    public func run(_ steps: [DeviceStep], on addresses: [String]) async -> [DeviceRecap] {
        var recaps: [String: DeviceRecap] = [:]
        await withTaskGroup(of: DeviceRecap.self) { group in
            var pending = addresses[...]
            var running = 0
            while running < concurrency, let address = pending.popFirst() {
                group.addTask { await self.runDevice(address, steps) }
                running += 1
            }
            for await recap in group {
                recaps[recap.address] = recap
                if let address = pending.popFirst() {
                    group.addTask { await self.runDevice(address, steps) }
                }
            }
        }
        return addresses.map { recaps[$0] ?? DeviceRecap(address: $0) }
    }

    private nonisolated func runDevice(_ address: String, _ steps: [DeviceStep]) async -> DeviceRecap {
        progress(.started(address: address))
        let recap = await runSteps(address, steps)
        progress(.finished(recap))
        return recap
    }

    /// What each step came to on one device, over its attempts.
    private struct Tally {
        /// Step index → final status (a step that changed the beacon on an
        /// earlier attempt stays `changed` when a retry finds it done).
        var statuses: [Int: Inventory.StepStatus] = [:]
        var wouldChange: Set<Int> = []
        var skipReason: String?
        /// Steps finished, in order: a reconnect goes on from here.
        var completed = 0
        /// Set by a failed `require`: the rest is skipped with this reason.
        var skipping: String?

        mutating func record(_ index: Int, _ status: Inventory.StepStatus) {
            if statuses[index] != .changed { statuses[index] = status }
        }
    }

    private nonisolated func runSteps(_ address: String, _ steps: [DeviceStep]) async -> DeviceRecap {
        var recap = DeviceRecap(address: address)
        // The device is in the inventory before any of its outcomes.
        do {
            try await inventory.recordDevice(DeviceRecord(address: address))
        } catch {
            recap.failed += 1
            recap.reason = "inventory: \(error)"
            return recap
        }
        var tally = Tally()
        let began = ContinuousClock.now
        var attempts = 1
        var fruitless = 0
        var pause = retryBackoff
        while true {
            let done = tally.completed
            do {
                try await attemptSteps(address, steps, &tally)
                break
            } catch {
                // A connection that got steps done resets the count: only
                // `deviceAttempts` connections in a row without progress (or
                // three times as many in all) give up.
                fruitless = tally.completed > done ? 0 : fruitless + 1
                guard fruitless < deviceAttempts, attempts < 3 * deviceAttempts, Self.worthAnotherConnection(error),
                    ContinuousClock.now - began < deviceDeadline, !Task.isCancelled
                else {
                    recap.failed = 1
                    recap.reason = "\(error)"
                    break
                }
                // Reconnect and go on from the step that failed: the ones
                // before it hold (each was read back).
                attempts += 1
                recap.retries += 1
                if tally.completed > done { pause = retryBackoff }
                try? await Task.sleep(for: pause)
                pause = pause * 2
                if let error = error as? BlueZError, error.busErrorName == .bluez.notReady {
                    await waitForPoweredAdapter()
                }
            }
        }
        for status in tally.statuses.values {
            switch status {
            case .ok: recap.ok += 1
            case .changed: recap.changed += 1
            case .unchanged: recap.unchanged += 1
            case .skipped: recap.skipped += 1
            default: break
            }
        }
        recap.wouldChange = tally.wouldChange.count
        recap.skipped -= tally.wouldChange.count
        if recap.failed == 0, let reason = tally.skipReason { recap.reason = reason }
        return recap
    }

    /// The least busy adapter that sees `address` (nil: the client's choice).
    private func claimAdapter(for address: String) async -> Adapter? {
        guard adapters.count > 1 else { return nil }
        var candidates: [Adapter] = []
        let all = await client.adapters()
        for path in adapters {
            if await client.device(address: address, adapter: path) != nil,
                let adapter = all.first(where: { $0.path == path && $0.powered })
            {
                candidates.append(adapter)
            }
        }
        guard let chosen = candidates.min(by: { busy[$0.path, default: 0] < busy[$1.path, default: 0] }) else {
            return nil
        }
        busy[chosen.path, default: 0] += 1
        return chosen
    }

    private func releaseAdapter(_ adapter: Adapter) { busy[adapter.path, default: 1] -= 1 }

    /// After NotReady (the adapter switched off: rfkill, a controller
    /// reset): until an adapter is powered again, at most 15 s.
    private nonisolated func waitForPoweredAdapter() async {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline, !Task.isCancelled {
            if await client.adapters().contains(where: \.powered) { return }
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Whether a failure may not happen again on a fresh connection: the
    /// radio's misfortunes, a device gone for a moment, an ATT "unlikely
    /// error". A read-back that disagrees, a beacon that says no, or a
    /// missing service is not retried.
    static func worthAnotherConnection(_ error: any Error) -> Bool {
        guard let error = error as? BlueZError else { return false }
        if error.isTransient || error.reason == .deviceNotFound { return true }
        return error.isPassingRefusal
    }

    /// One connection and the steps over it, each outcome committed.
    private nonisolated func attemptSteps(_ address: String, _ steps: [DeviceStep], _ tally: inout Tally) async throws {
        let device = address.uppercased()
        let connectStep = try? await inventory.beginStep(run: run, device: device, step: "connect")
        var connected = false
        do {
            if await client.device(address: address) == nil {
                _ = try await client.waitForDevice(address: address, timeout: findTimeout)
            }
            let adapter = await claimAdapter(for: address)
            defer { if let adapter { Task { await self.releaseAdapter(adapter) } } }
            try await client.withConnection(to: address, on: adapter, policy: policy) { session in
                connected = true
                if let connectStep { try? await inventory.finishStep(connectStep, .ok) }
                let beacon = try await SBeacon(session)
                for (index, step) in steps.enumerated() where index >= tally.completed {
                    let id = try await inventory.beginStep(run: run, device: device, step: step.name)
                    if let skipping = tally.skipping {
                        try await inventory.finishStep(id, .skipped, detail: skipping)
                        progress(.step(address: address, step: step.name, status: .skipped, detail: skipping))
                        tally.record(index, .skipped)
                        tally.completed = index + 1
                        continue
                    }
                    let started = ContinuousClock.now
                    do {
                        let (status, detail) = try await perform(step, on: beacon)
                        try await inventory.finishStep(
                            id, status, detail: detail, durationMilliseconds: Self.milliseconds(since: started))
                        progress(.step(address: address, step: step.name, status: status, detail: detail))
                        tally.record(index, status)
                        tally.completed = index + 1
                        if status == .skipped {
                            if dryRun, detail?.hasPrefix("dry run:") == true { tally.wouldChange.insert(index) }
                            switch step {
                            case .requireBattery, .requireFirmware:
                                tally.skipping = detail
                                tally.skipReason = detail
                            default: break
                            }
                        }
                    } catch {
                        try await inventory.finishStep(
                            id, .failed, error: "\(error)", durationMilliseconds: Self.milliseconds(since: started))
                        progress(.step(address: address, step: step.name, status: .failed, detail: "\(error)"))
                        throw error
                    }
                }
            }
        } catch {
            if !connected, let connectStep { try? await inventory.finishStep(connectStep, .failed, error: "\(error)") }
            throw error
        }
    }

    static func milliseconds(since start: ContinuousClock.Instant) -> Int64 {
        let elapsed = ContinuousClock.now - start
        return elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    /// Performs one step; returns its inventory status and a detail line.
    private nonisolated func perform(
        _ step: DeviceStep, on beacon: SBeacon
    ) async throws
        -> (Inventory.StepStatus, String?)
    {
        let address = beacon.address
        switch step {
        case .info:
            let info = try await beacon.readInfo()
            try await inventory.recordDevice(Self.record(address, info))
            try await inventory.recordReading(
                address: address, at: Date(), battery: info.battery, rssi: await client.device(address: address)?.rssi,
                firmware: info.firmware.description)
            return (.ok, Self.describe(info))
        case .requireBattery(let minimum):
            let battery = try await beacon.readBattery()
            // What was read is known from now on (audits use it).
            try await remember(address) { $0.battery = battery }
            try await inventory.recordReading(address: address, at: Date(), battery: battery, rssi: nil, firmware: nil)
            return battery >= minimum
                ? (.ok, "battery \(battery) %") : (.skipped, "battery \(battery) % is below \(minimum) %")
        case .requireFirmware(let minimum):
            let text = try await beacon.readFirmwareRevision()
            let readable = try? FirmwareVersion(text)
            if let readable { try await remember(address) { $0.firmware = readable } }
            let version = readable ?? FirmwareVersion(major: 0, minor: 0, patch: 0)
            return version >= minimum
                ? (.ok, "firmware \(version)") : (.skipped, "firmware \(text) is older than \(minimum)")
        case .syncTime:
            if dryRun {
                let stored = try await beacon.readTimeOffset()
                let computed = BeaconTime.offset(uptime: try await beacon.readUptime(), now: Self.now())
                return BeaconTime.needsSync(stored: stored, computed: computed)
                    ? (.skipped, "dry run: time offset: \(stored) → \(computed)") : (.unchanged, nil)
            }
            let change = try await beacon.syncTime(now: Self.now())
            try await remember(address) { $0.timeOffset = change.after }
            return change.written ? (.changed, "time offset \(change.before) → \(change.after)") : (.unchanged, nil)
        case .calibrate:
            // Idempotent: a beacon that holds a plausible calibration keeps it.
            let current = try await beacon.readCalibration()
            if current.calibrated, Auditor.plausibleGravity.contains(current.vector.magnitude) {
                // Recorded too: a calibration whose result was lost with
                // the link (a retry finds it done) is still known.
                try await remember(address) { $0.calibration = current }
                return (.unchanged, "already calibrated")
            }
            if dryRun { return (.skipped, "dry run: would calibrate") }
            let state = try await beacon.calibrate()
            try await remember(address) {
                $0.calibration = state
                $0.calibratedAt = Date()
            }
            return (.changed, "calibrated: \(state.vector.x), \(state.vector.y), \(state.vector.z) mG")
        case .identity(let major, let minor):
            let current = try await beacon.readIdentity()
            let chosenMinor: UInt16
            if let minor {
                chosenMinor = minor
            } else if current.major == major {
                chosenMinor = current.minor
            } else {
                chosenMinor = try await allocateMinor(major)
            }
            let wanted = BeaconIdentity(major: major, minor: chosenMinor)
            if dryRun {
                return current == wanted
                    ? (.unchanged, nil)
                    : (
                        .skipped,
                        "dry run: identity: \(current.major).\(current.minor) → \(wanted.major).\(wanted.minor)"
                    )
            }
            let change = try await beacon.setIdentity(wanted)
            try await remember(address) { $0.identity = change.after }
            return change.written
                ? (
                    .changed,
                    "identity \(change.before.major).\(change.before.minor) → \(change.after.major).\(change.after.minor)"
                )
                : (.unchanged, nil)
        case .apply(let profile):
            if dryRun {
                let current = try await beacon.readConfig()
                return current == profile.config
                    ? (.unchanged, nil) : (.skipped, "dry run: config: \(current) → \(profile.config)")
            }
            let change = try await beacon.writeConfig(profile.config)
            try await remember(address) {
                $0.config = change.after
                $0.profile = profile.name
            }
            return change.written ? (.changed, "config \(change.before) → \(change.after)") : (.unchanged, nil)
        case .verify(let profile):
            let config = try await beacon.readConfig()
            if dryRun, config != profile.config {
                // Nothing was written: an apply before it would have made it hold.
                return (.unchanged, "holds \(config) now; \(profile.name) only once applied")
            }
            guard config == profile.config else {
                throw OperationError.verificationFailed(
                    address: address, what: "profile \(profile.name)", wrote: "\(profile.config)", readBack: "\(config)"
                )
            }
            return (.ok, "holds \(profile.name)")
        case .pullTrips(let clear):
            let offset = try await beacon.readTimeOffset()
            let trips = try await beacon.pullTrips()
            let added = try await inventory.storeTrips(trips, device: address, timeOffset: offset, pulledAt: Date())
            if clear, !trips.isEmpty, !dryRun { try await beacon.clear(.clearTrips) }
            return (.ok, "\(trips.count) trips, \(added) new")
        case .pullEvents(let clear):
            let offset = try await beacon.readTimeOffset()
            let events = try await beacon.pullEvents()
            let added = try await inventory.storeEvents(events, device: address, timeOffset: offset, pulledAt: Date())
            if clear, !events.isEmpty, !dryRun { try await beacon.clear(.clearEvents) }
            return (.ok, "\(events.count) events, \(added) new")
        case .pullIncidents(let clear):
            let offset = try await beacon.readTimeOffset()
            let incidents = try await beacon.pullIncidents()
            let added = try await inventory.storeIncidents(
                incidents, device: address, timeOffset: offset, pulledAt: Date())
            if clear, !incidents.isEmpty, !dryRun { try await beacon.clear(.clearIncidents) }
            return (.ok, "\(incidents.count) incidents, \(added) new")
        case .auditLive(let profile):
            let info = try await beacon.readInfo()
            try await inventory.recordDevice(Self.record(address, info))
            let profiles = profile.map { [$0.name: $0] } ?? self.profiles
            var subject = AuditSubject(address: address, info: info)
            subject.assignedProfile = try await inventory.device(address)?.profile
            let report = Auditor.audit(subject, profiles: profiles, profile: profile?.name)
            return (.ok, report.findings.isEmpty ? "clean" : report.findings.map(\.description).joined(separator: "; "))
        case .reboot:
            if dryRun { return (.skipped, "dry run: would reboot") }
            try await beacon.reboot()
            return (.changed, "rebooted")
        case .factoryReset:
            if dryRun { return (.skipped, "dry run: would reset") }
            try await beacon.factoryReset(confirmed: true)
            return (.changed, "factory reset")
        }
    }

    /// The next minor under `major` above every one in use: in the
    /// inventory, in the adverts of the beacons in range, and handed out in
    /// this run.
    private func allocateMinor(_ major: UInt16) async throws -> UInt16 {
        if nextMinor[major] == nil {
            // Awaits below let other devices in: the base is set only by the
            // first to come back, and handing out a minor has no await.
            let stored =
                try await inventory.query(
                    "SELECT max(minor) FROM devices WHERE major = ?", [.integer(Int64(major))]
                ).first?.first?.integer ?? 0
            let advertised =
                await client.devices().compactMap { device -> Int64? in
                    guard let bytes = device.manufacturerData[SBeaconUUID.appleCompanyID],
                        let advert = try? IBeaconAdvert(bytes: bytes), advert.identity.major == major
                    else { return nil }
                    return Int64(advert.identity.minor)
                }.max() ?? 0
            if nextMinor[major] == nil { nextMinor[major] = UInt16(clamping: max(stored, advertised) + 1) }
        }
        let minor = nextMinor[major]!
        nextMinor[major] = minor &+ 1
        return minor
    }

    /// `info` as one line: everything a technician checks at a glance.
    static func describe(_ info: BeaconInfo) -> String {
        let calibration = info.calibration
        let pending = info.tripInformation
        return "\(info.model) \(info.serial) hw \(info.hardwareRevision), firmware \(info.firmware), "
            + "battery \(info.battery) %, identity \(info.identity.major).\(info.identity.minor), "
            + (calibration.calibrated
                ? "calibrated (\(calibration.vector.x), \(calibration.vector.y), \(calibration.vector.z) mG)"
                : "not calibrated")
            + ", clock " + (info.timeOffset == 0 ? "not set" : "set") + ", \(info.config), trip \(info.tripStatus), "
            + "unsynced \(pending.trips) trips \(pending.events) events \(pending.incidents) incidents"
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Records what a step read or wrote of a device; the fields left nil
    /// keep what the inventory holds.
    private nonisolated func remember(_ address: String, _ fill: (inout DeviceRecord) -> Void) async throws {
        var record = DeviceRecord(address: address)
        fill(&record)
        try await inventory.recordDevice(record)
    }

    static func record(_ address: String, _ info: BeaconInfo) -> DeviceRecord {
        var record = DeviceRecord(address: address)
        record.identity = info.identity
        record.model = info.model
        record.serial = info.serial
        record.hardwareRevision = info.hardwareRevision
        record.firmware = info.firmware
        record.battery = info.battery
        record.calibration = info.calibration
        if info.calibration.calibrated, info.timeOffset != 0 {
            record.calibratedAt = Date(
                timeIntervalSince1970: Double(
                    BeaconTime.epochMilliseconds(beaconSeconds: info.calibration.calibratedAt, offset: info.timeOffset))
                    / 1000)
        }
        record.timeOffset = info.timeOffset
        record.config = info.config
        return record
    }
}
