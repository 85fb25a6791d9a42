import Testing

@testable import DBusBinding

/// The signal router as a value, with no socket and no bus: which
/// subscriptions a signal reaches, how a well-known sender is followed, and
/// when a match rule must go on or off the bus. SignalTests checks the same
/// over a real bus.
@Suite("The signal router routes without a socket", .timeLimit(.minutes(2)))
struct SignalRouterTests {
    static func signal(
        from sender: String, _ interface: InterfaceName, _ member: MemberName, at path: ObjectPath = "/x",
        _ body: [BusValue] = []
    ) -> BusMessage {
        BusMessage(
            kind: .signal, serial: 1, sender: sender, path: path, interface: interface, member: member,
            signature: body.map(\.type.signature).joined(), body: body, noReplyExpected: true)
    }

    static func nameOwnerChanged(_ name: String, from old: String, to new: String) -> BusMessage {
        signal(
            from: "org.freedesktop.DBus", .bus, "NameOwnerChanged", at: "/org/freedesktop/DBus",
            [.string(name), .string(old), .string(new)])
    }

    /// A subscription whose signals are collected: `collect()` finishes it
    /// and returns what it got, in order.
    struct Collector {
        let stream: AsyncStream<BusSignal>
        let continuation: AsyncStream<BusSignal>.Continuation
        init() { (stream, continuation) = AsyncStream.makeStream(of: BusSignal.self) }
        var sink: SignalRouter.Sink { .stream(continuation) }
        func collect() async -> [BusSignal] {
            continuation.finish()
            var out: [BusSignal] = []
            for await signal in stream { out.append(signal) }
            return out
        }
    }

    @Test func eachSubscriptionGetsWhatItsRuleMatches() async throws {
        var router = SignalRouter()
        #expect(!router.isListening)
        let ticks = Collector(), onOther = Collector(), argument = Collector()
        router.add(1, .init(rule: MatchRule(interface: "org.example.Echo1", member: "Tick"), sink: ticks.sink))
        router.add(2, .init(rule: MatchRule(path: "/other"), sink: onOther.sink))
        router.add(
            3, .init(rule: MatchRule(interface: "org.example.Args", arguments: [0: "wanted"]), sink: argument.sink))
        #expect(router.isListening)

        let messages = [
            Self.signal(from: ":1.5", "org.example.Echo1", "Tick", [.uint32(1)]),
            Self.signal(from: ":1.5", "org.example.Echo1", "Tock", [.uint32(2)]),
            Self.signal(from: ":1.6", "org.example.Echo1", "Tick", at: "/other", [.uint32(3)]),
            Self.signal(from: ":1.5", "org.example.Args", "Said", ["unwanted"]),
            Self.signal(from: ":1.5", "org.example.Args", "Said", ["wanted"]),
            Self.signal(from: ":1.5", "org.example.Args", "Said", [.uint32(7)]),
        ]
        for message in messages {
            router.follow(message)
            router.deliver(message)
        }
        // A method call is no signal, whatever its rule says.
        var call = Self.signal(from: ":1.5", "org.example.Echo1", "Tick", [.uint32(9)])
        call.kind = .methodCall
        router.deliver(call)

        let gotTicks = await ticks.collect()
        #expect(gotTicks.map(\.body) == [[.uint32(1)], [.uint32(3)]])
        #expect(gotTicks.map(\.sender) == [":1.5", ":1.6"])
        #expect(await onOther.collect().map(\.body) == [[.uint32(3)]])
        #expect(await argument.collect().map(\.body) == [["wanted"]])
    }

