import Synchronization
import Testing

@testable import DBusBinding

/// The object server as a value, with no socket and no bus: what it answers
/// each call, and the signals a change causes. ObjectServerTests and
/// InteropTests check the same over a real bus, with real peers.
@Suite("The object server answers calls without a socket", .timeLimit(.minutes(2)))
struct ObjectServerUnitTests {
    static let path: ObjectPath = "/org/example/Unit"
    static let interface: InterfaceName = "org.example.Unit1"

    /// What the `Checked` setter was given (only `aSetterRunsWhenTheWorkRuns`
    /// runs it).
    final class SetterLog: Sendable {
        let values = Mutex<[BusValue]>([])
    }
    static let setterSaw = SetterLog()

    static func unitInterface() -> BusInterface {
        BusInterface(
            name: interface,
            methods: [
                .init(name: "Add", inputs: [.init("a", .int32), .init("b", .int32)], outputs: [.init("sum", .int32)]) {
                    call in
                    guard case .int32(let a) = call.body[0], case .int32(let b) = call.body[1] else { return [] }
                    return [.int32(a + b)]
                },
                // Declared to answer 'i', answers 's': a handler's mistake.
                .init(name: "Liar", outputs: [.init("n", .int32)]) { _ in ["not a number"] },
            ],
            properties: [
                .init("Greeting", .string, access: .readwrite),
                .init("Count", .uint32),
                .init("Secret", .string, access: .write),
                .init("Cached", .string, access: .readwrite, changeSignal: .invalidates),
                .init("Quiet", .string, access: .readwrite, changeSignal: .none),
                .init("Checked", .int32, access: .readwrite) { value, _ in
                    Self.setterSaw.values.withLock { $0.append(value) }
                },
            ])
    }

    static func server(manager: ObjectPath? = nil) throws -> ObjectServer {
        var server = ObjectServer()
        server.machineID = "0123456789abcdef0123456789abcdef"
        if let manager { server.addObjectManager(at: manager) }
        _ = try server.export(
            unitInterface(), at: path,
            values: ["Greeting": "hello", "Count": .uint32(0), "Secret": "s3cret", "Cached": "a", "Quiet": "q"])
        return server
    }

    /// A method call as the connection decodes it.
    static func call(
        _ member: MemberName, _ interface: InterfaceName?, at path: ObjectPath = Self.path, _ body: [BusValue] = []
    ) -> BusMessage {
        BusMessage(
            kind: .methodCall, serial: 7, sender: ":1.42", destination: ":1.1", path: path, interface: interface,
            member: member, signature: body.map(\.type.signature).joined(), body: body, noReplyExpected: false)
    }

    static func properties(_ member: MemberName, _ body: [BusValue]) -> BusMessage {
        call(member, .properties, body)
    }

    @Test func propertiesGetGetAllAndSet() throws {
        var server = try Self.server()
        let name = Self.interface.rawValue

        let get = server.answer(Self.properties("Get", [.string(name), "Greeting"]))
        #expect(get.reply == [.variant("hello")])
        let all = server.answer(Self.properties("GetAll", [.string(name)])).reply
        #expect(
            all == [.propertyMap(["Greeting": "hello", "Count": .uint32(0), "Cached": "a", "Quiet": "q"])],
            "every readable value, and not the write-only one")

