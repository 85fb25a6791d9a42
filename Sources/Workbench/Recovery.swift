/// The recovery policies of issue 26 (docs/bluez-failures.md, Part 3.4;
/// docs/reliability.md, "Recovering without an operator"): how a failure
/// is classified, and the per-run state machines that decide when to
/// remove a device, lower an adapter's concurrency, power-cycle an adapter
/// or pause discovery. Pure values: no D-Bus, no clock of their own (every
/// call is given `now`), so each machine is unit-tested on its own; the
/// fleet runner and the station feed them and carry out what they decide.
public enum Recovery {
    // MARK: Constants (one place; docs/reliability.md lists them)

    /// Consecutive stale-class connect failures on one device (no success
    /// in between) that lead to one `RemoveDevice`.
    public static let staleLimit = 3
    /// After a `RemoveDevice`: how long the device may take to be heard
    /// again (InterfacesAdded and an advert, on any adapter).
    public static let reappearTimeout: Duration = .seconds(10)
    /// The pause before retrying after a stale-class failure (bleak-retry-
    /// connector's transient backoff).
    public static let staleBackoff: Duration = .milliseconds(250)
    /// After a slot failure: retry when a link on that adapter drops, or
    /// after this long, whichever is first (bleak-retry-connector's
    /// `BLEAK_OUT_OF_SLOTS_BACKOFF_TIME`).
    public static let slotBackoff: Duration = .seconds(4)
    /// A limit learned from plain aborts alone is a guess (a random abort
    /// looks the same): after this many connects succeed with the adapter
    /// full at that limit, one connect more is allowed (a probe). A probe
    /// refused doubles the count for the next; a connect that succeeds with
    /// as many links up as the limit raises it (docs/reliability.md, 2).
    public static let slotProbeAfter = 3
    /// The wedge detector's window: discovery refusals, connect failures
    /// and no advert on an adapter that reads Powered, all for this long.
    public static let wedgeWindow: Duration = .seconds(15)
    /// A station's window (it makes no connects while idle, so discovery
    /// refused is all the evidence there is): the length of
    /// `provision-new.batch`'s scan, after which `scan` power-cycles an
    /// adapter whose discovery never ran.
    public static let stationWedgeWindow: Duration = .seconds(10)
    /// StartDiscovery refusals within the window that count as wedged.
    public static let wedgeDiscoveryRefusals = 3
    /// Connect failures within the window that count as wedged (or none
    /// attempted because discovery was needed first).
    public static let wedgeConnectFailures = 2
    /// At most one power cycle per adapter within this long.
    public static let resetInterval: Duration = .seconds(600)
    /// Power cycle: how long Powered may take to read false, the pause
    /// off, how long Powered may take to read true.
    public static let powerOffTimeout: Duration = .seconds(5)
    public static let powerOffTime: Duration = .seconds(2)
    public static let powerOnTimeout: Duration = .seconds(10)
    /// How long an adapter that went away may take to come back (by its
    /// address) before the run fails with exit status 3.
    public static let adapterReturnTimeout: Duration = .seconds(30)
    /// How long an adapter that reads unpowered (switched off: rfkill,
    /// `bluetoothctl power off`) may take to be powered again, counted
    /// from when it was first seen off; then its devices fail ("adapter …
    /// switched off"), and when no adapter of the run is left the run
    /// stops with exit status 3.
    public static let adapterOffTimeout: Duration = .seconds(15)
    /// Connects answered NotReady by an adapter that reads Powered, with
    /// no connect succeeding on it in between: the controller refuses
    /// what its adapter says it can do — wedged, whether or not adverts
    /// are still heard.
    public static let notReadyWedge = 3
    /// The pause before retrying a connect that was not the beacon's
    /// failure (busy, NotReady): the first, doubling per device up to
    /// `unchargedBackoffCap`, back to the first after a connect succeeds.
    public static let unchargedBackoff: Duration = .milliseconds(250)
    public static let unchargedBackoffCap: Duration = .seconds(2)
    /// Waits that were not the beacon's (slots, busy, an adapter off or
    /// wedged) per device turn: past this much, its failures are charged
    /// like any other (the 4 / 12 / 90 s rules then end it).
    public static let unchargedTimeLimit: Duration = .seconds(60)
    /// A beacon with no advert for this long is gone.
    public static let presenceTimeout: Duration = .seconds(5)
    /// Busy while discovering: retries per device with discovery paused,
    /// the pause before each.
    public static let busyRetries = 3
    public static let busyBackoff: Duration = .milliseconds(250)
    /// Busy with discovery off: how long to wait for the device's
    /// Connected to change.
    public static let busyWait: Duration = .seconds(5)
    /// A connect failure on an adapter under suspicion (discovery refused
    /// since its last advert, or nothing heard on it at all while
    /// discovering with every advert): adapter class, retried uncharged
    /// after this pause while the wedge detector decides.
    public static let suspectAdapterPause: Duration = .seconds(1)
    /// Discovering, connects failing, and no advert on the adapter for this
    /// long: discovery is stopped and started again (a wedged controller
    /// then refuses, which is the wedge detector's evidence).
    public static let quietRestart: Duration = .seconds(5)

