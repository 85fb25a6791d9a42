import DBusBinding
import Foundation
import TestSupport
import Testing

/// A private bus with two connections: `server` serves the echo object at
/// `/org/example/Echo` under the name `org.example.Echo`, `client` calls it.
struct EchoFixture {
    static let name: BusName = "org.example.Echo"
    static let path: ObjectPath = "/org/example/Echo"
    static let interface: InterfaceName = "org.example.Echo1"

    let bus: PrivateBus
    let server: BusConnection
    let client: BusConnection
    /// The member of each call whose handler began (NeverReply, Delayed),
    /// in order: a test acts once a call is really under way.
    let entered: AsyncStream<String>

    static func start() async throws -> EchoFixture {
        let bus = try await PrivateBus.start()
        let server = try await BusConnection.connect(.address(bus.address))
        let client = try await BusConnection.connect(.address(bus.address))
        let (entered, continuation) = AsyncStream.makeStream(of: String.self)
        try await server.export(
            echoInterface(entered: continuation), at: path, properties: ["Greeting": "hello", "Count": .uint32(0)])
        #expect(try await server.requestName(name) == .primaryOwner)
        return EchoFixture(bus: bus, server: server, client: client, entered: entered)
    }

    /// Waits until the server's handler of a `member` call has begun.
    func handlerEntered(_ member: String) async throws {
        _ = try await take(1, from: entered.filter { $0 == member }, "the server to begin handling \(member)")
    }

    func stop() async {
        await client.close()
        await server.close()
        await bus.stop()
    }

    /// Calls a method of the echo object.
    func call(
        _ member: MemberName, _ body: [BusValue] = [], timeout: Duration = .seconds(10)
    ) async throws
        -> BusMessage
    {
        try await client.call(Self.name, Self.path, Self.interface, member, body, timeout: timeout)
    }

    static func echo(_ name: MemberName, _ types: [BusType]) -> BusInterface.Method {
        .init(name: name, inputs: types.map { .init(nil, $0) }, outputs: types.map { .init(nil, $0) }) { $0.body }
    }

    static let everyBasicType: [BusType] = [
        .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath,
        .signature,
    ]

    static let nestedTypes: [BusType] = [
        .dictionary(key: .string, value: .propertyMap),
        .array(.structure([.objectPath, .propertyMap])),
        .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .propertyMap)),
        .dictionary(key: .uint16, value: .variant),
    ]

    static func echoInterface(entered: AsyncStream<String>.Continuation) -> BusInterface {
        BusInterface(
            name: interface,
            methods: [
                echo("EchoVariant", [.variant]),
                echo("EchoBasics", everyBasicType),
                echo("EchoNested", nestedTypes),
                echo("EchoBytes", [.array(.byte)]),
                echo("EchoStrings", [.array(.string)]),
                .init(name: "Fail", inputs: [.init("name", .string), .init("message", .string)]) { call in
                    throw BusError(BusErrorName(call.body[0].string!), call.body[1].string!)
                },
                .init(name: "ThrowSwiftError") { _ in
                    throw TestSupportError("a plain Swift error")
                },
                .init(name: "NeverReply") { _ in
                    entered.yield("NeverReply")
                    // Never: until the call is cancelled.
                    try await Task.sleep(for: .seconds(86_400))
                    return []
                },
                .init(name: "Delayed", inputs: [.init("milliseconds", .uint32)], outputs: [.init(nil, .uint32)]) {
                    call in
                    entered.yield("Delayed")
                    try await Task.sleep(for: .milliseconds(Int(call.body[0].uint32!)))
                    return call.body
                },
                .init(name: "WrongReply", outputs: [.init(nil, .string)]) { _ in [.uint32(1)] },
                .init(name: "Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int32)]) {
                    call in [.int32(call.body[0].int32! &+ call.body[1].int32!)]
                },
            ],
            properties: [
                .init("Greeting", .string, access: .readwrite),
                .init("Count", .uint32, access: .read),
                .init("Secret", .string, access: .readwrite, changeSignal: .invalidates),
                .init("Checked", .int32, access: .readwrite) { value, _ in
                    guard let number = value.int32, number >= 0 else {
                        throw BusError(.invalidArgs, "Checked must not be negative")
                    }
                },
            ],
            signals: [.init(name: "Tick", arguments: [.init("count", .uint32)])]
        )
    }
}

/// Runs `body` with a fresh echo fixture, and always stops it.
func withEchoFixture(_ body: (EchoFixture) async throws -> Void) async throws {
    try await withResource({ try await EchoFixture.start() }, stop: { await $0.stop() }, body)
}
