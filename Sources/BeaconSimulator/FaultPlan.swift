import Foundation

/// What goes wrong, and when: a list of rules, each a hook point in the
/// simulated bluetoothd, a target, an optional condition, a trigger and an
/// action (docs/simulator.md, "Fault plans"; the design is
/// docs/bluez-failures.md, Part 3).
///
/// A pure value: no actor, no bus. The daemon calls `decide(_:_:)` once at
/// each hook, and performs the actions it returns. The plan counts
/// occurrences per rule and per target instance, draws each probability
/// rule from its own generator (seeded by the plan's seed and the rule's
/// id, so one rule's draws never shift another's), caps firings at `times`,
/// and logs what fired.
public struct FaultPlan: Sendable, Equatable {
    public var seed: UInt64
    public var adapters: [AdapterLimit]
    public var rules: [Rule]

    /// Firings per rule id.
    public private(set) var fired: [String: Int] = [:]
    /// The last `Self.logSize` firings, oldest first.
    public private(set) var recent: [Firing] = []
    private var occurrences: [String: [String: Int]] = [:]
    private var generators: [String: SplitMix64] = [:]
    static let logSize = 100

    public init(seed: UInt64 = 1, adapters: [AdapterLimit] = [], rules: [Rule] = []) {
        self.seed = seed
        self.adapters = adapters
        self.rules = rules
    }

    // MARK: Parts

    /// The hook points, where the daemon asks the plan.
    public enum Hook: String, Sendable, CaseIterable, Codable {
        /// A Device1.Connect arrived (before anything happens).
        case connectRequested = "connect.requested"
        /// Connected turned true, before the GATT tree and the reply.
        case linkUp = "link.up"
        /// The GATT tree is about to be exported and ServicesResolved set.
        case servicesResolved = "services.resolved"
        /// A ReadValue, before the beacon sees it.
        case attRead = "att.read"
        /// A WriteValue, before the beacon sees it.
        case attWrite = "att.write"
        /// A WriteValue the beacon applied, before the reply.
        case writeLanded = "write.landed"
        /// A notification about to be sent.
        case notify
        /// An Adapter1.StartDiscovery.
        case discoveryStart = "discovery.start"
        /// One advert of a beacon, heard on an adapter while discovering.
        case discoveryAdvert = "discovery.advert"
        /// A write of Adapter1.Powered.
        case adapterPower = "adapter.power"
        /// A moment after the daemon started (trigger `atMs`).
        case time
    }

    /// Whom a rule concerns: every field given must match (AND); none
    /// given (or `"any": true`) matches everything.
    public struct Target: Sendable, Equatable {
        public var beacon: Int?
        public var address: String?
        public var adapter: Int?
        /// For att.read, att.write, write.landed and notify.
        public var characteristic: String?

        public init(beacon: Int? = nil, address: String? = nil, adapter: Int? = nil, characteristic: String? = nil) {
            self.beacon = beacon
            self.address = address
            self.adapter = adapter
            self.characteristic = characteristic
        }

        public var isAny: Bool { beacon == nil && address == nil && adapter == nil && characteristic == nil }
    }

    /// Conditions checked before the trigger: only occurrences that meet
    /// them count.
    public struct When: Sendable, Equatable {
        public var discovering: Bool?
        public var linksUpAtLeast: Int?
        public var connected: Bool?
        public init(discovering: Bool? = nil, linksUpAtLeast: Int? = nil, connected: Bool? = nil) {
            self.discovering = discovering
            self.linksUpAtLeast = linksUpAtLeast
            self.connected = connected
        }
    }

    public enum Trigger: Sendable, Equatable {
        /// Once, at the nth matching occurrence (1-based).
        case nth(Int)
        /// Every matching occurrence after the first `after`.
        case every(after: Int)
        /// Each matching occurrence with probability p.
        case probability(Double)
        /// Hook `time` only: once, this long after the daemon started.
        case atMs(Int)
    }