    // MARK: Classification

    /// The class of a failure (docs/bluez-failures.md 3.4's table), which
    /// decides whether it counts toward the stale limit and whether it is
    /// charged to the beacon's retry budget.
    public enum FailureClass: String, Sendable, Equatable, CaseIterable {
        /// The adapter: NotReady, a discovery refusal, absent or wedged.
        case adapter
        /// Connect answered InProgress.
        case busy
        /// The adapter's connection slots are full.
        case slot
        /// The beacon has not been heard lately: it left.
        case gone
        /// An abort on a beacon in range with slots to spare.
        case stale
        /// None of the above: the runner's ordinary rules apply.
        case other

        /// Charged to the beacon's retry budget. Slot, busy and adapter
        /// failures are the bench's, not the beacon's.
        public var charged: Bool {
            switch self {
            case .slot, .busy, .adapter: false
            case .gone, .stale, .other: true
            }
        }
    }

    /// A failure as the policies see it: BlueZ' error name (or nil for a
    /// timeout or a local condition) and message, and what was true at
    /// the moment.
    public struct Failure: Sendable, Equatable {
        /// `org.bluez.Error.Failed`, or nil (a timeout, the device gone…).
        public var name: String?
        public var message: String
        /// The operation was StartDiscovery (not a Connect).
        public var fromDiscovery = false
        /// The adapter was absent (removed) or judged wedged.
        public var adapterAbsentOrWedged = false
        /// The device's object went away during its own Connect.
        public var deviceRemovedDuringConnect = false
        /// Other links up on the adapter (the larger of the counts at the
        /// start and at the end of the Connect; the device itself excluded).
        public var linksUp = 0
        /// The beacon was heard (an advert) within `presenceTimeout`.
        public var heardRecently = true

        public init(
            name: String?, message: String, fromDiscovery: Bool = false, adapterAbsentOrWedged: Bool = false,
            deviceRemovedDuringConnect: Bool = false, linksUp: Int = 0, heardRecently: Bool = true
        ) {
            self.name = name
            self.message = message
            self.fromDiscovery = fromDiscovery
            self.adapterAbsentOrWedged = adapterAbsentOrWedged
            self.deviceRemovedDuringConnect = deviceRemovedDuringConnect
            self.linksUp = linksUp
            self.heardRecently = heardRecently
        }

        /// The short name of the failure for a recovery's detail:
        /// `le-connection-abort-by-local`, `InProgress`.
        public var kind: String {
            let lower = message.lowercased()
            for text in Recovery.abortTexts + ["br-connection-canceled"] where lower.contains(text) { return text }
            if let name { return String(name.split(separator: ".").last ?? Substring(name)) }
            return message.isEmpty ? "failure" : String(message.prefix(60))
        }
    }

