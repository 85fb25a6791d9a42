import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import SafeText
import Testing

@testable import FleetReport

/// The streamed report (`FleetReport.streamed`, `ReportPage.write`) is the
/// same page, byte for byte, as the report computed from arrays
/// (`FleetReport.init`, `ReportPage.html`, whose pages are golden): the
/// golden fleets, filtered and not, and a larger fleet that takes every
/// path the fold has (orphan readings and outcomes, steps of no device,
/// duplicate identities inside and outside a selection, hour, day and
/// week units, the deflated data block).
extension FleetReportTests {
    static let tableColumns = [
        "address", "mac_ending", "major", "minor", "model", "serial", "firmware", "battery", "calibrated",
        "calibrated_at", "calibration_x", "calibration_y", "calibration_z", "profile", "last_seen", "benches",
    ]

    /// `devices` as an inventory's device table holds them.
    static func table(_ devices: [ReportDevice]) -> DeviceTable {
        func time(_ date: Date?) -> SQLiteValue { date.map(GoldenFleet.timestamp) ?? .null }
        func integer(_ value: Int?) -> SQLiteValue { value.map { .integer(Int64($0)) } ?? .null }
        func text(_ value: String?) -> SQLiteValue { value.map { .text($0) } ?? .null }
        let rows = devices.map { device -> [SQLiteValue] in
            [
                .text(device.address), .text(device.macEnding), integer(device.major), integer(device.minor),
                text(device.model), text(device.serial), text(device.firmware), integer(device.battery),
                integer(device.calibrated.map { $0 ? 1 : 0 }), time(device.calibratedAt),
                integer(device.calibrationVector?.x), integer(device.calibrationVector?.y),
                integer(device.calibrationVector?.z), text(device.profile), time(device.lastSeen),
                text(device.benches.map { "{" + $0.split(separator: " ").joined(separator: ",") + "}" }),
            ]
        }
        return DeviceTable(columns: tableColumns, rows: rows)
    }

    /// Both pages of one fleet: from arrays and streamed.
    static func bothPages(
        table: DeviceTable, subjects: [AuditSubject], history: FleetHistory, server: Bool,
        filters: [DeviceFilter] = [], selectors: String = "", since: Date? = nil
    ) throws -> (arrays: String, streamed: String, report: FleetReport) {
        let reading = ArrayReportReading(table: table, subjects: subjects, history: history)
        // The arrays in the order the streams give them (by address).
        let sorted = DeviceTable(columns: table.columns, rows: try Self.all(reading.devices().rows))
        let reference = FleetReport(
            source: "postgresql://office@depot.example/fleet", server: server,
            devices: ReportDevice.rows(of: sorted), subjects: subjects, history: history,
            profiles: GoldenFleet.profiles, filters: filters, selectors: selectors, since: since, now: now)
        let html = ReportPage.html(reference, nonce: goldenNonce)

        let directory = FileManager.default.temporaryDirectory.path
        let rows = try ReportRowsFile(directory: directory)
        let (report, head) = try FleetReport.streamed(
            source: "postgresql://office@depot.example/fleet", server: server, reading: reading,
            profiles: GoldenFleet.profiles, filters: filters, selectors: selectors, since: since, now: now
        ) { json in try rows.append(json) }
        let path = directory + "/beaconbench-stream-test-\(UInt64.random(in: 0...UInt64.max)).html"
        defer { unlink(path) }
        try OutputFile.write(to: path) { writer throws(OutputFile.Refusal) in
            try ReportPage.write(report, tableHead: head, rows: rows, nonce: goldenNonce, to: &writer)
        }
        let streamed = try String(contentsOfFile: path, encoding: .utf8)
        #expect(report.rowCount == reference.rows.count)
        #expect(report.crossingCount == reference.crossingThisQuarter.count)
        #expect(report.projectedCount == reference.projections.count)
        return (html, streamed, report)
    }

