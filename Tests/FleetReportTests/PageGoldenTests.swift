import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Testing

@testable import FleetReport

/// The report page, byte for byte: fixed synthetic fleets rendered with a
/// fixed nonce and a fixed `now`, compared with the pages committed under
/// Golden/. A change to the page's bytes fails here first; when the change
/// is meant, `BEACONBENCH_WRITE_GOLDEN=1 swift test --filter
/// FleetReportTests/pageIsUnchanged` rewrites the files (and fails, so the
/// run that wrote them never counts as a pass): review their diff, then run
/// again without it.
extension FleetReportTests {
    static let goldenDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Golden")
    static let goldenNonce = String(repeating: "0", count: 32)

    @Test func pageIsUnchanged() throws {
        let fleet = GoldenFleet(now: Self.now)
        let large = GoldenFleet.large(now: Self.now)
        let cases: [(file: String, report: FleetReport)] = [
            ("page.html", fleet.report(server: false)),
            ("server.html", fleet.report(server: true, filters: [.profile("car")], selectors: "profile=car")),
            ("empty.html", fleet.report(server: false, empty: true)),
            // Past `ReportPage.deflateAbove`: the device table travels deflated.
            ("large.html", large),
        ]
        let writing = ProcessInfo.processInfo.environment["BEACONBENCH_WRITE_GOLDEN"] == "1"
        for (file, report) in cases {
            let page = ReportPage.html(report, nonce: Self.goldenNonce)
            let url = Self.goldenDirectory.appendingPathComponent(file)
            if writing {
                try FileManager.default.createDirectory(at: Self.goldenDirectory, withIntermediateDirectories: true)
                try Data(page.utf8).write(to: url)
                Issue.record("wrote \(url.path): review its diff, then run again without BEACONBENCH_WRITE_GOLDEN")
                continue
            }
            let golden = try #require(
                FileManager.default.contents(atPath: url.path), "no golden page at \(url.path)")
            let bytes = Array(page.utf8)
            if bytes != Array(golden) {
                Issue.record("\(file) differs from its golden page: \(Self.firstDifference(bytes, Array(golden)))")
            }
        }
        // Each path of the data block is taken.
        let largePage = ReportPage.html(large, nonce: Self.goldenNonce)
        #expect(
            largePage.contains(#"<script type="application/octet-stream" id="report-data" data-encoding="deflate">"#))
        #expect(
            ReportPage.html(fleet.report(server: false), nonce: Self.goldenNonce).contains(
                #"<script type="application/json" id="report-data">"#))
    }

    /// Where two pages part: the line number and both lines (bounded).
    static func firstDifference(_ page: [UInt8], _ golden: [UInt8]) -> String {
        let offset =
            zip(page, golden).enumerated().first { $0.element.0 != $0.element.1 }?.offset
            ?? min(page.count, golden.count)
        let line = page.prefix(offset).filter { $0 == UInt8(ascii: "\n") }.count + 1
        func lineAt(_ bytes: [UInt8]) -> String {
            let start = bytes[..<offset].lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
            let end = bytes[offset...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            return String(decoding: bytes[start..<end].prefix(300), as: UTF8.self)
        }
        return "byte \(offset), line \(line) (\(page.count) bytes, golden \(golden.count)):\n  now:    "
            + lineAt(page) + "\n  golden: " + lineAt(golden)
    }
}

/// A fixed fleet that reaches every chart: devices read through the
/// report's own decoder (`ReportDevice.rows(of:)`, with values that fail
/// their checks), hand-built devices with hostile text, two profiles and a
/// profile that no longer exists, readings that project crossings, two
/// benches at work, failures and skips. No two entries tie where the page
/// sorts, so the page is the same in every process.
struct GoldenFleet {
    let now: Date
    var devices: [ReportDevice] = []
    var subjects: [AuditSubject] = []
    var history = FleetHistory()

    static let day = 86_400.0

    static var profiles: [String: Profile] {
        [
            "car": FleetReportTests.car,
            "van": Profile(
                name: "van", description: "vans",
                config: DrivingBehaviourConfig(
                    cornering: 500, braking: 550, acceleration: 450, duration: 150, enable: [.detection]),
                requirements: .init(
                    minimumBatteryPercent: 40, minimumFirmware: try! FirmwareVersion("1.1.0"),
                    calibrationRequired: true, maximumCalibrationAgeDays: 180),
                identity: .init(major: 200, minor: .sequential)),
        ]
    }

    /// As the inventory stores a time: `2026-11-30T09:41:07.000Z` (whole seconds here).
    static func timestamp(_ date: Date) -> SQLiteValue {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down)) % 60
        return .text(UTC.minute(date).replacingOccurrences(of: " ", with: "T") + ":" + UTC.two(seconds) + ".000Z")
    }

