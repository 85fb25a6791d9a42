import DBusBinding
import Foundation
import FoundationXML
import TestSupport
import Testing

@Suite("Serving objects: properties, object manager, introspection", .timeLimit(.minutes(5)))
struct ObjectServerTests {
    @Test func propertiesGetGetAllAndSet() async throws {
        try await withEchoFixture { fixture throws in
            let client = fixture.client
            let name = EchoFixture.name, path = EchoFixture.path, interface = EchoFixture.interface
            #expect(try await client.getProperty("Greeting", interface: interface, at: path, of: name) == "hello")
            let all = try await client.getAllProperties(interface: interface, at: path, of: name)
            #expect(all == ["Greeting": "hello", "Count": .uint32(0)])

            try await client.setProperty("Greeting", to: "hej", interface: interface, at: path, of: name)
            #expect(try await client.getProperty("Greeting", interface: interface, at: path, of: name) == "hej")

            let readOnly = await #expect(throws: BusError.self) {
                try await client.setProperty("Count", to: .uint32(5), interface: interface, at: path, of: name)
            }
            #expect(readOnly?.name == .propertyReadOnly)
            let wrongType = await #expect(throws: BusError.self) {
                try await client.setProperty("Greeting", to: .uint32(5), interface: interface, at: path, of: name)
            }
            #expect(wrongType?.name == .invalidArgs)
            let unknown = await #expect(throws: BusError.self) {
                try await client.getProperty("Nope", interface: interface, at: path, of: name)
            }
            #expect(unknown?.name == .invalidArgs)

            // A setter decides: it refuses a negative value, and stores nothing itself.
            let refused = await #expect(throws: BusError.self) {
                try await client.setProperty("Checked", to: .int32(-1), interface: interface, at: path, of: name)
            }
            #expect(refused?.name == .invalidArgs)
            #expect(refused?.message == "Checked must not be negative")
            try await client.setProperty("Checked", to: .int32(1), interface: interface, at: path, of: name)
        }
    }

    @Test func objectManagerAnnouncesObjectsAsTheyComeAndGo() async throws {
        try await withEchoFixture { fixture throws in
            let server = fixture.server
            await server.addObjectManager(at: "/")
            let added = try await fixture.client.signals(matching: .interfacesAdded(sender: EchoFixture.name))
            let removed = try await fixture.client.signals(matching: .interfacesRemoved(sender: EchoFixture.name))
            let device = BusInterface(
                name: "org.bluez.Device1", properties: [.init("Address", .string), .init("RSSI", .int16)])
            let battery = BusInterface(name: "org.bluez.Battery1", properties: [.init("Percentage", .byte)])
            let path: ObjectPath = "/org/bluez/hci0/dev_A1_B2_A3_B5_C7_D9"

            try await server.export(
                device, at: path, properties: ["Address": "A1:B2:A3:B5:C7:D9", "RSSI": .int16(-60)])
            try await server.export(battery, at: path, properties: ["Percentage": .byte(87)])
            let announcements = try await take(2, from: added, "2 signal(s) on added").map(InterfacesAdded.init)
            #expect(announcements.count == 2)
            #expect(announcements[0].path == path)
            #expect(
                announcements[0].interfaces["org.bluez.Device1"] == [
                    "Address": "A1:B2:A3:B5:C7:D9", "RSSI": .int16(-60),
                ])
            #expect(announcements[0].interfaces.keys.contains("org.freedesktop.DBus.Properties"))
            #expect(Set(announcements[1].interfaces.keys) == ["org.bluez.Battery1"])

            let objects = try await fixture.client.managedObjects(of: EchoFixture.name)
            #expect(objects[path]?["org.bluez.Battery1"] == ["Percentage": .byte(87)])
            #expect(objects[EchoFixture.path]?["org.example.Echo1"]?["Greeting"] == "hello")

            try await server.unexport(["org.bluez.Battery1"], at: path)
            try await server.unexport(at: path)
            let gone = try await take(2, from: removed, "2 signal(s) on removed").map(InterfacesRemoved.init)
            #expect(
                gone.map(\.interfaces) == [
                    ["org.bluez.Battery1"],
                    ["org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties", "org.bluez.Device1"],
                ])
            #expect(try await fixture.client.managedObjects(of: EchoFixture.name)[path] == nil)
        }
    }

    @Test func introspectionIsWellFormedXML() async throws {
        try await withEchoFixture { fixture throws in
            await fixture.server.addObjectManager(at: "/")
            let xml = try await fixture.client.introspect(EchoFixture.path, of: EchoFixture.name)
            let document = try XMLDocument(xmlString: xml, options: [])
            let interfaces = try document.nodes(forXPath: "/node/interface/@name").compactMap(\.stringValue)
            #expect(interfaces.contains("org.example.Echo1"))
            #expect(interfaces.contains("org.freedesktop.DBus.Properties"))
            #expect(interfaces.contains("org.freedesktop.DBus.Introspectable"))
            let methods = try document.nodes(forXPath: "/node/interface[@name='org.example.Echo1']/method/@name")
                .compactMap(\.stringValue)
            #expect(methods.contains("EchoNested") && methods.contains("Add"))
            let access = try document.nodes(
                forXPath: "/node/interface[@name='org.example.Echo1']/property[@name='Count']/@access")
            #expect(access.first?.stringValue == "read")

            // Intermediate nodes list their children, so tools can walk the tree.
            let root = try XMLDocument(xmlString: try await fixture.client.introspect("/", of: EchoFixture.name))
            #expect(try root.nodes(forXPath: "/node/node/@name").compactMap(\.stringValue) == ["org"])
            let org = try XMLDocument(
                xmlString: try await fixture.client.introspect("/org/example", of: EchoFixture.name))
            #expect(try org.nodes(forXPath: "/node/node/@name").compactMap(\.stringValue) == ["Echo"])
        }
    }

    @Test func peerPingAndMachineId() async throws {
        try await withEchoFixture { fixture throws in
            try await fixture.client.call(EchoFixture.name, "/", .peer, "Ping")
            let id = try await fixture.client.call(EchoFixture.name, "/", .peer, "GetMachineId").body(as: "s")
            #expect(id[0].string?.isEmpty == false)
        }
    }
}
