import BlueZClient
import DBusBinding
import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol
import SafeText
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

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
    /// The identities written: reserved in the inventory, and first on the
    /// shared server when the bench has one.
    let identities: IdentityReserver
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
        identities = IdentityReserver(
            client: client, inventory: inventory, run: run, dryRun: dryRun, sharedIdentities: sharedIdentities,
            progress: progress)
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
            recaps: Self.inOrder(addresses, recaps, notStarted: stopped), inventoryFailure: inventoryFailure,
            interrupted: interrupted, recoveries: recoveries, adapterFailure: adapterFailure)
    }

    /// The recaps in the order of `addresses`; a device whose turn never
    /// came is not started, for `reason`.
    private static func inOrder(
        _ addresses: [String], _ recaps: [String: DeviceRecap], notStarted reason: String
    ) -> [DeviceRecap] {
        addresses.map { address in
            recaps[address]
                ?? {
                    var recap = DeviceRecap(address: address)
                    recap.notStarted = true
                    recap.reason = reason
                    return recap
                }()
        }
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
            _ = try await record {
                try await inventory.recordStep(
                    run: run, device: nil, step: "find", .init(.failed, detail: detail, error: Self.notSeenReason))
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
        try await recorder(body)
    }

    /// Inventory calls whose failure stops the run.
    private nonisolated var recorder: InventoryRecorder { InventoryRecorder { await self.stop($0) } }

    /// What a step may use of the run, on `beacon`; what it remembers is
    /// kept in `remembered` for its end.
    private nonisolated func context(
        _ beacon: SBeacon, for step: DeviceStep, remembered: RememberedFacts
    ) -> StepContext {
        StepContext(
            address: beacon.address, dryRun: dryRun, profiles: profiles, inventory: inventory, recorder: recorder,
            identities: identities, declared: step.step.records, remembered: remembered)
    }

    private nonisolated func turn(_ address: String, _ steps: [DeviceStep]) async -> Turn {
        let device = address.uppercased()
        // The `connect` row is begun in the claim's commit, unless a link
        // left up is to be taken down first (its `disconnect` row comes
        // before; `runSteps`).
        let connected = await client.device(address: address)?.connected ?? false
        let leftUp = !dryRun && connected
        let claim: Inventory.Claim
        let connectRow: Int64?
        do {
            (claim, connectRow) = try await record {
                try await inventory.claimDevice(
                    device, run: run, beginning: leftUp || Task.isCancelled ? nil : "connect")
            }
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
            if let connectRow {
                try? await inventory.finishStep(connectRow, .interrupted, error: "interrupted: the run was interrupted")
            }
            try? await inventory.releaseDevice(device, run: run)
            var recap = DeviceRecap(address: address)
            recap.notStarted = true
            recap.reason = "not started: the run was interrupted"
            return .done(recap)
        }
        progress(.started(address: address))
        let recap = await runSteps(address, steps, previousHolder: previous, connectRow: connectRow)
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
            _ = try? await inventory.recordStep(
                run: run, device: address.uppercased(), step: "disconnect", .init(.ok, detail: text))
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

        /// The device's counts of steps, and why its steps were skipped.
        func count(into recap: inout DeviceRecap) {
            for status in statuses.values {
                switch status {
                case .ok: recap.ok += 1
                case .changed: recap.changed += 1
                case .unchanged: recap.unchanged += 1
                case .skipped: recap.skipped += 1
                default: break
                }
            }
            recap.wouldChange = wouldChange.count
            recap.skipped -= wouldChange.count
            if recap.failed == 0, !recap.interrupted, let reason = skipReason { recap.reason = reason }
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

    /// A device's turn, its claim held: `connectRow`, when given, is its
    /// `connect` row, begun with the claim.
    private nonisolated func runSteps(
        _ address: String, _ steps: [DeviceStep], previousHolder: ClaimHolder?, connectRow: Int64?
    ) async -> DeviceRecap {
        var recap = DeviceRecap(address: address)
        // A link this process did not make (this run holds the device's
        // claim, and works on a device once at a time).
        if !dryRun { await disconnectLeftLink(address, from: previousHolder) }
        var tally = Tally()
        if let connectRow { tally.rows[Tally.connectKey] = connectRow }
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
                    await endInFlight(tally, .failed, error: "\(error); \(reason)")
                    recap.failed = 1
                    recap.reason = "\(reason) (\(error))"
                    break
                }
                // An adapter gone for good, or every adapter switched off
                // past its time: the run stops; this device with it.
                if let failure = await recovery.adapterFailure, !(error is InventoryFailure) {
                    await endInFlight(tally, .failed, error: "\(failure) (\(error))")
                    recap.failed = 1
                    recap.reason = "\(failure) (\(error))"
                    break
                }
                // A connection that got steps done resets the count: only
                // `deviceAttempts` connections in a row without progress (or
                // three times as many in all) give up.
                fruitless = tally.completed > done ? 0 : fruitless + 1
                let stopping = error is InventoryFailure || error is RunStopped
                if !stopping, Task.isCancelled {
                    // Ctrl-C: the step in flight did not end; say so.
                    await endInFlight(tally, .interrupted, error: "interrupted: \(error)")
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
                        await endInFlight(tally, .failed, error: "\(error)")
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
        tally.count(into: &recap)
        return recap
    }

    /// Ends the outcome row of the attempt in flight, if any, with `status`.
    private nonisolated func endInFlight(_ tally: Tally, _ status: Inventory.StepStatus, error: String) async {
        guard let key = tally.inFlight, let id = tally.rows[key] else { return }
        _ = try? await record {
            try await inventory.finishStep(id, status, error: error, retries: tally.retries[key] ?? 0)
        }
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
            try await waitForAdvert(address)
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
        let policy = judgedPolicy(address, adapterPath: adapterPath, linksAtStart: linksAtStart, giveUp: giveUp)
        try await client.withConnection(to: address, on: adapter, policy: policy) { session in
            tally.connecting = false
            await recovery.connectSucceeded(address, adapterPath: adapterPath, linksAtStart: linksAtStart)
            let beacon = try await SBeacon(session, observer: { observations.add($0) })
            tally.inFlight = nil
            if !tally.connected, let id = tally.rows[Tally.connectKey] {
                let retries = tally.retries[Tally.connectKey] ?? 0
                // The first step's row is begun in the connect's commit.
                let first =
                    tally.completed < steps.count && tally.rows[tally.completed] == nil && tally.skipping == nil
                    ? tally.completed : nil
                let begun = try await record {
                    try await inventory.endStep(
                        id,
                        .init(
                            .ok,
                            detail: retries > 0 ? "after \(retries) failed attempt\(retries == 1 ? "" : "s")" : nil,
                            retries: retries),
                        next: first.map { .begin(steps[$0].name) } ?? .none)
                }
                tally.connected = true
                if let first, let begun {
                    tally.rows[first] = begun
                    tally.inFlight = first
                }
            }
            for index in steps.indices where index >= tally.completed {
                try await performStep(index, of: steps, address, on: beacon, observations, &tally)
            }
        }
    }

    /// Waits (`findTimeout`) for the device's next advert; an adapter lost
    /// meanwhile (the run stopping) ends the wait at once.
    private nonisolated func waitForAdvert(_ address: String) async throws {
        let deadline = ContinuousClock.now + findTimeout
        while true {
            let slice = min(.milliseconds(500), deadline - ContinuousClock.now)
            do {
                _ = try await client.waitForAdvertisedDevice(address: address, timeout: max(.zero, slice))
                return
            } catch let error as BlueZError {
                guard case .timeout = error.reason, !Task.isCancelled else { throw error }
                let lost = await recovery.adapterFailure != nil
                if ContinuousClock.now >= deadline || lost {
                    throw BlueZError(.timeout(findTimeout), device: address, step: "find")
                }
            }
        }
    }

    /// The connect policy for one connection: each failed Connect is
    /// judged by the recovery policies. Waits that were not the beacon's
    /// fault are retried uncharged up to `Recovery.unchargedTimeLimit` in
    /// the device's turn; past it, its failures are charged.
    private nonisolated func judgedPolicy(
        _ address: String, adapterPath: ObjectPath?, linksAtStart: Int, giveUp: GiveUpReason
    ) -> ConnectPolicy {
        var policy = self.policy
        let recovery = self.recovery
        policy.judge = { error in
            let judged = ContinuousClock.now
            let verdict = await recovery.connectFailed(
                address, error: error, adapterPath: adapterPath, linksAtStart: linksAtStart)
            switch verdict {
            case .charged: return .ordinary
            case .uncharged:
                giveUp.addUncharged(ContinuousClock.now - judged)
                return giveUp.unchargedTime < Recovery.unchargedTimeLimit ? .retryUncharged : .ordinary
            case .recovered: return .retryAfresh
            case .giveUp(let reason):
                giveUp.set(reason)
                return .giveUp
            }
        }
        return policy
    }

    /// One step on the link, its outcome committed; what the beacon told
    /// during it is recorded, also when it fails (less what its failure
    /// makes untrue). A `require` not met skips the rest.
    ///
    /// A step that succeeds ends in one transaction (`Inventory.endStep`):
    /// what the beacon told, its outcome, and the next step's `running`
    /// row — which becomes the row in flight, so every failure path charges
    /// it as if it had begun it — or, after a `require` not met, the
    /// remaining steps `skipped`.
    private nonisolated func performStep(
        _ index: Int, of steps: [DeviceStep], _ address: String, on beacon: SBeacon, _ observations: Observations,
        _ tally: inout Tally
    ) async throws {
        let step = steps[index]
        if await isStopped { throw RunStopped() }
        let id = try await row(index, address, steps, &tally)
        if let skipping = tally.skipping {
            try await record { try await inventory.finishStep(id, .skipped, detail: skipping) }
            progress(.step(address: address, step: step.name, status: .skipped, detail: skipping))
            tally.record(index, .skipped)
            tally.completed = index + 1
            return
        }
        tally.inFlight = index
        let started = ContinuousClock.now
        let result: StepResult
        let remembered = RememberedFacts()
        do {
            result = try await step.step.perform(on: beacon, context(beacon, for: step, remembered: remembered))
        } catch {
            try await keep(
                Self.stillTrue(observations.take(), after: step), of: address, remembered: remembered.take())
            if !(error is InventoryFailure) {
                progress(.step(address: address, step: step.name, status: .failed, detail: "\(error)"))
            }
            throw error
        }
        let (device, reading) = await observed(observations.take(), of: address, remembered: remembered.take())
        let (status, detail) = (result.status, result.detail)
        let stops = status == .skipped && step.step.skippedStopsTheDevice
        let later = index + 1 < steps.count ? Array(steps[(index + 1)...]) : []
        let next: Inventory.StepNext =
            stops
            ? .skip(later.map(\.name), reason: detail)
            : later.isEmpty || tally.rows[index + 1] != nil ? .none : .begin(later[0].name)
        let end = Inventory.StepEnd(
            status, detail: detail, durationMilliseconds: Self.milliseconds(since: started),
            retries: tally.retries[index] ?? 0)
        let begun = try await record {
            try await inventory.endStep(id, end, observed: device, reading: reading, next: next)
        }
        tally.inFlight = nil
        progress(.step(address: address, step: step.name, status: status, detail: detail))
        tally.record(index, status)
        tally.completed = index + 1
        if status == .skipped {
            if dryRun, detail?.hasPrefix("dry run:") == true { tally.wouldChange.insert(index) }
            if step.step.skippedStopsTheDevice {
                tally.skipping = detail
                tally.skipReason = detail
            }
        }
        if stops {
            // Their rows were written with this step's.
            for skipped in later {
                progress(.step(address: address, step: skipped.name, status: .skipped, detail: detail))
            }
            for skipped in later.indices { tally.record(index + 1 + skipped, .skipped) }
            tally.completed = steps.count
        } else if case .begin = next, let begun {
            tally.rows[index + 1] = begun
            tally.inFlight = index + 1
        }
    }

    /// What a failed step read that the beacon may no longer hold: the
    /// value the step writes, read before the write — a write can land
    /// just before the link drops, and the step then fails with no answer.
    /// Kept, it would tell the inventory the beacon holds the old value.
    /// Each step says what it forgets (`FleetStep.onFailure`).
    static func stillTrue(_ observations: [SBeacon.Observation], after failed: DeviceStep) -> [SBeacon.Observation] {
        failed.step.onFailure.stillTrue(observations)
    }

    /// What was read from a beacon, as the inventory stores it: its facts
    /// (for `devices`: what the step remembered, and over it what the
    /// beacon told) and, with a battery level or firmware told, a reading
    /// for trends; nil when there is nothing.
    private nonisolated func observed(
        _ observations: [SBeacon.Observation], of address: String, remembered: DeviceRecord? = nil
    ) async -> (DeviceRecord?, Inventory.StepReading?) {
        // Seen now, when the step ends (what it remembered was filled in
        // during it).
        var remembered = remembered
        remembered?.seenAt = Date()
        guard !observations.isEmpty else { return (remembered, nil) }
        var record = remembered ?? DeviceRecord(address: address)
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
        guard record.battery != nil || record.firmware != nil else { return (record, nil) }
        let rssi = await client.device(address: address)?.rssi
        return (
            record,
            Inventory.StepReading(
                battery: record.battery, rssi: record.battery == nil ? nil : rssi,
                firmware: record.firmware?.description)
        )
    }

    /// Records what was read from a beacon during a step that failed (a
    /// step that succeeds records it with its outcome, `performStep`).
    private nonisolated func keep(
        _ observations: [SBeacon.Observation], of address: String, remembered: DeviceRecord?
    ) async throws {
        let (device, reading) = await observed(observations, of: address, remembered: remembered)
        guard let device else { return }
        try await self.record { try await inventory.recordDevice(device) }
        if let reading {
            try await self.record {
                try await inventory.recordReading(
                    address: device.address, at: Date(), battery: reading.battery, rssi: reading.rssi,
                    firmware: reading.firmware)
            }
        }
    }

    /// `10 s`, `1.5 s`.
    static func secondsText(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return CFormat.string("%g s", seconds)
    }

    static func milliseconds(since start: ContinuousClock.Instant) -> Int64 {
        let elapsed = ContinuousClock.now - start
        return elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
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

/// What a step learnt of its device (`StepContext.remember`), kept until
/// the step's end is recorded.
final class RememberedFacts: Sendable {
    private let record = Mutex<DeviceRecord?>(nil)

    /// Adds to what is kept: `fill`'s fields over those filled before.
    func fill(_ address: String, _ fill: (inout DeviceRecord) -> Void) {
        record.withLock { record in
            var device = record ?? DeviceRecord(address: address)
            fill(&device)
            record = device
        }
    }

    /// What was kept, and nothing from now on.
    func take() -> DeviceRecord? {
        record.withLock { record in
            defer { record = nil }
            return record
        }
    }
}
