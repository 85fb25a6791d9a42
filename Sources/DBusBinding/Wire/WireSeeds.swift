/// Messages in their wire form, in either byte order, written by this
/// binding rather than libdbus (libdbus marshals in the machine's order
/// only, and never writes the hostile shapes the fuzzer should start from).
/// For seeds and tests: `WireDifferential` holds libdbus to what these bytes
/// are.
public struct WireEncoder {
    public private(set) var bytes: [UInt8] = []
    public let bigEndian: Bool

    public init(bigEndian: Bool) { self.bigEndian = bigEndian }

    mutating func pad(_ alignment: Int) {
        while bytes.count % alignment != 0 { bytes.append(0) }
    }
    mutating func u16(_ value: UInt16) {
        pad(2)
        withUnsafeBytes(of: bigEndian ? value.bigEndian : value.littleEndian) { bytes.append(contentsOf: $0) }
    }
    mutating func u32(_ value: UInt32) {
        pad(4)
        withUnsafeBytes(of: bigEndian ? value.bigEndian : value.littleEndian) { bytes.append(contentsOf: $0) }
    }
    mutating func u64(_ value: UInt64) {
        pad(8)
        withUnsafeBytes(of: bigEndian ? value.bigEndian : value.littleEndian) { bytes.append(contentsOf: $0) }
    }
    mutating func patch32(at offset: Int, _ value: UInt32) {
        withUnsafeBytes(of: bigEndian ? value.bigEndian : value.littleEndian) {
            bytes.replaceSubrange(offset..<(offset + 4), with: $0)
        }
    }
    mutating func text(_ string: String) {
        u32(UInt32(string.utf8.count))
        bytes.append(contentsOf: string.utf8)
        bytes.append(0)
    }
    mutating func signature(_ string: String) {
        bytes.append(UInt8(truncatingIfNeeded: string.utf8.count))
        bytes.append(contentsOf: string.utf8)
        bytes.append(0)
    }

    /// Appends one value, aligned as D-Bus requires (relative to the start
    /// of `bytes`, which is the message's start).
    public mutating func append(_ value: BusValue) {
        switch value {
        case .byte(let v): bytes.append(v)
        case .boolean(let v): u32(v ? 1 : 0)
        case .int16(let v): u16(UInt16(bitPattern: v))
        case .uint16(let v): u16(v)
        case .int32(let v): u32(UInt32(bitPattern: v))
        case .uint32(let v): u32(v)
        case .int64(let v): u64(UInt64(bitPattern: v))
        case .uint64(let v): u64(v)
        case .double(let v): u64(v.bitPattern)
        case .string(let v): text(v)
        case .objectPath(let v): text(v.rawValue)
        case .signature(let v): signature(v.rawValue)
        case .bytes(let v):
            u32(UInt32(v.count))
            bytes.append(contentsOf: v)
        case .array(let element, let elements):
            u32(0)
            let lengthAt = bytes.count - 4
            pad(element.alignment)
            let start = bytes.count
            for element in elements { append(element) }
            patch32(at: lengthAt, UInt32(bytes.count - start))
        case .dictionary(_, _, let entries):
            u32(0)
            let lengthAt = bytes.count - 4
            pad(8)
            let start = bytes.count
            for entry in entries {
                pad(8)
                append(entry.key)
                append(entry.value)
            }
            patch32(at: lengthAt, UInt32(bytes.count - start))
        case .structure(let fields):
            pad(8)
            for field in fields { append(field) }
        case .variant(let inner):
            signature(inner.type.signature)
            pad(inner.type.alignment)
            append(inner)
        }
    }

