import Synchronization
import TestSupport
import Testing

@testable import DBusBinding

/// `subscribeWire`: a subscriber that takes signals as their bytes gets
/// every matching signal once, in order, with the body libdbus would give
/// — through the fast path when the binding reads the socket, through its
/// fallback when libdbus does or when its rule needs the body.
@Suite("Wire subscriptions: the bytes, or the fallback, once each, in order", .timeLimit(.minutes(3)))
struct WireSubscriptionTests {
    final class Seen: Sendable {
        let entries = Mutex<[(fast: Bool, member: String, body: [BusValue])]>([])
        var count: Int { entries.withLock { $0.count } }
    }

    static func subscribe(
        _ client: BusConnection, _ rule: MatchRule, into seen: Seen
    ) async throws
        -> SignalSubscription
    {
        try await client.subscribeWire(
            rule,
            handler: { view in
                let member = view.header.string(.member) ?? ""
                let body = (try? view.busValues()) ?? []
                seen.entries.withLock { $0.append((true, member, body)) }
            },
            fallback: { signal in
                seen.entries.withLock { $0.append((false, signal.member.rawValue, signal.body)) }
            })
    }

    /// Signals of several shapes; the last one is a marker.
    static func emitAll(_ server: BusConnection) async throws {
        for count in UInt32(1)...100 {
            try await server.emitSignal(
                path: EchoFixture.path, interface: EchoFixture.interface, member: "Tick", body: [.uint32(count)])
            try await server.setProperties(
                ["Greeting": .string("hello \(count)"), "Count": .uint32(count)], interface: EchoFixture.interface,
                at: EchoFixture.path)
        }
        try await server.emitSignal(path: EchoFixture.path, interface: EchoFixture.interface, member: "Marker")
    }

    @Test(arguments: [BusReader.wire, .libdbus])
    func aWireSubscriberSeesWhatAStreamSees(_ reader: BusReader) async throws {
        try await BusReader.$chosen.withValue(reader) {
            try await withEchoFixture { fixture in
                let rule = MatchRule(sender: EchoFixture.name)
                let seen = Seen()
                let subscription = try await Self.subscribe(fixture.client, rule, into: seen)
                let stream = try await fixture.client.signals(matching: rule)
                try await Self.emitAll(fixture.server)
                let streamed = try await take(from: stream, until: { $0.member == "Marker" }, "the stream's marker")
                try await waitUntil("the wire subscriber to see \(streamed.count) signals") {
                    seen.count >= streamed.count
                }
                let got = seen.entries.withLock { $0 }
                #expect(got.count == streamed.count)
                #expect(got.map(\.member) == streamed.map(\.member.rawValue))
                #expect(got.map(\.body) == streamed.map(\.body))
                // Every one by the path the reader allows.
                #expect(got.allSatisfy { $0.fast == (reader == .wire) })
                await subscription.cancel()
            }
        }
    }

    /// With only wire subscribers, no signal is demarshalled at all.
    @Test func signalsForWireSubscribersAloneAreNeverDemarshalled() async throws {
        try await BusReader.$chosen.withValue(.wire) {
            try await withEchoFixture { fixture in
                let seen = Seen()
                let before = await fixture.client.core.signalsNotDemarshalled
                let subscription = try await Self.subscribe(
                    fixture.client, MatchRule(sender: EchoFixture.name, interface: EchoFixture.interface), into: seen)
                try await Self.emitAll(fixture.server)
                try await waitUntil("the wire subscriber to see the marker") {
                    seen.entries.withLock { $0.last?.member == "Marker" }
                }
                #expect(seen.count == 101)
                #expect(await fixture.client.core.signalsNotDemarshalled - before == 101)
                await subscription.cancel()
            }
        }
    }

    /// A rule that needs the body (`arg0`) cannot be judged on the header:
    /// its subscriber gets the matching signals through the fallback.
    @Test func aRuleOnTheBodyTakesTheFallback() async throws {
        try await BusReader.$chosen.withValue(.wire) {
            try await withEchoFixture { fixture in
                let seen = Seen()
                let subscription = try await Self.subscribe(
                    fixture.client, MatchRule(interface: "org.example.Args", arguments: [0: "wanted"]), into: seen)
                let markers = try await fixture.client.signals(
                    matching: MatchRule(interface: "org.example.Args", member: "Marker"))
                for text in ["unwanted", "wanted", "wanted too", "wanted"] {
                    try await fixture.server.emitSignal(
                        path: "/x", interface: "org.example.Args", member: "Said", body: [.string(text)])
                }
                try await fixture.server.emitSignal(
                    path: "/x", interface: "org.example.Args", member: "Marker", body: ["wanted"])
                _ = try await take(1, from: markers, "the marker")
                try await waitUntil("the two wanted signals and the marker") { seen.count >= 3 }
                let got = seen.entries.withLock { $0 }
                #expect(got.map(\.member) == ["Said", "Said", "Marker"])
                #expect(got.allSatisfy { !$0.fast })
                #expect(got.prefix(2).map(\.body) == [["wanted"], ["wanted"]])
                await subscription.cancel()
            }
        }
    }
}
