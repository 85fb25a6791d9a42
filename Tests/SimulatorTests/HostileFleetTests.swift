import BeaconSimulator
import DBusBinding
import Foundation
import SBeaconProtocol
import TestSupport
import Testing

/// The test equipment for hostile input (issue 15): byte strings in fleet
/// files, the hostile fixture served byte for byte over D-Bus, and
/// Tests/Peers/screen.py.
@Suite("Hostile beacons: arbitrary bytes in names and Device Information", .timeLimit(.minutes(5)))
struct HostileFleetTests {
    static let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    static let fixture = tests.appendingPathComponent("Fixtures/hostile-fleet.json").path
    static let screen = tests.appendingPathComponent("Peers/screen.py").path

    static func bytes(_ hex: String) -> [UInt8] {
        stride(from: 0, to: hex.count, by: 2).map {
            let start = hex.index(hex.startIndex, offsetBy: $0)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
    }

    /// The fixture's byte strings, read here independently of `ByteString`
    /// (JSON strings, hex, text with repeat, arrays of them).
    static func expected(_ value: Any?) -> [UInt8]? {
        switch value {
        case let text as String: return Array(text.utf8)
        case let parts as [Any]: return parts.flatMap { expected($0) ?? [] }
        case let object as [String: Any]:
            let once =
                (object["text"] as? String).map { Array($0.utf8) }
                ?? (object["hex"] as? String).map { bytes($0.filter { !$0.isWhitespace }) } ?? []
            return Array(Array(repeating: once, count: object["repeat"] as? Int ?? 1).joined())
        default: return nil
        }
    }

    @Test func byteStringsDecodeEveryFormAndRoundTrip() throws {
        func decode(_ json: String) throws -> [UInt8] {
            try JSONDecoder().decode(ByteString.self, from: Data(json.utf8)).bytes
        }
        #expect(
            try decode(#""A\u0000\u001b]0;x\u0007\u009b""#) == [
                0x41, 0, 0x1B, 0x5D, 0x30, 0x3B, 0x78, 0x07, 0xC2, 0x9B,
            ])
        #expect(try decode(#"{"hex": "FF c0 80"}"#) == [0xFF, 0xC0, 0x80])
        #expect(try decode(#"{"base64": "/8CA"}"#) == [0xFF, 0xC0, 0x80])
        #expect(try decode(#"{"text": "ab", "repeat": 3}"#) == Array("ababab".utf8))
        #expect(try decode(#"["1.0.8", {"hex": "1b"}, "[2J"]"#) == Array("1.0.8\u{1B}[2J".utf8))
        for bad in [#"{"hex": "abc"}"#, #"{"hex": "zz"}"#, #"{"hex": "00", "text": "x"}"#, #"{"repeat": 2}"#, "42"] {
            #expect(throws: DecodingError.self, "\(bad)") { try decode(bad) }
        }
        // Written back as a string when UTF-8, as hex otherwise: every byte kept.
        for value in [ByteString([0x41, 0, 0x1B, 0x07]), ByteString([0xFF, 0xC0, 0x80, 0xED, 0xA0, 0x80])] {
            let data = try JSONEncoder().encode(value)
            #expect(try JSONDecoder().decode(ByteString.self, from: data) == value)
        }
        #expect(
            String(decoding: try JSONEncoder().encode(ByteString([0xFF, 0x41])), as: UTF8.self) == #"{"hex":"ff41"}"#)
    }

