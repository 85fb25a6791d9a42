import Foundation
import SBeaconProtocol
import Testing

@testable import Profiles

@Suite("Profiles: the shipped ones load, broken ones are named precisely", .timeLimit(.minutes(2)))
struct ProfileTests {
    static let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("profiles").path

    @Test func everyShippedProfileLoads() throws {
        let profiles = try ProfileLoader.loadAll(from: [Self.shipped])
        #expect(Set(profiles.keys) == ["car", "van", "truck", "bus", "motorcycle"])
        let car = try #require(profiles["car"])
        #expect(
            car.config
                == DrivingBehaviourConfig(
                    cornering: 350, braking: 350, acceleration: 450, duration: 300,
                    enable: [.detection, .lowPassFilter]))
        #expect(car.requirements.minimumFirmware == FirmwareVersion(major: 1, minor: 0, patch: 8))
        #expect(car.identity?.major == 100 && car.identity?.minor == .sequential)
        for profile in profiles.values { #expect(profile.config.firstInvalidField == nil, "\(profile.name)") }
    }

    static let valid = """
        {"description": "x",
         "driving_behaviour": {"cornering_mg": 300, "braking_mg": 300, "acceleration_mg": 300, "duration_ms": 500, "enabled": ["DB"]},
         "requirements": {"minimum_battery_percent": 20, "minimum_firmware": "1.0.7", "calibration_required": false}}
        """

