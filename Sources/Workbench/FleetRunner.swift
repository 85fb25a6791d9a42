import BlueZClient
import DBusBinding
import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Synchronization

/// One device step of a batch, checked and resolved (profiles looked up).
public enum DeviceStep: Sendable, Equatable {
    case info
    case requireBattery(atLeast: UInt8)
    case requireFirmware(atLeast: FirmwareVersion)
    case syncTime
    case calibrate
    /// The identity meant for the device: reserved in the inventory (and on
    /// the shared server when there is one) before it is written.
    case identity(IdentityPlan)
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

/// What happened to one device in a fleet run. The counts are of steps;
/// `result` is the device's verdict, which the recap's summary counts.
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
    /// 1 when the device failed (a step failed for good), else 0.
    public var failed = 0
    /// The run stopped (the inventory failed, Ctrl-C) before the device's turn.
    public var notStarted = false
    /// The run was cancelled (Ctrl-C) while the device's steps were under
    /// way: the step in flight is recorded `interrupted`.
    public var interrupted = false
    /// Why the device dropped out, or why its steps were skipped.
    public var reason: String?

    public init(address: String) { self.address = address }

    /// A device's verdict.
    public enum Result: String, Sendable, Codable, CaseIterable {
        /// Something was written (in a dry run: would be) and read back.
        case changed
        /// It holds what it should; nothing needed writing.
        case ok
        /// A `require` was not met, or another process had it: nothing written.
        case skipped
        case failed
        /// The run was cancelled (Ctrl-C) while its steps were under way.
        case interrupted
        /// Its turn never came.
        case notStarted = "not-started"
    }

    public var result: Result {
        if failed > 0 { return .failed }
        if interrupted { return .interrupted }
        if notStarted { return .notStarted }
        if changed + wouldChange > 0 { return .changed }
        if reason != nil { return .skipped }
        return .ok
    }
}

/// A fleet run's recaps, and why it stopped early, if it did.
public struct FleetResult: Sendable {
    public var recaps: [DeviceRecap]
    /// The inventory failed (disk full, I/O error, corruption): the run
    /// stopped before writing anything more to a beacon.
    public var inventoryFailure: String?
    /// The run's task was cancelled (Ctrl-C): devices under way are
    /// `interrupted`, those whose turn never came `notStarted`.
    public var interrupted = false
    /// The recoveries done in the run (each also a `recover` outcome row).
    public var recoveries: [RecoveryRecord] = []
    /// An adapter went away and did not come back in time: the run stopped
    /// (exit status 3), with this reason.
    public var adapterFailure: String?

    public init(
        recaps: [DeviceRecap], inventoryFailure: String? = nil, interrupted: Bool = false,
        recoveries: [RecoveryRecord] = [], adapterFailure: String? = nil
    ) {
        self.recaps = recaps
        self.inventoryFailure = inventoryFailure
        self.interrupted = interrupted
        self.recoveries = recoveries
        self.adapterFailure = adapterFailure
    }
}

/// How far a fleet run has come, for an elapsed time and an estimate.
public struct FleetTally: Sendable, Equatable {
    /// When the run began (wall clock, for display).
    public var startedAt: Date
    /// When the run began (monotonic, for arithmetic).
    public var started: ContinuousClock.Instant
    /// Devices finished, whatever their verdict (failed and "not seen" included).
    public var done: Int
    /// Devices in the run.
    public var total: Int
    /// Of the devices finished, those that failed.
    public var failed: Int

    public init(startedAt: Date, started: ContinuousClock.Instant, done: Int, total: Int, failed: Int) {
        self.startedAt = startedAt
        self.started = started
        self.done = done
        self.total = total
        self.failed = failed
    }

    /// Time since the run began.
    public var elapsed: Duration { ContinuousClock.now - started }

    /// The time left at the pace so far (nil until a device is done).
    public var estimatedRemaining: Duration? {
        guard done > 0 else { return nil }
        guard done < total else { return .zero }
        return elapsed / done * (total - done)
    }
}

/// What a fleet run reports as it goes, for progress lines.
public enum FleetProgress: Sendable {
    case started(address: String)
    case step(address: String, step: String, status: Inventory.StepStatus, detail: String?)
    /// Something a technician should know about a device (one line).
    case note(address: String, String)
    case finished(DeviceRecap)
    /// The run's counts: once as it begins (nothing done) and after every
    /// device that finishes (after its `finished`).
    case tally(FleetTally)
}

/// An inventory call failed: nothing more can be recorded, so the run stops.
struct InventoryFailure: Error, CustomStringConvertible {
    var error: any Error
    var description: String { "inventory: \(error)" }
}

/// The run was stopped (the inventory failed on another device).
struct RunStopped: Error, CustomStringConvertible {
    var description: String { "the run stopped: the inventory failed" }
}