    @Test func bluetoothdMakesANameOfTheAdvertisedBytesAsBlueZ566Does() {
        func name(_ bytes: [UInt8]) -> String? { BlueZName.name(advertised: bytes) }
        // Valid UTF-8, controls and all, kept as it is (not even stripped).
        #expect(name(Array(" SB\u{1B}]0;pwned\u{07}\u{9B}2J ".utf8)) == " SB\u{1B}]0;pwned\u{07}\u{9B}2J ")
        // Trailing NULs dropped first.
        #expect(name(Array("SBeacon".utf8) + [0, 0]) == "SBeacon")
        // A NUL inside: the name ends there.
        #expect(name(Array("SBeacon\u{1B}".utf8) + [0] + Array("[2J".utf8)) == "SBeacon\u{1B}")
        // Invalid UTF-8: non-ASCII bytes become spaces, then white space is stripped.
        #expect(name([0xFF] + Array("\u{1B}[31mSB".utf8) + [0xC0, 0x80, 0xE2, 0x82]) == "\u{1B}[31mSB")
        #expect(name([0xFF, 0x41, 0xC3, 0xA9, 0x0B]) == "A  \u{0B}")
        // Nothing left: no Name, and Alias is the address with dashes.
        #expect(name([0xFF, 0x20, 0x00]) == nil)
        #expect(name([]) == nil)
        #expect(BlueZName.alias(advertised: [0xFF], address: "C0:FE:15:00:00:01") == "C0-FE-15-00-00-01")
        // At most 248 bytes, never splitting a character.
        #expect(name(Array(String(repeating: "€", count: 100).utf8))?.utf8.count == 246)
        #expect(name(Array(String(repeating: "A", count: 400).utf8))?.utf8.count == 248)
    }

