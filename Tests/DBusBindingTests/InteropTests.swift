import DBusBinding
import Foundation
import TestSupport
import Testing

/// The binding against stock D-Bus tools and a hostile peer, on a private bus.
@Suite("Interoperability with busctl, gdbus, dbus-python and a hostile peer", .timeLimit(.minutes(5)))
struct InteropTests {
    static let peersDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Peers").path

    func tool(_ name: String, _ arguments: [String]) async throws -> ToolOutput {
        let output = try await runTool(name, arguments, timeout: 30)
        #expect(output.status == 0, "\(name) \(arguments.joined(separator: " ")): \(output.stderr)")
        return output
    }

    @Test func busctlCallsGetsPropertiesAndIntrospects() async throws {
        try await withEchoFixture { fixture throws in
            await fixture.server.addObjectManager(at: "/")
            let address = "--address=\(fixture.bus.address)"
            let sum = try await tool(
                "busctl",
                [
                    address, "call", "org.example.Echo", "/org/example/Echo",
                    "org.example.Echo1", "Add", "ii", "40", "2",
                ])
            #expect(sum.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "i 42")
            let nested = try await tool(
                "busctl",
                [
                    address, "call", "org.example.Echo", "/org/example/Echo",
                    "org.example.Echo1", "EchoStrings", "as", "3", "a", "", "ü",
                ])
            #expect(nested.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"as 3 "a" "" "\303\274""#)
            let greeting = try await tool(
                "busctl",
                [
                    address, "get-property", "org.example.Echo", "/org/example/Echo",
                    "org.example.Echo1", "Greeting",
                ])
            #expect(greeting.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == #"s "hello""#)
            let introspection = try await tool(
                "busctl", [address, "introspect", "org.example.Echo", "/org/example/Echo"])
            #expect(introspection.stdout.contains("org.example.Echo1"))
            #expect(introspection.stdout.contains(".EchoNested"))
            #expect(introspection.stdout.contains("org.freedesktop.DBus.Properties"))
            let tree = try await tool("busctl", [address, "tree", "org.example.Echo"])
            #expect(tree.stdout.contains("/org/example/Echo"))
            let error = try await runTool(
                "busctl",
                [
                    address, "call", "org.example.Echo", "/org/example/Echo",
                    "org.example.Echo1", "Fail", "ss", "org.bluez.Error.InProgress", "busy",
                ])
            #expect(error.status != 0)
            #expect(error.stderr.contains("busy"))
        }
    }

    @Test func gdbusIntrospectsAndCalls() async throws {
        try await withEchoFixture { fixture throws in
            let introspection = try await tool(
                "gdbus",
                [
                    "introspect", "--address", fixture.bus.address,
                    "--dest", "org.example.Echo", "--object-path", "/org/example/Echo",
                ])
            #expect(introspection.stdout.contains("interface org.example.Echo1"))
            #expect(introspection.stdout.contains("readwrite s Greeting"))
            let call = try await tool(
                "gdbus",
                [
                    "call", "--address", fixture.bus.address, "--dest", "org.example.Echo",
                    "--object-path", "/org/example/Echo", "--method", "org.example.Echo1.EchoNested",
                    "{'a': {'b': <int16 -5>}}", "[(objectpath '/x', {'k': <true>})]",
                    "@a{oa{sa{sv}}} {}", "{uint16 76: <[byte 2, 21]>}",
                ])
            #expect(call.stdout.contains("'b': <int16 -5>"))
            #expect(call.stdout.contains("objectpath '/x'"))
            #expect(call.stdout.contains("<[byte 0x02, 0x15]>") || call.stdout.contains("b\"\\x02\\x15\""))
        }
    }