    /// A whole message. `fields` are (code, value) pairs written as given
    /// (each value in a variant); the signature field is added from the
    /// body unless `fields` has one.
    public static func message(
        bigEndian: Bool = false, type: UInt8, flags: UInt8 = 0, serial: UInt32 = 1,
        fields: [(UInt8, BusValue)], body: [BusValue]
    ) -> [UInt8] {
        var encoder = WireEncoder(bigEndian: bigEndian)
        encoder.bytes = [bigEndian ? UInt8(ascii: "B") : UInt8(ascii: "l"), type, flags, 1]
        encoder.u32(0)
        encoder.u32(serial)
        encoder.u32(0)
        encoder.pad(8)
        var all = fields
        let signature = body.map(\.type.signature).joined()
        if !signature.isEmpty, !fields.contains(where: { $0.0 == 8 }) {
            all.append((8, .signature(Signature(unchecked: signature, types: (try? BusType.parse(signature)) ?? []))))
        }
        for (code, value) in all {
            encoder.pad(8)
            encoder.bytes.append(code)
            encoder.append(.variant(value))
        }
        encoder.patch32(at: 12, UInt32(encoder.bytes.count - 16))
        encoder.pad(8)
        let bodyStart = encoder.bytes.count
        for value in body { encoder.append(value) }
        encoder.patch32(at: 4, UInt32(encoder.bytes.count - bodyStart))
        return encoder.bytes
    }

    /// A signal.
    public static func signal(
        bigEndian: Bool = false, path: String, interface: String, member: String, sender: String? = ":1.7",
        body: [BusValue]
    ) -> [UInt8] {
        var fields: [(UInt8, BusValue)] = [
            (1, .objectPath(ObjectPath(unchecked: path))), (2, .string(interface)), (3, .string(member)),
        ]
        if let sender { fields.append((7, .string(sender))) }
        return message(bigEndian: bigEndian, type: 4, flags: 1, fields: fields, body: body)
    }
}

extension WireDifferential {
    static let manufacturer: [UInt8] = [0x02, 0x15] + Array(repeating: 0xAB, count: 21)

    /// A PropertiesChanged of RSSI and ManufacturerData: the hot signal.
    public static func hotSignal(bigEndian: Bool = false, rssi: Int16 = -61) -> [UInt8] {
        WireEncoder.signal(
            bigEndian: bigEndian, path: "/org/bluez/hci0/dev_C0_FE_00_00_00_01",
            interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            body: [
                .string("org.bluez.Device1"),
                .propertyMap([
                    "RSSI": .int16(rssi),
                    "ManufacturerData": .dictionary(
                        key: .uint16, value: .variant, [.init(.uint16(0x004C), .variant(.bytes(manufacturer)))]),
                ]),
                .strings([]),
            ])
    }

    /// Device1 with every type BlueZ sends for it, and some it may.
    static var deviceProperties: [String: BusValue] {
        [
            "Address": .string("C0:FE:00:00:00:01"), "AddressType": .string("random"), "Name": .string("SBeacon ☃"),
            "Alias": .string("SBeacon"), "RSSI": .int16(-70), "TxPower": .int16(4), "Connected": .boolean(false),
            "ServicesResolved": .boolean(true), "Adapter": .objectPath("/org/bluez/hci0"),
            "UUIDs": .strings(["0000180a-0000-1000-8000-00805f9b34fb", "0000180f-0000-1000-8000-00805f9b34fb"]),
            "ManufacturerData": .dictionary(
                key: .uint16, value: .variant,
                [
                    .init(.uint16(0x004C), .variant(.bytes(manufacturer))),
                    .init(.uint16(0xFFFF), .variant(.bytes([]))),
                ]),
            "ServiceData": .dictionary(
                key: .string, value: .variant,
                [.init(.string("0000feaa-0000-1000-8000-00805f9b34fb"), .variant(.bytes([0x10, 0x00, 0x01])))]),
            "AdvertisingData": .dictionary(
                key: .byte, value: .variant, [.init(.byte(0x16), .variant(.bytes([0xAA, 0xFE])))]),
            "AdvertisingFlags": .bytes([0x06]), "Class": .uint32(0x1F00), "Appearance": .uint16(0x0200),
            "Paired": .boolean(false), "Trusted": .boolean(true), "LegacyPairing": .boolean(false),
            "Icon": .string("computer"), "Modalias": .string("usb:v1D6Bp0246d0537"), "Byte": .byte(7),
            "Int32": .int32(-5), "Int64": .int64(-1 << 40), "UInt64": .uint64(1 << 60), "Double": .double(-0.5),
            "Signature": .signature(Signature(unchecked: "a{sv}", types: [.propertyMap])),
            "Paths": .objectPaths(["/org/bluez/hci0", "/org/bluez/hci1"]),
            "Sets": .dictionary(
                key: .objectPath, value: .propertyMap,
                [.init(.objectPath("/org/bluez/hci0/set_1"), .propertyMap(["Rank": .byte(1)]))]),
            "Nested": .variant(.int16(3)),
            "Struct": .structure([.int32(1), .string("x"), .variant(.double(.nan))]),
        ]
    }