    init(now: Date) {
        self.now = now
        let columns = [
            "address", "mac_ending", "major", "minor", "model", "serial", "firmware", "battery", "calibrated",
            "calibrated_at", "calibration_x", "calibration_y", "calibration_z", "profile", "last_seen", "benches",
        ]
        func ago(_ days: Double) -> SQLiteValue { Self.timestamp(now.addingTimeInterval(-days * Self.day)) }
        // address, mac, major, minor, model, serial, firmware, battery, calibrated, at, x, y, z, profile, seen, benches
        let rows: [[SQLiteValue]] = [
            [
                "C0:FE:00:00:00:01", "a1b2c3d4", 100, 1, "SB-1", "S0001", "1.0.8", 95, 1, ago(5), 0, 0, 1000, "car",
                ago(1), "{aaaa1111bbbb2222}",
            ],
            [
                "C0:FE:00:00:00:02", "a1b2c3d5", 100, 2, "SB-1", "S0002", "1.0.8", 72, 1, ago(45), 10, -20, 990, "car",
                ago(2), "{aaaa1111bbbb2222,cccc3333dddd4444}",
            ],
            [
                "C0:FE:00:00:00:03", "a1b2c3d6", 100, 3, "SB-1", "S0003", "1.0.6", 38, 1, ago(120), 0, 0, 1400, "car",
                ago(3), "{cccc3333dddd4444}",
            ],
            [
                "C0:FE:00:00:00:04", "a1b2c3d7", 100, 3, "SB-2", "S0004", "1.0.6", 22, 1, ago(200), 5, 5, 700, "car",
                ago(4), "{aaaa1111bbbb2222}",
            ],
            [
                "C0:FE:00:00:00:05", "a1b2c3d8", 100, 5, "SB-2", "S0005", "1.1.0", 12, 1, ago(400), 0, 300, 960, "car",
                ago(30), "{aaaa1111bbbb2222}",
            ],
            [
                "C0:FE:00:00:00:06", "a1b2c3d9", 100, 6, "SB-2", nil, "1.1.0", 150, 0, nil, nil, nil, nil, "car", nil,
                nil,
            ],
            [
                "C0:FE:00:00:00:07", "b1b2c3d4", 200, 1, "SB-3 van", "V0001", "1.1.0", 88, 1, ago(10), 0, -1000, 0,
                "van", ago(1), "{cccc3333dddd4444}",
            ],
            [
                "C0:FE:00:00:00:08", "b1b2c3d5", 200, 2, "SB-3 van", "V0002", "2.0.0", 55, 1, ago(60), 0, 0, 1100,
                "van", ago(6), "{cccc3333dddd4444}",
            ],
            [
                "C0:FE:00:00:00:09", "b1b2c3d6", 200, 3, "SB-3 van", "V0003", "1.0.8", 41, 1, ago(300), 1200, 0, 0,
                "van", ago(8), "{aaaa1111bbbb2222}",
            ],
            [
                "C0:FE:00:00:00:0A", "b1b2c3d7", 200, 4, "SB-3 van", "V0004", "1.0.9", 33, nil, nil, nil, nil, nil,
                "van", ago(9), nil,
            ],
            [
                "C0:FE:00:00:00:0B", "c1b2c3d4", nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, ago(0.5),
                nil,
            ],
            [
                "C0:FE:00:00:00:0C", "c1b2c3d5", 0, 0, "SB-1", "S0099", "1.0", 64, 1, "yesterday", 0, 0, 1000, nil,
                ago(70), "{eeee5555ffff6666}",
            ],
            [
                "C0:FE:00:00:00:0D", "c1b2c3d6", 300, 1, "SB-9", "T0001", "1.2.0", 47, 1, ago(20), 0, 0, 1000, "truck",
                ago(12), "{eeee5555ffff6666}",
            ],
            // A row whose address fails its check is left out.
            ["not an address", "dead", 1, 1, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil],
        ]
        devices = ReportDevice.rows(of: DeviceTable(columns: columns, rows: rows))
        // Hostile text, built by hand (the decoder's checks would refuse some of it).
        var hostile = ReportDevice(address: "C0:FE:00:00:00:0E")
        hostile.macEnding = "c1b2c3d7"
        hostile.major = 100
        hostile.minor = 14
        hostile.model = "<img src=x onerror=alert(1)></script><script>alert(2)</script>\u{1B}[2J\u{202E}"
        hostile.serial = "</script><!-- \u{2028}\"\\ & " + String(repeating: "x", count: 120)
        hostile.firmware = "<svg onload=alert(3)>"
        hostile.battery = 29
        hostile.profile = "car"
        hostile.benches = "<b>bench</b>"
        hostile.lastSeen = now.addingTimeInterval(-3 * Self.day)
        devices.append(hostile)

        subjects = devices.map { device in
            var subject = AuditSubject(address: device.address)
            subject.assignedProfile = device.profile
            subject.battery = device.battery.map { UInt8($0) }
            subject.firmware = device.firmware.flatMap { try? FirmwareVersion($0) }
            subject.calibrated = device.calibrated
            subject.calibratedAt = device.calibratedAt
            subject.calibrationVector = device.calibrationVector.map {
                Vector(x: Int16($0.x), y: Int16($0.y), z: Int16($0.z))
            }
            if let major = device.major, let minor = device.minor {
                subject.identity = BeaconIdentity(major: UInt16(major), minor: UInt16(minor))
            }
            subject.lastSeen = device.lastSeen
            if let name = device.profile, let profile = Self.profiles[name] {
                subject.config = profile.config
                subject.configReadAt = now.addingTimeInterval(-Self.day)
            }
            return subject
        }
        // Config drift: two cars corner at 500, one van brakes at 600, one car's duration differs.
        for index in [1, 2] { subjects[index].config?.cornering = 500 }
        subjects[7].config?.braking = 600
        subjects[3].config?.duration = 90

        var readings: [BatteryReading] = []
        func series(_ index: Int, _ values: [(Double, Int)]) {
            for (daysAgo, battery) in values {
                readings.append(
                    BatteryReading(
                        device: devices[index].address, at: now.addingTimeInterval(-daysAgo * Self.day),
                        battery: battery))
            }
        }
        series(0, [(60, 100), (30, 98), (5, 95)])
        series(1, [(90, 97), (60, 88), (30, 80), (2, 72)])
        series(2, [(80, 70), (40, 55), (3, 38)])
        series(3, [(50, 40), (20, 30), (4, 22)])
        series(4, [(30.5, 12)])
        series(6, [(40, 95), (1, 88)])
        series(7, [(100, 90), (50, 72), (6, 55)])
        series(8, [(70, 60), (35, 50), (8, 41)])
        series(9, [(20, 45), (9, 33)])
        series(12, [(15, 50), (12, 47)])
        readings.sort { ($0.device, $0.at) < ($1.device, $1.at) }

        func ms(_ steps: Int) -> Int { steps * 1_234 }
        let a = "aaaa1111"
        let c = "cccc3333"
        let activity: [ActivityCount] = [
            .init(day: "2026-10-20", bench: a, device: devices[0].address, steps: 9, failed: 0, milliseconds: ms(9)),
            .init(day: "2026-10-20", bench: a, device: devices[1].address, steps: 9, failed: 1, milliseconds: ms(9)),
            .init(day: "2026-10-21", bench: c, device: devices[2].address, steps: 7, failed: 2, milliseconds: ms(7)),
            .init(day: "2026-10-21", bench: a, device: devices[3].address, steps: 8, failed: 0, milliseconds: ms(8)),
            .init(day: "2026-11-02", bench: c, device: devices[6].address, steps: 12, failed: 1, milliseconds: ms(12)),
            .init(day: "2026-11-02", bench: c, device: devices[7].address, steps: 11, failed: 0, milliseconds: ms(11)),
            .init(day: "2026-11-02", bench: c, device: nil, steps: 1, failed: 1, milliseconds: 40),
            .init(day: "2026-11-14", bench: a, device: devices[8].address, steps: 6, failed: 3, milliseconds: ms(6)),
        ]
        let problems: [StepProblem] = [
            .init(
                device: devices[1].address, step: "connect", status: "failed",
                reason: "C0:FE:00:00:00:02 did not answer after 3 tries\nsecond line"),
            .init(
                device: devices[2].address, step: "connect", status: "failed",
                reason: "C0:FE:00:00:00:03 did not answer after 5 tries"),
            .init(
                device: devices[2].address, step: "write config", status: "failed", reason: "write refused (0x0e)"),
            .init(
                device: devices[6].address, step: "firmware", status: "skipped",
                reason: "firmware 1.0.6 is older than 1.1.0"),
            .init(device: devices[8].address, step: "calibrate", status: "failed", reason: ""),
            .init(
                device: devices[8].address, step: "calibrate", status: "failed", reason: "<script>x</script> 42 mG"),
            .init(device: nil, step: "scan", status: "failed", reason: "adapter hci0 is powered off"),
            .init(
                device: devices[8].address, step: "set time", status: "skipped",
                reason: "firmware 1.0.6 is older than 1.1.0"),
        ]
        history = FleetHistory(readings: readings, activity: activity, problems: problems)
    }