    /// The texts of an abort (what BlueZ makes of every asynchronous LE
    /// connect failure, slot refusals included: docs/bluez-failures.md 1.2).
    static let abortTexts = ["le-connection-abort-by-local", "software caused connection abort", "input/output error"]
    /// Texts that name a full controller outright.
    static let slotTexts = [
        "limited resources", "connection limit", "too many links", "concurrent-connection-limit", "no resources",
        "memory capacity",
    ]

    static func isAbort(_ failure: Failure) -> Bool {
        let lower = failure.message.lowercased()
        return abortTexts.contains { lower.contains($0) }
    }

    /// The class before the slot learner's view: `.slot` for an outright
    /// slot failure, `.stale` for an abort that the learner may still call
    /// a slot failure (see `SlotLearner.judge`).
    public static func preliminaryClass(_ failure: Failure) -> FailureClass {
        let name = failure.name ?? ""
        let lower = failure.message.lowercased()
        if name == "org.bluez.Error.NotReady" || failure.adapterAbsentOrWedged
            || (failure.fromDiscovery && (name == "org.bluez.Error.InProgress" || name == "org.bluez.Error.Failed"))
        {
            return .adapter
        }
        if name == "org.bluez.Error.InProgress" || lower.contains("br-connection-busy") { return .busy }
        if slotTexts.contains(where: { lower.contains($0) }) { return .slot }
        if failure.deviceRemovedDuringConnect, failure.linksUp >= 1 { return .slot }
        let abort = isAbort(failure) || lower.contains("br-connection-canceled")
        if abort, !failure.heardRecently { return .gone }
        if abort { return .stale }
        return .other
    }

    // MARK: Stale devices

    /// Per device: consecutive stale-class failures, and whether the device
    /// was removed since its last success (at most once).
    public struct StaleCounter: Sendable, Equatable {
        public private(set) var consecutive: [String: Int] = [:]
        public private(set) var removed: Set<String> = []
        /// The last stale failure's kind per device, for the detail.
        private var lastKind: [String: String] = [:]

        public init() {}

        /// A stale-class failure on `device`: the detail of a removal when
        /// one is due (`remove-device after 3 × le-connection-abort-by-local`),
        /// else nil. Other classes neither count nor reset the count.
        /// `mayRemove` false (the device was not heard since its first
        /// failure of the streak, where that is known: a wedged adapter
        /// hears nothing, and removing a device there cures nothing): the
        /// failure counts, the removal waits for a failure where it may.
        public mutating func staleFailure(_ device: String, kind: String, mayRemove: Bool = true) -> String? {
            let device = device.uppercased()
            consecutive[device, default: 0] += 1
            lastKind[device] = kind
            guard consecutive[device, default: 0] >= Recovery.staleLimit, !removed.contains(device), mayRemove else {
                return nil
            }
            removed.insert(device)
            let count = consecutive[device, default: 0]
            consecutive[device] = 0
            return "remove-device after \(count) × \(kind)"
        }

        /// A connect to `device` succeeded: its count and its removal are forgotten.
        public mutating func succeeded(_ device: String) {
            let device = device.uppercased()
            consecutive[device] = nil
            removed.remove(device)
        }
    }

    // MARK: Slot limits

    /// Per adapter (by address): the LE link limit learned from slot
    /// failures, and the concurrency it allows. `--concurrency` is the
    /// ceiling. A limit the adapter named (a slot text, or a device object
    /// gone during its connect) is firm: never raised in a run. A limit
    /// learned from plain aborts alone is tentative: a connect that succeeds
    /// with as many other links up as the limit raises it to what was held,
    /// and after `Recovery.slotProbeAfter` connects succeed with the adapter
    /// full one connect more is allowed, to find out (a refused probe
    /// doubles that count).
    public struct SlotLearner: Sendable, Equatable {
        public let ceiling: Int
        public private(set) var learned: [String: Int] = [:]
        /// Adapters whose limit came from plain aborts alone (probed).
        public private(set) var tentative: Set<String> = []
        /// Provisional slot aborts before a limit is learned: adapter →
        /// links up → beacons that aborted there.
        private var provisional: [String: [Int: Set<String>]] = [:]
        /// The most other links up at a successful connect, per adapter:
        /// the adapter holds more than that.
        private var succeededAt: [String: Int] = [:]
        /// Per tentative adapter: connects that succeeded with the adapter
        /// full at its limit since it was learned, raised or last probed.
        private var fullSuccesses: [String: Int] = [:]
        /// Per tentative adapter: full successes before the next probe.
        private var probeAfter: [String: Int] = [:]
        /// Tentative adapters allowed one connect beyond their limit now.
        public private(set) var probing: Set<String> = []

