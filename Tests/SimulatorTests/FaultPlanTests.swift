import Foundation
import Testing

@testable import BeaconSimulator

/// The fault plan as a value: parsed strictly, and deciding deterministically.
@Suite("Fault plans: parsing, checking and deciding", .timeLimit(.minutes(2)))
struct FaultPlanTests {
    static let beacon2 = FaultPlan.Context(adapter: 0, beacon: 2, address: "C1:00:00:00:00:02")
    static let beacon3 = FaultPlan.Context(adapter: 0, beacon: 3, address: "C1:00:00:00:00:03")

    static func plan(_ rules: String, seed: Int = 7) throws -> FaultPlan {
        try FaultPlan(json: #"{"seed": \#(seed), "rules": [\#(rules)]}"#)
    }

    /// Which occurrences (1-based) fire, of `count` asks with `context`.
    static func firings(
        _ plan: inout FaultPlan, _ hook: FaultPlan.Hook, _ context: FaultPlan.Context, _ count: Int
    )
        -> [Int]
    {
        (1...count).filter { _ in !plan.decide(hook, context).isEmpty }
    }

    @Test func nthFiresOnceAtTheNthOccurrenceOfEachBeacon() throws {
        var plan = try Self.plan(
            #"{"id": "n2", "hook": "write.landed", "target": {"any": true}, "trigger": {"nth": 2}, "action": {"kind": "drop-link"}}"#
        )
        #expect(Self.firings(&plan, .writeLanded, Self.beacon2, 5) == [2])
        #expect(Self.firings(&plan, .writeLanded, Self.beacon3, 5) == [2])
        #expect(plan.fired == ["n2": 2])
        #expect(plan.recent.map(\.target) == ["beacon 2 C1:00:00:00:00:02", "beacon 3 C1:00:00:00:00:03"])
        #expect(plan.recent.allSatisfy { $0.hook == "write.landed" && $0.kind == "drop-link" })
        // Other hooks do not count.
        #expect(plan.decide(.attWrite, Self.beacon2).isEmpty)
    }

    @Test func everyFiresAfterTheFirstKAndTimesCapsIt() throws {
        var plan = try Self.plan(
            #"{"id": "e", "hook": "connect.requested", "trigger": {"every": true, "after": 2}, "times": 3, "action": {"kind": "fail"}}"#
        )
        #expect(Self.firings(&plan, .connectRequested, Self.beacon2, 10) == [3, 4, 5])
        #expect(plan.fired["e"] == 3)
        let fired = plan.decide(.connectRequested, Self.beacon3)
        #expect(fired.isEmpty, "times caps firings over every instance")
    }

    @Test func probabilityIsDeterministicPerSeedAndRuleAndIndependentOfOtherRules() throws {
        let rule = #"{"id": "p", "hook": "att.read", "trigger": {"probability": 0.3}, "action": {"kind": "fail"}}"#
        let other =
            #"{"id": "q", "hook": "att.read", "trigger": {"probability": 0.5}, "action": {"kind": "stall", "ms": 1}}"#
        var first = try Self.plan(rule)
        var second = try Self.plan(rule)
        var withOther = try Self.plan(other + "," + rule)
        var otherSeed = try Self.plan(rule, seed: 8)
        let a = Self.firings(&first, .attRead, Self.beacon2, 400)
        let b = Self.firings(&second, .attRead, Self.beacon2, 400)
        let c = (1...400).filter { _ in withOther.decide(.attRead, Self.beacon2).contains { $0.rule == "p" } }
        let d = Self.firings(&otherSeed, .attRead, Self.beacon2, 400)
        #expect(a == b)
        #expect(a == c, "another rule's draws shift nothing")
        #expect(a != d, "another seed draws otherwise")
        #expect((80...160).contains(a.count), "\(a.count) of 400 at p = 0.3")
    }

    @Test func targetsAndConditionsNarrowWhatCounts() throws {
        var plan = try Self.plan(
            """
            {"id": "b2", "hook": "att.write", "target": {"beacon": 2, "characteristic": "53420201-6561-636F-6E00-000000000000"},
             "trigger": {"nth": 1}, "action": {"kind": "fail"}},
            {"id": "addr", "hook": "connect.requested", "target": {"address": "c1:00:00:00:00:03"}, "trigger": {"nth": 1},
             "action": {"kind": "fail"}},
            {"id": "ad1", "hook": "discovery.start", "target": {"adapter": 1}, "trigger": {"nth": 1},
             "action": {"kind": "wedge"}},
            {"id": "busy", "hook": "connect.requested", "when": {"discovering": true, "linksUpAtLeast": 1},
             "trigger": {"every": true}, "action": {"kind": "busy-while-discovering"}}
            """)
        var write = Self.beacon2
        write.characteristic = "53420202-0000-1000-8000-00805f9b34fb"
        #expect(plan.decide(.attWrite, write).isEmpty, "another characteristic")
        write.characteristic = "53420201-6561-636f-6e00-000000000000"
        #expect(plan.decide(.attWrite, write).map(\.rule) == ["b2"])
        #expect(plan.decide(.connectRequested, Self.beacon2).isEmpty)
        #expect(plan.decide(.connectRequested, Self.beacon3).map(\.rule) == ["addr"])
        #expect(plan.decide(.discoveryStart, FaultPlan.Context(adapter: 0)).isEmpty)
        #expect(plan.decide(.discoveryStart, FaultPlan.Context(adapter: 1)).map(\.rule) == ["ad1"])
        var busy = Self.beacon2
        busy.discovering = true
        #expect(plan.decide(.connectRequested, busy).isEmpty, "no link up")
        busy.linksUp = 1
        #expect(plan.decide(.connectRequested, busy).map(\.rule) == ["busy"])
        busy.discovering = false
        #expect(plan.decide(.connectRequested, busy).isEmpty)
    }

    @Test func timeRulesFireOnceAtTheirMoment() throws {
        var plan = try Self.plan(
            #"{"id": "t", "hook": "time", "target": {"beacon": 4}, "trigger": {"atMs": 500}, "action": {"kind": "vanish", "ms": null}}"#
        )
        var context = FaultPlan.Context(beacon: 4, address: "C1:00:00:00:00:04", timeMs: 100)
        #expect(plan.decide(.time, context).isEmpty)
        context.timeMs = 600
        #expect(plan.decide(.time, context).map(\.rule) == ["t"])
        #expect(plan.decide(.time, context).isEmpty)
    }

    @Test func aBeaconsOwnRateReplacesAFaultsRuleProbability() throws {
        var options = SimulatorOptions()
        options.faults = [.attError: 0]
        var plan = options.effectivePlan
        #expect(plan.rules.map(\.id) == ["faults.att-error.read", "faults.att-error.write"])
        var sick = Self.beacon2
        sick.beaconRates = ["att-error": 1]
        #expect(Self.firings(&plan, .attRead, Self.beacon3, 20).isEmpty)
        #expect(Self.firings(&plan, .attRead, sick, 5) == [1, 2, 3, 4, 5])
    }

    @Test func thePlanReadsBackAsItWasWritten() throws {
        let text = """
            {"seed": 9, "adapters": [{"index": 0, "slots": 2, "slotFailure": "limited-resources"}],
             "rules": [
              {"id": "m1", "hook": "connect.requested", "target": {"beacon": 2}, "trigger": {"nth": 1},
               "action": {"kind": "stale", "flap": true}},
              {"id": "m3", "hook": "discovery.start", "target": {"adapter": 0}, "trigger": {"nth": 1},
               "action": {"kind": "wedge", "discoveryError": "not-ready", "connect": {"abortAfterMs": 2000}}},
              {"id": "m4", "hook": "connect.requested", "target": {"beacon": 3}, "trigger": {"nth": 1},
               "action": {"kind": "replug", "goneMs": 1500, "newIndex": "next"}},
              {"id": "m5", "hook": "write.landed", "target": {"beacon": 1}, "trigger": {"nth": 1},
               "action": {"kind": "shift-gatt", "delta": 16}},
              {"id": "m7", "hook": "time", "target": {"beacon": 4}, "trigger": {"atMs": 0},
               "action": {"kind": "vanish", "ms": null, "keepObject": true, "preheard": {"rssi": -42, "agoMs": 20000}}},
              {"id": "h", "hook": "write.landed", "trigger": {"nth": 2}, "times": 1,
               "action": {"kind": "stall", "until": "released", "hold": "second-write"}}
             ]}
            """
        let plan = try FaultPlan(json: text)
        #expect(plan.seed == 9)
        #expect(plan.adapters == [.init(index: 0, slots: 2, slotFailure: .limitedResources)])
        #expect(plan.rules.count == 6)
        #expect(plan.rules[0].action == .stale(flap: true, afterMs: nil))
        #expect(plan.rules[1].action == .wedge(discoveryError: .notReady, abortAfterMs: 2000, sticky: false))
        #expect(plan.rules[2].action == .replug(goneMs: 1500, newIndex: nil))
        #expect(plan.rules[4].action == .vanish(ms: nil, keepObject: true, preheard: .init(rssi: -42, agoMs: 20000)))
        #expect(plan.rules[5].action == .stall(ms: nil, hold: "second-write"))
        let again = try FaultPlan(json: plan.json)
        #expect(again == plan)
    }

    @Test(arguments: [
        (
            #"{"rules": [{"id": "x", "hook": "connect.requsted", "trigger": {"nth": 1}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".hook: unknown value 'connect.requsted'"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "stal"}}]}"#,
            #"rule "x".action.kind: unknown kind 'stal'"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "fail"}, "colour": 1}]}"#,
            #"rule "x": unknown field 'colour'"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 0}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".trigger.nth: must be a whole number"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"probability": 1.5}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".trigger.probability: must be between 0 and 1"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1, "every": true}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".trigger: give exactly one of"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"atMs": 5}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".trigger.atMs: only with hook time"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "discovery.start", "trigger": {"nth": 1}, "action": {"kind": "stale"}}]}"#,
            #"rule "x".action.kind: 'stale' does nothing at hook discovery.start"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "stall"}}]}"#,
            #"rule "x".action: give either ms or "until": "released""#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "fail", "error": "no such"}}]}"#,
            #"rule "x".action.error: 'no such' is not a D-Bus error name"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "target": {"address": "nope"}, "trigger": {"nth": 1}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".target.address: 'nope' is not an address"#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "fail"}},{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "fail"}}]}"#,
            #"rule "x": id: given to two rules"#
        ),
        (#"{"rules": [{"hook": "att.read"}]}"#, "rules[0].id: missing"),
        (#"{"adapters": [{"index": 0, "slots": 0}]}"#, "adapters[0].slots: must be a whole number in 1…64"),
        (
            #"{"adapters": [{"index": 0, "slotFailure": "explode"}]}"#,
            "adapters[0].slotFailure: unknown value 'explode'"
        ),
        (#"{"rulez": []}"#, "plan: unknown field 'rulez'"),
        (
            #"{"rules": [{"id": "x", "hook": "att.read", "trigger": {"nth": 1}, "action": {"kind": "stall", "ms": 5, "hold": "h"}}]}"#,
            #"rule "x".action.hold: only with "until": "released""#
        ),
        (
            #"{"rules": [{"id": "x", "hook": "att.write", "target": {"characteristic": "53420201-0000-1000-8000-00805f9b34fb"}, "trigger": {"nth": 1}, "action": {"kind": "fail"}}]}"#,
            #"rule "x".target.characteristic: an SBeacon has no characteristic 53420201-0000-1000-8000-00805f9b34fb"#
        ),
        ("{", "not valid JSON"),
    ])
    func badPlansAreRefusedNamingTheRuleAndTheField(json: String, expected: String) throws {
        let error = #expect(throws: FaultPlanError.self) { try FaultPlan(json: json) }
        #expect(error?.description.hasPrefix(expected) == true, "\(error?.description ?? "no error")")
    }

    @Test func aDeeplyNestedPlanIsRefusedNotACrash() throws {
        let deep =
            #"{"rules": "# + String(repeating: "[", count: 200_000) + String(repeating: "]", count: 200_000) + "}"
        #expect(throws: FaultPlanError.self) { try FaultPlan(json: deep) }
    }

    @Test func aHostileRuleIdIsShownEscaped() throws {
        let error = #expect(throws: FaultPlanError.self) {
            try FaultPlan(json: #"{"rules": [{"id": "ok", "hook": "x\u001b[2J", "trigger": {"nth": 1}}]}"#)
        }
        #expect(error?.description.contains("\u{1B}") == false)
    }

    @Test func theCommandLineChecksThePlanFileAtStart() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("plan-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let good = directory.appendingPathComponent("good.json").path
        let bad = directory.appendingPathComponent("bad.json").path
        try
            #"{"rules": [{"id": "m6", "hook": "connect.requested", "trigger": {"every": true}, "action": {"kind": "busy-while-discovering"}}]}"#
            .write(toFile: good, atomically: true, encoding: .utf8)
        try
            #"{"rules": [{"id": "m6", "hook": "connect.requested", "trigger": {"every": true}, "action": {"kind": "busy"}}]}"#
            .write(toFile: bad, atomically: true, encoding: .utf8)
        let commandLine = try SimulatorCommandLine(
            arguments: ["--fault-plan", good, "--slots", "2", "--faults", "att-error=0.1", "--seed", "3"])
        #expect(commandLine.options.connectionsPerAdapter == 2)
        #expect(
            commandLine.options.effectivePlan.rules.map(\.id) == [
                "m6", "faults.att-error.read", "faults.att-error.write",
            ])
        let error = #expect(throws: SimulatorCommandLine.UsageError.self) {
            try SimulatorCommandLine(arguments: ["--fault-plan", bad])
        }
        #expect(
            error?.description.hasPrefix("--fault-plan \(bad): rule \"m6\".action.kind: unknown kind 'busy'") == true)
        #expect(throws: SimulatorCommandLine.UsageError.self) {
            try SimulatorCommandLine(arguments: ["--fault-plan", directory.appendingPathComponent("none").path])
        }
    }

