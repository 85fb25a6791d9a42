import BlueZClient
import DBusBinding
import FoundationEssentials
import Inventory
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// One recovery done (or tried) in a run: an outcome row in the inventory
/// (step `recover`, status `ok` or `failed`, `detail` what was done and
/// why, device NULL for the adapter's), a line in the recap.
public struct RecoveryRecord: Sendable, Equatable, Codable {
    /// `remove-device`, `concurrency`, `power-cycle`, `follow-adapter`,
    /// `pause-discovery`, `adapter-wedged`, `adapter-gone`.
    public var action: String
    public var ok: Bool
    /// The beacon's address, nil for an adapter-level recovery.
    public var device: String?
    /// The adapter's address, when it concerns one.
    public var adapter: String?
    /// What was done and why: `remove-device after 3 × le-connection-abort-by-local`.
    public var detail: String
    /// Why it failed, when it did.
    public var error: String?
}

/// How a run recovers (docs/reliability.md, "Recovering without an operator").
public struct RecoveryOptions: Sendable {
    /// `--no-adapter-reset`: never power-cycle an adapter.
    public var adapterResets = true
    /// Discovery is kept on during the run (restarted after a pause, a power
    /// cycle or an adapter's return), with this filter: every advert
    /// (DuplicateData) or changes only.
    public var keepDiscovery = true
    public var everyAdvert = false
    /// Presence is known (discovery with every advert): an abort of a
    /// beacon not heard for `presenceTimeout` is `gone`. Without it every
    /// abort is taken as heard (stale or slot).
    public var presenceKnown: Bool { everyAdvert }
    /// How long the watcher waits between looks at the adapters.
    public var watchInterval: Duration = .milliseconds(500)
    /// An adapter gone for good, or every adapter switched off for good,
    /// stops the run (`adapterFailure`: exit status 3). A station does not
    /// stop: it waits for the adapter as long as it runs.
    public var stopsOnAdapterLoss = true
    /// The wedge detector's window: `Recovery.wedgeWindow` for a run; a
    /// station's is `Recovery.stationWedgeWindow`, as long as a scan waits.
    public var wedgeWindow: Duration = Recovery.wedgeWindow

    public init(
        adapterResets: Bool = true, keepDiscovery: Bool = true, everyAdvert: Bool = false,
        stopsOnAdapterLoss: Bool = true
    ) {
        self.adapterResets = adapterResets
        self.keepDiscovery = keepDiscovery
        self.everyAdvert = everyAdvert
        self.stopsOnAdapterLoss = stopsOnAdapterLoss
    }
}

