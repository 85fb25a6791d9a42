import DBusBinding
import TestSupport
import Testing

@Suite("Signals reach the subscribers whose rules match, and no others", .timeLimit(.minutes(5)))
struct SignalTests {
    @Test func eachSubscriberGetsOnlyWhatItsRuleMatches() async throws {
        try await withEchoFixture { fixture throws in
            let server = fixture.server
            let ticks = try await fixture.client.signals(
                matching: MatchRule(sender: EchoFixture.name, interface: EchoFixture.interface, member: "Tick"))
            let otherPath = try await fixture.client.signals(
                matching: MatchRule(interface: EchoFixture.interface, member: "Tick", path: "/org/example/Other"))
            let otherSender = try await fixture.client.signals(
                matching: MatchRule(sender: "org.example.NotTheEcho", interface: EchoFixture.interface))
            let argZero = try await fixture.client.signals(
                matching: MatchRule(interface: "org.example.Args", arguments: [0: "wanted"]))

            for count in UInt32(1)...3 {
                try await server.emitSignal(
                    path: EchoFixture.path, interface: EchoFixture.interface, member: "Tick",
                    body: [.uint32(count)])
            }
            try await server.emitSignal(
                path: "/org/example/Other", interface: EchoFixture.interface, member: "Tick",
                body: [.uint32(99)])
            try await server.emitSignal(path: "/x", interface: "org.example.Args", member: "Said", body: ["unwanted"])
            try await server.emitSignal(path: "/x", interface: "org.example.Args", member: "Said", body: ["wanted"])
            try await server.emitSignal(path: "/x", interface: "org.example.Args", member: "Said", body: [.uint32(7)])
            // Markers, sent after all of that by the same connection: a bus
            // delivers one sender's messages in order, so whatever of the
            // above a stream was to get came before its marker. (These
            // absences were "nothing within 300 ms".) The server takes the
            // other sender's name first, so that its marker matches that
            // rule; the NameOwnerChanged saying so reaches the client before
            // the marker, and after the signals sent before it.
            try await server.emitSignal(path: "/x", interface: "org.example.Args", member: "Marker", body: ["wanted"])
            #expect(try await server.requestName("org.example.NotTheEcho") == .primaryOwner)
            try await server.emitSignal(path: "/x", interface: EchoFixture.interface, member: "Marker")

            let received = try await take(3, from: ticks, "three Ticks")
            #expect(received.map { $0.body } == [[.uint32(1)], [.uint32(2)], [.uint32(3)]])
            #expect(received.allSatisfy { $0.sender == fixture.server.uniqueName && $0.path == EchoFixture.path })
            #expect(try await take(1, from: otherPath, "the Tick on the other path").map(\.body) == [[.uint32(99)]])
            let args = try await take(from: argZero, until: { $0.member == "Marker" }, "the Args marker")
            #expect(args.dropLast().map(\.body) == [["wanted"]])
            let fromOther = try await take(
                from: otherSender, until: { $0.member == "Marker" }, "the other sender's marker")
            #expect(fromOther.count == 1, "only the marker came by the other sender's rule: \(fromOther)")
        }
    }

    @Test func propertiesChangedCarriesChangesAndInvalidations() async throws {
        try await withEchoFixture { fixture throws in
            let changes = try await fixture.client.signals(
                matching: .propertiesChanged(sender: EchoFixture.name, interface: EchoFixture.interface))
            try await fixture.server.setProperties(
                ["Greeting": "bonjour", "Count": .uint32(3)], interface: EchoFixture.interface, at: EchoFixture.path)
            // Setting the same value again emits nothing.
            try await fixture.server.setProperties(
                ["Greeting": "bonjour"], interface: EchoFixture.interface, at: EchoFixture.path)
            try await fixture.server.setProperties(
                ["Secret": "kept back"], interface: EchoFixture.interface, at: EchoFixture.path)
            try await fixture.server.setProperties(
                ["Count": nil], interface: EchoFixture.interface, at: EchoFixture.path)

            let signals = try await take(3, from: changes, "3 signal(s) on changes").map(PropertiesChanged.init)
            #expect(signals.count == 3)
            #expect(signals[0].interface == EchoFixture.interface.rawValue)
            #expect(signals[0].changed == ["Greeting": "bonjour", "Count": .uint32(3)])
            #expect(signals[0].invalidated.isEmpty)
            #expect(signals[1].changed.isEmpty && signals[1].invalidated == ["Secret"])
            #expect(signals[2].changed.isEmpty && signals[2].invalidated == ["Count"])
        }
    }

    @Test func aSubscriptionEndsWhenItsStreamIsDropped() async throws {
        try await withEchoFixture { fixture throws in
            do {
                let stream = try await fixture.client.signals(matching: MatchRule(interface: EchoFixture.interface))
                #expect(await fixture.client.subscriptionCount == 1)
                _ = stream
            }
            // The stream's end unsubscribes from a task of its own: no event
            // to wait for, so polled.
            try await waitUntil("the dropped stream's subscription to end") {
                await fixture.client.subscriptionCount == 0
            }
        }
    }

    @Test func aPeerThatDisappearsIsReported() async throws {
        try await withEchoFixture { fixture throws in
            let peer = try await BusConnection.connect(.address(fixture.bus.address))
            #expect(try await peer.requestName("org.example.Peer") == .primaryOwner)
            #expect(try await fixture.client.nameOwner(of: "org.example.Peer") == peer.uniqueName)
            let changes = try await fixture.client.nameOwnerChanges(of: "org.example.Peer")
            let peerName = peer.uniqueName
            await peer.close()
            let seen = try await take(1, from: changes, "1 signal(s) on changes")
            #expect(seen.count == 1)
            #expect(seen.first?.name == "org.example.Peer")
            #expect(seen.first?.oldOwner == peerName)
            #expect(seen.first?.newOwner == nil)
            #expect(seen.first?.isVanished == true)
            #expect(try await fixture.client.nameOwner(of: "org.example.Peer") == nil)
        }
    }

    @Test func aWellKnownSenderFollowsItsNewOwner() async throws {
        try await withEchoFixture { fixture throws in
            let first = try await BusConnection.connect(.address(fixture.bus.address))
            #expect(try await first.requestName("org.example.Restarting") == .primaryOwner)
            let stream = try await fixture.client.signals(
                matching: MatchRule(sender: "org.example.Restarting", interface: "org.example.Life", member: "Hello"))
            try await first.emitSignal(path: "/", interface: "org.example.Life", member: "Hello", body: ["first"])
            #expect(try await take(1, from: stream, "1 signal(s) on stream").map(\.body) == [["first"]])
            await first.close()
            // A new process takes the name, as bluetoothd does after a restart.
            let second = try await BusConnection.connect(.address(fixture.bus.address))
            // No pause: the NameOwnerChanged for the new owner reaches the
            // client before RequestName's reply reaches `second`, so before
            // anything `second` sends after it.
            #expect(try await second.requestName("org.example.Restarting") == .primaryOwner)
            try await second.emitSignal(path: "/", interface: "org.example.Life", member: "Hello", body: ["second"])
            #expect(try await take(1, from: stream, "1 signal(s) on stream").map(\.body) == [["second"]])
            await second.close()
        }
    }
}