    /// One action of every kind, and its JSON (`example`).
    static let actions: [FaultPlan.Action] = [
        .fail(error: "org.bluez.Error.InProgress", message: "In Progress", afterMs: 5), .stall(ms: 20, hold: nil),
        .dropLink(reason: .remote, writeLands: .toss), .vanish(ms: 300, keepObject: false, preheard: nil),
        .stale(flap: false, afterMs: 40), .wedge(discoveryError: .notReady, abortAfterMs: 2000, sticky: true),
        .wedge(discoveryError: .none, abortAfterMs: 0, sticky: false, connectNotReady: true),
        .replug(goneMs: 700, newIndex: 3), .shiftGatt(delta: 32), .busyWhileDiscovering, .withhold,
        .powerOff(ms: 900), .powerOff(ms: nil),
    ]

    /// An action as a plan's JSON gives it. No `default`: a new action does
    /// not compile here until it has its JSON (and then a line in `actions`).
    static func example(_ action: FaultPlan.Action) -> String {
        switch action {
        case .fail(let error, let message, let afterMs):
            #"{"kind": "fail", "error": "\#(error)", "message": "\#(message)", "afterMs": \#(afterMs)}"#
        case .stall(let ms, _): #"{"kind": "stall", "ms": \#(ms ?? 0)}"#
        case .dropLink(let reason, let writeLands):
            #"{"kind": "drop-link", "reason": "\#(reason.rawValue)", "writeLands": "\#(writeLands.rawValue)"}"#
        case .vanish(let ms, let keepObject, _): #"{"kind": "vanish", "ms": \#(ms ?? 0), "keepObject": \#(keepObject)}"#
        case .stale(let flap, let afterMs): #"{"kind": "stale", "flap": \#(flap), "afterMs": \#(afterMs ?? 0)}"#
        case .wedge(let error, let abortAfterMs, let sticky, let notReady):
            #"{"kind": "wedge", "discoveryError": "\#(error.rawValue)", "connect": {"abortAfterMs": \#(abortAfterMs), "notReady": \#(notReady)}, "sticky": \#(sticky)}"#
        case .replug(let goneMs, let newIndex):
            #"{"kind": "replug", "goneMs": \#(goneMs), "newIndex": \#(newIndex ?? 0)}"#
        case .shiftGatt(let delta): #"{"kind": "shift-gatt", "delta": \#(delta)}"#
        case .busyWhileDiscovering: #"{"kind": "busy-while-discovering"}"#
        case .withhold: #"{"kind": "withhold"}"#
        case .powerOff(let ms): #"{"kind": "power-off", "ms": \#(ms.map(String.init) ?? "null")}"#
        }
    }