/// Carries out the recovery policies (`Recovery`) for one run (a fleet
/// run, or a station's life): classifies each connect failure, removes a
/// stale device, lowers an adapter's concurrency, pauses discovery for a
/// busy connect, follows adapters by address, power-cycles a wedged one;
/// and records each as a `recover` outcome row.
public actor RecoveryCoordinator {
    let client: BluetoothClient
    let inventory: Inventory
    /// The inventory run recoveries are recorded under (nil: not recorded,
    /// a `watch` without a run).
    let run: Int64?
    public let options: RecoveryOptions
    let note: @Sendable (String) -> Void

    private var stale = Recovery.StaleCounter()
    /// Removed devices being waited for (discovery must stay on).
    private var rediscovering = 0
    private var slots: Recovery.SlotLearner
    private var wedge = Recovery.WedgeDetector()
    private var busy = Recovery.BusyPolicy()
    public private(set) var records: [RecoveryRecord] = []
    /// Adapters this run works with, by address → the path each had last.
    private var adapterPaths: [String: ObjectPath] = [:]
    private var absentSince: [String: (at: ContinuousClock.Instant, wall: Date)] = [:]
    /// Paths adapters had before they moved → their address (work begun
    /// on the old path is still judged as the adapter's).
    private var formerPaths: [ObjectPath: String] = [:]
    /// Adapters whose discovery is paused for a busy connect → the devices
    /// whose connect waits for it.
    private var paused: [String: Set<String>] = [:]
    /// Adapters given up: wedged again within the reset interval.
    private var givenUp: [String: String] = [:]
    /// Why the run must stop (an adapter gone for good): exit status 3.
    public private(set) var adapterFailure: String?
    private var watcher: Task<Void, Never>?
    /// When discovery was last restarted on a quiet adapter, by address.
    private var quietRestarts: [String: ContinuousClock.Instant] = [:]
    /// When discovery was last started on an adapter and has not shown
    /// Discovering true yet, by address.
    private var startedAt: [String: ContinuousClock.Instant] = [:]
    /// When each device's current stale streak began.
    private var streakStart: [String: ContinuousClock.Instant] = [:]
    /// Adapters present but reading unpowered (switched off), since when.
    private var offSince: [String: (at: ContinuousClock.Instant, wall: Date)] = [:]
    /// Adapters given up because they stayed off past `adapterOffTimeout`
    /// (lifted when they are powered again).
    private var offGivenUp: Set<String> = []
    /// Connects answered NotReady by an adapter reading Powered, in a row.
    private var notReadyStreak: [String: Int] = [:]
    /// The next uncharged pause per device (busy, NotReady), doubling.
    private var pauses: [String: Duration] = [:]
    /// Power cycles under way, by adapter address.
    private var cycling: [String: Task<Void, Never>] = [:]

    public init(
        client: BluetoothClient, inventory: Inventory, run: Int64?, concurrency: Int,
        options: RecoveryOptions = RecoveryOptions(), resets: [String: ContinuousClock.Instant] = [:],
        note: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.client = client
        self.inventory = inventory
        self.run = run
        self.options = options
        self.note = note
        slots = Recovery.SlotLearner(ceiling: concurrency)
        for (address, at) in resets { wedge.reset(address, at: at) }
    }

    /// When each adapter was last power-cycled (by address).
    public func resets() -> [String: ContinuousClock.Instant] { wedge.lastReset }

    // MARK: Adapters

    /// Learns the adapters (by address) and starts watching them: an
    /// adapter that goes is waited for (`adapterReturnTimeout`), followed
    /// when it comes back under another path, and power-cycled when wedged.
    public func start() async {
        for adapter in await client.adapters() where Device.isValidAddress(adapter.address) {
            adapterPaths[adapter.address.uppercased()] = adapter.path
        }
        guard watcher == nil else { return }
        watcher = Task { [weak self] in
            while !Task.isCancelled {
                guard let self else { return }
                await self.look()
                try? await Task.sleep(for: self.options.watchInterval)
            }
        }
    }

    /// Stops watching; a power cycle under way is finished (and recorded) first.
    public func stop() async {
        watcher?.cancel()
        watcher = nil
        for task in cycling.values { await task.value }
    }

    /// Whether a power cycle of ours is under way (its adapter reads off
    /// for a moment: nobody is to power it on meanwhile).
    public func isCycling() -> Bool { !cycling.isEmpty }

    /// The address of the adapter at `path` (nil: not one of ours).
    func address(of path: ObjectPath?) -> String? {
        guard let path else { return nil }
        return adapterPaths.first { $0.value == path }?.key ?? formerPaths[path]
    }

    /// Whether the adapter with `address` is absent now.
    func isAbsent(_ address: String) -> Bool { absentSince[address.uppercased()] != nil }

    /// Connections allowed at once over all adapters: each adapter's
    /// learned limit (or the ceiling), summed, never above the ceiling.
    public func concurrencyLimit() -> Int {
        guard !adapterPaths.isEmpty else { return slots.ceiling }
        return min(slots.ceiling, adapterPaths.keys.reduce(0) { $0 + slots.limit(for: $1) })
    }

    /// Per adapter: the limit learned (nil when none was).
    public func learnedLimits() -> [String: Int] { slots.learned }

    private func name(_ path: ObjectPath?) -> String { String(path?.components.last ?? "?") }

    /// One look at the adapters: gone, back (under which path), wedged.
    private func look() async {
        let now = ContinuousClock.now
        for (address, lastPath) in adapterPaths {
            guard let adapter = await client.adapter(address: address) else {
                if absentSince[address] == nil {
                    absentSince[address] = (now, Date())
                    note("adapter \(name(lastPath)) \(address) went away; waiting for it (at most 30 s)")
                } else if let since = absentSince[address], now - since.at > Recovery.adapterReturnTimeout,
                    adapterFailure == nil, options.stopsOnAdapterLoss
                {
                    adapterFailure = goneReason(address)
                    await record(
                        RecoveryRecord(
                            action: "adapter-gone", ok: false, device: nil, adapter: address,
                            detail: "wait-for-adapter \(address)", error: adapterFailure))
                }
                continue
            }
            // Switched off: Powered reads false (missing or not a boolean,
            // from a bluetoothd that lies, is not known to be off).
            if adapter.poweredOff, cycling[address] == nil {
                await adapterIsOff(adapter, now: now)
                continue
            }
            if adapter.powered, offSince.removeValue(forKey: address) != nil {
                offGivenUp.remove(address)
                note("adapter \(adapter.name) \(address) is powered again")
                if options.keepDiscovery {
                    try? await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)
                }
            }
            if absentSince.removeValue(forKey: address) != nil || adapter.path != lastPath {
                if adapter.path != lastPath { formerPaths[lastPath] = address }
                adapterPaths[address] = adapter.path
                if adapter.path != lastPath {
                    await adapterMoved(adapter, from: lastPath)
                } else {
                    note("adapter \(adapter.name) \(address) is back")
                    await restartDiscovery(adapter)
                }
                continue
            }
            await watchForWedge(adapter, now: now)
        }
    }

    /// Why the run stops for an adapter gone for good.
    private func goneReason(_ address: String) -> String {
        let wall = absentSince[address]?.wall ?? Date()
        return "adapter \(address) went away at \(Self.clock(wall)) and did not return within "
            + "\(Int(Recovery.adapterReturnTimeout.components.seconds)) s"
    }

    /// Why an adapter switched off is given up.
    private func offReason(_ address: String) -> String {
        let wall = offSince[address]?.wall ?? Date()
        return "adapter off: \(address) was switched off at \(Self.clock(wall)) and not powered again within "
            + "\(Int(Recovery.adapterOffTimeout.components.seconds)) s"
    }

    /// An adapter present but reading unpowered (rfkill, `bluetoothctl
    /// power off`; not a cycle of ours): waited for `adapterOffTimeout`
    /// from when it was first seen off; then given up (its devices fail),
    /// and when every adapter of the run is given up or gone the run stops.
    private func adapterIsOff(_ adapter: Adapter, now: ContinuousClock.Instant) async {
        let address = adapter.address.uppercased()
        guard let since = await offSpell(address) else {
            offSince[address] = (now, Date())
            note(
                "adapter \(adapter.name) \(address) is switched off; waiting for it to be powered again "
                    + "(at most \(Int(Recovery.adapterOffTimeout.components.seconds)) s)")
            return
        }
        guard now - since.at > Recovery.adapterOffTimeout else { return }
        await offTimedOut(adapter)
    }

    /// When the adapter's current spell off began (nil: not known off).
    /// Powered again since, however briefly (a watcher looking every
    /// half second can miss an adapter on for a moment between two
    /// switch-offs), ends the spell: the next off is waited for afresh.
    private func offSpell(_ address: String) async -> (at: ContinuousClock.Instant, wall: Date)? {
        guard let since = offSince[address] else { return nil }
        if let on = await client.lastPoweredOn(address: address), on > since.at {
            offSince[address] = nil
            offGivenUp.remove(address)
            return nil
        }
        return since
    }

    /// An adapter off past `adapterOffTimeout`: given up once (a row, a
    /// note); with every adapter of the run given up or gone, the run
    /// stops. The reason its devices fail with.
    @discardableResult
    private func offTimedOut(_ adapter: Adapter) async -> String {
        let address = adapter.address.uppercased()
        let reason = offReason(address)
        guard !offGivenUp.contains(address) else { return reason }
        offGivenUp.insert(address)
        note(reason)
        await record(
            RecoveryRecord(
                action: "adapter-off", ok: false, device: nil, adapter: address,
                detail: "wait-for-power \(adapter.name) \(address)", error: reason))
        let lost = adapterPaths.keys.allSatisfy { offGivenUp.contains($0) || absentSince[$0] != nil }
        if lost, adapterFailure == nil, options.stopsOnAdapterLoss { adapterFailure = reason }
        return reason
    }

    private func adapterMoved(_ adapter: Adapter, from old: ObjectPath) async {
        var error: String?
        do {
            if !adapter.powered { try await client.setPowered(adapter, true) }
            if options.keepDiscovery {
                try await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)
            }
        } catch let failure {
            error = "\(failure)"
        }
        let detail = "follow-adapter \(adapter.address.uppercased()) \(name(old)) → \(adapter.name)"
        note(detail)
        await record(
            RecoveryRecord(
                action: "follow-adapter", ok: error == nil, device: nil, adapter: adapter.address.uppercased(),
                detail: detail, error: error))
    }

    private func restartDiscovery(_ adapter: Adapter) async {
        guard options.keepDiscovery else { return }
        if !adapter.powered { try? await client.setPowered(adapter, true) }
        try? await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)
    }

    /// Discovery upkeep and the wedge detector: discovery wanted but off is
    /// started again; a refusal, or Discovering still false after a start
    /// that succeeded, is evidence; an advert clears it.
    private func watchForWedge(_ adapter: Adapter, now: ContinuousClock.Instant) async {
        let address = adapter.address.uppercased()
        if let heard = await client.lastAdvert(on: adapter.path), now - heard < Recovery.wedgeWindow {
            wedge.advertHeard(address, at: heard)
        }
        guard paused[address, default: []].isEmpty else { return }
        if options.keepDiscovery, adapter.powered { await keepDiscovering(adapter, now: now) }
        guard wedge.isWedged(address, powered: adapter.powered, at: now, window: options.wedgeWindow),
            givenUp[address] == nil
        else { return }
        _ = await wedged(adapter, now: now)
    }

    /// Discovery upkeep: started again where it is off, restarted on a
    /// quiet adapter whose connects fail; refusals are the wedge
    /// detector's evidence.
    private func keepDiscovering(_ adapter: Adapter, now: ContinuousClock.Instant) async {
        let address = adapter.address.uppercased()
        // Discovering, connects failing, nothing heard: restart discovery
        // (a wedged controller then refuses it).
        if adapter.discovering, let trouble = wedge.trouble(address), now - trouble.since >= Recovery.quietRestart,
            now - (quietRestarts[address] ?? trouble.since) >= Recovery.quietRestart,
            await client.lastAdvert(on: adapter.path).map({ now - $0 >= Recovery.quietRestart }) ?? true
        {
            quietRestarts[address] = now
            try? await client.stopDiscovery(on: adapter)
            note("\(adapter.name) \(address): connects failing and nothing heard; restarting discovery")
            do {
                try await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)
                startedAt[address] = now
            } catch {
                wedge.discoveryRefused(address, at: now)
            }
        } else if !adapter.discovering {
            // A start that succeeded but left Discovering false a second
            // later counts as refused (a wedged controller answers "in
            // progress", which the client takes as discovery already on).
            if let started = startedAt[address], now - started < .seconds(1) { return }
            if startedAt.removeValue(forKey: address) != nil { wedge.discoveryRefused(address, at: now) }
            do {
                try await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)
                startedAt[address] = now
            } catch {
                wedge.discoveryRefused(address, at: now)
            }
        } else {
            startedAt[address] = nil
        }
    }

    /// Discovery that its user (a station) starts itself was refused, or
    /// accepted and never shown running: evidence of a wedge on every
    /// powered adapter, with discovery needed (nothing can be found
    /// without it). The watcher power-cycles by the wedge rule.
    public func discoveryRefused() async {
        let now = ContinuousClock.now
        for (address, _) in adapterPaths {
            guard await client.adapter(address: address)?.powered == true else { continue }
            wedge.discoveryRefused(address, at: now)
            wedge.needsDiscovery(address, at: now)
        }
    }

    /// A wedged adapter: power-cycled when the policy allows (nil), else
    /// given up (the reason its devices fail with).
    private func wedged(_ adapter: Adapter, now: ContinuousClock.Instant, why: String? = nil) async -> String? {
        let address = adapter.address.uppercased()
        if let reason = givenUp[address] { return reason }
        if cycling[address] != nil {
            await powerCycle(adapter)
            return nil
        }
        switch wedge.mayReset(address, at: now, resetsAllowed: options.adapterResets) {
        case .allowed:
            await powerCycle(adapter, why: why)
            return nil
        case .disabled:
            givenUp[address] = "adapter \(adapter.name) \(address) is wedged; --no-adapter-reset: not power-cycled"
            note(givenUp[address]!)
            await record(
                RecoveryRecord(
                    action: "adapter-wedged", ok: false, device: nil, adapter: address,
                    detail: "wedged \(adapter.name) \(address)", error: "--no-adapter-reset"))
        case .alreadyTried(let at):
            let wall = Date().addingTimeInterval(-Self.seconds(now - at))
            givenUp[address] = "adapter wedged; reset already tried at \(Self.clock(wall, seconds: false))"
            note("adapter \(adapter.name) \(address): \(givenUp[address]!)")
            await record(
                RecoveryRecord(
                    action: "adapter-wedged", ok: false, device: nil, adapter: address,
                    detail: "wedged \(adapter.name) \(address)", error: givenUp[address]))
        }
        return givenUp[address]
    }

    /// Power-cycles a wedged adapter (once per `resetInterval`), then sets
    /// its filter and starts discovery again. A cycle already under way is
    /// waited for, not begun again.
    func powerCycle(_ adapter: Adapter, why: String? = nil) async {
        let address = adapter.address.uppercased()
        if let running = cycling[address] {
            await running.value
            return
        }
        let task = Task { await self.cycle(adapter, why: why) }
        cycling[address] = task
        await task.value
        cycling[address] = nil
        notReadyStreak[address] = nil
    }

    private func cycle(_ adapter: Adapter, why: String?) async {
        let address = adapter.address.uppercased()
        wedge.reset(address, at: .now)
        let detail = "power-cycle \(adapter.name) \(address)"
        note(
            "\(detail): "
                + (why ?? "discovery and connects failed for \(Int(Recovery.wedgeWindow.components.seconds)) s"))
        var error: String?
        do {
            try await client.powerCycle(
                adapter, offTimeout: Recovery.powerOffTimeout, offTime: Recovery.powerOffTime,
                onTimeout: Recovery.powerOnTimeout)
            if options.keepDiscovery, let current = await client.adapter(address: address) {
                try await client.startDiscovery(on: current, everyAdvert: options.everyAdvert)
            }
        } catch let failure {
            error = "\(failure)"
        }
        await record(
            RecoveryRecord(
                action: "power-cycle", ok: error == nil, device: nil, adapter: address, detail: detail,
                error: error))
    }

    // MARK: Connect failures

    /// What the runner does after a connect failure.
    public enum Verdict: Sendable, Equatable {
        /// The beacon's failure: charge it (the runner's retry rules).
        case charged(Recovery.FailureClass)
        /// The device was removed and heard again: charge it, then start its
        /// budget afresh (one recovery, at most once per run).
        case recovered
        /// Not the beacon's (slot, busy, adapter): retry without charging.
        case uncharged(Recovery.FailureClass)
        /// The adapter is given up (wedged again, or gone for good): fail
        /// with this reason.
        case giveUp(String)
    }

    /// Classifies a failed connect of `device` (its adapter at `adapterPath`,
    /// `linksAtStart` other links up when it began), carries out what the
    /// policies decide, waits what they say, and tells the runner how to
    /// count it.
    public func connectFailed(
        _ device: String, error: any Error, adapterPath: ObjectPath?, linksAtStart: Int
    ) async -> Verdict {
        let now = ContinuousClock.now
        let adapterAddress = address(of: adapterPath)
        if let adapterAddress, let reason = givenUp[adapterAddress] { return .giveUp(reason) }
        if let adapterAddress, offGivenUp.contains(adapterAddress) { return .giveUp(offReason(adapterAddress)) }
        if let adapterFailure { return .giveUp(adapterFailure) }
        let bluez = error as? BlueZError
        var failure = Recovery.Failure(
            name: bluez?.busErrorName?.rawValue,
            message: {
                if case .bus(let bus)? = bluez?.reason { return bus.message }
                return bluez.map { "\($0.reason)" } ?? "\(error)"
            }())
        let found = await client.device(address: device)
        if let sent = await client.linksWhenConnectSent(device) {
            // The links up when the Connect was sent: what a controller's
            // slot refusal is about.
            failure.linksUp = sent
        } else if let adapterPath {
            failure.linksUp = max(linksAtStart, await client.linksUp(on: adapterPath, excluding: device))
        }
        failure.adapterAbsentOrWedged = adapterAddress.map(isAbsent) ?? false
        // Absent now, or back under another path since the connect began
        // (its devices went with it): the adapter's failure.
        if let adapterAddress, await client.adapter(address: adapterAddress)?.path != adapterPath {
            failure.adapterAbsentOrWedged = true
        }
        // Under suspicion: discovery refused since the adapter's last advert,
        // or (discovering with every advert) nothing heard on it at all.
        let absentOrMoved = failure.adapterAbsentOrWedged
        var suspect = false
        if let adapterAddress, let adapterPath, givenUp[adapterAddress] == nil {
            if let trouble = wedge.trouble(adapterAddress), trouble.refusals > 0 { suspect = true }
            if options.presenceKnown, let since = await client.discoveringSince(adapterPath),
                now - since >= Recovery.presenceTimeout,
                await client.lastAdvert(on: adapterPath).map({ now - $0 >= Recovery.presenceTimeout }) ?? true
            {
                suspect = true
            }
        }
        if suspect { failure.adapterAbsentOrWedged = true }
        if case .adapterNotFound? = bluez?.reason { failure.adapterAbsentOrWedged = true }
        if bluez?.reason == .deviceNotFound, found == nil, await client.linksWhenConnectSent(device) != nil {
            failure.deviceRemovedDuringConnect = true
        }
        if options.presenceKnown {
            failure.heardRecently = false
            if let found { failure.heardRecently = await client.isPresent(found, within: Recovery.presenceTimeout) }
        }
        if let adapterAddress { wedge.connectFailed(adapterAddress, at: now) }
        let judgement =
            adapterAddress.map { slots.judge(failure, device: device, adapter: $0) }
            ?? Recovery.SlotLearner.Judgement(
                failureClass: Recovery.preliminaryClass(failure), lowered: nil, waitBelow: nil)
        if let lowered = judgement.lowered, let adapterAddress {
            let detail =
                "concurrency \(lowered.from) → \(lowered.to) on \(name(adapterPath)) \(adapterAddress)"
            note(
                "\(name(adapterPath)) \(adapterAddress): holds \(lowered.to) LE link\(lowered.to == 1 ? "" : "s"); "
                    + "concurrency \(lowered.from) → \(lowered.to) for this run")
            await record(
                RecoveryRecord(action: "concurrency", ok: true, device: nil, adapter: adapterAddress, detail: detail))
        }
        switch judgement.failureClass {
        case .stale:
            let key = device.uppercased()
            if stale.consecutive[key, default: 0] == 0 { streakStart[key] = now }
            // Where presence is known, remove only a device heard since its
            // streak began (the stale kind keeps advertising; a wedged
            // adapter hears nothing).
            var mayRemove = true
            if options.presenceKnown, let start = streakStart[key] {
                mayRemove = found?.lastHeard.map { $0 >= start } ?? false
            }
            guard let due = stale.staleFailure(device, kind: failure.kind, mayRemove: mayRemove) else {
                return .charged(.stale)
            }
            return await removeStale(device, detail: due) ? .recovered : .charged(.stale)
        case .slot where failure.deviceRemovedDuringConnect:
            // Out of slots, its object went (as some controllers do): it
            // comes back with its next advert.
            guard (try? await client.waitForDevice(address: device, timeout: Recovery.reappearTimeout)) != nil else {
                return .charged(.gone)
            }
            return .uncharged(.slot)
        case .slot:
            if let adapterPath, let below = judgement.waitBelow {
                await client.waitForLinks(below: below, on: adapterPath, timeout: Recovery.slotBackoff)
            }
            return .uncharged(.slot)
        case .busy where rediscovering > 0:
            // A removed device is being looked for: discovery stays on until
            // it is heard (its connect comes first then).
            try? await Task.sleep(for: Recovery.busyBackoff)
            return .uncharged(.busy)
        case .busy:
            guard let adapterPath, let adapterAddress else {
                try? await Task.sleep(for: Recovery.busyBackoff)
                return .uncharged(.busy)
            }
            let discovering = await client.discoveringSince(adapterPath) != nil
            switch busy.busy(device: device, adapter: adapterAddress, discovering: discovering) {
            case .pauseDiscovery(let first):
                paused[adapterAddress, default: []].insert(device.uppercased())
                var error: String?
                if let adapter = await client.adapter(address: adapterAddress) {
                    do { try await client.stopDiscovery(on: adapter) } catch let failure { error = "\(failure)" }
                }
                if first {
                    let detail = "pause-discovery \(name(adapterPath)) \(adapterAddress)"
                    note("\(detail): Connect answered InProgress while discovering")
                    await record(
                        RecoveryRecord(
                            action: "pause-discovery", ok: error == nil, device: nil, adapter: adapterAddress,
                            detail: detail, error: error))
                }
                try? await Task.sleep(for: Recovery.busyBackoff)
            case .waitForDevice:
                await pause(device)
            }
            return .uncharged(.busy)
        case .adapter where failure.name == "org.bluez.Error.NotReady" && !absentOrMoved:
            return await notReady(device, adapterAddress: adapterAddress, now: now)
        case .adapter where suspect:
            try? await Task.sleep(for: Recovery.suspectAdapterPause)
            return .uncharged(.adapter)
        case .adapter:
            if let adapterAddress {
                // Gone: back within `adapterReturnTimeout` of when it went
                // (not of this failure), or the device gives up.
                let since = absentSince[adapterAddress]?.at ?? now
                let deadline = since + Recovery.adapterReturnTimeout
                // A wait that ends at once (org.bluez has no owner while
                // bluetoothd restarts) is asked again, paused, until the
                // deadline: "did not return within 30 s" only once it is past.
                while ContinuousClock.now < deadline, !Task.isCancelled {
                    if (try? await client.waitForAdapter(
                        address: adapterAddress, powered: true, timeout: deadline - ContinuousClock.now)) != nil
                    {
                        break
                    }
                    if await client.adapter(address: adapterAddress)?.powered == true { break }
                    try? await Task.sleep(for: Recovery.unchargedBackoff)
                }
                if let adapterFailure { return .giveUp(adapterFailure) }
                if let reason = await stillDown(adapterAddress) { return .giveUp(reason) }
            }
            // Back (under a new name, maybe): bluetoothd reloads the devices
            // it stored without their adverts; nothing is judged of this one
            // before its next advert.
            if let known = await client.device(address: device), known.manufacturerData.isEmpty, known.rssi == nil {
                _ = try? await client.waitForAdvertisedDevice(address: device, timeout: Recovery.reappearTimeout)
            }
            return .uncharged(.adapter)
        case .gone, .other:
            return .charged(judgement.failureClass)
        }
    }

    /// The pause before an uncharged retry of `device`: doubling from
    /// `unchargedBackoff` to `unchargedBackoffCap` (never a tight loop).
    private func pause(_ device: String) async {
        let key = device.uppercased()
        let current = pauses[key] ?? Recovery.unchargedBackoff
        pauses[key] = min(current * 2, Recovery.unchargedBackoffCap)
        try? await Task.sleep(for: current)
    }

    /// Why an adapter that was waited for is still no use (nil: it is
    /// there and powered).
    private func stillDown(_ address: String) async -> String? {
        guard let adapter = await client.adapter(address: address) else { return goneReason(address) }
        return adapter.powered ? nil : offReason(address)
    }

    /// Connect answered NotReady. An adapter reading unpowered is switched
    /// off: waited for until `adapterOffTimeout` after it was first seen
    /// off (shared by all its devices), then given up. An adapter reading
    /// Powered that answers NotReady refuses what it says it can do: after
    /// `notReadyWedge` in a row (no connect succeeding on it) it is wedged
    /// — power-cycled, or given up — whether adverts are heard or not;
    /// before that, each retry waits its backoff.
    private func notReady(_ device: String, adapterAddress: String?, now: ContinuousClock.Instant) async -> Verdict {
        guard let adapterAddress else {
            await pause(device)
            return .uncharged(.adapter)
        }
        if let running = cycling[adapterAddress] {
            // Our own power cycle: wait for it.
            await running.value
            return .uncharged(.adapter)
        }
        guard let adapter = await client.adapter(address: adapterAddress) else {
            return .uncharged(.adapter)
        }
        if adapter.poweredOff {
            if await offSpell(adapterAddress) == nil {
                offSince[adapterAddress] = (now, Date())
                note(
                    "adapter \(adapter.name) \(adapterAddress) is switched off; waiting for it to be powered again "
                        + "(at most \(Int(Recovery.adapterOffTimeout.components.seconds)) s)")
            }
            let left = offSince[adapterAddress]!.at + Recovery.adapterOffTimeout - ContinuousClock.now
            if left > .zero {
                _ = try? await client.waitForAdapter(address: adapterAddress, powered: true, timeout: left)
            }
            if let running = cycling[adapterAddress] { await running.value }
            guard let current = await client.adapter(address: adapterAddress) else {
                // Gone meanwhile (bluetoothd restarting): the gone rule's.
                return .uncharged(.adapter)
            }
            if !current.powered {
                let reason = await offTimedOut(current)
                return .giveUp(adapterFailure ?? reason)
            }
            return .uncharged(.adapter)
        }
        notReadyStreak[adapterAddress, default: 0] += 1
        let streak = notReadyStreak[adapterAddress, default: 0]
        guard streak >= Recovery.notReadyWedge else {
            await pause(device)
            return .uncharged(.adapter)
        }
        let why = "\(streak) connects answered NotReady while it reads powered"
        if let reason = await wedged(adapter, now: now, why: why) { return .giveUp(reason) }
        return .uncharged(.adapter)
    }

    /// RemoveDevice, then wait for the device to be heard again. A removed
    /// device comes back only with an advert heard while discovering: where
    /// no discovery of ours runs (paused for a busy connect, or a run that
    /// scanned first and stopped), it is started on the powered adapters for
    /// the wait and stopped after.
    private func removeStale(_ device: String, detail: String) async -> Bool {
        var error: String?
        var started: [Adapter] = []
        rediscovering += 1
        defer { rediscovering -= 1 }
        do {
            try await client.removeDevice(device)
            for adapter in await client.adapters() where adapter.powered {
                guard await client.discoveringSince(adapter.path) == nil else { continue }
                if (try? await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)) != nil {
                    started.append(adapter)
                }
            }
            _ = try await client.waitForDevice(address: device, timeout: Recovery.reappearTimeout)
        } catch let failure {
            error = "\(failure)"
        }
        for adapter in started { try? await client.stopDiscovery(on: adapter) }
        note("\(device): \(detail)")
        await record(
            RecoveryRecord(
                action: "remove-device", ok: error == nil, device: device.uppercased(), adapter: nil,
                detail: detail, error: error))
        return error == nil
    }

    /// A connect of `device` succeeded with `linksAtStart` other links up on
    /// `adapterPath`.
    public func connectSucceeded(_ device: String, adapterPath: ObjectPath?, linksAtStart: Int) async {
        stale.succeeded(device)
        busy.succeeded(device)
        pauses[device.uppercased()] = nil
        if let adapterPath, let address = address(of: adapterPath) {
            notReadyStreak[address] = nil
            let links = await client.linksWhenConnectSent(device) ?? linksAtStart
            // What the adapter held with this link: the others up both when
            // its Connect was sent and now (one counted when sent may have
            // dropped before the controller took this one).
            let alongside = await min(links, client.linksUp(on: adapterPath, excluding: device))
            if let raised = slots.succeeded(adapter: address, linksUp: links, alongside: alongside) {
                // A limit guessed from plain aborts, proved too low.
                let adapterName = name(adapterPaths[address])
                note(
                    "\(adapterName) \(address): held \(alongside + 1) LE links; "
                        + "concurrency \(raised.from) → \(raised.to) for this run")
                await record(
                    RecoveryRecord(
                        action: "concurrency", ok: true, device: nil, adapter: address,
                        detail: "concurrency \(raised.from) → \(raised.to) on \(adapterName) \(address)"))
            }
        }
        await connectSettled(device)
    }

    /// A device's connect settled (connected, or its turn ended): discovery
    /// paused for it comes back when no other connect waits for it.
    public func connectSettled(_ device: String) async {
        let device = device.uppercased()
        for (address, devices) in paused where devices.contains(device) {
            paused[address]?.remove(device)
            guard paused[address]?.isEmpty ?? true else { continue }
            paused[address] = nil
            guard options.keepDiscovery, let adapter = await client.adapter(address: address) else { continue }
            try? await client.startDiscovery(on: adapter, everyAdvert: options.everyAdvert)
        }
    }

    /// Discovery is needed to find a device (none known to connect to).
    public func needsDiscovery() {
        let now = ContinuousClock.now
        for address in adapterPaths.keys { wedge.needsDiscovery(address, at: now) }
    }

    // MARK: Recording

    private func record(_ record: RecoveryRecord) async {
        records.append(record)
        let inventory = self.inventory
        guard let run = self.run else { return }
        _ = try? await inventory.recordStep(
            run: run, device: record.device, step: "recover",
            .init(record.ok ? .ok : .failed, detail: record.detail, error: record.error))
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func clock(_ date: Date, seconds: Bool = true) -> String {
        var instant = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        localtime_r(&instant, &parts)
        return seconds
            ? CFormat.string("%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
            : CFormat.string("%02d:%02d", parts.tm_hour, parts.tm_min)
    }
}