    func report(
        server: Bool, filters: [DeviceFilter] = [], selectors: String = "", empty: Bool = false
    ) -> FleetReport {
        FleetReport(
            source: server ? "postgresql://office@depot.example/fleet" : "/srv/bench/<inventory>.sqlite",
            server: server, devices: empty ? [] : devices, subjects: empty ? [] : subjects,
            history: empty ? FleetHistory() : history, profiles: Self.profiles, filters: filters,
            selectors: selectors, since: empty ? nil : now.addingTimeInterval(-120 * Self.day), now: now)
    }

    /// Enough devices that the device table's JSON passes
    /// `ReportPage.deflateAbove`, from a server (a benches column).
    static func large(now: Date) -> FleetReport {
        var devices: [ReportDevice] = []
        var subjects: [AuditSubject] = []
        var readings: [BatteryReading] = []
        let profiles = ["car", "van"]
        let firmware = ["1.0.6", "1.0.8", "1.1.0", "2.0.0"]
        for index in 0..<5_000 {
            var device = ReportDevice(
                address: String(format: "C0:FE:00:00:%02X:%02X", index / 256, index % 256))
            device.macEnding = String(format: "%08x", index)
            device.major = index % 3 == 0 ? 200 : 100
            device.minor = index % 997
            device.model = "SB-\(index % 5)"
            device.serial = String(format: "S%06d", index)
            device.firmware = firmware[index % firmware.count]
            device.battery = index % 7 == 0 ? nil : (index * 37) % 101
            device.calibrated = index % 11 != 0
            device.calibratedAt = now.addingTimeInterval(-Double(index % 500) * day)
            device.calibrationVector = (index % 13, -(index % 17), 800 + index % 450)
            device.profile = index % 19 == 0 ? nil : profiles[index % 2]
            device.lastSeen = now.addingTimeInterval(-Double(index % 90) * day)
            device.benches = ["aaaa1111", "cccc3333", "aaaa1111 cccc3333"][index % 3]
            devices.append(device)
            var subject = AuditSubject(address: device.address)
            subject.assignedProfile = device.profile
            subject.battery = device.battery.map { UInt8($0) }
            subject.firmware = try? FirmwareVersion(device.firmware ?? "")
            subject.calibrated = device.calibrated
            subject.calibratedAt = device.calibratedAt
            subject.identity = BeaconIdentity(major: UInt16(device.major!), minor: UInt16(device.minor!))
            subjects.append(subject)
            if index % 40 == 0 {
                for step in 0..<3 {
                    readings.append(
                        BatteryReading(
                            device: device.address, at: now.addingTimeInterval(-Double(60 - step * 25) * day),
                            battery: max(0, 90 - index % 50 - step * (index % 9))))
                }
            }
        }
        readings.sort { ($0.device, $0.at) < ($1.device, $1.at) }
        return FleetReport(
            source: "postgresql://office@depot.example/fleet", server: true, devices: devices, subjects: subjects,
            history: FleetHistory(readings: readings), profiles: GoldenFleet.profiles, now: now)
    }
}