    /// The first column of the table after `heading` in docs/simulator.md.
    static func documented(after heading: String) throws -> Set<String> {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/simulator.md"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0.hasPrefix(heading) }) else { return [] }
        let table = lines[(start + 1)...].drop { !$0.hasPrefix("|") }.prefix { $0.hasPrefix("|") }
        return Set(table.compactMap { $0.firstMatch(of: #/^\| `([a-z.-]+)` \|/#).map { String($0.output.1) } })
    }

    /// Every action parses, at every hook where it applies, into itself and
    /// reads back as written; every action and every hook has its row in
    /// docs/simulator.md, and every row is one.
    @Test func everyActionParsesAndIsDocumented() throws {
        #expect(Set(Self.actions.map(\.kind)).sorted() == FaultPlan.Action.kinds.sorted())
        for action in Self.actions {
            let hooks = FaultPlan.hooks(of: action.kind)
            #expect(!hooks.isEmpty, "\(action.kind) applies nowhere")
            for hook in hooks.sorted(by: { $0.rawValue < $1.rawValue }) {
                let trigger = hook == .time ? #"{"atMs": 0}"# : #"{"nth": 1}"#
                let plan = try Self.plan(
                    #"{"id": "a", "hook": "\#(hook.rawValue)", "trigger": \#(trigger), "action": \#(Self.example(action))}"#
                )
                #expect(plan.rules.first?.action == action, "\(action.kind) at \(hook.rawValue)")
                #expect(try FaultPlan(json: plan.json) == plan, "\(action.kind) at \(hook.rawValue)")
            }
        }
        #expect(try Self.documented(after: "**Actions**") == Set(FaultPlan.Action.kinds))
        #expect(try Self.documented(after: "**Hooks**") == Set(FaultPlan.Hook.allCases.map(\.rawValue)))
    }
}