    static func all<T>(_ stream: RowStream<T>) throws -> [T] {
        var items: [T] = []
        while let item = try stream.next() { items.append(item) }
        return items
    }

    static func expectSame(_ pages: (arrays: String, streamed: String, report: FleetReport), _ name: String) {
        if pages.arrays != pages.streamed {
            Issue.record(
                "\(name): the streamed page differs: \(firstDifference(Array(pages.streamed.utf8), Array(pages.arrays.utf8)))"
            )
        }
    }

    @Test func theStreamedPageIsThePageOfTheArrays() throws {
        let fleet = GoldenFleet(now: Self.now)
        let table = Self.table(fleet.devices)
        let since = Self.now.addingTimeInterval(-120 * Self.day)
        Self.expectSame(
            try Self.bothPages(
                table: table, subjects: fleet.subjects, history: fleet.history, server: false, since: since),
            "page")
        Self.expectSame(
            try Self.bothPages(
                table: table, subjects: fleet.subjects, history: fleet.history, server: true,
                filters: [.profile("car")], selectors: "profile=car", since: since),
            "server, profile=car")
        Self.expectSame(
            try Self.bothPages(table: Self.table([]), subjects: [], history: FleetHistory(), server: false), "empty")
    }

    /// A fleet of 6,000 devices over two years, with everything the fold
    /// treats apart.
    static func streamFleet() -> (table: DeviceTable, subjects: [AuditSubject], history: FleetHistory) {
        var devices: [ReportDevice] = []
        var subjects: [AuditSubject] = []
        var readings: [BatteryReading] = []
        var activity: [ActivityCount] = []
        var problems: [StepProblem] = []
        let firmware = ["1.0.6", "1.0.8", "1.1.0", "2.0.0", "0.9.1", "1.2.0", "1.3.0", "1.4.0", "1.5.0", "x"]
        func address(_ index: Int) -> String { String(format: "C0:FE:00:01:%02X:%02X", index / 256, index % 256) }
        for index in 0..<6_000 {
            var device = ReportDevice(address: address(index))
            device.macEnding = String(format: "%08x", index)
            device.major = index % 3 == 0 ? 200 : 100
            device.minor = index % 1_500  // four devices per identity: duplicates
            device.model = "SB-\(index % 4)"
            device.serial = String(format: "S%06d", index)
            device.firmware = index % 23 == 0 ? nil : firmware[index % firmware.count]
            device.battery = index % 7 == 0 ? nil : (index * 37) % 101
            device.calibrated = index % 11 == 0 ? false : index % 13 == 0 ? nil : true
            device.calibratedAt = index % 17 == 0 ? nil : now.addingTimeInterval(-Double(index % 500) * day)
            device.calibrationVector = (index % 13, -(index % 17), 650 + index % 700)
            device.profile = index % 19 == 0 ? nil : index % 29 == 0 ? "truck" : ["car", "van"][index % 2]
            device.lastSeen = now.addingTimeInterval(-Double(index % 90) * day)
            device.benches = ["aaaa1111", "cccc3333", "aaaa1111 cccc3333"][index % 3]
            // Some audited devices are not in the table; some table devices are not audited.
            if index % 31 != 0 { devices.append(device) }
            if index % 37 != 0 {
                var subject = AuditSubject(address: device.address)
                subject.assignedProfile = index % 41 == 0 ? nil : device.profile
                subject.battery = device.battery.map { UInt8($0) }
                subject.firmware = try? FirmwareVersion(device.firmware ?? "")
                subject.calibrated = device.calibrated
                subject.calibratedAt = device.calibratedAt
                subject.identity = BeaconIdentity(major: UInt16(device.major!), minor: UInt16(device.minor!))
                if index % 5 == 0 {
                    subject.config = DrivingBehaviourConfig(
                        cornering: UInt16(400 + index % 3 * 50), braking: 550, acceleration: 450, duration: 150,
                        enable: [.detection])
                }
                subjects.append(subject)
            }
            // Readings: a few devices over two years, most over a few months.
            if index % 3 == 0 {
                let span = index % 9 == 0 ? 700.0 : 60.0
                for step in 0..<(index % 5 + 1) {
                    readings.append(
                        BatteryReading(
                            device: device.address,
                            at: now.addingTimeInterval(-span * day + Double(step) * span / 5 * day + Double(index)),
                            battery: max(0, 95 - index % 60 - step * (index % 11))))
                }
            }
            if index % 2 == 0 {
                for step in 0..<3 {
                    let at = now.addingTimeInterval(-Double((index * 7 + step * 97) % 600) * day)
                    activity.append(
                        ActivityCount(
                            day: UTC.day(at), bench: ["aaaa1111", "cccc3333"][step % 2], device: device.address,
                            steps: 5 + step, failed: step == 2 ? 1 : 0, milliseconds: 1_000 * (index % 9)))
                }
            }
            if index % 10 == 0 {
                problems.append(
                    StepProblem(
                        device: device.address, step: ["connect", "write config"][index % 2], status: "failed",
                        reason: "\(device.address) did not answer after \(index % 4) tries"))
            }
        }
        // History of no device, and of devices in no table.
        for step in 0..<20 {
            readings.append(
                BatteryReading(
                    device: "C0:FE:FF:00:00:\(String(format: "%02X", step))",
                    at: now.addingTimeInterval(-Double(step) * 3 * day), battery: 50 + step))
            activity.append(
                ActivityCount(
                    day: UTC.day(now.addingTimeInterval(-Double(step) * 9 * day)), bench: "eeee5555", device: nil,
                    steps: 2, failed: 1, milliseconds: 10))
            problems.append(
                StepProblem(device: nil, step: "scan", status: "failed", reason: "adapter hci\(step) is off"))
        }
        readings.sort { ($0.device, $0.at) < ($1.device, $1.at) }
        let table = Self.table(devices.reversed())
        return (table, subjects.reversed(), FleetHistory(readings: readings, activity: activity, problems: problems))
    }