    static let broken: [(String, String)] = [
        (#"{"description": "x""#, "is not valid JSON (line 1, column 20: unexpected end, ',' or '}' expected)"),
        (
            "{\n  \"description\": \"x\",\n  \"driving_behaviour\": {,\n}",
            "is not valid JSON (line 3, column 25: a key in double quotes expected)"
        ),
        (
            "{\"description\": \"x\"} trailing",
            "is not valid JSON (line 1, column 22: text after the end of the JSON value)"
        ),
        (
            valid.replacingOccurrences(of: #""braking_mg": 300"#, with: #""braking_mg": 6000"#),
            "driving_behaviour.braking_mg: 6000 is outside 50–5000 mG"
        ),
        (
            valid.replacingOccurrences(of: #""braking_mg": 300"#, with: #""brakes": 300"#),
            "driving_behaviour.brakes: unknown key (allowed here: cornering_mg, braking_mg, acceleration_mg, duration_ms, enabled)"
        ),
        (
            valid.replacingOccurrences(of: #""duration_ms": 500"#, with: #""duration_ms": 0"#),
            "driving_behaviour.duration_ms: 0 is outside 1–10000 ms"
        ),
        (
            valid.replacingOccurrences(of: #""duration_ms": 500"#, with: #""duration_ms": "500""#),
            "driving_behaviour.duration_ms: must be a whole number in 1–10000 ms"
        ),
        (
            valid.replacingOccurrences(of: #""cornering_mg": 300"#, with: #""cornering_mg": 300.5"#),
            "driving_behaviour.cornering_mg: 300.5 is not a whole number (50–5000 mG)"
        ),
        (
            valid.replacingOccurrences(of: #""cornering_mg": 300"#, with: #""cornering_mg": true"#),
            "driving_behaviour.cornering_mg: must be a whole number in 50–5000 mG"
        ),
        (
            valid.replacingOccurrences(of: #"["DB"]"#, with: #"["DB", "XX"]"#),
            "driving_behaviour.enabled[1]: 'XX' is not one of DB, HP, LP"
        ),
        (
            valid.replacingOccurrences(of: #"["DB"]"#, with: #"["DB", "DB"]"#),
            "driving_behaviour.enabled[1]: 'DB' is listed twice"
        ),
        (
            valid.replacingOccurrences(of: #""minimum_firmware": "1.0.7""#, with: #""minimum_firmware": "1.0""#),
            "requirements.minimum_firmware: '1.0' is not MAJOR.MINOR.PATCH"
        ),
        (
            valid.replacingOccurrences(of: #""calibration_required": false"#, with: #""calibration_required": 0"#),
            "requirements.calibration_required: must be true or false"
        ),
        (
            valid.replacingOccurrences(of: #""minimum_battery_percent": 20"#, with: #""minimum_battery_percent": 101"#),
            "requirements.minimum_battery_percent: 101 is outside 0–100 %"
        ),
        (
            valid.replacingOccurrences(of: #""description": "x","#, with: ""),
            "description: is missing (a sentence saying what the profile is for)"
        ),
        (
            valid.replacingOccurrences(of: #""description": "x","#, with: #""description": "x", "colour": "red","#),
            "colour: unknown key (allowed here: description, driving_behaviour, requirements, identity)"
        ),
        (
            valid.replacingOccurrences(of: "}}", with: #"}, "identity": {"major": 70000}}"#),
            "identity.major: 70000 is outside 0–65535"
        ),
        (
            valid.replacingOccurrences(of: "}}", with: #"}, "identity": {"major": 7, "minor": "random"}}"#),
            "identity.minor: 'random' is not one of sequential, keep"
        ),
        ("[1, 2]", "must be an object"),
    ]

    @Test func brokenProfilesAreRefusedWithFileKeyAndRule() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("profiles-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let good = directory + "/good.json"
        try Self.valid.write(toFile: good, atomically: true, encoding: .utf8)
        #expect(try ProfileLoader.load(good).config.enable == .detection)
        for (index, (text, message)) in Self.broken.enumerated() {
            let path = directory + "/broken\(index).json"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            let error = #expect(throws: ProfileError.self) { try ProfileLoader.load(path) }
            #expect(error?.description == "\(path): \(message)", "case \(index)")
        }
    }

    /// Profiles are parsed without Foundation (JSONValue); a number in a
    /// message reads as the NSNumber of Foundation's parser read.
    @Test func numbersInMessagesReadAsFoundationPrintedThem() throws {
        let literals = [
            "300", "300.5", "0.1", "12.345678901234567", "99999999999999999999", "-0.5", "300.0", "1.10", "-0",
            "9223372036854775807", "9223372036854775808", "-9223372036854775809", "0.30000000000000004", "6000",
            "2.50", "123456789012.5", "0.000001", "100000000000000000000000.5",
        ]
        for literal in literals {
            let array = try #require(JSONSerialization.jsonObject(with: Data("[\(literal)]".utf8)) as? [Any])
            #expect(JSONValue.describe(number: literal) == "\(array[0])", "\(literal)")
        }
        // And a list item that is not a string, as `"\(item)"` printed it.
        let items = #"[true, false, 5, null, 1.5, "s"]"#
        let foundation = try #require(JSONSerialization.jsonObject(with: Data(items.utf8)) as? [Any])
        guard case .array(let mine) = try JSONValue.parse(Array(items.utf8)) else {
            Issue.record("not an array")
            return
        }
        #expect(mine.map(\.messageText) == foundation.map { "\($0)" })
    }

    /// What JSONSyntax lets pass but Foundation's parser refused (a bare
    /// value, an unknown escape, bytes that are not UTF-8) is refused with
    /// the words Foundation's parser used.
    @Test func textFoundationRefusedIsRefusedInItsWords() throws {
        let texts: [[UInt8]] = [
            Array("3".utf8), Array(#""x""#.utf8), Array("null".utf8), Array(#"{"a": "\x"}"#.utf8),
            Array(#"{"a": "\u12"}"#.utf8), Array(#"{"a": "b"#.utf8) + [0xFF] + Array(#""}"#.utf8),
            Array(#"{"a": "\ud800"}"#.utf8),
        ]
        for text in texts {
            var expected = ""
            do {
                _ = try JSONSerialization.jsonObject(with: Data(text), options: [])
                Issue.record("Foundation took \(text)")
            } catch {
                expected = (error as NSError).userInfo["NSDebugDescription"] as? String ?? ""
            }
            guard JSONSyntax.firstError(in: text) == nil else { continue }
            let error = #expect(throws: ProfileError.self) {
                try ProfileLoader.parse(Data(text), name: "x", file: "x.json")
            }
            #expect(error?.message == "is not valid JSON (\(expected))", "\(text)")
        }
        // Escapes are decoded as Foundation decoded them.
        let escaped = #"{"a": "\u00e9\/\n\ud83d\ude00"}"#
        let foundation = try #require(JSONSerialization.jsonObject(with: Data(escaped.utf8)) as? [String: String])
        #expect(try JSONValue.parse(Array(escaped.utf8)) == .object(["a": .string(foundation["a"] ?? "")]))
    }
}
