import Testing

@testable import DBusBinding

/// Records what the fast decoder tells a sink, copying what it keeps.
struct RecordingSink: WirePropertySink {
    var events: [String] = []
    var values: [String: BusValue] = [:]
    var check: ((String, WireValue) -> Void)?

    mutating func beginObject(path: WireName) { events.append("object \(path.string)") }
    mutating func interface(_ name: WireName) { events.append("interface \(name.string)") }
    mutating func property(_ name: WireName, _ value: WireValue) {
        events.append("property \(name.string)")
        values[name.string] = try? value.busValue()
        check?(name.string, value)
    }
    mutating func invalidated(_ name: WireName) { events.append("invalidated \(name.string)") }
    mutating func interfaceRemoved(_ name: WireName) { events.append("removed \(name.string)") }
    mutating func end() { events.append("end") }
}

@Suite("The wire decoder reads BlueZ' types as libdbus does", .timeLimit(.minutes(2)))
struct WireDecoderTests {
    /// A PropertiesChanged body marshalled by libdbus (serial 1 since
    /// `WireMessage.marshal` sets it).
    static func changed(_ properties: [String: BusValue], invalidated: [String] = []) throws -> [UInt8] {
        try WireMessage.marshal(
            method: "PropertiesChanged",
            body: [.string("org.bluez.Device1"), .propertyMap(properties), .strings(invalidated)])
    }

    static func decode(_ bytes: [UInt8], check: ((String, WireValue) -> Void)? = nil) throws -> RecordingSink {
        try bytes.withUnsafeBytes { buffer in
            let view = try WireMessageView(validating: buffer)
            var sink = RecordingSink(check: check)
            let shape = BlueZDecoder.decode(view, names: .blueZ(), paths: InternTable(), into: &sink)
            #expect(shape == .propertiesChanged)
            return sink
        }
    }

    @Test func marshalledMessagesHaveASerial() throws {
        let bytes = try WireMessage.marshal(method: "A", body: [.string("x")])
        #expect(bytes[8] == 1 && bytes[9] == 0 && bytes[10] == 0 && bytes[11] == 0)
        #expect(try WireMessage.decodeBody(marshalled: bytes) == [.string("x")])
    }

