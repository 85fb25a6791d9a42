import Foundation
import SafeText

/// A fault plan refused: the rule and the field, and what is wrong. What
/// it quotes from the plan is made visible and bounded (a plan may come
/// from anywhere).
public struct FaultPlanError: Error, CustomStringConvertible, Equatable {
    public let description: String
    init(_ description: String) { self.description = Visible.text(description, limit: 600) }
}

/// JSON as it is written, with integers, numbers and booleans kept apart
/// (JSONSerialization on Linux mixes them up).
enum JSONValue: Codable, Equatable, Sendable {
    case null
    case bool(Bool)
    case integer(Int)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    static func parse(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    var text: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data("null".utf8), as: UTF8.self)
    }
}

/// Reads one JSON object field by field, refusing what it does not know.
private struct Fields {
    let object: [String: JSONValue]
    /// `rule "m1": action` — where the object sits, for errors.
    let place: String

    init(_ value: JSONValue?, _ place: String) throws {
        guard case .object(let object) = value else { throw FaultPlanError("\(place): must be a JSON object") }
        self.object = object
        self.place = place
    }

    func only(_ known: [String]) throws {
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw FaultPlanError(
                "\(place): unknown field '\(unknown)' (known: \(known.joined(separator: ", ")))")
        }
    }

    func has(_ key: String) -> Bool {
        if case .some(.null) = object[key] { return false }
        return object[key] != nil
    }

    func int(_ key: String, _ range: ClosedRange<Int>) throws -> Int? {
        guard has(key) else { return nil }
        guard case .integer(let value) = object[key], range.contains(value) else {
            throw FaultPlanError("\(place).\(key): must be a whole number in \(range.lowerBound)…\(range.upperBound)")
        }
        return value
    }

    func bool(_ key: String) throws -> Bool? {
        guard has(key) else { return nil }
        guard case .bool(let value) = object[key] else {
            throw FaultPlanError("\(place).\(key): must be true or false")
        }
        return value
    }

    func string(_ key: String) throws -> String? {
        guard has(key) else { return nil }
        guard case .string(let value) = object[key] else { throw FaultPlanError("\(place).\(key): must be a string") }
        return value
    }

    func choice<T: RawRepresentable & CaseIterable>(_ key: String, _ type: T.Type) throws -> T?
    where T.RawValue == String {
        guard let text = try string(key) else { return nil }
        guard let value = T(rawValue: text) else {
            throw FaultPlanError(
                "\(place).\(key): unknown value '\(text)' (known: \(T.allCases.map(\.rawValue).joined(separator: ", ")))"
            )
        }
        return value
    }

    func probability(_ key: String) throws -> Double? {
        guard has(key) else { return nil }
        let value: Double
        switch object[key] {
        case .integer(let number): value = Double(number)
        case .number(let number): value = number
        default: throw FaultPlanError("\(place).\(key): must be a number between 0 and 1")
        }
        guard (0...1).contains(value) else { throw FaultPlanError("\(place).\(key): must be between 0 and 1") }
        return value
    }
}

extension FaultPlan {
    static let maxMs = 86_400_000

    /// Parses and checks a plan. Every error names the rule (by id, or by
    /// position before its id is known) and the field.
    public init(json text: String) throws {
        let value: JSONValue
        do {
            value = try JSONValue.parse(text)
        } catch {
            throw FaultPlanError("not valid JSON: \(Self.reason(error))")
        }
        let top = try Fields(value, "plan")
        try top.only(["seed", "adapters", "rules"])
        self.init(seed: UInt64(try top.int("seed", 0...Int.max) ?? 1))
        if top.has("adapters") {
            guard case .array(let list) = top.object["adapters"] else {
                throw FaultPlanError("plan.adapters: must be an array")
            }
            for (position, item) in list.enumerated() {
                let fields = try Fields(item, "adapters[\(position)]")
                try fields.only(["index", "slots", "slotFailure"])
                guard let index = try fields.int("index", 0...15) else {
                    throw FaultPlanError("adapters[\(position)].index: missing")
                }
                guard !adapters.contains(where: { $0.index == index }) else {
                    throw FaultPlanError("adapters[\(position)].index: adapter \(index) is given twice")
                }
                adapters.append(
                    AdapterLimit(
                        index: index, slots: try fields.int("slots", 1...64),
                        slotFailure: try fields.choice("slotFailure", SlotFailure.self) ?? .abort))
            }
        }
        if top.has("rules") {
            guard case .array(let list) = top.object["rules"] else {
                throw FaultPlanError("plan.rules: must be an array")
            }
            for (position, item) in list.enumerated() {
                let rule = try Self.rule(item, position: position)
                guard !rules.contains(where: { $0.id == rule.id }) else {
                    throw FaultPlanError("rule \"\(rule.id)\": id: given to two rules")
                }
                rules.append(rule)
            }
        }
    }