    @Test func aWellKnownSenderIsFollowedThroughNameOwnerChanged() async throws {
        var router = SignalRouter()
        let echo = Collector()
        router.add(1, .init(rule: MatchRule(sender: "org.example.Echo"), sink: echo.sink))
        let first = router.watchOwner(of: "org.example.Echo")
        let second = router.watchOwner(of: "org.example.Echo")
        #expect(first, "the first watcher looks the owner up")
        #expect(!second)
        router.setOwner(":1.5", of: "org.example.Echo")

        func route(_ message: BusMessage) {
            router.follow(message)
            router.deliver(message)
        }
        route(Self.signal(from: ":1.5", "org.example.Echo1", "Tick", [.uint32(1)]))
        route(Self.signal(from: ":1.6", "org.example.Echo1", "Tick", [.uint32(2)]))
        // Another name's change, and one not from the bus, change nothing.
        route(Self.nameOwnerChanged("org.example.Other", from: "", to: ":1.6"))
        var forged = Self.nameOwnerChanged("org.example.Echo", from: ":1.5", to: ":1.6")
        forged.sender = ":1.6"
        route(forged)
        #expect(router.nameOwners == ["org.example.Echo": ":1.5"])
        route(Self.nameOwnerChanged("org.example.Echo", from: ":1.5", to: ":1.6"))
        #expect(router.nameOwners == ["org.example.Echo": ":1.6"])
        route(Self.signal(from: ":1.5", "org.example.Echo1", "Tick", [.uint32(3)]))
        route(Self.signal(from: ":1.6", "org.example.Echo1", "Tick", [.uint32(4)]))
        // The name vanishes: nobody's signals match until it is owned again.
        route(Self.nameOwnerChanged("org.example.Echo", from: ":1.6", to: ""))
        #expect(router.nameOwners.isEmpty)
        route(Self.signal(from: ":1.6", "org.example.Echo1", "Tick", [.uint32(5)]))

        #expect(await echo.collect().map(\.body) == [[.uint32(1)], [.uint32(4)]])

        let notLast = router.unwatchOwner(of: "org.example.Echo")
        #expect(!notLast)
        router.setOwner(":1.7", of: "org.example.Echo")
        let last = router.unwatchOwner(of: "org.example.Echo")
        #expect(last, "the last watcher removes the rule")
        #expect(router.nameOwners.isEmpty, "and the owner is forgotten")
    }

    @Test func matchRulesAreCountedPerRule() {
        var router = SignalRouter()
        let rule = MatchRule(interface: "org.example.Echo1").description
        #expect(!router.hasUsers(of: rule))
        let added = [
            router.addUser(of: rule), router.addUser(of: rule),
            router.addUser(of: MatchRule(member: "Tick").description),
        ]
        #expect(added == [true, false, true], "the first user of each rule adds it on the bus")
        let releasedOne = router.releaseUser(of: rule)
        #expect(!releasedOne)
        #expect(router.hasUsers(of: rule))
        let releasedLast = router.releaseUser(of: rule)
        #expect(releasedLast, "the last user removes it")
        #expect(!router.hasUsers(of: rule))
        #expect(router.hasUsers(of: MatchRule(member: "Tick").description))
    }

    @Test func subscriptionsComeAndGo() async {
        var router = SignalRouter()
        let first = Collector(), second = Collector()
        router.add(1, .init(rule: MatchRule(member: "Tick"), sink: first.sink))
        router.add(2, .init(rule: MatchRule(member: "Tick"), sink: second.sink))
        router.deliver(Self.signal(from: ":1.5", "org.example.Echo1", "Tick", [.uint32(1)]))
        let removed = router.remove(1)
        let again = router.remove(1)
        #expect(removed != nil)
        #expect(again == nil, "gone already")
        router.deliver(Self.signal(from: ":1.5", "org.example.Echo1", "Tick", [.uint32(2)]))
        #expect(await first.collect().map(\.body) == [[.uint32(1)]])

        // Closing: every sink handed back to be finished, nothing left.
        let sinks = router.removeAll()
        #expect(sinks.count == 1)
        for sink in sinks { sink.finish() }
        #expect(await second.collect().map(\.body) == [[.uint32(1)], [.uint32(2)]])
        #expect(router.subscriptions.isEmpty)
        #expect(!router.isListening)
    }
}