    /// The seed corpus of `dbus-wire`: BlueZ' shapes in both byte orders,
    /// other messages, and hostile shapes (the bytes of each were checked
    /// against libdbus by `WireDifferentialTests`).
    public static func seeds() -> [[UInt8]] {
        var seeds: [[UInt8]] = []
        for bigEndian in [false, true] {
            let device = "/org/bluez/hci0/dev_C0_FE_00_00_00_01"
            let characteristic: [String: BusValue] = [
                "UUID": .string("6e400002-b5a3-f393-e0a9-e50e24dcca9e"),
                "Service": .objectPath(ObjectPath(unchecked: device + "/service0010")),
                "Flags": .strings(["write", "notify"]), "Value": .bytes([1, 2, 3]), "Notifying": .boolean(false),
                "Handle": .uint16(0x12), "MTU": .uint16(247),
            ]
            seeds.append(hotSignal(bigEndian: bigEndian))
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: device, interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged",
                    body: [.string("org.bluez.Device1"), .propertyMap(deviceProperties), .strings(["Alias", "RSSI"])]))
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                    member: "InterfacesAdded",
                    body: [
                        .objectPath(ObjectPath(unchecked: device)),
                        .dictionary(
                            key: .string, value: .propertyMap,
                            [
                                .init(.string("org.bluez.Device1"), .propertyMap(deviceProperties)),
                                .init(.string("org.freedesktop.DBus.Properties"), .propertyMap([:])),
                            ]),
                    ]))
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                    member: "InterfacesAdded",
                    body: [
                        .objectPath(ObjectPath(unchecked: device + "/service0010/char0011")),
                        .dictionary(
                            key: .string, value: .propertyMap,
                            [.init(.string("org.bluez.GattCharacteristic1"), .propertyMap(characteristic))]),
                    ]))
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                    member: "InterfacesRemoved",
                    body: [
                        .objectPath(ObjectPath(unchecked: device)),
                        .strings(["org.bluez.Device1", "org.freedesktop.DBus.Properties"]),
                    ]))
            let objects: [BusValue.DictEntry] = [
                .init(
                    .objectPath("/org/bluez/hci0"),
                    .dictionary(
                        key: .string, value: .propertyMap,
                        [
                            .init(
                                .string("org.bluez.Adapter1"),
                                .propertyMap([
                                    "Address": .string("00:AA:01:00:00:23"), "Powered": .boolean(true),
                                    "Discovering": .boolean(false), "Roles": .strings(["central", "peripheral"]),
                                ]))
                        ])),
                .init(
                    .objectPath(ObjectPath(unchecked: device)),
                    .dictionary(
                        key: .string, value: .propertyMap,
                        [.init(.string("org.bluez.Device1"), .propertyMap(deviceProperties))])),
                .init(
                    .objectPath(ObjectPath(unchecked: device + "/service0010/char0011")),
                    .dictionary(
                        key: .string, value: .propertyMap,
                        [.init(.string("org.bluez.GattCharacteristic1"), .propertyMap(characteristic))])),
            ]
            seeds.append(
                WireEncoder.message(
                    bigEndian: bigEndian, type: 2,
                    fields: [(5, .uint32(7)), (7, .string(":1.3")), (6, .string(":1.9"))],
                    body: [
                        .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .propertyMap), objects)
                    ]
                ))
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                    member: "NameOwnerChanged", sender: "org.freedesktop.DBus",
                    body: [.string("org.bluez"), .string(""), .string(":1.3")]))
            seeds.append(
                WireEncoder.message(
                    bigEndian: bigEndian, type: 3,
                    fields: [(4, .string("org.bluez.Error.Failed")), (5, .uint32(9)), (6, .string(":1.9"))],
                    body: [.string("Operation failed")]))
            seeds.append(
                WireEncoder.message(
                    bigEndian: bigEndian, type: 1,
                    fields: [
                        (1, .objectPath("/org/example")), (2, .string("org.example.Fuzz")), (3, .string("Call")),
                        (6, .string("org.example")), (42, .array(.int16, [.int16(1), .int16(2)])),
                    ],
                    body: [
                        .int32(-1),
                        .dictionary(
                            key: .string, value: .structure([.array(.double), .boolean]),
                            [.init(.string("k"), .structure([.array(.double, [.double(1.5)]), .boolean(true)]))]),
                        .variant(.variant(.variant(.uint64(5)))), .array(.boolean, [.boolean(true), .boolean(false)]),
                    ]))
            // Hostile shapes.
            // A PropertiesChanged with another signature (the hostile peer's).
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: device, interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged", body: [.string("org.bluez.Device1"), .string("RSSI")]))
            // `h` at the top level and inside a variant, with UNIX_FDS set.
            seeds.append(
                WireEncoder.message(
                    bigEndian: bigEndian, type: 4,
                    fields: [
                        (1, .objectPath("/x")), (2, .string("a.b")), (3, .string("C")), (9, .uint32(1)),
                        (8, .signature(Signature(unchecked: "h", types: [.unixFD]))),
                    ],
                    body: [.uint32(0)]))
            seeds.append(
                WireEncoder.signal(
                    bigEndian: bigEndian, path: device, interface: "org.freedesktop.DBus.Properties",
                    member: "PropertiesChanged",
                    body: [
                        .string("org.bluez.Device1"),
                        .dictionary(key: .string, value: .variant, [.init(.string("Fd"), .variant(.uint32(0)))]),
                        .strings([]),
                    ]
                ).replacingVariantSignature("u", with: "h"))
            // Variants 64 and 65 deep inside a PropertiesChanged.
            for depth in [60, 61, 62] {
                var value = BusValue.int16(1)
                for _ in 0..<depth { value = .variant(value) }
                seeds.append(
                    WireEncoder.signal(
                        bigEndian: bigEndian, path: device, interface: "org.freedesktop.DBus.Properties",
                        member: "PropertiesChanged",
                        body: [.string("org.bluez.Device1"), .propertyMap(["Deep": value]), .strings([])]))
            }
            // A long array cut short.
            let many = WireEncoder.signal(
                bigEndian: bigEndian, path: device, interface: "org.freedesktop.DBus.Properties",
                member: "PropertiesChanged",
                body: [
                    .string("org.bluez.Device1"),
                    .propertyMap(Dictionary(uniqueKeysWithValues: (0..<400).map { ("K\($0)", BusValue.byte(1)) })),
                    .strings([]),
                ])
            seeds.append(Array(many.prefix(4000)))
            // An `aq` whose length is not a multiple of 2 (libdbus refuses).
            var odd = WireEncoder.signal(
                bigEndian: bigEndian, path: "/x", interface: "a.b", member: "C",
                body: [.array(.uint16, [.uint16(1), .uint16(2)])])
            odd.removeLast()
            odd[odd.count - 7 + (bigEndian ? 3 : 0)] = 3
            odd[bigEndian ? 7 : 4] = 7
            seeds.append(odd)
        }
        return seeds
    }
}

extension Array where Element == UInt8 {
    /// The first variant signature `from` (length byte, bytes, NUL) replaced
    /// by `to` of the same length (hostile seeds).
    func replacingVariantSignature(_ from: String, with to: String) -> [UInt8] {
        let pattern = [UInt8(from.utf8.count)] + Array(from.utf8) + [0]
        let replacement = [UInt8(to.utf8.count)] + Array(to.utf8) + [0]
        var copy = self
        // Skip the header: search from the body's start.
        let headerFields =
            self[0] == UInt8(ascii: "l")
            ? Int(self[12]) | Int(self[13]) << 8 | Int(self[14]) << 16
            : Int(self[15]) | Int(self[14]) << 8 | Int(self[13]) << 16
        let start = (16 + headerFields + 7) & ~7
        var index = start
        while index + pattern.count <= count {
            if Array(self[index..<(index + pattern.count)]) == pattern {
                copy.replaceSubrange(index..<(index + pattern.count), with: replacement)
                return copy
            }
            index += 1
        }
        return copy
    }
}