    private static func reason(_ error: Error) -> String {
        if case DecodingError.dataCorrupted(let context) = error {
            return (context.underlyingError as NSError?)?.localizedDescription ?? context.debugDescription
        }
        return "\(error)"
    }

    private static func rule(_ value: JSONValue, position: Int) throws -> Rule {
        let unnamed = try Fields(value, "rules[\(position)]")
        guard let id = try unnamed.string("id"), !id.isEmpty, id.count <= 100,
            id.allSatisfy({ $0.isASCII && !$0.isWhitespace && !$0.isNewline })
        else {
            throw FaultPlanError("rules[\(position)].id: missing, or not 1–100 printable ASCII characters")
        }
        let place = "rule \"\(id)\""
        let fields = try Fields(value, place)
        try fields.only(["id", "hook", "target", "when", "trigger", "times", "action", "beaconRate"])
        guard let hook = try fields.choice("hook", Hook.self) else { throw FaultPlanError("\(place).hook: missing") }

        var target = Target()
        if fields.has("target") {
            let t = try Fields(fields.object["target"], "\(place).target")
            try t.only(["any", "beacon", "address", "adapter", "characteristic"])
            if let any = try t.bool("any"), !any {
                throw FaultPlanError("\(place).target.any: can only be true (leave it out otherwise)")
            }
            target.beacon = try t.int("beacon", 0...100_000)
            target.address = try t.string("address")
            if let address = target.address, !Self.isAddress(address) {
                throw FaultPlanError("\(place).target.address: '\(address)' is not an address like C1:00:00:00:00:02")
            }
            target.adapter = try t.int("adapter", 0...15)
            target.characteristic = try t.string("characteristic")
            if let uuid = target.characteristic, UUID(uuidString: uuid) == nil {
                throw FaultPlanError("\(place).target.characteristic: '\(uuid)' is not a 128-bit UUID")
            }
            // A rule on a characteristic the beacon does not have would never
            // fire: a plan that tests nothing, silently.
            if let uuid = target.characteristic,
                !GattLayout.services.flatMap(\.characteristics).contains(where: {
                    $0.uuid.rawValue.lowercased() == uuid.lowercased()
                })
            {
                throw FaultPlanError(
                    "\(place).target.characteristic: an SBeacon has no characteristic \(uuid)"
                        + " (docs/simulator.md lists them)")
            }
            if target.characteristic != nil,
                ![.attRead, .attWrite, .writeLanded, .notify].contains(hook)
            {
                throw FaultPlanError(
                    "\(place).target.characteristic: only for att.read, att.write, write.landed and notify")
            }
        }

        var when = When()
        if fields.has("when") {
            let w = try Fields(fields.object["when"], "\(place).when")
            try w.only(["discovering", "linksUpAtLeast", "connected"])
            when = When(
                discovering: try w.bool("discovering"), linksUpAtLeast: try w.int("linksUpAtLeast", 0...64),
                connected: try w.bool("connected"))
        }

        let t = try Fields(fields.object["trigger"], "\(place).trigger")
        try t.only(["nth", "every", "after", "probability", "atMs"])
        let given = ["nth", "every", "probability", "atMs"].filter(t.has)
        guard given.count == 1 else {
            throw FaultPlanError("\(place).trigger: give exactly one of nth, every, probability, atMs")
        }
        if t.has("after"), given != ["every"] { throw FaultPlanError("\(place).trigger.after: only with every") }
        let trigger: Trigger
        switch given[0] {
        case "nth": trigger = .nth(try t.int("nth", 1...Int.max)!)
        case "every":
            guard try t.bool("every") == true else { throw FaultPlanError("\(place).trigger.every: must be true") }
            trigger = .every(after: try t.int("after", 0...Int.max) ?? 0)
        case "probability": trigger = .probability(try t.probability("probability")!)
        default: trigger = .atMs(try t.int("atMs", 0...maxMs)!)
        }
        if case .atMs = trigger, hook != .time { throw FaultPlanError("\(place).trigger.atMs: only with hook time") }
        if hook == .time, case .atMs = trigger {
        } else if hook == .time {
            throw FaultPlanError("\(place).trigger: hook time fires only with atMs")
        }

        let times = try fields.int("times", 1...Int.max)
        let action = try Self.action(fields.object["action"], place: "\(place).action", hook: hook)
        let beaconRate = try fields.string("beaconRate")
        if let beaconRate, Fault(rawValue: beaconRate) == nil {
            throw FaultPlanError("\(place).beaconRate: unknown fault kind '\(beaconRate)'")
        }
        return Rule(
            id: id, hook: hook, target: target, when: when, trigger: trigger, times: times, action: action,
            beaconRate: beaconRate)
    }