        public init(ceiling: Int) { self.ceiling = max(1, ceiling) }

        /// Connections allowed at once on `adapter` (one more while a
        /// tentative limit is probed).
        public func limit(for adapter: String) -> Int {
            let adapter = adapter.uppercased()
            guard let known = learned[adapter] else { return ceiling }
            return min(ceiling, probing.contains(adapter) ? known + 1 : known)
        }

        /// What a judged failure comes to.
        public struct Judgement: Sendable, Equatable {
            public var failureClass: FailureClass
            /// The concurrency was lowered: from, to (say so once).
            public var lowered: (from: Int, to: Int)?
            /// Wait until fewer than this many links are up (a slot failure).
            public var waitBelow: Int?

            public static func == (lhs: Judgement, rhs: Judgement) -> Bool {
                lhs.failureClass == rhs.failureClass && lhs.lowered?.from == rhs.lowered?.from
                    && lhs.lowered?.to == rhs.lowered?.to && lhs.waitBelow == rhs.waitBelow
            }
        }

        /// Judges a connect failure of `device` on `adapter`: an outright
        /// slot failure teaches the limit; an abort with other links up is
        /// a slot failure at or above the learned limit, and before one is
        /// learned a provisional one (two beacons aborting at the same
        /// number of links fix the limit there, tentatively). An abort at or
        /// above a probed limit ends the probe.
        public mutating func judge(_ failure: Failure, device: String, adapter: String) -> Judgement {
            let adapter = adapter.uppercased()
            let device = device.uppercased()
            let links = failure.linksUp
            switch Recovery.preliminaryClass(failure) {
            case .slot:
                let lowered = learn(max(1, links), on: adapter, firm: true)
                return Judgement(failureClass: .slot, lowered: lowered, waitBelow: max(1, links))
            case .stale where links >= 1 && Recovery.isAbort(failure):
                if let limit = learned[adapter] {
                    guard links >= limit else { return Judgement(failureClass: .stale, lowered: nil, waitBelow: nil) }
                    if probing.remove(adapter) != nil {
                        // The probe refused: the limit stands; probe again later.
                        fullSuccesses[adapter] = 0
                        probeAfter[adapter] = min(
                            2 * probeAfter[adapter, default: Recovery.slotProbeAfter], 1 << 20)
                    }
                    return Judgement(failureClass: .slot, lowered: nil, waitBelow: limit)
                }
                // A connect succeeded with as many links up: slots were free.
                if links <= succeededAt[adapter, default: -1] {
                    return Judgement(failureClass: .stale, lowered: nil, waitBelow: nil)
                }
                var seen = provisional[adapter, default: [:]][links, default: []]
                seen.insert(device)
                provisional[adapter, default: [:]][links] = seen
                let lowered = seen.count >= 2 ? learn(links, on: adapter, firm: false) : nil
                return Judgement(failureClass: .slot, lowered: lowered, waitBelow: links)
            case let other:
                return Judgement(failureClass: other, lowered: nil, waitBelow: nil)
            }
        }