/// Runs device steps over many beacons at once: each device's steps in
/// order, several devices at once (connects are serialised per adapter by
/// the client, so one device's calibration overlaps others' work). A
/// device whose step fails drops out with its reason and the others go on;
/// a failing `require` skips the device's remaining steps. Every outcome is
/// committed to the inventory as it happens, and everything read from a
/// beacon is recorded, also when its step then fails.
///
/// Several processes may work with one inventory at once: each device is
/// claimed in the inventory before its turn (one process at a time; the
/// other goes on with other devices and comes back), identities are
/// reserved there before they are written. When the inventory fails the
/// run stops before anything more is written to a beacon.
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
    /// How long to wait for a device another process works on.
    let claimWait: Duration
    /// The adapters to spread devices over (empty: let the client choose).
    let adapters: [ObjectPath]
    /// The shared server's identity registry, when the bench has one.
    let sharedIdentities: (any SharedIdentities)?
    /// How long discovery may take to find a device bluetoothd does not
    /// know when the run begins; then it fails with "not seen", and
    /// nothing of it is written to the inventory but one outcome (device
    /// NULL, step `find`).
    let seenTimeout: Duration
    /// Devices at work on each adapter.
    private var busy: [ObjectPath: Int] = [:]
    /// The recovery policies (shared by a station's runners; else the run's own).
    let recovery: RecoveryCoordinator
    private let ownsRecovery: Bool
    /// Why the run stopped early (the inventory failed).
    private var inventoryFailure: String?
    /// Why the shared server is not asked any more in this run.
    private var sharedUnreachable: String?
    /// When each device was first found claimed by another process.
    private var waitingSince: [String: ContinuousClock.Instant] = [:]

    public init(
        client: BluetoothClient, inventory: Inventory, run: Int64, concurrency: Int, dryRun: Bool = false,
        // The client retries a connect once; the runner's reconnects do the rest.
        policy: ConnectPolicy = ConnectPolicy(attempts: 2, requiredServices: SBeacon.requiredServices),
        findTimeout: Duration = .seconds(15), profiles: [String: Profile] = [:], deviceAttempts: Int = 4,
        deviceDeadline: Duration = .seconds(90), retryBackoff: Duration = .seconds(1),
        claimWait: Duration = .seconds(180),
        adapters: [ObjectPath] = [], sharedIdentities: (any SharedIdentities)? = nil,
        seenTimeout: Duration = .seconds(10), recovery: RecoveryCoordinator? = nil,
        progress: @escaping @Sendable (FleetProgress) -> Void = { _ in }
    ) {
        self.recovery =
            recovery
            ?? RecoveryCoordinator(
                client: client, inventory: inventory, run: run, concurrency: concurrency,
                options: RecoveryOptions(keepDiscovery: false), note: { progress(.note(address: "", $0)) })
        ownsRecovery = recovery == nil
        self.seenTimeout = seenTimeout
        self.deviceAttempts = max(1, deviceAttempts)
        self.deviceDeadline = deviceDeadline
        self.adapters = adapters
        self.retryBackoff = retryBackoff
        self.claimWait = claimWait
        self.profiles = profiles
        self.progress = progress
        self.findTimeout = findTimeout
        self.client = client
        self.inventory = inventory
        self.run = run
        self.concurrency = max(1, concurrency)
        self.dryRun = dryRun
        self.policy = policy
        self.sharedIdentities = sharedIdentities
    }

    /// A device's turn: done, or put back because another process has it;
    /// or the search for a device not known when the run began.
    private enum Turn: Sendable {
        case done(DeviceRecap)
        case busy(String)
        /// Discovery found it: its turn may come.
        case found(String)
        /// Not found within `seenTimeout`: failed "not seen".
        case notSeen(DeviceRecap)
        /// The search was cancelled: its turn never came.
        case lost(String)
    }

    /// The reason a device that was never found fails with.
    public static let notSeenReason = "not seen"

    /// Runs `steps` on every device of `addresses`; returns a recap per
    /// device, in the order given.
    public func run(_ steps: [DeviceStep], on addresses: [String]) async -> [DeviceRecap] {
        await runFleet(steps, on: addresses).recaps
    }

    /// Runs `steps` on every device of `addresses`: recaps in the order
    /// given, whether the inventory failed under the run, and whether the
    /// run was cancelled.
    ///
    /// A device bluetoothd does not know when the run begins is looked for
    /// (discovery must run) for at most `seenTimeout`, without taking a
    /// turn; one still not found fails with the reason "not seen" and adds
    /// nothing to the inventory but one outcome: device NULL, step `find`,
    /// status `failed`, the address in `detail` and "not seen" in `error`.
    public func runFleet(_ steps: [DeviceStep], on addresses: [String]) async -> FleetResult {
        let tally = FleetTally(
            startedAt: Date(), started: ContinuousClock.now, done: 0, total: addresses.count, failed: 0)
        progress(.tally(tally))
        await recovery.start()
        await takeDownAbandonedLinks(addresses)
        var recaps: [String: DeviceRecap] = [:]
        let searchEnds = ContinuousClock.now + seenTimeout
        await withTaskGroup(of: Turn.self) { group in
            var pending: [String] = []
            var looking = 0
            for address in addresses {
                if await client.device(address: address) != nil {
                    pending.append(address)
                } else {
                    group.addTask { await self.lookFor(address, until: searchEnds) }
                    looking += 1
                }
            }
            var waiting: [String] = []
            var running = 0
            var counts = tally
            while true {
                while running < min(concurrency, await recovery.concurrencyLimit()), inventoryFailure == nil,
                    await recovery.adapterFailure == nil, !Task.isCancelled
                {
                    let address: String
                    if !pending.isEmpty {
                        address = pending.removeFirst()
                    } else if !waiting.isEmpty {
                        address = waiting.removeFirst()
                    } else {
                        break
                    }
                    group.addTask { await self.turn(address, steps) }
                    running += 1
                }
                guard running + looking > 0, let turn = await group.next() else { break }
                var finished: DeviceRecap?
                switch turn {
                case .done(let recap):
                    running -= 1
                    finished = recap
                case .busy(let address):
                    running -= 1
                    waiting.append(address)
                case .found(let address):
                    looking -= 1
                    pending.append(address)
                case .notSeen(let recap):
                    looking -= 1
                    finished = recap
                case .lost:
                    looking -= 1
                }
                if let finished {
                    recaps[finished.address] = finished
                    counts.done += 1
                    if finished.failed > 0 { counts.failed += 1 }
                    progress(.tally(counts))
                }
            }
        }
        let interrupted = Task.isCancelled
        let adapterFailure = await recovery.adapterFailure
        let recoveries = await recovery.records
        if ownsRecovery { await recovery.stop() }
        let stopped =
            inventoryFailure.map { _ in "not started: the inventory failed" }
            ?? adapterFailure.map { "not started: \($0)" }
            ?? (interrupted ? "not started: the run was interrupted" : "not started: the run was stopped")
        return FleetResult(
            recaps: addresses.map { address in
                recaps[address]
                    ?? {
                        var recap = DeviceRecap(address: address)
                        recap.notStarted = true
                        recap.reason = stopped
                        return recap
                    }()
            }, inventoryFailure: inventoryFailure, interrupted: interrupted, recoveries: recoveries,
            adapterFailure: adapterFailure)
    }

    /// Waits (until `deadline`) for bluetoothd to know `address`. A device
    /// never found is recorded as one outcome without a device (so that
    /// the inventory gets no row for an address that may be mistyped).
    private nonisolated func lookFor(_ address: String, until deadline: ContinuousClock.Instant) async -> Turn {
        await recovery.needsDiscovery()
        while !Task.isCancelled {
            do {
                _ = try await client.waitForDevice(
                    address: address, timeout: max(.zero, deadline - ContinuousClock.now))
                return .found(address)
            } catch let error as BlueZError where error.reason == .bluetoothdGone {
                // bluetoothd restarting: look again once it is back.
                try? await Task.sleep(for: .milliseconds(200))
                if ContinuousClock.now >= deadline { break }
            } catch {
                break
            }
        }
        if Task.isCancelled { return .lost(address) }
        var recap = DeviceRecap(address: address)
        recap.failed = 1
        recap.reason = Self.notSeenReason
        let detail = "\(address.uppercased()): not seen in \(Self.secondsText(seenTimeout)) of discovery"
        do {
            try await record {
                let id = try await inventory.beginStep(run: run, device: nil, step: "find")
                try await inventory.finishStep(id, .failed, detail: detail, error: Self.notSeenReason)
            }
        } catch {
            recap.reason = Self.notSeenReason + "; \(error)"
        }
        progress(.step(address: address, step: "find", status: .failed, detail: detail))
        progress(.finished(recap))
        return .notSeen(recap)
    }

    private func stop(_ failure: InventoryFailure) {
        if inventoryFailure == nil { inventoryFailure = "\(failure.error)" }
    }

    private var isStopped: Bool { inventoryFailure != nil }

    /// Whether a device another process works on has been waited for long enough.
    private func waitedTooLong(_ address: String) -> Bool {
        let now = ContinuousClock.now
        let since = waitingSince[address] ?? now
        waitingSince[address] = since
        return now - since > claimWait
    }

    /// An inventory call: its failure stops the run.
    private nonisolated func record<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as SQLiteError {
            let failure = InventoryFailure(error: error)
            await stop(failure)
            throw failure
        }
    }

    private nonisolated func turn(_ address: String, _ steps: [DeviceStep]) async -> Turn {
        let device = address.uppercased()
        let claim: Inventory.Claim
        do {
            claim = try await record { try await inventory.claimDevice(device, run: run) }
        } catch {
            var recap = DeviceRecap(address: address)
            recap.notStarted = true
            recap.reason = "not started: \(error)"
            return .done(recap)
        }
        var previous: ClaimHolder?
        switch claim {
        case .heldBy(let holder):
            if await waitedTooLong(device) {
                var recap = DeviceRecap(address: address)
                recap.reason = "another beaconbench worked on it all along (\(holder)); nothing done here"
                progress(.finished(recap))
                return .done(recap)
            }
            try? await Task.sleep(for: .milliseconds(300))
            return .busy(address)
        case .claimed(let from): previous = from
        }
        if Task.isCancelled {
            try? await inventory.releaseDevice(device, run: run)
            var recap = DeviceRecap(address: address)
            recap.notStarted = true
            recap.reason = "not started: the run was interrupted"
            return .done(recap)
        }
        progress(.started(address: address))
        let recap = await runSteps(address, steps, previousHolder: previous)
        try? await inventory.releaseDevice(device, run: run)
        progress(.finished(recap))
        return .done(recap)
    }

    /// Links to beacons of this run, or left by a process that died on
    /// this inventory, that this process did not make: bluetoothd keeps a
    /// dead client's links, and they hold the adapter's connection slots.
    /// Each is taken down (after claiming its device: never one another
    /// running process works on), in one line.
    private nonisolated func takeDownAbandonedLinks(_ addresses: [String]) async {
        guard !dryRun else { return }
        let wanted = Set(addresses.map { $0.uppercased() })
        let abandoned = (try? await inventory.abandonedClaims()) ?? [:]
        for device in await client.devices() where device.connected {
            let address = device.address.uppercased()
            guard wanted.contains(address) || abandoned[address] != nil else { continue }
            guard case .claimed(let from)? = try? await inventory.claimDevice(address, run: run) else { continue }
            await disconnectLeftLink(address, from: from ?? abandoned[address])
            try? await inventory.releaseDevice(address, run: run)
        }
    }

    /// Takes down a link this process did not make; says so and records it.
    private nonisolated func disconnectLeftLink(_ address: String, from holder: ClaimHolder?) async {
        guard await client.device(address: address)?.connected == true else { return }
        let who = holder.map { "beaconbench \($0), which is gone" } ?? "another process"
        do {
            guard try await client.disconnect(address: address) else { return }
            let text = "disconnected: it was left connected by \(who)"
            progress(.note(address: address, text))
            if let id = try? await inventory.beginStep(run: run, device: address.uppercased(), step: "disconnect") {
                try? await inventory.finishStep(id, .ok, detail: text)
            }
        } catch {
            progress(.note(address: address, "could not take down the link left by \(who): \(error)"))
        }
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
        /// One outcome row per step however many attempts it took, and one
        /// for the connection (key `connectKey`).
        var rows: [Int: Int64] = [:]
        /// Failed attempts per row key.
        var retries: [Int: Int] = [:]
        var connected = false
        /// The connect of the attempt under way has not succeeded yet: a
        /// failure now is a connect failure (the recovery policies judge it).
        var connecting = false
        /// The adapter the connect went through, and the other links up on
        /// it when it began.
        var adapterPath: ObjectPath?
        var linksAtStart = 0
        /// The row whose attempt is in flight: a failure is charged to it.
        var inFlight: Int?

        static let connectKey = -1

        mutating func record(_ index: Int, _ status: Inventory.StepStatus) {
            if statuses[index] != .changed { statuses[index] = status }
        }
    }

    /// The outcome row of a step (or of the connection), begun once.
    private nonisolated func row(
        _ key: Int, _ address: String, _ steps: [DeviceStep], _ tally: inout Tally
    )
        async throws -> Int64
    {
        if let id = tally.rows[key] { return id }
        let name = key == Tally.connectKey ? "connect" : steps[key].name
        let id = try await record { try await inventory.beginStep(run: run, device: address.uppercased(), step: name) }
        tally.rows[key] = id
        return id
    }

    private nonisolated func runSteps(
        _ address: String, _ steps: [DeviceStep], previousHolder: ClaimHolder?
    ) async -> DeviceRecap {
        var recap = DeviceRecap(address: address)
        // A link this process did not make (this run holds the device's
        // claim, and works on a device once at a time).
        if !dryRun { await disconnectLeftLink(address, from: previousHolder) }
        var tally = Tally()
        let began = ContinuousClock.now
        var attempts = 1
        var fruitless = 0
        var pause = retryBackoff
        // Failures that were not the beacon's (slot, busy, adapter) are
        // retried inside the connect, uncharged; the time they took is not
        // counted against the deadline.
        let giveUp = GiveUpReason()
        defer { Task { await self.recovery.connectSettled(address) } }
        while true {
            let done = tally.completed
            do {
                try await attemptSteps(address, steps, &tally, giveUp: giveUp)
                break
            } catch {
                if let reason = giveUp.take() {
                    // The adapter is given up (wedged again, gone for good).
                    if let key = tally.inFlight, let id = tally.rows[key] {
                        _ = try? await record {
                            try await inventory.finishStep(
                                id, .failed, error: "\(error); \(reason)", retries: tally.retries[key] ?? 0)
                        }
                    }
                    recap.failed = 1
                    recap.reason = "\(reason) (\(error))"
                    break
                }
                // A connection that got steps done resets the count: only
                // `deviceAttempts` connections in a row without progress (or
                // three times as many in all) give up.
                fruitless = tally.completed > done ? 0 : fruitless + 1
                let stopping = error is InventoryFailure || error is RunStopped
                if !stopping, Task.isCancelled {
                    // Ctrl-C: the step in flight did not end; say so.
                    if let key = tally.inFlight, let id = tally.rows[key] {
                        _ = try? await record {
                            try await inventory.finishStep(
                                id, .interrupted, error: "interrupted: \(error)", retries: tally.retries[key] ?? 0)
                        }
                    }
                    recap.interrupted = true
                    recap.reason = "interrupted"
                    break
                }
                let again =
                    !stopping && fruitless < deviceAttempts && attempts < 3 * deviceAttempts
                    && Self.worthAnotherConnection(error)
                    && ContinuousClock.now - began - giveUp.unchargedTime < deviceDeadline
                    && !Task.isCancelled
                if !stopping, let key = tally.inFlight, let id = tally.rows[key] {
                    if again {
                        tally.retries[key, default: 0] += 1
                        do { try await record { try await inventory.noteRetry(id, error: "\(error)") } } catch {
                            recap.failed = 1
                            recap.reason = "\(error)"
                            break
                        }
                    } else {
                        _ = try? await record {
                            try await inventory.finishStep(
                                id, .failed, error: "\(error)", retries: tally.retries[key] ?? 0)
                        }
                    }
                }
                guard again else {
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
        if recap.failed == 0, !recap.interrupted, let reason = tally.skipReason { recap.reason = reason }
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

    /// One connection and the steps over it, each outcome committed; what
    /// the beacon tells is recorded after each step, whether it succeeded
    /// or not.
    private nonisolated func attemptSteps(
        _ address: String, _ steps: [DeviceStep], _ tally: inout Tally, giveUp: GiveUpReason
    ) async throws {
        if await isStopped { throw RunStopped() }
        // A failure now is the connection's (first time) or the next step's (a reconnect).
        let key = tally.connected && tally.completed < steps.count ? tally.completed : Tally.connectKey
        _ = try await row(key, address, steps, &tally)
        tally.inFlight = key
        tally.connecting = true
        // Unknown, or known with neither advert data nor RSSI (reloaded
        // from bluetoothd's storage, as after an adapter's return, not
        // heard since): its next advert first.
        let known = await client.device(address: address)
        if known.map({ $0.manufacturerData.isEmpty && $0.rssi == nil && !$0.connected }) ?? true {
            await recovery.needsDiscovery()
            _ = try await client.waitForAdvertisedDevice(address: address, timeout: findTimeout)
        }
        let adapter = await claimAdapter(for: address)
        defer { if let adapter { Task { await self.releaseAdapter(adapter) } } }
        var adapterPath = adapter?.path
        if adapterPath == nil { adapterPath = await client.device(address: address)?.adapter }
        tally.adapterPath = adapterPath
        tally.linksAtStart = 0
        if let adapterPath { tally.linksAtStart = await client.linksUp(on: adapterPath, excluding: address) }
        let linksAtStart = tally.linksAtStart
        let observations = Observations()
        // Each failed Connect is judged by the recovery policies.
        var policy = self.policy
        let recovery = self.recovery
        let judgedPath = adapterPath
        policy.judge = { error in
            let judged = ContinuousClock.now
            let verdict = await recovery.connectFailed(
                address, error: error, adapterPath: judgedPath, linksAtStart: linksAtStart)
            switch verdict {
            case .charged: return .ordinary
            case .uncharged:
                giveUp.addUncharged(ContinuousClock.now - judged)
                return .retryUncharged
            case .recovered: return .retryAfresh
            case .giveUp(let reason):
                giveUp.set(reason)
                return .giveUp
            }
        }
        try await client.withConnection(to: address, on: adapter, policy: policy) { session in
            tally.connecting = false
            await recovery.connectSucceeded(address, adapterPath: adapterPath, linksAtStart: linksAtStart)
            let beacon = try await SBeacon(session, observer: { observations.add($0) })
            if !tally.connected, let id = tally.rows[Tally.connectKey] {
                let retries = tally.retries[Tally.connectKey] ?? 0
                try await record {
                    try await inventory.finishStep(
                        id, .ok,
                        detail: retries > 0 ? "after \(retries) failed attempt\(retries == 1 ? "" : "s")" : nil,
                        retries: retries)
                }
                tally.connected = true
            }
            tally.inFlight = nil
            for (index, step) in steps.enumerated() where index >= tally.completed {
                if await isStopped { throw RunStopped() }
                let id = try await row(index, address, steps, &tally)
                if let skipping = tally.skipping {
                    try await record { try await inventory.finishStep(id, .skipped, detail: skipping) }
                    progress(.step(address: address, step: step.name, status: .skipped, detail: skipping))
                    tally.record(index, .skipped)
                    tally.completed = index + 1
                    continue
                }
                tally.inFlight = index
                let started = ContinuousClock.now
                let result: (Inventory.StepStatus, String?)
                do {
                    result = try await perform(step, on: beacon)
                } catch {
                    try await keep(Self.stillTrue(observations.take(), after: step), of: address)
                    if !(error is InventoryFailure) {
                        progress(.step(address: address, step: step.name, status: .failed, detail: "\(error)"))
                    }
                    throw error
                }
                try await keep(observations.take(), of: address)
                let (status, detail) = result
                try await record {
                    try await inventory.finishStep(
                        id, status, detail: detail, durationMilliseconds: Self.milliseconds(since: started),
                        retries: tally.retries[index] ?? 0)
                }
                tally.inFlight = nil
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
            }
        }
    }

    /// What a failed step read that the beacon may no longer hold: the
    /// value the step writes, read before the write — a write can land
    /// just before the link drops, and the step then fails with no answer.
    /// Kept, it would tell the inventory the beacon holds the old value.
    static func stillTrue(_ observations: [SBeacon.Observation], after failed: DeviceStep) -> [SBeacon.Observation] {
        observations.filter { observation in
            // (A calibration's state is read after the beacon answered:
            // true even when it refused.)
            switch (failed, observation) {
            case (.apply, .config), (.identity, .identity), (.syncTime, .timeOffset): false
            default: true
            }
        }
    }

    /// Records what was read from a beacon: its facts in `devices`, and a
    /// reading (battery, firmware) for trends.
    private nonisolated func keep(_ observations: [SBeacon.Observation], of address: String) async throws {
        guard !observations.isEmpty else { return }
        var record = DeviceRecord(address: address)
        for observation in observations {
            switch observation {
            case .identity(let identity): record.identity = identity
            case .config(let config): record.config = config
            case .calibration(let state): record.calibration = state
            case .timeOffset(let offset): record.timeOffset = offset
            case .battery(let battery): record.battery = battery
            case .firmware(let firmware): record.firmware = firmware
            }
        }
        let reading = record
        try await self.record { try await inventory.recordDevice(reading) }
        if reading.battery != nil || reading.firmware != nil {
            let rssi = await client.device(address: address)?.rssi
            try await self.record {
                try await inventory.recordReading(
                    address: address, at: Date(), battery: reading.battery, rssi: reading.battery == nil ? nil : rssi,
                    firmware: reading.firmware?.description)
            }
        }
    }

    /// `10 s`, `1.5 s`.
    static func secondsText(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return String(format: "%g s", seconds)
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
            // The description and the calibration's real time, beside what
            // the reads themselves record.
            try await record { try await inventory.recordDevice(Self.record(address, info)) }
            return (.ok, Self.describe(info))
        case .requireBattery(let minimum):
            // What was read is recorded (audits use it), met or not.
            // A bench-summary advert heard a moment ago says it without a read.
            let (battery, fromAdvert) = try await beacon.batteryLevel()
            let source = fromAdvert ? " (advert)" : ""
            return battery >= minimum
                ? (.ok, "battery \(battery) %\(source)")
                : (.skipped, "battery \(battery) %\(source) is below \(minimum) %")
        case .requireFirmware(let minimum):
            let (text, version, fromAdvert) = try await beacon.firmware()
            let source = fromAdvert ? " (advert)" : ""
            guard let version else {
                return (
                    .skipped,
                    "firmware revision '\(DeviceInformationText.excerpt(text))' is not a version (MAJOR.MINOR.PATCH)"
                )
            }
            return version >= minimum
                ? (.ok, "firmware \(version)\(source)")
                : (.skipped, "firmware \(version)\(source) is older than \(minimum)")
        case .syncTime:
            if dryRun {
                let stored = try await beacon.readTimeOffset()
                let computed = BeaconTime.offset(uptime: try await beacon.readUptime(), now: Self.now())
                return BeaconTime.needsSync(stored: stored, computed: computed)
                    ? (.skipped, "dry run: time offset: \(stored) → \(computed)") : (.unchanged, nil)
            }
            let change = try await beacon.syncTime(clock: { Self.now() })
            return change.written ? (.changed, "time offset \(change.before) → \(change.after)") : (.unchanged, nil)
        case .calibrate:
            // Idempotent: a beacon that holds a plausible calibration keeps it.
            // The state read is recorded whatever follows (a beacon that
            // refuses to calibrate is still known as it is).
            let current = try await beacon.readCalibration()
            if current.calibrated, Auditor.plausibleGravity.contains(current.vector.magnitude) {
                return (.unchanged, "already calibrated")
            }
            if dryRun { return (.skipped, "dry run: would calibrate") }
            let state = try await beacon.calibrate()
            try await remember(address) { $0.calibratedAt = Date() }
            return (.changed, "calibrated: \(state.vector.x), \(state.vector.y), \(state.vector.z) mG")
        case .identity(let plan):
            let current = try await beacon.readIdentity()
            let reservation = try await reserve(plan, for: address, holds: current)
            let wanted = reservation.identity
            let why = plan.source == .explicit ? "explicit" : "profile " + (plan.profileName ?? "")
            let note = reservation.note.map { "; \($0)" } ?? ""
            if dryRun {
                return current == wanted
                    ? (.unchanged, nil)
                    : (
                        .skipped,
                        "dry run: identity: \(current.major).\(current.minor) → \(wanted.major).\(wanted.minor) (\(why))\(note)"
                    )
            }
            let change = try await beacon.setIdentity(wanted)
            return change.written
                ? (
                    .changed,
                    "identity \(change.before.major).\(change.before.minor) → \(change.after.major).\(change.after.minor) (\(why))\(note)"
                )
                : (.unchanged, reservation.note)
        case .apply(let profile):
            if dryRun {
                let current = try await beacon.readConfig()
                return current == profile.config
                    ? (.unchanged, nil) : (.skipped, "dry run: config: \(current) → \(profile.config)")
            }
            let change = try await beacon.writeConfig(profile.config)
            try await remember(address) { $0.profile = profile.name }
            return change.written ? (.changed, "config \(change.before) → \(change.after)") : (.unchanged, nil)
        case .verify(let profile):
            // Read on this link already (an apply's read-back) with nothing
            // written since: that is what the beacon holds; else read.
            let confirmed = beacon.confirmedConfig
            let config: DrivingBehaviourConfig
            if let confirmed { config = confirmed } else { config = try await beacon.readConfig() }
            if dryRun, config != profile.config {
                // Nothing was written: an apply before it would have made it hold.
                return (.unchanged, "holds \(config) now; \(profile.name) only once applied")
            }
            guard config == profile.config else {
                throw OperationError.verificationFailed(
                    address: address, what: "profile \(profile.name)", wrote: "\(profile.config)", readBack: "\(config)"
                )
            }
            return (.ok, "holds \(profile.name)" + (confirmed != nil ? " (read back on this connection)" : ""))
        case .pullTrips(let clear):
            let offset = try await beacon.readTimeOffset()
            let trips = try await beacon.pullTrips()
            let added = try await record {
                try await inventory.storeTrips(trips, device: address, timeOffset: offset, pulledAt: Date())
            }
            if clear, !trips.isEmpty, !dryRun { try await beacon.clear(.clearTrips) }
            return (.ok, "\(trips.count) trips, \(added) new")
        case .pullEvents(let clear):
            let offset = try await beacon.readTimeOffset()
            let events = try await beacon.pullEvents()
            let added = try await record {
                try await inventory.storeEvents(events, device: address, timeOffset: offset, pulledAt: Date())
            }
            if clear, !events.isEmpty, !dryRun { try await beacon.clear(.clearEvents) }
            return (.ok, "\(events.count) events, \(added) new")
        case .pullIncidents(let clear):
            let offset = try await beacon.readTimeOffset()
            let incidents = try await beacon.pullIncidents()
            let added = try await record {
                try await inventory.storeIncidents(incidents, device: address, timeOffset: offset, pulledAt: Date())
            }
            if clear, !incidents.isEmpty, !dryRun { try await beacon.clear(.clearIncidents) }
            return (.ok, "\(incidents.count) incidents, \(added) new")
        case .auditLive(let profile):
            let info = try await beacon.readInfo()
            try await record { try await inventory.recordDevice(Self.record(address, info)) }
            let profiles = profile.map { [$0.name: $0] } ?? self.profiles
            var subject = AuditSubject(address: address, info: info)
            subject.assignedProfile = try await record { try await inventory.device(address)?.profile }
            let meant = try await record { try await inventory.meantIdentity(address) }
            subject.meantIdentity = meant?.identity
            subject.meantIdentitySource = meant.map {
                $0.source == "profile" ? "profile \($0.profile ?? "")" : $0.source
            }
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

    /// The identity meant for a device, reserved in the inventory under
    /// its write lock — and first claimed on the shared server, when the
    /// bench has one and it answers — before anything is written.
    private nonisolated func reserve(
        _ plan: IdentityPlan, for address: String, holds current: BeaconIdentity
    ) async throws -> IdentityReservation {
        let advertised = await advertisedIdentities()
        guard !dryRun, let shared = sharedIdentities else {
            return try await record {
                try await inventory.reserveIdentity(
                    device: address, plan: plan, holds: current, advertised: advertised, run: run, commit: !dryRun)
            }
        }
        // What this inventory would give: the minor offered to the server.
        var proposed: UInt16?
        var reservation = try await record {
            try await inventory.reserveIdentity(
                device: address, plan: plan, holds: current, advertised: advertised, run: run, commit: false)
        }
        var serverNote: String?
        // The server's answer wins when it is free here; a minor another
        // process took here meanwhile is offered back to the server.
        for _ in 0..<4 {
            if let reason = await sharedUnreachableReason() {
                serverNote = "the server was unreachable (\(reason)): allocated by this bench alone"
                proposed = nil
                break
            }
            do {
                let floor = try await record { try await inventory.highestMinor(major: plan.major) }
                proposed = try await shared.claim(
                    address: address.uppercased(), major: plan.major, preferred: reservation.identity.minor,
                    floor: floor)
            } catch {
                await sharedFailed("\(error)")
                continue
            }
            reservation = try await record {
                try await inventory.reserveIdentity(
                    device: address, plan: plan, holds: current, advertised: advertised, proposed: proposed, run: run)
            }
            if reservation.identity.minor == proposed { return reservation }
        }
        reservation = try await record {
            try await inventory.reserveIdentity(
                device: address, plan: plan, holds: current, advertised: advertised, run: run)
        }
        if let serverNote {
            reservation.note = [reservation.note, serverNote].compactMap { $0 }.joined(separator: "; ")
        }
        return reservation
    }

    private func sharedUnreachableReason() -> String? { sharedUnreachable }
    private func sharedFailed(_ reason: String) {
        if sharedUnreachable == nil {
            sharedUnreachable = reason
            progress(
                .note(
                    address: "",
                    "the shared server is unreachable (\(reason)): identities are allocated by this bench alone in this run; the fleet audit reports any duplicate"
                ))
        }
    }

    /// The identities the SBeacons in range advertise, by address.
    private nonisolated func advertisedIdentities() async -> [String: BeaconIdentity] {
        var result: [String: BeaconIdentity] = [:]
        for (address, bytes) in await client.advertisedData(company: SBeaconUUID.appleCompanyID) {
            guard let advert = try? IBeaconAdvert(bytes: bytes) else { continue }
            result[address] = advert.identity
        }
        return result
    }

    /// `info` as one line: everything a technician checks at a glance.
    static func describe(_ info: BeaconInfo) -> String {
        let calibration = info.calibration
        let pending = info.tripInformation
        // The device's own strings, cut short for a line (the inventory
        // keeps them whole).
        let model = DeviceInformationText.excerpt(info.model, limit: 64)
        let serial = DeviceInformationText.excerpt(info.serial, limit: 64)
        let hardware = DeviceInformationText.excerpt(info.hardwareRevision, limit: 64)
        let firmware =
            info.firmware?.description
            ?? "'\(DeviceInformationText.excerpt(info.firmwareRevision))' (not a version)"
        let head: String = "\(model) \(serial) hw \(hardware), firmware \(firmware), "
        return head
            + "battery \(info.battery) %, identity \(info.identity.major).\(info.identity.minor), "
            + (calibration.calibrated
                ? "calibrated (\(calibration.vector.x), \(calibration.vector.y), \(calibration.vector.z) mG)"
                : "not calibrated")
            + ", clock " + (info.timeOffset == 0 ? "not set" : "set") + ", \(info.config), trip \(info.tripStatus), "
            + "unsynced \(pending.trips) trips \(pending.events) events \(pending.incidents) incidents"
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// Records what a step learnt of a device beyond what it read (the
    /// profile applied, when it calibrated); the fields left nil keep what
    /// the inventory holds.
    private nonisolated func remember(_ address: String, _ fill: (inout DeviceRecord) -> Void) async throws {
        var device = DeviceRecord(address: address)
        fill(&device)
        let filled = device
        try await record { try await inventory.recordDevice(filled) }
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

/// Why a device's connect was given up by the recovery policies (an
/// adapter given up), and the time its uncharged retries took.
final class GiveUpReason: Sendable {
    private let state = Mutex<(reason: String?, uncharged: Duration)>((nil, .zero))
    func set(_ reason: String) { state.withLock { $0.reason = reason } }
    func take() -> String? {
        state.withLock { state in
            defer { state.reason = nil }
            return state.reason
        }
    }
    func addUncharged(_ duration: Duration) { state.withLock { $0.uncharged += duration } }
    var unchargedTime: Duration { state.withLock { $0.uncharged } }
}

/// What a beacon told during one step, kept until the step ends.
final class Observations: Sendable {
    private let list = Mutex<[SBeacon.Observation]>([])
    func add(_ observation: SBeacon.Observation) { list.withLock { $0.append(observation) } }
    func take() -> [SBeacon.Observation] {
        list.withLock { list in
            defer { list = [] }
            return list
        }
    }
}