    /// The hooks where each action means something.
    static func hooks(of kind: String) -> Set<Hook> {
        let all = Set(Hook.allCases)
        let beacon: Set<Hook> = all.subtracting([.discoveryStart, .adapterPower])
        switch kind {
        case "fail": return all.subtracting([.time, .discoveryAdvert, .linkUp])
        case "stall": return all.subtracting([.time])
        case "drop-link": return [.linkUp, .servicesResolved, .attRead, .attWrite, .writeLanded, .notify, .time]
        case "vanish", "shift-gatt": return beacon
        case "stale": return [.connectRequested, .linkUp, .servicesResolved, .attRead, .attWrite, .writeLanded, .time]
        case "wedge", "replug", "power-off": return all
        case "busy-while-discovering": return [.connectRequested]
        case "withhold": return [.servicesResolved, .notify, .discoveryAdvert]
        default: return []
        }
    }

    private static func action(_ value: JSONValue?, place: String, hook: Hook) throws -> Action {
        let a = try Fields(value, place)
        guard let kind = try a.string("kind") else { throw FaultPlanError("\(place).kind: missing") }
        guard Action.kinds.contains(kind) else {
            throw FaultPlanError(
                "\(place).kind: unknown kind '\(kind)' (known: \(Action.kinds.joined(separator: ", ")))")
        }
        guard hooks(of: kind).contains(hook) else {
            throw FaultPlanError(
                "\(place).kind: '\(kind)' does nothing at hook \(hook.rawValue) (it applies at: "
                    + hooks(of: kind).map(\.rawValue).sorted().joined(separator: ", ") + ")")
        }
        switch kind {
        case "fail":
            try a.only(["kind", "error", "message", "afterMs"])
            let error = try a.string("error") ?? "org.bluez.Error.Failed"
            guard Self.isErrorName(error) else {
                throw FaultPlanError("\(place).error: '\(error)' is not a D-Bus error name like org.bluez.Error.Failed")
            }
            let message = try a.string("message") ?? "le-connection-abort-by-local"
            guard message.count <= 500, !message.contains(where: { $0.isNewline }) else {
                throw FaultPlanError("\(place).message: at most 500 characters, one line")
            }
            return .fail(error: error, message: message, afterMs: try a.int("afterMs", 0...maxMs) ?? 0)
        case "stall":
            try a.only(["kind", "ms", "until", "hold"])
            let ms = try a.int("ms", 0...maxMs)
            let until = try a.string("until")
            if let until, until != "released" {
                throw FaultPlanError("\(place).until: only \"released\"")
            }
            guard (ms == nil) != (until == nil) else {
                throw FaultPlanError("\(place): give either ms or \"until\": \"released\"")
            }
            let hold = try a.string("hold")
            if until != nil, hold == nil { throw FaultPlanError("\(place).hold: a stall until released needs a name") }
            if ms != nil, hold != nil { throw FaultPlanError("\(place).hold: only with \"until\": \"released\"") }
            if let hold, hold.isEmpty || hold.count > 100 {
                throw FaultPlanError("\(place).hold: 1–100 characters")
            }
            return .stall(ms: ms, hold: hold)
        case "drop-link":
            try a.only(["kind", "reason", "writeLands"])
            return .dropLink(
                reason: try a.choice("reason", DropReason.self) ?? .timeout,
                writeLands: try a.choice("writeLands", WriteLands.self) ?? .never)
        case "vanish":
            try a.only(["kind", "ms", "keepObject", "preheard"])
            var preheard: Preheard?
            if a.has("preheard") {
                let p = try Fields(a.object["preheard"], "\(place).preheard")
                try p.only(["rssi", "agoMs"])
                guard let rssi = try p.int("rssi", -127...20) else {
                    throw FaultPlanError("\(place).preheard.rssi: missing")
                }
                preheard = Preheard(rssi: rssi, agoMs: try p.int("agoMs", 0...maxMs) ?? 0)
                guard hook == .time else { throw FaultPlanError("\(place).preheard: only with hook time (atMs 0)") }
            }
            return .vanish(
                ms: try a.int("ms", 0...maxMs), keepObject: try a.bool("keepObject") ?? true, preheard: preheard)
        case "stale":
            try a.only(["kind", "flap", "afterMs"])
            return .stale(flap: try a.bool("flap") ?? true, afterMs: try a.int("afterMs", 0...maxMs))
        case "wedge":
            try a.only(["kind", "discoveryError", "connect", "sticky"])
            var abort = 20_000
            var notReady = false
            if a.has("connect") {
                let c = try Fields(a.object["connect"], "\(place).connect")
                try c.only(["abortAfterMs", "notReady"])
                abort = try c.int("abortAfterMs", 0...maxMs) ?? abort
                notReady = try c.bool("notReady") ?? false
            }
            return .wedge(
                discoveryError: try a.choice("discoveryError", DiscoveryError.self) ?? .inProgress,
                abortAfterMs: abort, sticky: try a.bool("sticky") ?? false, connectNotReady: notReady)
        case "replug":
            try a.only(["kind", "goneMs", "newIndex"])
            var newIndex: Int?
            if a.has("newIndex") {
                if case .string("next") = a.object["newIndex"] {
                    newIndex = nil
                } else {
                    guard let index = try? a.int("newIndex", 0...255) else {
                        throw FaultPlanError("\(place).newIndex: \"next\" or a number 0…255")
                    }
                    newIndex = index
                }
            }
            return .replug(goneMs: try a.int("goneMs", 0...maxMs) ?? 1500, newIndex: newIndex)
        case "shift-gatt":
            try a.only(["kind", "delta"])
            return .shiftGatt(delta: try a.int("delta", 1...4096) ?? 16)
        case "busy-while-discovering":
            try a.only(["kind"])
            return .busyWhileDiscovering
        case "withhold":
            try a.only(["kind"])
            return .withhold
        default:
            try a.only(["kind", "ms"])
            // `"ms": null`: off until a client powers it on.
            if case .some(.null) = a.object["ms"] { return .powerOff(ms: nil) }
            return .powerOff(ms: try a.int("ms", 0...maxMs) ?? 5000)
        }
    }

