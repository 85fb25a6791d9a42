import Testing

@testable import Workbench

/// The recovery policies of issue 26 as pure values: no bus, no clock but
/// the instants given.
@Suite("Recovery policies (pure)", .timeLimit(.minutes(2)))
struct RecoveryPolicyTests {
    typealias Failure = Recovery.Failure
    static let abort = "le-connection-abort-by-local"
    static let failed = "org.bluez.Error.Failed"

    static func abortFailure(links: Int = 0, heard: Bool = true) -> Failure {
        Failure(name: failed, message: abort, linksUp: links, heardRecently: heard)
    }

    @Test func failuresAreClassifiedAsTheTableSays() {
        let c = Recovery.preliminaryClass
        #expect(c(Failure(name: "org.bluez.Error.NotReady", message: "Resource Not Ready")) == .adapter)
        #expect(
            c(
                Failure(
                    name: "org.bluez.Error.InProgress", message: "Operation already in progress", fromDiscovery: true))
                == .adapter)
        #expect(c(Failure(name: Self.failed, message: Self.abort, adapterAbsentOrWedged: true)) == .adapter)
        #expect(c(Failure(name: "org.bluez.Error.InProgress", message: "In Progress")) == .busy)
        #expect(c(Failure(name: Self.failed, message: "br-connection-busy")) == .busy)
        #expect(
            c(Failure(name: Self.failed, message: "Connection Rejected due to Limited Resources (0x0d)")) == .slot)
        #expect(c(Failure(name: Self.failed, message: "Too many links (31)")) == .slot)
        #expect(c(Failure(name: Self.failed, message: "le-connection-concurrent-connection-limit")) == .slot)
        #expect(
            c(Failure(name: nil, message: "the device is not known", deviceRemovedDuringConnect: true, linksUp: 2))
                == .slot)
        #expect(c(Failure(name: nil, message: "gone", deviceRemovedDuringConnect: true, linksUp: 0)) == .other)
        #expect(c(Self.abortFailure(heard: false)) == .gone)
        #expect(c(Self.abortFailure()) == .stale)
        #expect(c(Failure(name: Self.failed, message: "Software caused connection abort")) == .stale)
        #expect(c(Failure(name: Self.failed, message: "br-connection-canceled")) == .stale)
        #expect(c(Failure(name: Self.failed, message: "Operation failed with ATT error: 0x03")) == .other)
        // Charged to the beacon only when it is the beacon's.
        #expect(!Recovery.FailureClass.slot.charged)
        #expect(!Recovery.FailureClass.busy.charged)
        #expect(!Recovery.FailureClass.adapter.charged)
        #expect(Recovery.FailureClass.stale.charged)
        #expect(Self.abortFailure().kind == Self.abort)
        #expect(Failure(name: "org.bluez.Error.InProgress", message: "In Progress").kind == "InProgress")
    }

    @Test func aStaleDeviceIsRemovedOnceAfterThreeFailuresUntilASuccess() {
        var stale = Recovery.StaleCounter()
        #expect(stale.staleFailure("c1:00:00:00:00:01", kind: Self.abort) == nil)
        #expect(stale.staleFailure("C1:00:00:00:00:01", kind: Self.abort) == nil)
        #expect(stale.staleFailure("C1:00:00:00:00:01", kind: Self.abort) == "remove-device after 3 × \(Self.abort)")
        // Never again in the run without a success between.
        for _ in 0..<10 { #expect(stale.staleFailure("C1:00:00:00:00:01", kind: Self.abort) == nil) }
        // Another device counts on its own.
        #expect(stale.staleFailure("C1:00:00:00:00:02", kind: Self.abort) == nil)
        stale.succeeded("C1:00:00:00:00:01")
        #expect(stale.consecutive["C1:00:00:00:00:01"] == nil)
        #expect(stale.staleFailure("C1:00:00:00:00:01", kind: Self.abort) == nil)
        #expect(stale.staleFailure("C1:00:00:00:00:01", kind: Self.abort) == nil)
        #expect(stale.staleFailure("C1:00:00:00:00:01", kind: Self.abort) != nil)
    }

    @Test func aRemovalWaitsUntilItMayBeDone() {
        var stale = Recovery.StaleCounter()
        for _ in 0..<4 { #expect(stale.staleFailure("A", kind: Self.abort, mayRemove: false) == nil) }
        #expect(stale.staleFailure("A", kind: Self.abort) == "remove-device after 5 × \(Self.abort)")
        #expect(stale.staleFailure("A", kind: Self.abort) == nil)
    }

    @Test func aSuccessBetweenFailuresStartsTheCountAgain() {
        var stale = Recovery.StaleCounter()
        _ = stale.staleFailure("A", kind: Self.abort)
        _ = stale.staleFailure("A", kind: Self.abort)
        stale.succeeded("A")
        #expect(stale.staleFailure("A", kind: Self.abort) == nil)
        #expect(stale.consecutive["A"] == 1)
    }

    @Test func anExplicitSlotFailureTeachesTheLimitOnce() {
        var slots = Recovery.SlotLearner(ceiling: 5)
        let adapter = "00:1A:7D:DA:71:13"
        #expect(slots.limit(for: adapter) == 5)
        let full = Failure(
            name: Self.failed, message: "Connection Rejected due to Limited Resources (0x0d)", linksUp: 2)
        let first = slots.judge(full, device: "B1", adapter: adapter)
        #expect(first.failureClass == .slot)
        #expect(first.lowered?.from == 5 && first.lowered?.to == 2)
        #expect(first.waitBelow == 2)
        #expect(slots.limit(for: adapter.lowercased()) == 2)
        // Said once: the same limit again lowers nothing; never raised.
        #expect(slots.judge(full, device: "B2", adapter: adapter).lowered == nil)
        slots.succeeded(adapter: adapter, linksUp: 4)
        #expect(slots.limit(for: adapter) == 2)
        // Another adapter is its own.
        #expect(slots.limit(for: "00:1A:7D:DA:71:14") == 5)
    }

    @Test func theCeilingStaysACeiling() {
        var slots = Recovery.SlotLearner(ceiling: 2)
        let judged = slots.judge(
            Failure(name: Self.failed, message: "too many links", linksUp: 4), device: "B1", adapter: "A")
        #expect(judged.failureClass == .slot)
        #expect(judged.lowered == nil)
        #expect(slots.limit(for: "A") == 2)
    }

    @Test func twoBeaconsAbortingAtTheSameLinkCountFixTheLimit() {
        var slots = Recovery.SlotLearner(ceiling: 5)
        let first = slots.judge(Self.abortFailure(links: 2), device: "B3", adapter: "A")
        #expect(first.failureClass == .slot)
        #expect(first.lowered == nil)
        #expect(first.waitBelow == 2)
        #expect(slots.limit(for: "A") == 5)
        // The same beacon again at the same count is no new evidence.
        #expect(slots.judge(Self.abortFailure(links: 2), device: "B3", adapter: "A").lowered == nil)
        let second = slots.judge(Self.abortFailure(links: 2), device: "B4", adapter: "A")
        #expect(second.failureClass == .slot)
        #expect(second.lowered?.from == 5 && second.lowered?.to == 2)
        #expect(slots.limit(for: "A") == 2)
        // At or above the learned limit: a slot failure; below it: stale.
        #expect(slots.judge(Self.abortFailure(links: 3), device: "B5", adapter: "A").failureClass == .slot)
        #expect(slots.judge(Self.abortFailure(links: 1), device: "B5", adapter: "A").failureClass == .stale)
        #expect(slots.judge(Self.abortFailure(links: 0), device: "B5", adapter: "A").failureClass == .stale)
    }

    @Test func anAbortWithSlotsProvedFreeIsStale() {
        var slots = Recovery.SlotLearner(ceiling: 5)
        #expect(slots.judge(Self.abortFailure(links: 0), device: "B1", adapter: "A").failureClass == .stale)
        #expect(slots.judge(Self.abortFailure(links: 3), device: "B1", adapter: "A").failureClass == .slot)
        // A connect succeeded with 3 others up: the adapter holds 4 at least.
        slots.succeeded(adapter: "A", linksUp: 3)
        #expect(slots.judge(Self.abortFailure(links: 3), device: "B2", adapter: "A").failureClass == .stale)
        #expect(slots.judge(Self.abortFailure(links: 2), device: "B1", adapter: "A").failureClass == .stale)
        #expect(slots.limit(for: "A") == 5)
        // A beacon not heard lately is gone, whatever the links.
        #expect(
            slots.judge(Self.abortFailure(links: 4, heard: false), device: "B1", adapter: "A").failureClass == .gone)
    }

    /// Two random aborts at one link up, before any connect succeeded with
    /// a link up (the 60-beacon run at 5 % faults, seed 92): the limit 1 they
    /// teach is tentative, and probed back up.
    static func learnOneFromTwoAborts() -> Recovery.SlotLearner {
        var slots = Recovery.SlotLearner(ceiling: 5)
        _ = slots.judge(abortFailure(links: 1), device: "B1", adapter: "A")
        let second = slots.judge(abortFailure(links: 1), device: "B2", adapter: "A")
        #expect(second.lowered?.from == 5 && second.lowered?.to == 1)
        #expect(slots.limit(for: "A") == 1)
        #expect(slots.tentative == ["A"])
        return slots
    }

    @Test func aLimitLearnedFromAbortsIsProbedAfterThreeFullSuccesses() {
        var slots = Self.learnOneFromTwoAborts()
        // Connects at the limit (no other link up) that go well: after the
        // third, one connect more is allowed.
        for _ in 1..<Recovery.slotProbeAfter {
            #expect(slots.succeeded(adapter: "A", linksUp: 0) == nil)
            #expect(slots.limit(for: "A") == 1)
        }
        #expect(slots.succeeded(adapter: "A", linksUp: 0) == nil)
        #expect(slots.limit(for: "A") == 2)
        #expect(slots.probing == ["A"])
        // The probe's connect, with one other link up, succeeds: the adapter
        // held 2; the limit is 2 (still tentative), probed again likewise.
        let raised = slots.succeeded(adapter: "A", linksUp: 1)
        #expect(raised?.from == 1 && raised?.to == 2)
        #expect(slots.limit(for: "A") == 2)
        #expect(slots.probing.isEmpty)
        for _ in 0..<Recovery.slotProbeAfter { slots.succeeded(adapter: "A", linksUp: 1) }
        #expect(slots.limit(for: "A") == 3)
        // Every success up to the ceiling: the limit is forgotten.
        #expect(slots.succeeded(adapter: "A", linksUp: 2)?.to == 3)
        for _ in 0..<Recovery.slotProbeAfter { slots.succeeded(adapter: "A", linksUp: 2) }
        #expect(slots.succeeded(adapter: "A", linksUp: 3)?.to == 4)
        for _ in 0..<Recovery.slotProbeAfter { slots.succeeded(adapter: "A", linksUp: 3) }
        #expect(slots.limit(for: "A") == 5)
        let last = slots.succeeded(adapter: "A", linksUp: 4)
        #expect(last?.from == 4 && last?.to == 5)
        #expect(slots.learned["A"] == nil && slots.tentative.isEmpty && slots.probing.isEmpty)
        #expect(slots.limit(for: "A") == 5)
    }

    @Test func aSuccessWithAsManyLinksUpRaisesATentativeLimitAtOnce() {
        var slots = Self.learnOneFromTwoAborts()
        // A connect sent before the limit was learned, with 3 others up,
        // goes well: the adapter held 4.
        let raised = slots.succeeded(adapter: "A", linksUp: 3)
        #expect(raised?.from == 1 && raised?.to == 4)
        #expect(slots.limit(for: "A") == 4)
        // Successes below the limit but not at it are not the adapter full.
        for _ in 0..<10 { #expect(slots.succeeded(adapter: "A", linksUp: 1) == nil) }
        #expect(slots.limit(for: "A") == 4 && slots.probing.isEmpty)
    }

    @Test func aRefusedProbeKeepsTheLimitAndDoublesTheWait() {
        // A real one-slot adapter that refuses with the plain abort text.
        var slots = Self.learnOneFromTwoAborts()
        for _ in 0..<Recovery.slotProbeAfter { slots.succeeded(adapter: "A", linksUp: 0) }
        #expect(slots.limit(for: "A") == 2)
        // The probe's connect, sent with one link up, is refused: a slot
        // failure, uncharged, and the limit stays 1.
        let refused = slots.judge(Self.abortFailure(links: 1), device: "B3", adapter: "A")
        #expect(refused == .init(failureClass: .slot, lowered: nil, waitBelow: 1))
        #expect(slots.limit(for: "A") == 1 && slots.probing.isEmpty)
        // The next probe comes after twice as many full successes.
        for _ in 0..<(2 * Recovery.slotProbeAfter - 1) { slots.succeeded(adapter: "A", linksUp: 0) }
        #expect(slots.limit(for: "A") == 1)
        slots.succeeded(adapter: "A", linksUp: 0)
        #expect(slots.limit(for: "A") == 2)
        _ = slots.judge(Self.abortFailure(links: 1), device: "B4", adapter: "A")
        for _ in 0..<(4 * Recovery.slotProbeAfter - 1) { slots.succeeded(adapter: "A", linksUp: 0) }
        #expect(slots.limit(for: "A") == 1)
        slots.succeeded(adapter: "A", linksUp: 0)
        #expect(slots.limit(for: "A") == 2)
        // A stale abort (no other link up) is not the probe's answer.
        #expect(slots.judge(Self.abortFailure(links: 0), device: "B5", adapter: "A").failureClass == .stale)
        #expect(slots.probing == ["A"])
    }

    @Test func onlyLinksUpWithTheConnectRaiseALimit() {
        // A two-slot adapter that refuses with the abort text: 2 learned.
        var slots = Recovery.SlotLearner(ceiling: 5)
        _ = slots.judge(Self.abortFailure(links: 2), device: "B1", adapter: "A")
        #expect(slots.judge(Self.abortFailure(links: 2), device: "B2", adapter: "A").lowered?.to == 2)
        // A connect sent with 2 links up, one of which dropped before the
        // controller took it: 1 up alongside. No raise; the adapter was full.
        #expect(slots.succeeded(adapter: "A", linksUp: 2, alongside: 1) == nil)
        #expect(slots.limit(for: "A") == 2)
        // With both still up, it held 3.
        #expect(slots.succeeded(adapter: "A", linksUp: 2, alongside: 2)?.to == 3)
    }

    @Test func aLimitTheAdapterNamedIsNeverProbed() {
        var slots = Recovery.SlotLearner(ceiling: 5)
        let full = Failure(name: Self.failed, message: "Too many links (31)", linksUp: 1)
        #expect(slots.judge(full, device: "B1", adapter: "A").lowered?.to == 1)
        #expect(slots.tentative.isEmpty)
        for _ in 0..<20 { #expect(slots.succeeded(adapter: "A", linksUp: 0) == nil) }
        #expect(slots.limit(for: "A") == 1 && slots.probing.isEmpty)
        // Nor raised by a success: what it named stands.
        #expect(slots.succeeded(adapter: "A", linksUp: 2) == nil)
        #expect(slots.limit(for: "A") == 1)
        // A tentative limit the adapter then names outright is firm.
        var named = Self.learnOneFromTwoAborts()
        _ = named.judge(full, device: "B3", adapter: "A")
        #expect(named.tentative.isEmpty)
        for _ in 0..<20 { named.succeeded(adapter: "A", linksUp: 0) }
        #expect(named.limit(for: "A") == 1)
    }

    @Test func aWedgeNeedsTheWholeWindow() {
        var wedge = Recovery.WedgeDetector()
        let t0 = ContinuousClock.now
        let adapter = "00:1A:7D:DA:71:13"
        for second in [0, 2, 4] { wedge.discoveryRefused(adapter, at: t0 + .seconds(second)) }
        wedge.connectFailed(adapter, at: t0 + .seconds(5))
        wedge.connectFailed(adapter, at: t0 + .seconds(8))
        #expect(!wedge.isWedged(adapter, powered: true, at: t0 + .seconds(10)))
        #expect(wedge.isWedged(adapter, powered: true, at: t0 + .seconds(15)))
        // Unpowered is not wedged (it is off: the adapter-off path).
        #expect(!wedge.isWedged(adapter, powered: false, at: t0 + .seconds(15)))
        // An advert clears it.
        wedge.advertHeard(adapter, at: t0 + .seconds(16))
        #expect(!wedge.isWedged(adapter, powered: true, at: t0 + .seconds(20)))
    }

    @Test func aStationJudgesRefusedDiscoveryOverAScansLength() {
        // An idle station: discovery refused from the start, nothing heard,
        // no connects (discovery is needed). A scan cycles after its 10 s.
        var wedge = Recovery.WedgeDetector()
        let t0 = ContinuousClock.now
        let window = Recovery.stationWedgeWindow
        for second in [0, 1, 2, 3] {
            wedge.discoveryRefused("A", at: t0 + .seconds(second))
            wedge.needsDiscovery("A", at: t0 + .seconds(second))
        }
        #expect(window == .seconds(10))
        #expect(!wedge.isWedged("A", powered: true, at: t0 + .seconds(9), window: window))
        #expect(wedge.isWedged("A", powered: true, at: t0 + .seconds(10), window: window))
        // A run's window is longer.
        #expect(!wedge.isWedged("A", powered: true, at: t0 + .seconds(10)))
        #expect(wedge.isWedged("A", powered: true, at: t0 + .seconds(15)))
        // Nor is a station's adapter wedged with an advert in its window.
        wedge.advertHeard("A", at: t0 + .seconds(11))
        wedge.discoveryRefused("A", at: t0 + .seconds(12))
        #expect(!wedge.isWedged("A", powered: true, at: t0 + .seconds(20), window: window))
    }

    @Test func aQuietRoomIsNotAWedge() {
        var wedge = Recovery.WedgeDetector()
        let t0 = ContinuousClock.now
        // Refusals, but no connect failed and none waited: not wedged.
        for second in 0..<10 { wedge.discoveryRefused("A", at: t0 + .seconds(second)) }
        #expect(!wedge.isWedged("A", powered: true, at: t0 + .seconds(20)))
        // Connect failures without discovery refusals: not wedged either.
        var other = Recovery.WedgeDetector()
        for second in 0..<5 { other.connectFailed("B", at: t0 + .seconds(second)) }
        #expect(!other.isWedged("B", powered: true, at: t0 + .seconds(20)))
        // Refusals while discovery was needed for anything: wedged.
        other.discoveryRefused("C", at: t0)
        other.discoveryRefused("C", at: t0 + .seconds(1))
        other.discoveryRefused("C", at: t0 + .seconds(2))
        other.needsDiscovery("C", at: t0 + .seconds(1))
        #expect(other.isWedged("C", powered: true, at: t0 + .seconds(16)))
    }

    @Test func aPowerCycleAtMostOncePerIntervalAndNeverWhenDisabled() {
        var wedge = Recovery.WedgeDetector()
        let t0 = ContinuousClock.now
        #expect(wedge.mayReset("A", at: t0, resetsAllowed: false) == .disabled)
        #expect(wedge.mayReset("A", at: t0, resetsAllowed: true) == .allowed)
        wedge.reset("A", at: t0)
        #expect(wedge.mayReset("A", at: t0 + .seconds(599), resetsAllowed: true) == .alreadyTried(at: t0))
        #expect(wedge.mayReset("B", at: t0 + .seconds(1), resetsAllowed: true) == .allowed)
        #expect(wedge.mayReset("A", at: t0 + .seconds(600), resetsAllowed: true) == .allowed)
        // The evidence starts afresh after a cycle.
        for second in [1, 2, 3] { wedge.discoveryRefused("A", at: t0 + .seconds(second)) }
        wedge.needsDiscovery("A", at: t0 + .seconds(1))
        #expect(!wedge.isWedged("A", powered: true, at: t0 + .seconds(10)))
    }

    @Test func busyWhileDiscoveringPausesDiscoveryRecordedOncePerAdapter() {
        var busy = Recovery.BusyPolicy()
        #expect(busy.busy(device: "B1", adapter: "A", discovering: true) == .pauseDiscovery(record: true))
        #expect(busy.busy(device: "B2", adapter: "a", discovering: true) == .pauseDiscovery(record: false))
        #expect(busy.busy(device: "B1", adapter: "A", discovering: true) == .pauseDiscovery(record: false))
        #expect(busy.busy(device: "B1", adapter: "A", discovering: true) == .pauseDiscovery(record: false))
        // Three retries per device, then wait for the device instead.
        #expect(busy.busy(device: "B1", adapter: "A", discovering: true) == .waitForDevice)
        busy.succeeded("B1")
        #expect(busy.busy(device: "B1", adapter: "A", discovering: true) == .pauseDiscovery(record: false))
        #expect(busy.busy(device: "B3", adapter: "A", discovering: false) == .waitForDevice)
        #expect(busy.busy(device: "B3", adapter: "B", discovering: true) == .pauseDiscovery(record: true))
    }

    @Test func presenceCountsOnlySignalsSinceDiscoveryBegan() {
        let t0 = ContinuousClock.now
        // A cached object (heard before our discovery): not present.
        #expect(!Recovery.isPresent(lastHeard: t0 - .seconds(1), discoveringSince: t0, at: t0 + .seconds(1)))
        #expect(!Recovery.isPresent(lastHeard: nil, discoveringSince: t0, at: t0))
        #expect(!Recovery.isPresent(lastHeard: t0, discoveringSince: nil, at: t0))
        #expect(Recovery.isPresent(lastHeard: t0 + .seconds(1), discoveringSince: t0, at: t0 + .seconds(2)))
        // Gone after the presence timeout without a signal.
        #expect(!Recovery.isPresent(lastHeard: t0 + .seconds(1), discoveringSince: t0, at: t0 + .seconds(6)))
    }
}
