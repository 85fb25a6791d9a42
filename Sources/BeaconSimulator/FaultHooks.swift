import DBusBinding
import Foundation

/// Where the daemon asks the fault plan (once at each hook), and what it
/// does with the answer: the actions that mean the same wherever they fire
/// are done here; those that depend on the step (drop-link, fail,
/// withhold) come back to the caller in an `Outcome`.
extension SimulatedBluetoothd {
    /// What a hook's caller still has to do.
    struct Outcome {
        /// Drop the link (the caller knows whether a write landed first).
        var drop: (reason: FaultPlan.DropReason, writeLands: FaultPlan.WriteLands)?
        /// Reply this error (its `afterMs` already waited).
        var failure: BusError?
        /// Leave the step out (services never resolve, a notification or
        /// an advert is lost).
        var withhold = false
    }

    /// Asks the plan at `hook` and performs what fired: adapter actions
    /// (power-off, wedge, replug), beacon marks (vanish, stale, shift-gatt),
    /// then stalls, then a failure's wait. `busy-while-discovering` becomes
    /// a failure when the adapter discovers.
    @discardableResult
    func ask(
        _ hook: FaultPlan.Hook, adapter: Int?, address: String? = nil, characteristic: String? = nil
    ) async throws -> Outcome {
        var outcome = Outcome()
        guard !plan.rules.isEmpty else { return outcome }
        let context = hookContext(adapter: adapter, address: address, characteristic: characteristic)
        let firings = plan.decide(hook, context)
        guard !firings.isEmpty else { return outcome }
        checkWaiters()
        let adapterIndex = adapter ?? 0
        var stalls: [(ms: Int?, hold: String?)] = []
        var failure: (BusError, Int)?
        for (_, action) in firings {
            switch action {
            case .powerOff(let ms):
                if adapters.indices.contains(adapterIndex) {
                    await switchOffForAWhile(adapterIndex, ms.map { .milliseconds($0) })
                    if hook == .connectRequested, failure == nil {
                        failure = (BusError(.bluez.notReady, "Resource Not Ready"), 0)
                    }
                }
            case .wedge(let discoveryError, let abortAfterMs, let sticky, let connectNotReady):
                if adapters.indices.contains(adapterIndex) {
                    wedge(
                        adapterIndex,
                        Wedge(
                            discoveryError: discoveryError, abortAfterMs: abortAfterMs, sticky: sticky,
                            connectNotReady: connectNotReady))
                }
            case .replug(let goneMs, let newIndex):
                if adapters.indices.contains(adapterIndex) {
                    await replug(adapterIndex, goneMs: goneMs, newIndex: newIndex)
                    if hook == .connectRequested || hook == .discoveryStart, failure == nil {
                        failure = (BusError(.bluez.doesNotExist, "Does Not Exist"), 0)
                    }
                }
            case .vanish(let ms, let keepObject, let preheard):
                if let address { await vanish(address, for: ms, keepObject: keepObject, preheard: preheard) }
            case .stale(let flap, let afterMs):
                if let address { stale[address] = StaleDevice(flap: flap, afterMs: afterMs) }
            case .shiftGatt(let delta):
                if let address { pendingGattShift[address, default: 0] += delta }
            case .stall(let ms, let hold):
                stalls.append((ms, hold))
            case .fail(let error, let message, let afterMs):
                if failure == nil {
                    let name = BusErrorName(error)
                    failure = (BusError(name, message), afterMs)
                }
            case .busyWhileDiscovering:
                if failure == nil, context.discovering { failure = (BusError(.bluez.inProgress, "In Progress"), 0) }
            case .dropLink(let reason, let writeLands):
                if outcome.drop == nil { outcome.drop = (reason, writeLands) }
            case .withhold:
                outcome.withhold = true
            }
        }
        for stall in stalls {
            if let ms = stall.ms {
                try? await Task.sleep(for: .milliseconds(ms))
            } else if let hold = stall.hold {
                await wait(on: hold)
            }
        }
        if let (error, afterMs) = failure {
            if afterMs > 0 { try? await Task.sleep(for: .milliseconds(afterMs)) }
            outcome.failure = error
        }
        if hook == .time, let drop = outcome.drop, let address {
            for index in adapters.indices where adapters[index].devices[address]?.connected == true {
                await disconnect(index, address, reason: drop.reason)
            }
        }
        return outcome
    }

    func hookContext(adapter: Int?, address: String?, characteristic: String?) -> FaultPlan.Context {
        var context = FaultPlan.Context(
            adapter: adapter, beacon: address.flatMap(beaconIndex), address: address,
            characteristic: characteristic, timeMs: elapsedMs)
        if let adapter, adapters.indices.contains(adapter) {
            context.linksUp = linksUp(adapter)
            context.discovering = !adapters[adapter].discoveryClients.isEmpty
            if let address { context.connected = adapters[adapter].devices[address]?.connected == true }
        }
        if let address { context.beaconRates = beacons[address]?.state.faults ?? [:] }
        return context
    }

    // MARK: Holds

    /// Holds the caller until `Release(name)`.
    func wait(on hold: String) async {
        await withCheckedContinuation { continuation in
            holds[hold, default: []].append(continuation)
            checkWaiters()
        }
    }

    /// Frees every step held under `name`.
    /// - Throws: when nothing is held under it.
    public func release(_ name: String) throws -> Int {
        guard let held = holds.removeValue(forKey: name), !held.isEmpty else {
            throw BusError(.bluez.doesNotExist, "Release: nothing is held under '\(name)'")
        }
        for continuation in held { continuation.resume() }
        return held.count
    }

    // MARK: The plan itself

    /// Replaces the plan (counts and the firing log start afresh); its
    /// `time` rules are armed (their `atMs` counts from daemon start, so a
    /// moment already past fires at once). `keepingCommandLineFaults`: the
    /// `--faults` rules stay (unless the new plan has rules of their ids).
    public func setPlan(_ newPlan: FaultPlan, keepingCommandLineFaults: Bool = false) async {
        plan = newPlan
        if keepingCommandLineFaults {
            var options = options
            options.faultPlan = newPlan
            plan = options.effectivePlan
        }
        await armTimeRules()
        checkWaiters()
    }

    public var currentPlan: FaultPlan { plan }

    /// Arms the plan's `time` rules: those at 0 ms run now (a preheard
    /// device is in place before the daemon says it is ready), the others
    /// at their moment (from daemon start).
    func armTimeRules() async {
        for rule in plan.rules where rule.hook == .time {
            guard case .atMs(let at) = rule.trigger else { continue }
            let address =
                rule.target.address
                ?? rule.target.beacon.flatMap { beaconOrder.indices.contains($0) ? beaconOrder[$0] : nil }
            let adapter = rule.target.adapter
            let delay = at - elapsedMs
            if delay <= 0 {
                _ = try? await ask(.time, adapter: adapter, address: address)
            } else {
                Task { [self] in
                    try? await Task.sleep(for: .milliseconds(delay))
                    _ = try? await ask(.time, adapter: adapter, address: address)
                }
            }
        }
    }

    /// Keeps the plan's `--faults` rule for `kind` in place (probability 0
    /// from the command line), so that a beacon's own rate for it
    /// (Update's `faults`) has a rule to act through.
    func ensureBeaconRateRules(for kinds: some Sequence<String>) {
        for kind in kinds {
            guard let fault = Fault(rawValue: kind) else { continue }
            for rule in fault.rules(probability: 0, options: options)
            where !plan.rules.contains(where: { $0.id == rule.id }) {
                plan.rules.append(rule)
            }
        }
    }
}
