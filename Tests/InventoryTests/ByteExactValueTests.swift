import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Testing

/// `SQLiteValue` is equal and hashed by its bytes, text SQLite holds that
/// is not UTF-8 is read as its bytes, and drift and the offline audit find
/// a stored value rewritten into a canonically equivalent form, on real
/// SQLite files edited with sqlite3 (docs/development.md, "Stored values
/// are compared as bytes"). `ledger verify`: ConsoleTests.ByteExactTests.
@Suite("stored values compared as bytes: SQLiteValue, drift, audit", .timeLimit(.minutes(3)))
struct ByteExactValueTests {
    static let address = "C0:1E:6D:EA:89:86"

    static func temporaryInventory() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("exact-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory + "/inventory.sqlite"
    }

    static func sqlite(_ path: String, _ sql: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [path, sql]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "sqlite3 \(sql): \(message)")
    }

    @Test func valuesAreEqualByTheirBytes() {
        let (nfc, nfd) = ("Caf\u{E9}", "Cafe\u{301}")
        #expect(nfc == nfd)  // the premise
        #expect(SQLiteValue.text(nfc) != .text(nfd))
        #expect(SQLiteValue.text("\u{C5}") != .text("\u{212B}") && SQLiteValue.text("K") != .text("\u{212A}"))
        #expect(Set<SQLiteValue>([.text(nfc), .text(nfd)]).count == 2)
        #expect([SQLiteValue.text(nfc): 1, .text(nfd): 2].count == 2)
        #expect(SQLiteValue.text(nfc) == .text(String(decoding: Array(nfc.utf8), as: UTF8.self)))
        #expect(SQLiteValue.real(0.0) != .real(-0.0) && SQLiteValue.real(1.5) == .real(1.5))
        #expect(SQLiteValue.integer(1) != .real(1) && SQLiteValue.integer(1) != .text("1"))
        #expect(SQLiteValue.blob([0xFF]) != .text("\u{FFFD}") && SQLiteValue.null == nil)
    }

    @Test func textIsReadAsItsBytes() async throws {
        let inventory = try Inventory(path: try Self.temporaryInventory())
        let row = try #require(
            try await inventory.query(
                "SELECT CAST(X'43616665CC81' AS TEXT), CAST(X'436166C3A9' AS TEXT), CAST(X'FF' AS TEXT), CAST(X'EFBFBD' AS TEXT)"
            ).first)
        #expect(row[0].text.map { Array($0.utf8) } == [0x43, 0x61, 0x66, 0x65, 0xCC, 0x81])
        #expect(row[1].text.map { Array($0.utf8) } == [0x43, 0x61, 0x66, 0xC3, 0xA9])
        #expect(row[0] != row[1])
        // Not UTF-8: its bytes, never the U+FFFD a decoder repairs it to.
        #expect(row[2] == .blob([0xFF]))
        #expect(row[3] == .text("\u{FFFD}") && row[2] != row[3])
    }

    /// A profile named `Kvan` (K: U+212A, the Kelvin sign, is canonically
    /// equivalent to it), a device that holds it and an assignment to it.
    static func assigned() async throws -> (String, Inventory, [String: Profile]) {
        let json = #"""
            {"description": "test", "driving_behaviour": {"cornering_mg": 300, "braking_mg": 300,
             "acceleration_mg": 300, "duration_ms": 500, "enabled": ["DB"]},
             "requirements": {"minimum_battery_percent": 10, "minimum_firmware": "1.0.0",
             "calibration_required": false}}
            """#
        let profile = try ProfileLoader.parse(Data(json.utf8), name: "Kvan", file: "Kvan.json")
        let path = try Self.temporaryInventory()
        let inventory = try Inventory(path: path)
        var record = DeviceRecord(address: address)
        record.profile = "Kvan"
        record.config = profile.config
        record.battery = 90
        try await inventory.recordDevice(record)
        _ = try await inventory.assign([
            Assignment(address: address, profile: "Kvan", assignedAt: Inventory.now(), assignedBy: "ana")
        ])
        return (path, inventory, ["Kvan": profile])
    }

    @Test func driftFindsAProfileNameRewrittenInAnotherUnicodeForm() async throws {
        let (path, inventory, profiles) = try await Self.assigned()
        let before = try await inventory.drift(profiles: profiles)
        #expect(before.findings.filter { $0.field == "profile" }.isEmpty, "\(before.findings)")
        try Self.sqlite(path, "UPDATE devices SET profile = CAST(X'E284AA76616E' AS TEXT)")
        let after = try await Inventory(path: path, readOnly: true).drift(profiles: profiles)
        let found = after.findings.filter { $0.field == "profile" }
        #expect(found.count == 1 && found.first?.desired == "Kvan", "\(after.findings)")
        #expect(found.first.map { $0.observed.map { Array($0.utf8) } != Array("Kvan".utf8) } == true)
    }

    @Test func theAuditFindsAProfileNameRewrittenInAnotherUnicodeForm() async throws {
        let (path, inventory, profiles) = try await Self.assigned()
        let clean = try await inventory.auditSubjects().map { Auditor.audit($0, profiles: profiles) }
        #expect(clean.first?.profile == "Kvan" && clean.first?.findings.contains(.noProfile) == false)
        try Self.sqlite(path, "UPDATE devices SET profile = CAST(X'E284AA76616E' AS TEXT)")
        let reports = try await Inventory(path: path, readOnly: true).auditSubjects().map {
            Auditor.audit($0, profiles: profiles)
        }
        let report = try #require(reports.first)
        #expect(report.profile == nil && report.findings.contains(.noProfile), "\(report.findings)")
        #expect(report.findings.contains { $0.code == "stored-value" }, "\(report.findings)")
    }
}
