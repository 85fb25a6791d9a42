import CDBus
import DBusBinding
import Testing

@Suite("Names, paths and signatures are checked before libdbus sees them", .timeLimit(.minutes(2)))
struct NameTests {
    @Test(arguments: ["", "org", "/org/", "//", "/org//bluez", "/org/blu-ez", "/org/bluez\0", "/é", "relative/path"])
    func invalidPathsAreRefused(_ text: String) {
        #expect(throws: BusError.self) { try ObjectPath(text) }
    }

    @Test(arguments: ["/", "/org", "/org/bluez/hci0/dev_A1_B2_A3_B5_C7_D9", "/_/0"])
    func validPathsAreAccepted(_ text: String) throws {
        #expect(try ObjectPath(text).rawValue == text)
    }

    /// A string the compiler cannot see as a literal: `T("…")` with a
    /// literal is a literal coercion, and an invalid literal stops the
    /// program by design.
    func runtime(_ text: String) -> String { text }

    @Test func interfacesMembersAndBusNames() {
        #expect(throws: BusError.self) { try InterfaceName(runtime("org")) }
        #expect(throws: BusError.self) { try InterfaceName(runtime("org..bluez")) }
        #expect(throws: BusError.self) { try InterfaceName(runtime("org.1bluez")) }
        #expect(throws: BusError.self) { try InterfaceName(runtime(String(repeating: "a.", count: 200) + "b")) }
        #expect(throws: BusError.self) { try MemberName(runtime("Get.All")) }
        #expect(throws: BusError.self) { try MemberName(runtime("9Lives")) }
        #expect(throws: BusError.self) { try MemberName(runtime("")) }
        #expect(throws: BusError.self) { try BusName(runtime("org")) }
        #expect(throws: BusError.self) { try BusName(runtime("org.bluez\0")) }
        #expect((try? InterfaceName(runtime("org.bluez.GattCharacteristic1"))) != nil)
        #expect((try? MemberName(runtime("StartNotify"))) != nil)
        #expect((try? BusName(runtime(":1.42")))?.isUnique == true)
        #expect((try? BusName(runtime("org.bluez")))?.isUnique == false)
    }

    @Test(arguments: [
        "a", "a{", "a{vs}", "()", "(i", "a{s}", "z", "a{sv}}", "h(", String(repeating: "a", count: 40) + "i",
    ])
    func invalidSignaturesAreRefused(_ text: String) {
        #expect(throws: BusError.self) { try Signature(text) }
        #expect(throws: BusError.self) { try BusType.parse(text) }
    }

    @Test func signaturesParseIntoTypes() throws {
        let types = try Signature(runtime("oa{sa{sv}}a(oa{sv})ay")).types
        #expect(
            types == [
                .objectPath,
                .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)),
                .array(.structure([.objectPath, .dictionary(key: .string, value: .variant)])),
                .array(.byte),
            ])
        #expect(types.map(\.signature).joined() == "oa{sa{sv}}a(oa{sv})ay")
    }

    /// The binding's validators agree with libdbus' on every input here, so
    /// nothing that passes ours can make libdbus abort.
    @Test func validatorsAgreeWithLibdbus() {
        let candidates = [
            "/", "/a", "/a/", "//a", "/a_b/c0", "a", "", "org.bluez", ".org.bluez", "org.bluez.", "org..bluez",
            ":1.1", ":1", "org.bluez-x", "_a.b", "a.b.c.d", "Get", "Get1", "1Get", "a{sv}", "(", "v", "aa{sv}",
        ]
        for text in candidates {
            #expect(((try? ObjectPath(text)) != nil) == (dbus_validate_path(text, nil) != 0), "\(text)")
            #expect(((try? InterfaceName(text)) != nil) == (dbus_validate_interface(text, nil) != 0), "\(text)")
            #expect(((try? MemberName(text)) != nil) == (dbus_validate_member(text, nil) != 0), "\(text)")
            #expect(((try? BusName(text)) != nil) == (dbus_validate_bus_name(text, nil) != 0), "\(text)")
            #expect(((try? Signature(text)) != nil) == (dbus_signature_validate(text, nil) != 0), "\(text)")
        }
    }

    @Test func valuesThatLibdbusWouldRejectAreRefusedBeforeSending() async throws {
        try await withEchoFixture { fixture throws in
            // An array whose elements are not all of its element type.
            let mixed = BusValue.array(.string, [.string("a"), .uint32(1)])
            let mixedError = await #expect(throws: BusError.self) {
                try await fixture.call("EchoVariant", [.variant(mixed)])
            }
            #expect(mixedError?.name == .invalidArgs)
            // A string with a NUL byte.
            await #expect(throws: BusError.self) { try await fixture.call("EchoVariant", [.variant(.string("a\0b"))]) }
            // An empty structure.
            await #expect(throws: BusError.self) { try await fixture.call("EchoVariant", [.variant(.structure([]))]) }
            // A dictionary entry of the wrong type.
            let badDict = BusValue.dictionary(key: .string, value: .variant, [.init(.uint32(1), .variant(.byte(1)))])
            await #expect(throws: BusError.self) { try await fixture.call("EchoVariant", [.variant(badDict)]) }
            // The connection is unharmed.
            #expect(try await fixture.call("Add", [.int32(1), .int32(2)]).body == [.int32(3)])
        }
    }

    @Test func decodingTheWrongShapeIsATypedError() async throws {
        try await withEchoFixture { fixture throws in
            let reply = try await fixture.call("Add", [.int32(1), .int32(2)])
            let error = #expect(throws: BusError.self) { try reply.body(as: "a{sv}") }
            #expect(error?.name == .invalidSignature)
            #expect(reply.body[0].string == nil)
            #expect(reply.body[0].stringKeyedDictionary == nil)
        }
    }
}