        let set = server.answer(Self.properties("Set", [.string(name), "Greeting", .variant("hej")]))
        #expect(set.reply == [])
        #expect(
            set.signals == [
                .init(
                    path: Self.path, interface: .properties, member: "PropertiesChanged",
                    body: [.string(name), .propertyMap(["Greeting": "hej"]), .strings([])])
            ], "PropertiesChanged goes out before the reply")
        #expect(server.propertyValue("Greeting", interface: Self.interface, at: Self.path) == "hej")

        // A property with a setter hands the value over and stores nothing.
        let checked = server.answer(Self.properties("Set", [.string(name), "Checked", .variant(.int32(5))]))
        #expect(checked.signals.isEmpty)
        #expect(checked.work != nil, "a setter runs as a handler")
        #expect(server.propertyValue("Checked", interface: Self.interface, at: Self.path) == nil)
    }

    @Test func aSetterRunsWhenTheWorkRuns() async throws {
        var server = try Self.server()
        let answer = server.answer(
            Self.properties("Set", [.string(Self.interface.rawValue), "Checked", .variant(.int32(5))]))
        let work = try #require(answer.work)
        #expect(try await work() == [])
        #expect(Self.setterSaw.values.withLock { $0 } == [.int32(5)])
    }

    @Test func propertiesErrorsKeepTheirNamesAndTexts() throws {
        var server = try Self.server()
        let name = Self.interface.rawValue
        let cases: [(BusMessage, BusErrorName, String)] = [
            (
                Self.properties("Set", [.string(name), "Count", .variant(.uint32(5))]), .propertyReadOnly,
                "Property 'Count' is not writable"
            ),
            (
                Self.properties("Set", [.string(name), "Greeting", .variant(.uint32(5))]), .invalidArgs,
                "Property 'Greeting' is 's', given 'u'"
            ),
            (Self.properties("Get", [.string(name), "Nope"]), .invalidArgs, "No such property 'Nope'"),
            (Self.properties("Get", [.string(name), "Secret"]), .invalidArgs, "No such property 'Secret'"),
            (
                Self.properties("Get", [.string(name)]), .invalidArgs,
                "Invalid arguments for Properties.Get: expected 'ss', got 's'"
            ),
            (
                Self.properties("Frob", []), .unknownMethod,
                "No such method 'Frob' in interface 'org.freedesktop.DBus.Properties'"
            ),
            (
                Self.properties("Get", ["org.example.Nope", "Greeting"]), .invalidArgs,
                "No such interface 'org.example.Nope'"
            ),
            (Self.properties("GetAll", ["not an interface"]), .invalidArgs, "No such interface 'not an interface'"),
        ]
        for (message, errorName, text) in cases {
            let response = server.answer(message)
            #expect(response.error == BusError(errorName, text), "\(message.member!) \(message.body)")
            #expect(response.signals.isEmpty)
        }
    }

    @Test func methodCallsAreCheckedBeforeAHandlerRuns() async throws {
        var server = try Self.server()
        let cases: [(BusMessage, BusErrorName, String)] = [
            (
                Self.call("Add", Self.interface, at: "/org/example/Nowhere", [.int32(1), .int32(2)]), .unknownObject,
                "No such object path '/org/example/Nowhere'"
            ),
            (
                Self.call("Add", "org.example.Other1", [.int32(1), .int32(2)]), .unknownInterface,
                "No such interface 'org.example.Other1' at object path '/org/example/Unit'"
            ),
            (
                Self.call("Nope", Self.interface, ["x"]), .unknownMethod,
                "No such method 'Nope' in interface 'org.example.Unit1' at object path '/org/example/Unit' (signature 's')"
            ),
            (
                Self.call("Nope", nil, []), .unknownInterface,
                "No such interface '' at object path '/org/example/Unit'"
            ),
            (
                Self.call("Add", Self.interface, ["two", "three"]), .invalidArgs,
                "Invalid arguments for org.example.Unit1.Add: expected 'ii', got 'ss'"
            ),
        ]
        for (message, errorName, text) in cases {
            let response = server.answer(message)
            #expect(response.error == BusError(errorName, text), "\(message.member!)")
        }

        // Found by member alone (no interface given), then run.
        let addAnswer = server.answer(Self.call("Add", nil, [.int32(2), .int32(3)]))
        let add = try #require(addAnswer.work)
        #expect(try await add() == [.int32(5)])
        // A reply of the wrong signature becomes Failed, naming both.
        let liarAnswer = server.answer(Self.call("Liar", Self.interface))
        let liar = try #require(liarAnswer.work)
        let error = await #expect(throws: BusError.self) { try await liar() }
        #expect(
            error
                == BusError(.failed, "org.example.Unit1.Liar answered 's' but is declared to answer 'i'"))
    }

    @Test func peerIntrospectableAndNoAnswer() throws {
        var server = try Self.server()
        let ping = server.answer(Self.call("Ping", .peer, at: "/anywhere"))
        #expect(ping.reply == [])
        let machineID = server.answer(Self.call("GetMachineId", nil, at: "/"))
        #expect(machineID.reply == ["0123456789abcdef0123456789abcdef"])

        let rootAnswer = server.answer(Self.call("Introspect", .introspectable, at: "/"))
        let root = try #require(rootAnswer.reply?.first?.string)
        #expect(root.contains("<node name=\"org\"/>"))
        let nodeAnswer = server.answer(Self.call("Introspect", nil, at: Self.path))
        let node = try #require(nodeAnswer.reply?.first?.string)
        #expect(node.contains("<interface name=\"org.example.Unit1\">"))
        #expect(node.contains("<property name=\"Cached\" type=\"s\" access=\"readwrite\">"))
        // An intermediate node is walkable; a path that is no node is unknown.
        let intermediate = server.answer(Self.call("Introspect", .introspectable, at: "/org/example"))
        #expect(intermediate.reply != nil)
        let elsewhere = server.answer(Self.call("Introspect", .introspectable, at: "/elsewhere"))
        #expect(elsewhere.error == BusError(.unknownObject, "No such object path '/elsewhere'"))

        var noMember = Self.call("Ping", .peer)
        noMember.member = nil
        let none = server.answer(noMember)
        #expect(none.isNone)
    }

    @Test func theObjectManagerAnnouncesAndLists() throws {
        var server = ObjectServer()
        server.addObjectManager(at: "/")
        let added = try server.export(Self.unitInterface(), at: Self.path, values: ["Greeting": "hello"])
        #expect(added.count == 1)
        #expect(added.first?.path == "/")
        #expect(added.first?.member == "InterfacesAdded")
        #expect(added.first?.body.first == .objectPath(Self.path))
        let announced = InterfacesAdded.interfaceMap(try #require(added.first?.body[1]))
        #expect(
            Set(announced.keys)
                == [
                    "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties",
                    Self.interface.rawValue,
                ], "a new object comes with the standard interfaces, as bluetoothd announces one")
        #expect(announced[Self.interface.rawValue]?["Greeting"]?.unwrapped == "hello")

        let managedAnswer = server.answer(Self.call("GetManagedObjects", .objectManager, at: "/"))
        let managed = try #require(managedAnswer.reply)
        #expect(managed.count == 1)
        #expect(managed[0].pathKeyedDictionary?.keys.map(\.rawValue) == [Self.path.rawValue])
        // Not a manager: no GetManagedObjects there.
        let notAManager = server.answer(Self.call("GetManagedObjects", .objectManager, at: Self.path))
        #expect(notAManager.error?.name == .unknownInterface)

        let removed = server.unexport(nil, at: Self.path)
        #expect(
            removed == [
                .init(
                    path: "/", interface: .objectManager, member: "InterfacesRemoved",
                    body: [
                        .objectPath(Self.path),
                        .strings([
                            "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties",
                            Self.interface.rawValue,
                        ]),
                    ])
            ])
        #expect(server.exportedPaths.isEmpty)
        let removedAgain = server.unexport(nil, at: Self.path)
        #expect(removedAgain.isEmpty, "nothing left to remove, nothing announced")

        // Without a manager above, nothing is announced.
        var unmanaged = ObjectServer()
        let unannounced = try unmanaged.export(Self.unitInterface(), at: Self.path, values: [:])
        #expect(unannounced.isEmpty)
    }

    @Test func setPropertiesSaysOnlyWhatChanged() throws {
        var server = try Self.server()
        let name = Self.interface.rawValue
        func set(_ changes: [String: BusValue?], announcing: Set<String> = []) throws -> [ObjectServer.Signal] {
            try server.setProperties(changes, interface: Self.interface, at: Self.path, announcing: announcing)
        }
        func changed(_ values: [String: BusValue], _ invalidated: [String]) -> [ObjectServer.Signal] {
            [
                .init(
                    path: Self.path, interface: .properties, member: "PropertiesChanged",
                    body: [.string(name), .propertyMap(values), .strings(invalidated)])
            ]
        }
        #expect(try set(["Greeting": "hello"]).isEmpty, "the same value: nothing changed")
        #expect(try set(["Greeting": "hello"], announcing: ["Greeting"]) == changed(["Greeting": "hello"], []))
        #expect(
            try set(["Count": .uint32(2), "Cached": "b", "Quiet": "r"])
                == changed(["Count": .uint32(2)], ["Cached"]))
        #expect(try set(["Greeting": nil]) == changed([:], ["Greeting"]), "a removed value is invalidated")
        #expect(server.propertyValue("Quiet", interface: Self.interface, at: Self.path) == "r")

        #expect(throws: BusError.invalidArgs("Property org.example.Unit1.Count is 'u', given 's'")) {
            try set(["Count": "two"])
        }
        #expect(throws: BusError.invalidArgs("org.example.Unit1 has no property 'Nope'")) { try set(["Nope": "x"]) }
        #expect(throws: BusError(.unknownInterface, "No interface org.example.Other1 at /org/example/Unit")) {
            try server.setProperties(["Greeting": "x"], interface: "org.example.Other1", at: Self.path)
        }
        #expect(throws: BusError.invalidArgs("org.example.Unit1 has no property 'Nope'")) {
            try server.export(Self.unitInterface(), at: "/org/example/Second", values: ["Nope": "x"])
        }
    }
}

extension ObjectServer.Response {
    var reply: [BusValue]? {
        if case .reply(let values) = answer { values } else { nil }
    }
    var error: BusError? {
        if case .error(let error) = answer { error } else { nil }
    }
    var work: ObjectServer.Work? {
        if case .run(let work) = answer { work } else { nil }
    }
    var isNone: Bool {
        if case .none = answer { true } else { false }
    }
}