        /// A connect on `adapter` succeeded with `linksUp` other links up
        /// when it was sent: the adapter holds more than that, so
        /// provisional aborts at or below it were not slot failures.
        /// `alongside` (default `linksUp`): the other links up with it
        /// for sure (up when it was sent and still up when it succeeded); a
        /// tentative limit at or below that is raised to `alongside + 1` (to
        /// the ceiling: forgotten), and at one below it the adapter was
        /// full. The raise, if any (from, to: say so).
        @discardableResult
        public mutating func succeeded(adapter: String, linksUp: Int, alongside: Int? = nil) -> (from: Int, to: Int)? {
            let adapter = adapter.uppercased()
            succeededAt[adapter] = max(succeededAt[adapter, default: -1], linksUp)
            provisional[adapter] = provisional[adapter]?.filter { $0.key > linksUp }
            let linksUp = min(linksUp, alongside ?? linksUp)
            guard tentative.contains(adapter), let known = learned[adapter] else { return nil }
            if linksUp >= known {
                probing.remove(adapter)
                fullSuccesses[adapter] = 0
                if linksUp + 1 >= ceiling {
                    learned[adapter] = nil
                    tentative.remove(adapter)
                    probeAfter[adapter] = nil
                } else {
                    learned[adapter] = linksUp + 1
                }
                let after = limit(for: adapter)
                return after > known ? (known, after) : nil
            }
            // The adapter full at its limit, and the connect went well.
            if linksUp == known - 1, !probing.contains(adapter), known < ceiling {
                fullSuccesses[adapter, default: 0] += 1
                if fullSuccesses[adapter, default: 0] >= probeAfter[adapter, default: Recovery.slotProbeAfter] {
                    probing.insert(adapter)
                }
            }
            return nil
        }

        /// Fixes the limit at `limit` (never raised but by a tentative
        /// limit's evidence); the lowering, if any. A firm limit stays firm.
        private mutating func learn(_ limit: Int, on adapter: String, firm: Bool) -> (from: Int, to: Int)? {
            let before = self.limit(for: adapter)
            // A lower limit stands (a tentative one is still probed); the
            // same limit named outright is firm from now on.
            if let known = learned[adapter], known <= limit {
                if firm, known == limit {
                    tentative.remove(adapter)
                    probing.remove(adapter)
                }
                return nil
            }
            learned[adapter] = limit
            if firm { tentative.remove(adapter) } else { tentative.insert(adapter) }
            provisional[adapter] = nil
            fullSuccesses[adapter] = 0
            probing.remove(adapter)
            let after = self.limit(for: adapter)
            return after < before ? (before, after) : nil
        }
    }

    // MARK: Wedged adapters

    /// Per adapter (by address): the evidence of a wedge within
    /// `wedgeWindow`, and when each was last power-cycled.
    public struct WedgeDetector: Sendable, Equatable {
        struct Evidence: Sendable, Equatable {
            var refusals: [ContinuousClock.Instant] = []
            var connectFailures: [ContinuousClock.Instant] = []
            /// Discovery needed before any connect (nothing to connect to).
            var waitingForDiscovery: ContinuousClock.Instant?
            var lastAdvert: ContinuousClock.Instant?
            /// When the trouble began (the first refusal or failure since
            /// the last advert).
            var since: ContinuousClock.Instant?
        }
        private var evidence: [String: Evidence] = [:]
        public private(set) var lastReset: [String: ContinuousClock.Instant] = [:]

        public init() {}

        private mutating func note(
            _ adapter: String, _ now: ContinuousClock.Instant, _ change: (inout Evidence) -> Void
        ) {
            let key = adapter.uppercased()
            var current = evidence[key] ?? Evidence()
            if current.since == nil { current.since = now }
            change(&current)
            evidence[key] = current
        }

        /// StartDiscovery refused (InProgress, NotReady, Failed), or
        /// Discovering still false after a StartDiscovery that succeeded.
        public mutating func discoveryRefused(_ adapter: String, at now: ContinuousClock.Instant) {
            note(adapter, now) { $0.refusals.append(now) }
        }

        /// A connect on the adapter failed.
        public mutating func connectFailed(_ adapter: String, at now: ContinuousClock.Instant) {
            note(adapter, now) { $0.connectFailures.append(now) }
        }

        /// Nothing could be connected because discovery is needed first.
        public mutating func needsDiscovery(_ adapter: String, at now: ContinuousClock.Instant) {
            note(adapter, now) { if $0.waitingForDiscovery == nil { $0.waitingForDiscovery = now } }
        }