    @Test func aLargerFleetStreamsToTheSamePage() throws {
        let (table, subjects, history) = Self.streamFleet()
        let all = try Self.bothPages(table: table, subjects: subjects, history: history, server: true)
        Self.expectSame(all, "every device")
        #expect(all.streamed.contains(#"data-encoding="deflate""#))
        #expect(!all.report.duplicates.isEmpty)
        #expect(all.report.trendUnit == "week")
        #expect(all.report.activityUnit == "week")
        Self.expectSame(
            try Self.bothPages(
                table: table, subjects: subjects, history: history, server: true,
                filters: [.profile("van"), .batteryBelow(60)], selectors: "profile=van battery<60"),
            "profile=van battery<60")
        Self.expectSame(
            try Self.bothPages(
                table: table, subjects: subjects, history: history, server: true,
                filters: [.address("C0:FE:00:01:00:03"), .macEnding("00000009")], selectors: "two devices"),
            "two devices")
        // A short history: the trend per hour, activity per day.
        let recent = Self.now.addingTimeInterval(-1.5 * Self.day)
        var hourly: [BatteryReading] = []
        for (index, row) in table.rows.enumerated() where index % 4 == 0 {
            for step in 0..<3 {
                hourly.append(
                    BatteryReading(
                        device: row[0].text ?? "", at: recent.addingTimeInterval(Double(index % 20 + step * 5) * 3600),
                        battery: 80 - step - index % 7))
            }
        }
        hourly.sort { ($0.device, $0.at) < ($1.device, $1.at) }
        let short = FleetHistory(
            readings: hourly,
            activity: history.activity.filter { $0.day >= UTC.day(Self.now.addingTimeInterval(-30 * Self.day)) },
            problems: history.problems)
        let hours = try Self.bothPages(table: table, subjects: subjects, history: short, server: false)
        Self.expectSame(hours, "short history")
        #expect(hours.report.trendUnit == "hour")
        #expect(hours.report.activityUnit == "day")
    }
}