    /// What the daemon does when a rule fires (docs/simulator.md lists
    /// where each applies).
    public enum Action: Sendable, Equatable {
        /// Reply this error (after `afterMs`); at notify, the notification
        /// is lost.
        case fail(error: String, message: String, afterMs: Int)
        /// Hold the step for `ms`, or until `Release(hold)` when ms is nil.
        case stall(ms: Int?, hold: String?)
        /// Drop the link, in BlueZ' order. At att.write, `writeLands` says
        /// whether the beacon got the write first.
        case dropLink(reason: DropReason, writeLands: WriteLands)
        /// The beacon stops advertising for `ms` (nil: for good); its links
        /// drop. `preheard`: at daemon start, its object exists as if heard
        /// `agoMs` ago at `rssi`.
        case vanish(ms: Int?, keepObject: Bool, preheard: Preheard?)
        /// Mode 1: every Connect fails until RemoveDevice.
        case stale(flap: Bool, afterMs: Int?)
        /// Mode 3: the adapter wedges until powered off and on (unless
        /// sticky). `connectNotReady`: every Connect answers NotReady at
        /// once (else it aborts after `abortAfterMs`); with `discoveryError`
        /// `.none` discovery still works and adverts are still heard.
        case wedge(discoveryError: DiscoveryError, abortAfterMs: Int, sticky: Bool, connectNotReady: Bool = false)
        /// Mode 4: the adapter goes and comes back under a new index.
        case replug(goneMs: Int, newIndex: Int?)
        /// Mode 5: the beacon's handles move by delta at its next connection.
        case shiftGatt(delta: Int)
        /// Mode 6: Connect → InProgress "In Progress" while discovering.
        case busyWhileDiscovering
        /// The step does not happen: services never resolve
        /// (services.resolved), a notification is lost (notify), an advert
        /// is not heard (discovery.advert).
        case withhold
        /// The adapter powers off for `ms`, then on again (nil: off until a
        /// client powers it on).
        case powerOff(ms: Int?)

        public var kind: String {
            switch self {
            case .fail: "fail"
            case .stall: "stall"
            case .dropLink: "drop-link"
            case .vanish: "vanish"
            case .stale: "stale"
            case .wedge: "wedge"
            case .replug: "replug"
            case .shiftGatt: "shift-gatt"
            case .busyWhileDiscovering: "busy-while-discovering"
            case .withhold: "withhold"
            case .powerOff: "power-off"
            }
        }
        static let kinds = [
            "fail", "stall", "drop-link", "vanish", "stale", "wedge", "replug", "shift-gatt",
            "busy-while-discovering", "withhold", "power-off",
        ]
    }

    public enum DropReason: String, Sendable, Equatable, CaseIterable {
        case timeout, remote, local
        /// `Device1.Disconnected(reason, message)` as BlueZ names them.
        public var bluez: (name: String, message: String) {
            switch self {
            case .timeout: ("org.bluez.Reason.Timeout", "Connection timeout")
            case .remote: ("org.bluez.Reason.Remote", "Connection terminated by remote user")
            case .local: ("org.bluez.Reason.Local", "Connection terminated by local host")
            }
        }
    }

    public enum WriteLands: String, Sendable, Equatable, CaseIterable {
        case never, always, toss
    }

    public enum DiscoveryError: String, Sendable, Equatable, CaseIterable {
        case inProgress = "in-progress"
        case notReady = "not-ready"
        /// Discovery is not refused, and adverts are still heard.
        case none
    }

    public struct Preheard: Sendable, Equatable {
        public var rssi: Int
        public var agoMs: Int
        public init(rssi: Int, agoMs: Int) {
            self.rssi = rssi
            self.agoMs = agoMs
        }
    }

    /// What happens when a Connect finds every LE slot of an adapter taken.
    public enum SlotFailure: String, Sendable, Equatable, CaseIterable {
        /// Failed "le-connection-abort-by-local" after the connect latency (BlueZ).
        case abort
        /// Failed "Connection Rejected due to Limited Resources (0x0d)".
        case limitedResources = "limited-resources"
        /// The device object goes, and comes back on its next advert.
        case vanish
    }

    public struct AdapterLimit: Sendable, Equatable {
        public var index: Int
        public var slots: Int?
        public var slotFailure: SlotFailure
        public init(index: Int, slots: Int?, slotFailure: SlotFailure = .abort) {
            self.index = index
            self.slots = slots
            self.slotFailure = slotFailure
        }
    }

    public struct Rule: Sendable, Equatable {
        public var id: String
        public var hook: Hook
        public var target: Target
        public var when: When
        public var trigger: Trigger
        public var times: Int?
        public var action: Action
        /// A `--faults` kind: a beacon's own rate for it (set through the
        /// control interface's Update) replaces `probability` for that beacon.
        public var beaconRate: String?

        public init(
            id: String, hook: Hook, target: Target = Target(), when: When = When(), trigger: Trigger,
            times: Int? = nil, action: Action, beaconRate: String? = nil
        ) {
            self.id = id
            self.hook = hook
            self.target = target
            self.when = when
            self.trigger = trigger
            self.times = times
            self.action = action
            self.beaconRate = beaconRate
        }
    }

    /// What the daemon knows at a hook.
    public struct Context: Sendable {
        public var adapter: Int?
        public var beacon: Int?
        public var address: String?
        public var characteristic: String?
        public var linksUp = 0
        public var discovering = false
        public var connected = false
        /// Milliseconds since the daemon started.
        public var timeMs = 0
        /// The beacon's own `--faults` rates (Update's `faults`).
        public var beaconRates: [String: Double] = [:]

