import Foundation
import Inventory
import Testing

/// The checks of values read back (docs/inventory.md, "Values read back"),
/// rule by rule; the commands over a spoiled inventory are
/// `StoredValueHostilityTests` (ConsoleTests).
@Suite("stored values: the rules", .timeLimit(.minutes(2)))
struct StoredValueTests {
    @Test func timestampsAreStrictAndNeverRollOver() {
        #expect(Inventory.parseTimestamp("2026-11-30T09:41:07.123Z") != nil)
        #expect(Inventory.parseTimestamp("2026-11-30T09:41:07Z") != nil)
        #expect(Inventory.parseTimestamp("2026-11-30T09:41:07.123456789Z") != nil)
        #expect(Inventory.parseTimestamp("2024-02-29T00:00:00.000Z") != nil)
        #expect(
            Inventory.parseTimestamp("2026-11-30T09:41:07.5Z")?.timeIntervalSince1970
                == Inventory.parseTimestamp("2026-11-30T09:41:07.500Z")?.timeIntervalSince1970)
        for text in [
            "2026-02-30T00:00:00.000Z", "2025-02-29T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
            "2026-11-30T24:00:00.000Z", "2026-11-30T09:60:00.000Z", "2026-11-30 09:41:07.123Z",
            "2026-11-30T09:41:07.123", "2026-11-30T09:41:07.Z", "2026-11-30T09:41:07.1234567890Z",
            " 2026-11-30T09:41:07.123Z", "1969-12-31T23:59:59.999Z", "0000-01-01T00:00:00.000Z", "not-a-date", "",
            String(repeating: "9", count: 10_240), "２０２６-11-30T09:41:07.123Z",
        ] {
            #expect(Inventory.parseTimestamp(text) == nil, "\(text.prefix(40))")
        }
    }

    @Test func eachColumnKeepsItsRule() {
        var check = RowCheck("devices", key: [.text("C0:FE:00:00:00:01")])
        #expect(check.integer(.integer(100), "battery", as: UInt8.self) == 100)
        #expect(check.integer(.null, "battery", as: UInt8.self) == nil)
        #expect(check.isClean, "NULL is unknown, not a failure")
        #expect(check.integer(.integer(101), "battery", as: UInt8.self) == nil)
        #expect(check.integer(.text("80"), "battery", as: UInt8.self) == nil)
        #expect(check.integer(.real(80), "battery", as: UInt8.self) == nil)
        #expect(check.integer(.integer(Int64.max), "calibration_x", as: Int16.self) == nil)
        #expect(check.integer(.integer(-32768), "calibration_x", as: Int16.self) == -32768)
        #expect(check.integer(.integer(49), "config_cornering", as: UInt16.self) == nil)
        #expect(check.integer(.integer(8), "config_enable", as: UInt16.self) == nil)
        #expect(check.text(.text("../../etc/passwd"), "profile") == nil)
        #expect(check.text(.text("car"), "profile") == "car")
        #expect(check.text(.blob([0, 255]), "model") == nil)
        #expect(check.text(.text("1.2"), "firmware") == nil)
        #expect(check.date(.text("2026-02-30T00:00:00.000Z"), "last_seen") == nil)
        #expect(check.text(.text("c0:fe:00:00:00:01"), "address") == nil)
        #expect(check.text(.null, "address", required: true) == nil)
        let fields = check.findings.map(\.field)
        #expect(
            fields == [
                "battery", "battery", "battery", "calibration_x", "config_cornering", "config_enable", "profile",
                "model", "firmware", "last_seen", "address", "address",
            ])
        #expect(check.findings.allSatisfy { $0.table == "devices" && $0.row == "C0:FE:00:00:00:01" })
        #expect(
            check.findings[3].description
                == "devices row C0:FE:00:00:00:01, calibration_x: 9223372036854775807 is outside -32768–32767")
    }

    @Test func valuesAndKeysAreShownVisiblyAndBounded() {
        var check = RowCheck("outcomes", key: [.text("\u{1B}[2J"), .integer(7)])
        _ = check.text(.text("\u{1B}]0;pwned\u{07}" + String(repeating: "x", count: 10_000)), "status")
        let finding = check.findings[0]
        #expect(finding.row == "'\\x1b[2J'/7")
        #expect(!finding.description.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
        #expect(finding.description.utf8.count < 400)
        #expect(StoredRule.shown(.blob(Array(repeating: 0, count: 40))).hasSuffix("(blob, 40 bytes)"))
    }

    @Test func overridesAreAnObjectOfKnownKeysInRange() throws {
        #expect(try ConfigOverrides.checked(json: #"{"cornering":300}"#).get() == ConfigOverrides(cornering: 300))
        #expect(try ConfigOverrides.checked(json: "{}").get() == ConfigOverrides())
        for json in [
            #"{"cornering":70000}"#, #"{"cornering":49}"#, #"{"cornering":300.5}"#, #"{"cornering":"300"}"#,
            #"{"speed":300}"#, "[]", "not json", #"{"duration":0}"#, #"{"cornering":1e308}"#,
        ] {
            #expect((try? ConfigOverrides.checked(json: json).get()) == nil, "\(json)")
        }
    }

    @Test func theLogKeepsEachFindingOnceAndBoundsThem() {
        var log = StoredFindingLog()
        let one = StoredFinding(table: "devices", row: "A", field: "battery", value: "101", reason: "is outside 0–100")
        log.add([one, one])
        for index in 0..<(StoredFindingLog.limit + 5) {
            log.add([StoredFinding(table: "readings", row: "\(index)", field: "battery", value: "x", reason: "r")])
        }
        let taken = log.take()
        #expect(taken.findings.count == StoredFindingLog.limit)
        #expect(taken.more == 6)
        #expect(log.take().findings.isEmpty)
    }
}