    @Test func oversizeValuesAndUnknownFieldsAreRefusedByName() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sim-bytes-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cases: [(String, String)] = [
            (
                #"[{"address": "C1:00:00:00:00:01", "model": {"text": "x", "repeat": 513}}]"#,
                #"beacon 1: model is 513 bytes, more than an attribute value holds (512); give the beacon "allowOversize": true to serve it anyway"#
            ),
            (
                #"[{"address": "C1:00:00:00:00:01", "firmwareRevison": "1.0.8"}]"#,
                "beacon 1: unknown field 'firmwareRevison' (known: address, serial, firmware, battery, factoryDefault, "
                    + "calibrated, moving, rssi, major, minor, config, name, manufacturer, model, hardwareRevision, "
                    + "firmwareRevision, allowOversize, note)"
            ),
            (
                #"[{"address": "C1:00:00:00:00:01"}, {"address": "C1:00:00:00:00:02", "serial": {"hex": "f"}}]"#,
                "beacon 2, field 'serial.hex': 'f' is not an even number of hex digits"
            ),
        ]
        for (index, (text, message)) in cases.enumerated() {
            let path = directory + "/bad\(index).json"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            let error = #expect(throws: FleetFileError.self) { try FleetFile.load(path, now: 0) }
            #expect(error?.description == "\(path): \(message)")
        }
        // allowOversize lets it through, and a state file keeps every byte.
        let good = directory + "/good.json"
        try #"""
        [{"address": "C1:00:00:00:00:01", "allowOversize": true, "model": {"text": "x", "repeat": 4000},
          "serial": ["S", {"hex": "ff00"}], "name": {"hex": "ff"}, "firmwareRevision": "1.0.8\u0000\u001b"}]
        """#.write(toFile: good, atomically: true, encoding: .utf8)
        let fleet = try FleetFile.load(good, now: 1_800_000_000_000)
        #expect(fleet[0].model.bytes.count == 4000)
        #expect(fleet[0].serialNumberBytes == [0x53, 0xFF, 0x00])
        #expect(fleet[0].firmwareRevisionBytes == Array("1.0.8\u{0}\u{1B}".utf8))
        #expect(fleet[0].bluezName == nil && fleet[0].bluezAlias == "C1-00-00-00-00-01")
        try StateFile.save(fleet, to: directory + "/state")
        #expect(try StateFile.load(directory + "/state") == fleet)
    }

    @Test func theHostileFixtureIsServedByteForByteOverDBus() async throws {
        let entries = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: Self.fixture)))
                as? [[String: Any]])
        #expect(entries.count == 6)
        try await StockClientTests.withSimulator(["--fleet", Self.fixture]) { simulator in
            #expect(simulator.readyLine.hasSuffix("beacons=6"))
            let client = try await BusConnection.connect(.address(simulator.bus.address))
            let bluez: BusName = "org.bluez"
            let adapter: ObjectPath = "/org/bluez/hci0"
            func devicePath(_ address: String) throws -> ObjectPath {
                try adapter.appending("dev_" + address.replacingOccurrences(of: ":", with: "_"))
            }
            // Every device's object: there already, or its InterfacesAdded
            // (subscribed to before discovery).
            let added = try await client.signals(matching: .interfacesAdded(sender: bluez))
            try await client.call(bluez, adapter, "org.bluez.Adapter1", "StartDiscovery")
            let present = try await client.managedObjects(of: bluez)
            let missing = Set(try entries.map { try devicePath(try #require($0["address"] as? String)) })
                .filter { present[$0]?["org.bluez.Device1"] == nil }
            _ = try await take(
                missing.count,
                from: added.filter { signal in
                    guard let added = try? InterfacesAdded(signal) else { return false }
                    return missing.contains(added.path) && added.interfaces["org.bluez.Device1"] != nil
                }, "InterfacesAdded of the \(missing.count) hostile beacons not yet on the bus")
            let objects = try await client.managedObjects(of: bluez)

            let characteristics: [(String, GattUUID)] = [
                ("manufacturer", SBeaconUUID.manufacturerName), ("model", SBeaconUUID.modelNumber),
                ("serial", SBeaconUUID.serialNumber), ("hardwareRevision", SBeaconUUID.hardwareRevision),
                ("firmwareRevision", SBeaconUUID.firmwareRevision),
            ]
            var provisionable = 0
            for entry in entries {
                let address = try #require(entry["address"] as? String)
                let path = try devicePath(address)
                let device = try #require(objects[path]?["org.bluez.Device1"], "no device \(address)")
                let advertised = try #require(Self.expected(entry["name"]))
                let name = BlueZName.name(advertised: advertised)
                #expect(device["Name"]?.string == name, "\(address)")
                #expect(device["Alias"]?.string == (name ?? address.replacingOccurrences(of: ":", with: "-")))
                // The advert stays sane: an SBeacon, factory new, a real version.
                let summary = try #require(device["ManufacturerData"]?.uint16KeyedDictionary?[0x0059]?.bytes)
                let advert = try BenchSummary(bytes: summary)
                #expect(advert.status.contains(.factoryDefault))
                #expect(advert.firmware.description == entry["firmware"] as? String)

                try await client.call(bluez, path, "org.bluez.Device1", "Connect", timeout: .seconds(20))
                let tree = try await client.managedObjects(of: bluez)
                for (field, uuid) in characteristics {
                    let characteristic = try #require(
                        tree.first {
                            path.isAncestor(of: $0.key)
                                && $0.value["org.bluez.GattCharacteristic1"]?["UUID"]?.string == uuid.rawValue
                        }?.key)
                    let reply = try await client.call(
                        bluez, characteristic, "org.bluez.GattCharacteristic1", "ReadValue", [.propertyMap([:])])
                    let value = try reply.body(as: "ay")[0].bytes ?? []
                    #expect(value == Self.expected(entry[field]), "\(address) \(field)")
                }
                let revision = DeviceInformationText.decode(Self.expected(entry["firmwareRevision"]) ?? [])
                if (try? FirmwareVersion(revision)) != nil { provisionable += 1 }
                try await client.call(bluez, path, "org.bluez.Device1", "Disconnect")

                // The control interface reports the same bytes, in hex.
                let report = try await StockClientTests.controlReport(simulator, address)
                #expect(report.name == name)
                #expect(report.hex?["name"].map(Self.bytes) == advertised)
                for (field, _) in characteristics {
                    #expect(report.hex?[field].map(Self.bytes) == Self.expected(entry[field]), "\(address) \(field)")
                }
            }
            // At least one beacon's firmware revision parses: it can be provisioned.
            #expect(provisionable >= 1)

            // Spot checks of what the fixture is for.
            let first = try #require(objects[try devicePath("C0:FE:15:00:00:01")]?["org.bluez.Device1"])
            #expect(first["Name"]?.string == "SB\u{1B}]0;pwned\u{07}\u{1B}[2J")
            let nul = try #require(objects[try devicePath("C0:FE:15:00:00:02")]?["org.bluez.Device1"])
            #expect(nul["Name"]?.string == "SBeacon\u{1B}")
            let invalid = try #require(objects[try devicePath("C0:FE:15:00:00:04")]?["org.bluez.Device1"])
            #expect(invalid["Name"]?.string == "\u{1B}[31mSB")
            let long = try #require(objects[try devicePath("C0:FE:15:00:00:05")]?["org.bluez.Device1"])
            #expect(long["Name"]?.string?.utf8.count == 248)
            await client.close()
        }
    }

    static func screen(_ arguments: [String]) async throws -> [String: Any] {
        let run = try await runTool("python3", [Self.screen] + arguments, timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
    }

    @Test func screenPyReportsWhatEscapeSequencesDid() async throws {
        let hostile = try await Self.screen(["--", "printf", #"\033]0;x\007\033[2J"#])
        #expect(hostile["exit_status"] as? Int == 0)
        let effects = try #require(hostile["effects"] as? [String: Int])
        #expect(effects["title"] == 1)
        #expect(effects["erase_in_display"] == 1)
        #expect(effects.filter { $0.value > 0 }.keys.sorted() == ["erase_in_display", "icon_name", "title"])
        #expect(hostile["titles"] as? [String] == ["x"])
        let raw = try #require(hostile["raw"] as? [String: Int])
        #expect(raw["esc"] == 2 && raw["bel"] == 1)
        let sequences = (hostile["escape_sequences"] as? [[String: Any]] ?? []).compactMap { $0["text"] as? String }
        #expect(sequences == [#"\x1b]0;x\x07"#, #"\x1b[2J"#])

        let plain = try await Self.screen(["--cols", "80", "--rows", "24", "--", "printf", "plain"])
        #expect(plain["display"] as? [String] == ["plain"])
        #expect((plain["effects"] as? [String: Int])?.values.allSatisfy { $0 == 0 } == true)
        #expect((plain["raw"] as? [String: Int])?.values.allSatisfy { $0 == 0 } == true)
        #expect(plain["raw_bytes"] as? Int == 5)

        // C1 controls as UTF-8 act; a bare 0x9b byte is only invalid UTF-8.
        let c1 = try await Self.screen(["--", "printf", #"a\302\2332Jb\233c"#])
        #expect((c1["effects"] as? [String: Int])?["erase_in_display"] == 1)
        #expect((c1["raw"] as? [String: Int])?["c1_code_points"] == 1)
        #expect((c1["raw"] as? [String: Int])?["c1_bytes"] == 1)
    }

    @Test func screenPyTypesInputAndKillsAHang() async throws {
        // Each line waits for the prompt. The shell says so when a line was
        // typed before it prompted for it: it looks for input waiting
        // (`read -t 0`) after each answer, before its prompt. (It slept
        // 0.5 s before each answer, so that typing ahead would show in the
        // echo order, by luck of timing.)
        let session = try await Self.screen([
            "--prompt", "> $", "--input", "a", "--input", "b", "--eof", "--",
            "bash", "-c",
            #"while printf '> '; read l; do echo "got $l"; if read -t 0; then echo "typed ahead"; fi; done"#,
        ])
        #expect(session["exit_status"] as? Int == 0)
        #expect(session["display"] as? [String] == ["> a", "got a", "> b", "got b", ">"])
        let hang = try await Self.screen(["--timeout", "1", "--", "sleep", "60"])
        #expect(hang["timed_out"] as? Bool == true)
        #expect(hang["exit_status"] as? Int == -15)
    }
}