    static func isAddress(_ text: String) -> Bool {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 6 && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    static func isErrorName(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return text.count <= 255 && parts.count >= 2
            && parts.allSatisfy { part in
                guard let first = part.first, !first.isNumber else { return false }
                return part.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
            }
    }

    // MARK: Writing

    /// The plan as JSON, in the form `init(json:)` reads (`FaultPlan()`).
    public var json: String { jsonValue.text }

    var jsonValue: JSONValue {
        var top: [String: JSONValue] = ["seed": .integer(Int(truncatingIfNeeded: seed))]
        if !adapters.isEmpty {
            top["adapters"] = .array(
                adapters.map { limit in
                    var object: [String: JSONValue] = [
                        "index": .integer(limit.index), "slotFailure": .string(limit.slotFailure.rawValue),
                    ]
                    if let slots = limit.slots { object["slots"] = .integer(slots) }
                    return .object(object)
                })
        }
        top["rules"] = .array(rules.map(\.jsonValue))
        return .object(top)
    }
}

extension FaultPlan.Rule {
    var jsonValue: JSONValue {
        var target: [String: JSONValue] = [:]
        if self.target.isAny { target["any"] = .bool(true) }
        if let beacon = self.target.beacon { target["beacon"] = .integer(beacon) }
        if let address = self.target.address { target["address"] = .string(address) }
        if let adapter = self.target.adapter { target["adapter"] = .integer(adapter) }
        if let uuid = self.target.characteristic { target["characteristic"] = .string(uuid) }
        var object: [String: JSONValue] = [
            "id": .string(id), "hook": .string(hook.rawValue), "target": .object(target),
            "trigger": trigger.jsonValue, "action": action.jsonValue,
        ]
        var when: [String: JSONValue] = [:]
        if let discovering = self.when.discovering { when["discovering"] = .bool(discovering) }
        if let least = self.when.linksUpAtLeast { when["linksUpAtLeast"] = .integer(least) }
        if let connected = self.when.connected { when["connected"] = .bool(connected) }
        if !when.isEmpty { object["when"] = .object(when) }
        if let times { object["times"] = .integer(times) }
        if let beaconRate { object["beaconRate"] = .string(beaconRate) }
        return .object(object)
    }
}

extension FaultPlan.Trigger {
    var jsonValue: JSONValue {
        switch self {
        case .nth(let n): .object(["nth": .integer(n)])
        case .every(let after): .object(["every": .bool(true), "after": .integer(after)])
        case .probability(let p): .object(["probability": .number(p)])
        case .atMs(let ms): .object(["atMs": .integer(ms)])
        }
    }
}

extension FaultPlan.Action {
    var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["kind": .string(kind)]
        switch self {
        case .fail(let error, let message, let afterMs):
            object["error"] = .string(error)
            object["message"] = .string(message)
            object["afterMs"] = .integer(afterMs)
        case .stall(let ms, let hold):
            if let ms { object["ms"] = .integer(ms) } else { object["until"] = .string("released") }
            if let hold { object["hold"] = .string(hold) }
        case .dropLink(let reason, let writeLands):
            object["reason"] = .string(reason.rawValue)
            object["writeLands"] = .string(writeLands.rawValue)
        case .vanish(let ms, let keepObject, let preheard):
            object["ms"] = ms.map { .integer($0) } ?? .null
            object["keepObject"] = .bool(keepObject)
            if let preheard {
                object["preheard"] = .object(["rssi": .integer(preheard.rssi), "agoMs": .integer(preheard.agoMs)])
            }
        case .stale(let flap, let afterMs):
            object["flap"] = .bool(flap)
            if let afterMs { object["afterMs"] = .integer(afterMs) }
        case .wedge(let discoveryError, let abortAfterMs, let sticky, let connectNotReady):
            object["discoveryError"] = .string(discoveryError.rawValue)
            object["connect"] = .object([
                "abortAfterMs": .integer(abortAfterMs), "notReady": .bool(connectNotReady),
            ])
            object["sticky"] = .bool(sticky)
        case .replug(let goneMs, let newIndex):
            object["goneMs"] = .integer(goneMs)
            object["newIndex"] = newIndex.map { .integer($0) } ?? .string("next")
        case .shiftGatt(let delta): object["delta"] = .integer(delta)
        case .busyWhileDiscovering, .withhold: break
        case .powerOff(let ms): object["ms"] = ms.map { .integer($0) } ?? .null
        }
        return .object(object)
    }
}

