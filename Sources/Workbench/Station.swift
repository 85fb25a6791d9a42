import BlueZClient
import DBusBinding
import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// How the install-bench station works (`station`).
public struct StationOptions: Sendable {
    /// The profile a beacon with no assignment is provisioned with (nil:
    /// such a beacon is skipped with that reason).
    public var profile: Profile?
    /// Only a beacon heard at least this strong is on the bench (not the
    /// pallet behind it).
    public var rssiMin: Int16
    /// Heard within this long: in range.
    public var heardWithin: Duration = .seconds(3)
    /// A beacon done with (whatever its verdict) is taken again only after
    /// it was away (not near) this long: taken off the bench and back.
    public var awayBeforeAgain: Duration = .seconds(5)
    /// Beacons worked on at once.
    public var concurrency: Int = 4
    /// Stop after this long (nil: until cancelled).
    public var runFor: Duration?
    /// Stop after this many beacons are done (nil: until cancelled); a
    /// beacon `missed` does not count.
    public var stopAfter: Int?
    /// How long a beacon gone from bluetoothd may take to come back before
    /// its step fails (then: taken away).
    public var findTimeout: Duration = .seconds(4)
    /// No new connection for a beacon after this long.
    public var deviceDeadline: Duration = .seconds(40)
    /// Connections in a row without progress before a beacon fails.
    public var deviceAttempts: Int = 3
    /// The first pause before a reconnect (doubled each time): short, the
    /// beacon lies by the adapter.
    public var retryBackoff: Duration = .milliseconds(300)
    /// Write nothing: say what would change.
    public var dryRun = false
    /// `--no-adapter-reset`: a wedged adapter is never power-cycled.
    public var adapterResets = true

    public init(profile: Profile?, rssiMin: Int16) {
        self.profile = profile
        self.rssiMin = rssiMin
    }
}

/// What became of one beacon at the station.
public struct StationResult: Sendable, Equatable {
    public enum Verdict: String, Sendable, CaseIterable {
        /// Something was written and read back: it now holds its desired state.
        case converged
        /// It held its desired state already: nothing written.
        case unchanged
        /// Not worked on: a requirement not met, no profile for it, another process has it.
        case skipped
        case failed
        /// Taken out of range while it was worked on.
        case takenAway = "taken-away"
        /// The station was stopped (Ctrl-C) while it was worked on.
        case interrupted
        /// Heard on the bench but never served before it left: queued while
        /// the slots were busy, or it left (or failed) during its connect.
        case missed
    }
    public var address: String
    public var verdict: Verdict
    /// What it was brought to: `assignment van major=250 minor=auto`, or `profile car`.
    public var target: String
    /// Why it failed or was skipped.
    public var reason: String?
    public var seconds: Double
    /// The RSSI it was taken at.
    public var rssi: Int16?
    /// Steps that changed the beacon.
    public var changedSteps: Int
    /// The identity it holds now (`250.7`), as last read back; nil when
    /// none was read.
    public var identity: String?

    public var succeeded: Bool { verdict == .converged || verdict == .unchanged }
}

/// The station's running counts.
public struct StationTally: Sendable, Equatable {
    public var counts: [StationResult.Verdict: Int] = [:]
    public var done: Int { counts.values.reduce(0, +) }
    /// Done, the beacons missed (never served) aside: what `stopAfter` counts.
    public var served: Int { done - self[.missed] }
    public var active = 0
    public init() {}
    public subscript(_ verdict: StationResult.Verdict) -> Int { counts[verdict, default: 0] }

    /// `12 done: 9 converged, 1 unchanged, 1 skipped, 1 failed, 0 taken away`.
    public var text: String {
        "\(done) done: "
            + StationResult.Verdict.allCases.filter { ($0 != .interrupted && $0 != .missed) || self[$0] > 0 }
            .map { "\(self[$0]) \($0.rawValue.replacingEvery("-", with: " "))" }.joined(separator: ", ")
    }
}

/// What the station tells as it goes.
public enum StationEvent: Sendable {
    /// A beacon came within range and its work began.
    case arrived(address: String, rssi: Int16?, target: String)
    case finished(StationResult, StationTally)
    /// The radio: bluetoothd gone or back, the adapter gone or back.
    case note(String)
}