    /// Each type BlueZ sends in a property, marshalled by libdbus, read by
    /// its typed accessor and by `busValue()`, and the whole message by the
    /// differential verdict.
    @Test(arguments: [
        ("y", BusValue.byte(0xFE)), ("n", .int16(-70)), ("q", .uint16(0xFFFF)), ("i", .int32(-2)),
        ("u", .uint32(0xDEAD_BEEF)), ("x", .int64(-1 << 40)), ("t", .uint64(1 << 63)), ("b", .boolean(true)),
        ("d", .double(-0.25)), ("s", .string("SBeacon ☃")), ("o", .objectPath("/org/bluez/hci0")),
        ("g", .signature(Signature(unchecked: "a{sv}", types: [.propertyMap]))), ("ay", .bytes([0, 1, 0xFF])),
        ("as", .strings(["a", "", "b"])), ("ao", .objectPaths(["/a", "/b/c"])),
        ("a{qv}", .dictionary(key: .uint16, value: .variant, [.init(.uint16(0x4C), .variant(.bytes([2, 0x15])))])),
        ("a{sv}", .dictionary(key: .string, value: .variant, [.init(.string("feaa"), .variant(.bytes([0x10])))])),
        ("a{yv}", .dictionary(key: .byte, value: .variant, [.init(.byte(0x16), .variant(.bytes([0xAA])))])),
        ("v", .variant(.int16(3))), ("(is)", .structure([.int32(1), .string("x")])),
    ])
    func eachPropertyType(signature: String, value: BusValue) throws {
        let bytes = try Self.changed(["P": value], invalidated: ["Alias"])
        #expect(try WireDifferential.check(bytes).get() == .fast(.propertiesChanged))
        var seen = false
        let sink = try Self.decode(bytes) { name, wire in
            #expect(name == "P")
            #expect(String(decoding: wire.signature, as: UTF8.self) == signature)
            seen = true
            switch value {
            case .byte(let v): #expect(wire.byte == v)
            case .int16(let v): #expect(wire.int16 == v)
            case .uint16(let v): #expect(wire.uint16 == v)
            case .int32(let v): #expect(wire.int32 == v)
            case .uint32(let v): #expect(wire.uint32 == v)
            case .int64(let v): #expect(wire.int64 == v)
            case .uint64(let v): #expect(wire.uint64 == v)
            case .boolean(let v): #expect(wire.bool == v)
            case .double(let v): #expect(wire.double == v)
            case .string(let v):
                #expect(wire.string == v)
                #expect(wire.textEquals(v) && !wire.textEquals(v + "x"))
            case .objectPath(let v): #expect(wire.string == v.rawValue)
            case .signature(let v): #expect(wire.string == v.rawValue)
            case .bytes(let v): #expect(wire.bytesEqual(v) && wire.bytes.map(Array.init) == v)
            case .array(_, let elements):
                var texts: [String] = []
                #expect(wire.forEachText { texts.append(String(decoding: $0, as: UTF8.self)) })
                #expect(texts == elements.map { $0.string ?? $0.objectPath?.rawValue ?? "?" })
            case .dictionary(_, _, let entries):
                var keys: [BusValue] = []
                var inner: [[UInt8]] = []
                #expect(
                    wire.forEachEntry { key, value in
                        keys.append((try? key.busValue()) ?? .byte(0))
                        inner.append(value.bytes.map(Array.init) ?? [])
                    })
                #expect(keys == entries.map(\.key))
                #expect(inner == entries.map { $0.value.bytes ?? [] })
            default: #expect(wire.kind == .variant || wire.kind == .other)
            }
        }
        #expect(seen)
        #expect(sink.values["P"] == value)
        #expect(
            sink.events == [
                "object /", "interface org.bluez.Device1", "property P", "invalidated Alias", "end",
            ])
    }

    @Test func theHotSignalInBothByteOrders() throws {
        for bigEndian in [false, true] {
            let bytes = WireDifferential.hotSignal(bigEndian: bigEndian, rssi: -42)
            #expect(try WireDifferential.check(bytes).get() == .fast(.propertiesChanged))
            var rssi: Int16?
            var manufacturer: [UInt16: [UInt8]] = [:]
            _ = try Self.decode(bytes) { name, value in
                if name == "RSSI" { rssi = value.int16 }
                if name == "ManufacturerData" {
                    value.forEachEntry { key, data in manufacturer[key.uint16 ?? 0] = data.bytes.map(Array.init) }
                }
            }
            #expect(rssi == -42)
            #expect(manufacturer == [0x004C: WireDifferential.manufacturer])
        }
    }

    /// UTF-8 as libdbus 1.14 judges it, each corner patched into a
    /// property's string and given to both sides.
    @Test(
        arguments: [
            ([0xEF, 0xBF, 0xBE], true), ([0xEF, 0xB7, 0x90], true), ([0x01, 0x41, 0x41], true),
            ([0xED, 0xA0, 0x80], false), ([0xC0, 0xAF, 0x41], false), ([0xE2, 0x82, 0x41], false),
            ([0x41, 0x00, 0x41], false), ([0xF4, 0x90, 0x80], false), ([0xE2, 0x82, 0xAC], true),
            ([0xF0, 0x9F, 0x98], false), ([0x80, 0x41, 0x41], false), ([0xF8, 0x88, 0x80], false),
        ] as [([UInt8], Bool)])
    func utf8Corners(patch: [UInt8], accepted: Bool) throws {
        var bytes = try Self.changed(["Name": .string("<@@@>")])
        let marker = Array("<@@@>".utf8)
        let at = try #require((0...(bytes.count - 5)).first { Array(bytes[$0..<($0 + 5)]) == marker })
        bytes.replaceSubrange((at + 1)..<(at + 4), with: patch)
        let verdict = try WireDifferential.check(bytes).get()
        #expect(verdict == (accepted ? .fast(.propertiesChanged) : .refused))
        #expect(WireText.isValidUTF8(patch.withUnsafeBytes { $0 }) == accepted || patch.count != 3)
    }

    @Test func fourByteCorners() throws {
        for (patch, accepted) in [
            ([0xF0, 0x9F, 0x98, 0x80], true), ([0xF4, 0x8F, 0xBF, 0xBF], true), ([0xF4, 0x90, 0x80, 0x80], false),
            ([0xF0, 0x8F, 0xBF, 0xBF], false),
        ] as [([UInt8], Bool)] {
            var bytes = try Self.changed(["Name": .string("<@@@@>")])
            let marker = Array("<@@@@>".utf8)
            let at = try #require((0...(bytes.count - 6)).first { Array(bytes[$0..<($0 + 6)]) == marker })
            bytes.replaceSubrange((at + 1)..<(at + 5), with: patch)
            #expect(try WireDifferential.check(bytes).get() == (accepted ? .fast(.propertiesChanged) : .refused))
        }
    }

    /// Header names, and libdbus' local path and interface (refused as a
    /// prefix).
    @Test(arguments: [
        ("/org/bluez/hci0", "org.bluez.Device1", "M", true), ("/org/freedesktop/DBus/Local", "a.b", "M", false),
        ("/org/freedesktop/DBus/LocalX", "a.b", "M", false), ("/x", "org.freedesktop.DBus.Local", "M", false),
        ("/x", "org.freedesktop.DBus.LocalFoo", "M", false), ("/x", "org.freedesktop.DBus.Loca", "M", true),
        ("/x", "a", "M", false), ("/x", "a..b", "M", false), ("/x", "a.1b", "M", false), ("/x", "a.b", "1M", false),
        ("/x", "a.b", "M.N", false), ("/x/", "a.b", "M", false), ("//x", "a.b", "M", false),
    ])
    func headerNames(path: String, interface: String, member: String, accepted: Bool) throws {
        let bytes = WireEncoder.signal(path: path, interface: interface, member: member, body: [.int32(1)])
        #expect(try WireDifferential.check(bytes).get() == (accepted ? .generic : .refused))
    }

    @Test(arguments: [":1.7", ":", ":1..2", "org.bluez", "org", "-a.b", "a.-b", "a.1b", ".a.b", "a.b."])
    func senderNames(sender: String) throws {
        let bytes = WireEncoder.signal(path: "/x", interface: "a.b", member: "M", sender: sender, body: [])
        let verdict = try WireDifferential.check(bytes).get()
        let valid = sender.withCString { _ in LibDBus.validateBusName(sender) }
        #expect(verdict == (valid ? .generic : .refused), "\(sender)")
    }

    /// Signatures whose brackets cross: libdbus 1.14.10 refuses them (the
    /// fuzzer found the first), as a `g` value and as a variant's.
    @Test(arguments: ["ia{s(adb}v)ab", "a{i(ii})", "(a{ii)}", "a{s(i})", "(i}", "a{i)"])
    func crossedBracketsAreRefused(signature: String) throws {
        let asValue = WireEncoder.signal(
            path: "/x", interface: "a.b", member: "M", body: [.signature(Signature(unchecked: signature, types: []))])
        #expect(try WireDifferential.check(asValue).get() == .refused)
        let good = try Self.changed(["P": .dictionary(key: .int32, value: .int32, [])])
        #expect(try WireDifferential.check(good).get() == .fast(.propertiesChanged))
        for crossed in ["a{i)}", "(a{i)"] {
            let inVariant = good.replacingVariantSignature("a{ii}", with: crossed)
            #expect(inVariant != good)
            #expect(try WireDifferential.check(inVariant).get() == .refused, "\(crossed)")
        }
    }

    @Test func internTablesAreBounded() {
        let table = InternTable(names: ["a", "b"], maximumNames: 3, maximumNameBytes: 4)
        func id(_ s: String) -> InternTable.ID? { table.id(s) }
        #expect(id("a")?.rawValue == 0 && id("b")?.rawValue == 1)
        #expect(id("ccc")?.rawValue == 2)
        #expect(id("ddd") == nil)  // full
        #expect(id("ccc")?.rawValue == 2)
        #expect(table.count == 3 && table.string(.init(rawValue: 2)) == "ccc")
        let long = InternTable(maximumNameBytes: 4)
        #expect(long.id("12345") == nil && long.id("1234") != nil)
        let blueZ = InternTable.blueZ()
        #expect(blueZ.string(BlueZName.rssi) == "RSSI")
        #expect(blueZ.string(BlueZName.manufacturerData) == "ManufacturerData")
        #expect(blueZ.string(BlueZName.device1) == "org.bluez.Device1")
        #expect(blueZ.string(BlueZName.gattDescriptor1) == "org.bluez.GattDescriptor1")
        #expect(blueZ.string(BlueZName.uuid) == "UUID" && blueZ.string(BlueZName.flags) == "Flags")
    }

    /// A message whose last part is invalid reaches no sink: the whole
    /// message is validated first.
    @Test func anInvalidTailRefusesTheWholeMessage() throws {
        var bytes = try Self.changed(["RSSI": .int16(-1)], invalidated: ["Al\u{7F}ias"])
        let at = try #require(bytes.lastIndex(of: 0x7F))
        bytes[at] = 0xC0
        #expect(try WireDifferential.check(bytes).get() == .refused)
        bytes.withUnsafeBytes { buffer in
            #expect(throws: WireRefusal.self) { try WireMessageView(validating: buffer) }
        }
    }

    /// An `aq` of 3 bytes: libdbus 1.14.10 refuses it (its validator in
    /// older releases skipped fixed-size arrays whole), and so does the
    /// wire decoder.
    @Test func aFixedArrayOfAnOddLengthIsRefused() throws {
        let seeds = WireDifferential.seeds()
        let seed = seeds[seeds.count / 2 - 1]  // the little-endian one
        #expect(seed[0] == UInt8(ascii: "l"))
        #expect(LibDBus.messageDemarshal(seed).map { LibDBus.messageUnref($0) } == nil)
        let refused = seed.withUnsafeBytes { buffer in (try? WireMessageView(validating: buffer)) == nil }
        #expect(refused)
        var good = seed
        good[good.count - 7] = 2
        good[4] = 6
        good.removeLast()
        #expect(try WireDifferential.check(good).get() == .generic)
    }
}
