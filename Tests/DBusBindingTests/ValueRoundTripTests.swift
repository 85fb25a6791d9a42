import DBusBinding
import Testing

@Suite("Values cross the bus unchanged", .timeLimit(.minutes(3)))
struct ValueRoundTripTests {
    static let basics: [BusValue] = [
        .byte(0), .boolean(true), .int16(.min), .uint16(.max), .int32(.min), .uint32(.max), .int64(.min),
        .uint64(.max), .double(-1.5e300), .string(""), .objectPath("/"), .signature(""),
    ]

    @Test func everyBasicTypeAtItsLimits() async throws {
        try await withEchoFixture { fixture throws in
            let extremes: [[BusValue]] = [
                Self.basics,
                [
                    .byte(255), .boolean(false), .int16(.max), .uint16(0), .int32(.max), .uint32(0), .int64(.max),
                    .uint64(0), .double(0.1), .string("ünïcødé ✓ \u{1F697}"), .objectPath("/org/bluez/hci0/dev_A1_B2"),
                    .signature("a{oa{sa{sv}}}"),
                ],
            ]
            for values in extremes {
                let reply = try await fixture.call("EchoBasics", values)
                #expect(reply.body == values)
                #expect(reply.signature == "ybnqiuxtdsog")
            }
        }
    }

    @Test func everyTypeInsideAVariant() async throws {
        try await withEchoFixture { fixture throws in
            let values: [BusValue] =
                Self.basics + [
                    .bytes([]), .bytes([1, 2, 3]),
                    .array(.string, []), .array(.int32, [.int32(1), .int32(-1)]),
                    .structure([.string("a"), .variant(.uint16(7))]),
                    .variant(.variant(.string("nested variants"))),
                    .propertyMap([:]),
                    .dictionary(key: .int64, value: .boolean, [.init(.int64(-1), .boolean(true))]),
                ]
            for value in values {
                let reply = try await fixture.call("EchoVariant", [.variant(value)])
                #expect(reply.body == [.variant(value)], "round trip of \(value.type)")
            }
        }
    }

    @Test func deeplyNestedContainersAsBlueZSendsThem() async throws {
        try await withEchoFixture { fixture throws in
            let device: [String: BusValue] = [
                "Address": "A1:B2:A3:B5:C7:D9", "RSSI": .int16(-67), "Connected": false,
                "UUIDs": .strings(["0000180f-0000-1000-8000-00805f9b34fb"]),
                "ManufacturerData": .dictionary(
                    key: .uint16, value: .variant, [.init(.uint16(0x004C), .variant(.bytes([0x02, 0x15])))]),
                "ServiceData": .propertyMap([:]),
            ]
            let interfaces = BusValue.dictionary(
                key: .string, value: .propertyMap,
                [
                    .init("org.bluez.Device1", .propertyMap(device)),
                    .init("org.freedesktop.DBus.Properties", .propertyMap([:])),
                ])
            let body: [BusValue] = [
                interfaces,
                .array(
                    .structure([.objectPath, .propertyMap]),
                    [
                        .structure([.objectPath("/a"), .propertyMap(["x": .double(1)])]),
                        .structure([.objectPath("/b"), .propertyMap([:])]),
                    ]),
                .dictionary(
                    key: .objectPath, value: .dictionary(key: .string, value: .propertyMap),
                    [.init(.objectPath("/org/bluez/hci0/dev_A1_B2_A3_B5_C7_D9"), interfaces)]),
                .dictionary(key: .uint16, value: .variant, []),
            ]
            let reply = try await fixture.call("EchoNested", body)
            #expect(reply.body == body)
            #expect(reply.signature == "a{sa{sv}}a(oa{sv})a{oa{sa{sv}}}a{qv}")
            let objects = reply.body[2].pathKeyedDictionary
            #expect(objects?.keys.first == "/org/bluez/hci0/dev_A1_B2_A3_B5_C7_D9")
        }
    }

    @Test func emptyArraysAndStrings() async throws {
        try await withEchoFixture { fixture throws in
            #expect(try await fixture.call("EchoStrings", [.strings([])]).body == [.strings([])])
            #expect(try await fixture.call("EchoStrings", [.strings(["", "", ""])]).body == [.strings(["", "", ""])])
            #expect(try await fixture.call("EchoBytes", [.bytes([])]).body == [.bytes([])])
            let nested: [BusValue] = [
                .dictionary(key: .string, value: .propertyMap, []),
                .array(.structure([.objectPath, .propertyMap]), []),
                .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .propertyMap), []),
                .dictionary(key: .uint16, value: .variant, []),
            ]
            #expect(try await fixture.call("EchoNested", nested).body == nested)
        }
    }

    @Test func sixtyFourKiBOfBytes() async throws {
        try await withEchoFixture { fixture throws in
            let bytes = (0..<65_536).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            let reply = try await fixture.call("EchoBytes", [.bytes(bytes)])
            #expect(reply.body[0].bytes == bytes)
            // An `array(.byte, …)` is encoded as `ay` too, and decodes as `bytes`.
            let small: [UInt8] = [9, 8, 7]
            let again = try await fixture.call("EchoBytes", [.array(.byte, small.map(BusValue.byte))])
            #expect(again.body == [.bytes(small)])
        }
    }

    @Test func nestingAtTheLimitAndBeyond() async throws {
        try await withEchoFixture { fixture throws in
            // 32 nested variants: within the 64-container limit.
            var deep = BusValue.string("core")
            for _ in 0..<31 { deep = .variant(deep) }
            #expect(try await fixture.call("EchoVariant", [.variant(deep)]).body == [.variant(deep)])
            // 100 nested variants: refused before it is sent, connection intact.
            var tooDeep = BusValue.string("core")
            for _ in 0..<100 { tooDeep = .variant(tooDeep) }
            await #expect(throws: BusError.self) { try await fixture.call("EchoVariant", [.variant(tooDeep)]) }
            #expect(try await fixture.call("Add", [.int32(2), .int32(3)]).body == [.int32(5)])
        }
    }
}