// MARK: --faults as rules

extension Fault {
    /// The rules `--faults KIND=P` stands for: each at its hook, any target,
    /// probability P, with the beacon's own rate (Update's `faults`) in its
    /// place when set. Ids are `faults.KIND` (`faults.KIND.read` and
    /// `.write` for the ATT kinds).
    public func rules(probability: Double, options: SimulatorOptions) -> [FaultPlan.Rule] {
        let stall = options.stall.wholeMilliseconds
        let outage = options.outage.wholeMilliseconds
        let connectMs = options.latency.connect.wholeMilliseconds
        func rule(_ id: String, _ hook: FaultPlan.Hook, _ action: FaultPlan.Action) -> FaultPlan.Rule {
            FaultPlan.Rule(
                id: id, hook: hook, trigger: .probability(probability), action: action, beaconRate: rawValue)
        }
        let id = "faults." + rawValue
        switch self {
        case .connectInProgress:
            return [
                rule(
                    id, .connectRequested,
                    .fail(error: "org.bluez.Error.InProgress", message: "In Progress", afterMs: 0))
            ]
        case .connectAbort:
            return [
                rule(
                    id, .connectRequested,
                    .fail(error: "org.bluez.Error.Failed", message: "le-connection-abort-by-local", afterMs: connectMs))
            ]
        case .servicesNeverResolved: return [rule(id, .servicesResolved, .withhold)]
        case .disconnectMidOperation:
            return [
                rule(id + ".read", .attRead, .dropLink(reason: .timeout, writeLands: .never)),
                rule(id + ".write", .attWrite, .dropLink(reason: .timeout, writeLands: .toss)),
            ]
        case .attError:
            let fail = FaultPlan.Action.fail(
                error: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x0e", afterMs: 0)
            return [rule(id + ".read", .attRead, fail), rule(id + ".write", .attWrite, fail)]
        case .stalledReply:
            return [
                rule(id + ".read", .attRead, .stall(ms: stall, hold: nil)),
                rule(id + ".write", .attWrite, .stall(ms: stall, hold: nil)),
            ]
        case .droppedNotification: return [rule(id, .notify, .withhold)]
        case .vanish: return [rule(id, .connectRequested, .vanish(ms: outage, keepObject: true, preheard: nil))]
        case .adapterOff: return [rule(id, .connectRequested, .powerOff(ms: outage))]
        }
    }

    /// The `--faults` kind a rule id stands for (`faults.att-error.read` →
    /// att-error), for `FaultCounts`.
    static func of(ruleID: String) -> Fault? {
        let parts = ruleID.split(separator: ".")
        guard parts.count >= 2, parts[0] == "faults" else { return nil }
        return Fault(rawValue: String(parts[1]))
    }
}

extension Duration {
    /// Whole milliseconds (rounded down), for plan parameters.
    var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }
}