/// The install bench: discovers continuously; each beacon that comes within
/// range (`rssiMin`) is converged to its desired state (`assign`), or
/// provisioned with the station's profile when it has none, through the
/// fleet runner's steps (require battery and firmware, sync-time,
/// calibrate, identity, apply, verify: as `provision-new.batch`). A beacon
/// is never worked on twice at once (and the inventory's claims keep other
/// processes off it); one done with is taken again only after it was away.
/// A beacon taken away half-way is reported `taken-away`, not retried for
/// ever. bluetoothd restarting, or the adapter going and coming back, is
/// ridden out: discovery is started again when they are back.
public actor Station {
    let bench: Bench
    let run: Int64
    let options: StationOptions
    let profiles: [String: Profile]
    let sharedIdentities: (any SharedIdentities)?
    let onEvent: @Sendable (StationEvent) -> Void

    private var active: Set<String> = []
    /// Done with: taken again once away for `awayBeforeAgain`.
    private var done: Set<String> = []
    /// When each beacon was last near (heard at or above `rssiMin`).
    private var lastNear: [String: ContinuousClock.Instant] = [:]
    private var tally = StationTally()
    private var results: [StationResult] = []
    /// Beacons near but not taken yet (the slots were busy): when first heard, at what RSSI.
    private var queued: [String: Int16?] = [:]
    /// Beacons under way: their work, and when each was last present
    /// (heard since discovery began, or connected).
    private var working: [String: Task<Void, Never>] = [:]
    private var lastPresent: [String: ContinuousClock.Instant] = [:]
    /// Beacons abandoned because they left: why.
    private var abandoned: [String: String] = [:]
    /// The recovery policies, for the station's whole life.
    private var recovery: RecoveryCoordinator?

    /// The recoveries done so far.
    public func recoveries() async -> [RecoveryRecord] { await recovery?.records ?? [] }

    public init(
        bench: Bench, run: Int64, options: StationOptions, profiles: [String: Profile],
        sharedIdentities: (any SharedIdentities)? = nil, onEvent: @escaping @Sendable (StationEvent) -> Void
    ) {
        self.bench = bench
        self.run = run
        self.options = options
        self.profiles = profiles
        self.sharedIdentities = sharedIdentities
        self.onEvent = onEvent
    }

    /// The steps that bring a beacon to `profile` (with `identity`).
    public static func steps(_ profile: Profile, identity: IdentityPlan?) -> [DeviceStep] {
        var steps: [DeviceStep] = [
            .requireBattery(atLeast: profile.requirements.minimumBatteryPercent),
            .requireFirmware(atLeast: profile.requirements.minimumFirmware), .syncTime, .calibrate,
        ]
        if let identity { steps.append(.identity(identity)) }
        return steps + [.apply(profile), .verify(profile)]
    }

    /// What a beacon is brought to: its assignment, else the station's
    /// profile; nil when neither can be.
    func plan(for address: String) async -> DesiredPlan? {
        let assignment = try? await bench.inventory.assignment(for: address)
        return DesiredPlan(assignment: assignment, otherwise: options.profile, profiles: profiles)
    }

    /// Runs until cancelled (Ctrl-C), `runFor` or `stopAfter`; returns
    /// every beacon's result in the order they finished (those under way
    /// when it was cancelled: `interrupted`).
    public func run() async -> [StationResult] {
        let started = ContinuousClock.now
        let client = bench.client
        var discoveringSince: ContinuousClock.Instant?
        var generation = await client.bluetoothdGeneration
        var radioDown: String?
        var recoveryOptions = RecoveryOptions(
            adapterResets: options.adapterResets, keepDiscovery: false, everyAdvert: true, stopsOnAdapterLoss: false)
        // Discovery refused is a station's only evidence: judged as a scan
        // judges it, over a scan's length.
        recoveryOptions.wedgeWindow = Recovery.stationWedgeWindow
        let recovery = RecoveryCoordinator(
            client: client, inventory: bench.inventory, run: run, concurrency: max(1, options.concurrency),
            options: recoveryOptions, note: { [onEvent] in onEvent(.note($0)) })
        self.recovery = recovery
        await recovery.start()
        do {
            while !Task.isCancelled {
                if let runFor = options.runFor, ContinuousClock.now - started >= runFor { break }
                if let stopAfter = options.stopAfter, tally.served >= stopAfter { break }
                // bluetoothd restarted (it forgets discovery), or discovery
                // could not start (the adapter was away): start it again.
                let now = await client.bluetoothdGeneration
                if now != generation {
                    generation = now
                    if discoveringSince != nil { try? await bench.endDiscovery() }
                    discoveringSince = nil
                }
                if discoveringSince == nil {
                    do {
                        // Not while our power cycle holds it off.
                        if await !recovery.isCycling() {
                            for adapter in try await bench.adapters() where !adapter.powered {
                                try await client.setPowered(adapter, true)
                            }
                        }
                        try await bench.beginDiscovery(everyAdvert: true)
                        discoveringSince = ContinuousClock.now
                        if let down = radioDown {
                            onEvent(.note("discovering again (after: \(down))"))
                            radioDown = nil
                        }
                    } catch {
                        // A wedged adapter refuses discovery: the evidence
                        // the recovery's wedge rule needs (an idle station
                        // makes no connects).
                        await recovery.discoveryRefused()
                        if radioDown == nil {
                            radioDown = "\(error)"
                            onEvent(.note("cannot discover: \(error); waiting for the adapter and bluetoothd"))
                        }
                    }
                } else if let since = discoveringSince, ContinuousClock.now - since > .seconds(3),
                    let adapters = try? await bench.adapters(), adapters.allSatisfy({ !$0.discovering })
                {
                    // The adapter came back (or was reset) without discovery;
                    // or it accepted discovery and never ran it (wedged).
                    await recovery.discoveryRefused()
                    try? await bench.endDiscovery()
                    discoveringSince = nil
                    radioDown = radioDown ?? "the adapter stopped discovering"
                    continue
                }
                // Beacons near now: heard since our discovery began (a
                // cached object, its RSSI included, is not a beacon here).
                let clock = ContinuousClock.now
                let near = await bench.present(window: options.heardWithin).filter {
                    ($0.rssi ?? -128) >= options.rssiMin
                }
                for beacon in near { lastNear[beacon.address] = clock }
                for address in done where clock - (lastNear[address] ?? clock) >= options.awayBeforeAgain {
                    done.remove(address)
                }
                await watchWorking(near: Set(near.map(\.address)), at: clock)
                let limit = min(max(1, options.concurrency), await recovery.concurrencyLimit())
                for beacon in near.sorted(by: { ($0.rssi ?? -128) > ($1.rssi ?? -128) })
                where !active.contains(beacon.address) && !done.contains(beacon.address) {
                    guard active.count < limit else {
                        // Heard, but the slots are busy: queued.
                        if queued[beacon.address] == nil { queued[beacon.address] = beacon.rssi }
                        continue
                    }
                    if let stopAfter = options.stopAfter, tally.served + active.count >= stopAfter { break }
                    queued[beacon.address] = nil
                    active.insert(beacon.address)
                    lastPresent[beacon.address] = clock
                    tally.active = active.count
                    let address = beacon.address
                    let rssi = beacon.rssi
                    working[address] = Task {
                        let result = await self.work(on: address, rssi: rssi)
                        await self.finish(result)
                    }
                }
                // Queued beacons that left before their turn: missed.
                let nearNow = Set(near.map(\.address))
                for (address, rssi) in queued
                where !nearNow.contains(address) && clock - (lastNear[address] ?? clock) >= Recovery.presenceTimeout {
                    queued[address] = nil
                    finish(
                        StationResult(
                            address: address, verdict: .missed, target: "nothing",
                            reason: "left while queued (slots busy)",
                            seconds: 0, rssi: rssi, changedSteps: 0), active: false)
                }
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        // Stopping: beacons under way finish (when cancelled, the runner
        // ends them as interrupted).
        let stopping = Task.isCancelled
        for task in working.values {
            if stopping { task.cancel() }
            await task.value
        }
        await recovery.stop()
        if discoveringSince != nil { try? await Task { try await self.bench.endDiscovery() }.value }
        return results
    }

    /// A beacon under way that is no longer present (no advert for
    /// `presenceTimeout`, not connected) left: its work is abandoned at once
    /// (the pending connect cancelled), not after connect timeouts.
    private func watchWorking(near: Set<String>, at now: ContinuousClock.Instant) async {
        for address in working.keys where abandoned[address] == nil {
            let device = await bench.client.device(address: address)
            var heard = false
            if let device { heard = await bench.client.isPresent(device, within: Recovery.presenceTimeout) }
            if device?.connected == true || heard || near.contains(address) {
                lastPresent[address] = now
                continue
            }
            guard now - (lastPresent[address] ?? now) >= Recovery.presenceTimeout else { continue }
            abandoned[address] = "its adverts stopped \(Int(Recovery.presenceTimeout.components.seconds)) s ago"
            working[address]?.cancel()
        }
    }

    private func finish(_ result: StationResult, active wasActive: Bool = true) {
        if wasActive {
            working[result.address] = nil
            lastPresent[result.address] = nil
            abandoned[result.address] = nil
        }
        active.remove(result.address)
        done.insert(result.address)
        lastNear[result.address] = ContinuousClock.now
        tally.counts[result.verdict, default: 0] += 1
        tally.active = active.count
        results.append(result)
        onEvent(.finished(result, tally))
    }

    /// One beacon, from its arrival to its verdict.
    private func work(on address: String, rssi: Int16?) async -> StationResult {
        let began = ContinuousClock.now
        func seconds() -> Double {
            let elapsed = ContinuousClock.now - began
            return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        }
        guard let plan = await plan(for: address) else {
            let reason = DesiredPlan.none(try? await bench.inventory.assignment(for: address))
            onEvent(.arrived(address: address, rssi: rssi, target: "nothing"))
            return StationResult(
                address: address, verdict: .skipped, target: "nothing", reason: reason, seconds: seconds(), rssi: rssi,
                changedSteps: 0)
        }
        onEvent(.arrived(address: address, rssi: rssi, target: plan.target))
        let client = bench.client
        let adapters = ((try? await bench.adapters()) ?? []).map(\.path)
        let runner = FleetRunner(
            client: client, inventory: bench.inventory, run: run, concurrency: 1, dryRun: options.dryRun,
            findTimeout: options.findTimeout,
            profiles: profiles, deviceAttempts: options.deviceAttempts, deviceDeadline: options.deviceDeadline,
            retryBackoff: options.retryBackoff, claimWait: .seconds(2), adapters: adapters,
            sharedIdentities: sharedIdentities,
            seenTimeout: options.findTimeout, recovery: recovery)
        let outcome = await withTaskExecutorPreference(client.bus.taskExecutor) {
            await runner.runFleet(plan.steps, on: [address])
        }
        let recap = outcome.recaps.first ?? DeviceRecap(address: address)
        var result = StationResult(
            address: address, verdict: .failed, target: plan.target, reason: recap.reason, seconds: seconds(),
            rssi: rssi, changedSteps: recap.changed)
        let stepsDone = recap.ok + recap.changed + recap.unchanged + recap.skipped
        if let left = abandoned[address] {
            // It left while served: found by its adverts stopping.
            if stepsDone == 0 {
                result.verdict = .missed
                result.reason = "left during connect (\(left))"
            } else {
                result.verdict = .takenAway
                result.reason = "taken away half-way: left during step \(stepsDone + 1) (\(left))"
            }
            return result
        }
        switch recap.result {
        case .changed where options.dryRun:
            result.verdict = .skipped
            result.reason = "dry run: \(recap.wouldChange) step\(recap.wouldChange == 1 ? "" : "s") would write"
        case .changed: result.verdict = .converged
        case .ok: result.verdict = .unchanged
        case .skipped: result.verdict = .skipped
        case .interrupted, .notStarted:
            result.verdict = .interrupted
            result.reason = recap.reason ?? "interrupted"
        case .failed:
            // Gone from the bench: not heard lately (or bluetoothd lost it).
            let here = await bench.present(window: options.heardWithin).contains { $0.address == address }
            if !here, stepsDone == 0 {
                // Never connected, and gone: heard but not served.
                result.verdict = .missed
                result.reason = "connect failed: \(recap.reason ?? "no connection")"
            } else if !here {
                result.verdict = .takenAway
                result.reason = "taken away half-way: \(recap.reason ?? "the connection was lost")"
            }
        }
        if result.succeeded, let identity = try? await bench.inventory.device(address)?.identity {
            result.identity = "\(identity.major).\(identity.minor)"
        }
        if plan.assigned, result.succeeded, !options.dryRun {
            try? await bench.inventory.markConverged(address, run: run)
        }
        return result
    }
}

/// The steps that bring one beacon to its desired state: its assignment's
/// (the profile's thresholds with the overrides, the assignment's identity
/// rule), else a profile's; the steps of provision-new.batch.
public struct DesiredPlan: Sendable, Equatable {
    public var steps: [DeviceStep]
    /// `assignment van major=250 minor=auto`, or `profile car`.
    public var target: String
    /// It comes from an assignment (a success is recorded as its convergence).
    public var assigned: Bool

    /// nil when there is no assignment and no `otherwise` profile, or the
    /// assignment names a profile that is not here.
    public init?(assignment: Assignment?, otherwise: Profile?, profiles: [String: Profile]) {
        if let assignment {
            guard var profile = profiles[assignment.profile] else { return nil }
            let identity = assignment.identityPlan(profile)
            profile.config = assignment.config(profile)
            (steps, target, assigned) = (
                Station.steps(profile, identity: identity), "assignment \(assignment.summary)", true
            )
            return
        }
        guard let profile = otherwise else { return nil }
        let identity = profile.identity.map {
            IdentityPlan(major: $0.major, minor: $0.minor == .keep ? .keep : .next, source: .profile(profile.name))
        }
        (steps, target, assigned) = (Station.steps(profile, identity: identity), "profile \(profile.name)", false)
    }

    /// Why there is no plan for a device.
    public static func none(_ assignment: Assignment?) -> String {
        assignment.map { "its assignment names profile '\($0.profile)', which this bench does not have" }
            ?? "no assignment, and no profile given for it (--profile P)"
    }
}