        /// An advert was heard on the adapter: it works; the evidence goes.
        public mutating func advertHeard(_ adapter: String, at now: ContinuousClock.Instant) {
            evidence[adapter.uppercased()] = Evidence(lastAdvert: now)
        }

        /// Whether `adapter` is wedged now: Powered reads true, and for the
        /// whole window (`wedgeWindow`; a station's `stationWedgeWindow`) there were at least `wedgeDiscoveryRefusals`
        /// refusals, no advert, and at least `wedgeConnectFailures` connect
        /// failures or none attempted because discovery was needed.
        public func isWedged(
            _ adapter: String, powered: Bool, at now: ContinuousClock.Instant, window: Duration = Recovery.wedgeWindow
        ) -> Bool {
            guard powered, let current = evidence[adapter.uppercased()], let since = current.since,
                now - since >= window
            else { return false }
            let windowStart = now - window
            if let advert = current.lastAdvert, advert >= windowStart { return false }
            guard current.refusals.count >= Recovery.wedgeDiscoveryRefusals else { return false }
            return current.connectFailures.count >= Recovery.wedgeConnectFailures
                || current.waitingForDiscovery != nil
        }

        /// When the adapter's current trouble began (nil: none since its
        /// last advert), and the discovery refusals since.
        public func trouble(_ adapter: String) -> (since: ContinuousClock.Instant, refusals: Int)? {
            guard let current = evidence[adapter.uppercased()], let since = current.since else { return nil }
            return (since, current.refusals.count)
        }

        /// Whether a power cycle of `adapter` may be done now; if not, why.
        public enum ResetDecision: Sendable, Equatable {
            case allowed
            /// `--no-adapter-reset`.
            case disabled
            /// One was done at that moment, within `resetInterval`.
            case alreadyTried(at: ContinuousClock.Instant)
        }

        public func mayReset(_ adapter: String, at now: ContinuousClock.Instant, resetsAllowed: Bool) -> ResetDecision {
            guard resetsAllowed else { return .disabled }
            if let last = lastReset[adapter.uppercased()], now - last < Recovery.resetInterval {
                return .alreadyTried(at: last)
            }
            return .allowed
        }

        /// A power cycle was done (or tried): the evidence starts afresh.
        public mutating func reset(_ adapter: String, at now: ContinuousClock.Instant) {
            lastReset[adapter.uppercased()] = now
            evidence[adapter.uppercased()] = nil
        }
    }

    // MARK: Busy while discovering

    /// Connect answered InProgress while our discovery runs: discovery is
    /// paused on that adapter for the connect (recorded once per adapter),
    /// and the device retried up to `busyRetries` times.
    public struct BusyPolicy: Sendable, Equatable {
        private var recorded: Set<String> = []
        private var retries: [String: Int] = [:]
        public init() {}

        public enum Decision: Sendable, Equatable {
            /// Stop discovery on the adapter (`record`: first time on it:
            /// write the recovery row), retry after `busyBackoff`.
            case pauseDiscovery(record: Bool)
            /// Discovery is off already (or the retries are spent): wait
            /// until the device's Connected changes, up to `busyWait`.
            case waitForDevice
        }

        public mutating func busy(device: String, adapter: String, discovering: Bool) -> Decision {
            let device = device.uppercased()
            let adapter = adapter.uppercased()
            guard discovering, retries[device, default: 0] < Recovery.busyRetries else { return .waitForDevice }
            retries[device, default: 0] += 1
            return .pauseDiscovery(record: recorded.insert(adapter).inserted)
        }

        public mutating func succeeded(_ device: String) { retries[device.uppercased()] = nil }
    }

    // MARK: Presence

    /// A beacon is present only from signals heard since our discovery
    /// began (`since`): never from a cached object or RSSI alone. Gone
    /// after `presenceTimeout` without one.
    public static func isPresent(
        lastHeard: ContinuousClock.Instant?, discoveringSince: ContinuousClock.Instant?,
        at now: ContinuousClock.Instant
    ) -> Bool {
        guard let lastHeard, let since = discoveringSince, lastHeard >= since else { return false }
        return now - lastHeard < presenceTimeout
    }
}