    @Test func dbusPythonCallsUsWithRightAndWrongArguments() async throws {
        try await withEchoFixture { fixture throws in
            let script = """
                import dbus, sys
                bus = dbus.bus.BusConnection(sys.argv[1])
                echo = bus.get_object("org.example.Echo", "/org/example/Echo")
                print(int(echo.Add(dbus.Int32(2), dbus.Int32(3), dbus_interface="org.example.Echo1")))
                try:
                    echo.Add("two", "three", dbus_interface="org.example.Echo1", signature="ss")
                except dbus.DBusException as error:
                    print(error.get_dbus_name())
                try:
                    echo.Nope(dbus_interface="org.example.Echo1")
                except dbus.DBusException as error:
                    print(error.get_dbus_name())
                props = echo.GetAll("org.example.Echo1", dbus_interface="org.freedesktop.DBus.Properties")
                print(str(props["Greeting"]))
                """
            let output = try await tool("/usr/bin/python3", ["-c", script, fixture.bus.address])
            #expect(
                output.stdout.split(separator: "\n") == [
                    "5", "org.freedesktop.DBus.Error.InvalidArgs", "org.freedesktop.DBus.Error.UnknownMethod", "hello",
                ])
        }
    }

    @Test func aHostilePeerGetsErrorsNotCrashes() async throws {
        try await withEchoFixture { fixture throws in
            let client = fixture.client
            // The peer is ready when it owns its name: NameOwnerChanged,
            // subscribed to before it starts.
            let owners = try await client.nameOwnerChanges(of: "org.example.Hostile")
            try await withResource(
                {
                    try ChildProcess(
                        "/usr/bin/python3",
                        ["\(Self.peersDirectory)/hostile_peer.py", fixture.bus.address, "org.example.Hostile"])
                }, stop: { await $0.terminate() }
            ) { _ in
                _ = try await take(1, from: owners.filter { $0.newOwner != nil }, "the hostile peer to own its name")
                let hostile: BusName = "org.example.Hostile"
                let path: ObjectPath = "/org/example/Hostile"
                let interface: InterfaceName = "org.example.Hostile1"

                // Wrong signature where a{oa{sa{sv}}} was expected.
                let wrong = await #expect(throws: BusError.self) {
                    try await client.managedObjects(at: path, of: hostile)
                }
                #expect(wrong?.name == .invalidSignature)
                // 8 MiB of bytes and 200,000 variants decode (they are legal).
                let huge = try await client.call(hostile, path, interface, "HugeBytes", timeout: .seconds(20))
                #expect(huge.body[0].bytes?.count == 8 * 1024 * 1024)
                let many = try await client.call(hostile, path, interface, "ManyVariants", timeout: .seconds(20))
                #expect(many.body[0].elements?.count == 200_000)
                let deep = try await client.call(hostile, path, interface, "DeepVariant")
                #expect(deep.signature == "v")
                // Unix fds are refused with a typed error, alone or nested.
                let fd = await #expect(throws: BusError.self) {
                    try await client.call(hostile, path, interface, "FileDescriptor")
                }
                #expect(fd?.name == .notSupported)
                await #expect(throws: BusError.self) { try await client.call(hostile, path, interface, "WithFdInside") }
                // A PropertiesChanged of the wrong shape is a decoding error for
                // that signal only; the next one is read.
                let changes = try await client.signals(matching: .propertiesChanged(sender: hostile))
                try await client.call(hostile, path, interface, "BadSignals")
                let received = try await take(2, from: changes, "2 signal(s) on changes")
                #expect(received.count == 2)
                #expect(throws: BusError.self) { try PropertiesChanged(received[0]) }
                #expect(try PropertiesChanged(received[1]).changed == ["RSSI": .int16(-42)])
                // The peer dies while we wait for its reply: an error, promptly.
                let vanished = await #expect(throws: BusError.self) {
                    try await client.call(hostile, path, interface, "Vanish", timeout: .seconds(20))
                }
                #expect(vanished?.name == .noReply)
                // And we are still fine.
                #expect(try await fixture.call("Add", [.int32(1), .int32(1)]).body == [.int32(2)])
            }
        }
    }
}