        public init(
            adapter: Int? = nil, beacon: Int? = nil, address: String? = nil, characteristic: String? = nil,
            linksUp: Int = 0, discovering: Bool = false, connected: Bool = false, timeMs: Int = 0,
            beaconRates: [String: Double] = [:]
        ) {
            self.adapter = adapter
            self.beacon = beacon
            self.address = address
            self.characteristic = characteristic
            self.linksUp = linksUp
            self.discovering = discovering
            self.connected = connected
            self.timeMs = timeMs
            self.beaconRates = beaconRates
        }
    }

    /// One rule that fired.
    public struct Firing: Sendable, Equatable, Codable {
        public var rule: String
        public var hook: String
        /// The instance it fired on: `beacon 2 C1:…`, `adapter 0`, `any`.
        public var target: String
        public var atMs: Int
        public var kind: String
    }

    // MARK: Deciding

    /// Asks the plan at `hook`: the actions of every rule that fires now, in
    /// the plan's order. Counts the occurrence for every rule whose hook,
    /// target and conditions match.
    public mutating func decide(_ hook: Hook, _ context: Context) -> [(rule: String, action: Action)] {
        var result: [(rule: String, action: Action)] = []
        for rule in rules
        where rule.hook == hook && Self.matches(rule.target, context) && Self.meets(rule.when, context) {
            // busy-while-discovering carries its own condition.
            if rule.action == .busyWhileDiscovering, !context.discovering { continue }
            if let times = rule.times, fired[rule.id, default: 0] >= times { continue }
            let instance = Self.instance(rule.target, context)
            let count = occurrences[rule.id, default: [:]][instance, default: 0] + 1
            occurrences[rule.id, default: [:]][instance] = count
            let fires: Bool
            switch rule.trigger {
            case .nth(let n): fires = count == n
            case .every(let after): fires = count > after
            case .probability(let p):
                let rate = rule.beaconRate.flatMap { context.beaconRates[$0] } ?? p
                var generator = generators[rule.id] ?? SplitMix64(seed: seed ^ Self.hash(rule.id))
                fires = generator.chance(rate)
                generators[rule.id] = generator
            case .atMs(let at): fires = context.timeMs >= at && fired[rule.id, default: 0] == 0
            }
            guard fires else { continue }
            fired[rule.id, default: 0] += 1
            recent.append(
                Firing(
                    rule: rule.id, hook: hook.rawValue, target: Self.describe(instance), atMs: context.timeMs,
                    kind: rule.action.kind))
            if recent.count > Self.logSize { recent.removeFirst(recent.count - Self.logSize) }
            result.append((rule.id, rule.action))
        }
        return result
    }

    /// Forgets what was counted and fired (the rules stay).
    public mutating func reset() {
        fired = [:]
        recent = []
        occurrences = [:]
        generators = [:]
    }

    static func matches(_ target: Target, _ context: Context) -> Bool {
        if let beacon = target.beacon, context.beacon != beacon { return false }
        if let address = target.address, context.address?.uppercased() != address.uppercased() { return false }
        if let adapter = target.adapter, context.adapter != adapter { return false }
        if let uuid = target.characteristic, context.characteristic?.lowercased() != uuid.lowercased() { return false }
        return true
    }

    static func meets(_ when: When, _ context: Context) -> Bool {
        if let discovering = when.discovering, context.discovering != discovering { return false }
        if let least = when.linksUpAtLeast, context.linksUp < least { return false }
        if let connected = when.connected, context.connected != connected { return false }
        return true
    }

    /// Occurrences are counted per beacon when the hook concerns one, else
    /// per adapter.
    static func instance(_ target: Target, _ context: Context) -> String {
        if let address = context.address { return "beacon \(context.beacon.map(String.init) ?? "?") \(address)" }
        if let adapter = context.adapter { return "adapter \(adapter)" }
        return "any"
    }

    static func describe(_ instance: String) -> String { instance }

    /// FNV-1a, 64 bits: stable across runs and machines (Hasher is not).
    static func hash(_ text: String) -> UInt64 {
        var value: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in text.utf8 {
            value ^= UInt64(byte)
            value &*= 0x0000_0100_0000_01B3
        }
        return value
    }

    /// The slot limit and failure for adapter `index`, if the plan sets one.
    public func limit(forAdapter index: Int) -> AdapterLimit? { adapters.first { $0.index == index } }

    /// Rule ids → firings, and the last firings, as `FiredRules()` answers.
    public struct Report: Codable, Sendable, Equatable {
        public var fired: [String: Int]
        public var recent: [Firing]
    }

    public var report: Report { Report(fired: fired, recent: recent) }
}
