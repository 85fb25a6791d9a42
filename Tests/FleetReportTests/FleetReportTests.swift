import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Testing

@testable import FleetReport

@Suite("Fleet report: numbers and safety", .timeLimit(.minutes(5)))
struct FleetReportTests {
    static let now = Inventory.parseTimestamp("2026-11-15T12:00:00.000Z")!
    static let day = 86_400.0

    static var car: Profile {
        Profile(
            name: "car", description: "cars",
            config: DrivingBehaviourConfig(
                cornering: 400, braking: 450, acceleration: 350, duration: 120,
                enable: [.detection, .lowPassFilter]),
            requirements: .init(
                minimumBatteryPercent: 30, minimumFirmware: try! FirmwareVersion("1.0.8"), calibrationRequired: true,
                maximumCalibrationAgeDays: 365), identity: .init(major: 100, minor: .sequential))
    }

    @Test func markupCharactersAreEscapedAndControlsShown() {
        #expect(
            HTML.escape(#"<a href="x" onclick='y'>&</a>"#)
                == "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;")
        #expect(HTML.text("a\u{1B}]0;title\u{07}b\u{202E}c") == #"a\x1b]0;title\x07b\u202ec"#)
        #expect(HTML.text(String(repeating: "x", count: 300), limit: 10) == "xxxxxxxxxx…[+290]")
    }

    @Test func jsonStringsCannotCloseTheScriptBlock() {
        let literal = HTML.json("</script><script>alert(1)</script><!-- \u{2028}\"\\ &")
        #expect(!literal.contains("<") && !literal.contains(">") && !literal.contains("&"))
        #expect(literal.contains(#"\u003c/script\u003e"#))
        // The same value to a JSON reader (U+2028 is made visible first, as on a terminal).
        let decoded = try? JSONSerialization.jsonObject(with: Data(literal.utf8), options: .fragmentsAllowed) as? String
        #expect(decoded == "</script><script>alert(1)</script><!-- \\u2028\"\\ &")
    }

    @Test func aDrainingBatteryIsProjectedToCrossItsMinimum() throws {
        // 80 % falling 1 % a day from 40 days ago: 40 % now, 30 % in 10 days.
        let readings = (0...4).map { index in
            BatteryReading(
                device: "C0:FE:00:00:00:01", at: Self.now.addingTimeInterval(Double(-40 + index * 10) * Self.day),
                battery: 80 - index * 10)
        }
        let projection = try #require(
            BatteryProjection.fit(
                device: "C0:FE:00:00:00:01", profile: "car", minimum: 30, readings: readings, now: Self.now))
        #expect(abs(projection.slopePerDay + 1) < 1e-9)
        #expect(abs(projection.batteryNow - 40) < 1e-9)
        let crossing = try #require(projection.crossing)
        #expect(abs(crossing.timeIntervalSince(Self.now) - 10 * Self.day) < 1)
    }

    @Test func aSteadyBatteryNeverCrossesAndTooFewReadingsGiveNoProjection() {
        let steady = [0.0, 5, 10].map {
            BatteryReading(device: "A", at: Self.now.addingTimeInterval(-$0 * Self.day), battery: 90)
        }
        #expect(
            BatteryProjection.fit(device: "A", profile: "car", minimum: 30, readings: steady, now: Self.now)?.crossing
                == nil)
        let sameDay = [0.0, 3600].map {
            BatteryReading(device: "A", at: Self.now.addingTimeInterval(-$0), battery: 90)
        }
        #expect(
            BatteryProjection.fit(device: "A", profile: "car", minimum: 30, readings: sameDay, now: Self.now) == nil)
    }

    @Test func aDeviceAlreadyBelowItsMinimumCrossedInThePast() throws {
        // 25 % twice, 10 days apart: below the 30 % minimum and not draining.
        let below = [20.0, 10].map {
            BatteryReading(device: "A", at: Self.now.addingTimeInterval(-$0 * Self.day), battery: 25)
        }
        let projection = try #require(
            BatteryProjection.fit(device: "A", profile: "car", minimum: 30, readings: below, now: Self.now))
        #expect(try #require(projection.crossing) <= Self.now)
    }

    static func device(_ index: Int, profile: String? = "car", battery: Int? = 50) -> ReportDevice {
        var device = ReportDevice(address: String(format: "C0:FE:00:00:00:%02X", index))
        device.macEnding = String(format: "0000000%x", index)
        device.profile = profile
        device.battery = battery
        device.firmware = "1.0.8"
        device.major = 100
        device.minor = index
        device.calibrated = true
        device.calibratedAt = now.addingTimeInterval(-10 * day)
        device.calibrationVector = (0, 0, 1000)
        return device
    }

    static func subject(_ device: ReportDevice) -> AuditSubject {
        var subject = AuditSubject(address: device.address)
        subject.assignedProfile = device.profile
        subject.battery = device.battery.map { UInt8($0) }
        subject.identity = BeaconIdentity(major: UInt16(device.major!), minor: UInt16(device.minor!))
        subject.configReadAt = now
        return subject
    }

    @Test func countsPerChartMatchTheFleet() {
        var devices = (1...6).map { Self.device($0, battery: $0 * 15) }
        devices.append(Self.device(7, profile: nil, battery: nil))
        devices[0].calibrationVector = (0, 0, 1400)
        devices[1].minor = 3  // the same identity as device 3
        var subjects = devices.map(Self.subject)
        subjects[2].config = DrivingBehaviourConfig(
            cornering: 500, braking: 450, acceleration: 350, duration: 120, enable: [.detection, .lowPassFilter])
        let history = FleetHistory(
            readings: [
                BatteryReading(
                    device: devices[0].address, at: Self.now.addingTimeInterval(-30 * Self.day), battery: 45),
                BatteryReading(device: devices[0].address, at: Self.now.addingTimeInterval(-1 * Self.day), battery: 16),
            ],
            activity: [
                ActivityCount(
                    day: "2026-11-14", bench: "aaaa", device: devices[0].address, steps: 5, failed: 1,
                    milliseconds: 5000),
                ActivityCount(
                    day: "2026-11-14", bench: "bbbb", device: devices[1].address, steps: 4, failed: 0,
                    milliseconds: 2000),
            ],
            problems: [
                StepProblem(
                    device: devices[0].address, step: "connect", status: "failed",
                    reason: "C0:FE:00:00:00:01 did not answer after 3 tries"),
                StepProblem(
                    device: devices[1].address, step: "connect", status: "failed",
                    reason: "C0:FE:00:00:00:02 did not answer after 5 tries"),
            ])
        let report = FleetReport(
            source: "test", server: false, devices: devices, subjects: subjects, history: history,
            profiles: ["car": Self.car], now: Self.now)
        #expect(report.rows.count == 7)
        #expect(report.battery.map(\.value) == [0, 1, 0, 1, 1, 0, 1, 1, 0, 1])
        #expect(report.batteryUnknown == 1)
        #expect(report.implausible == 1 && report.plausible == 6)
        #expect(report.duplicates.map(\.identity) == ["100.3"])
        #expect(report.duplicates.first?.holders.count == 2)
        #expect(report.driftFields.first { $0.label == "cornering" }?.value == 1)
        #expect(report.findings.first { $0.label == "no-profile" }?.value == 1)
        #expect(report.crossingThisQuarter.map(\.device) == [devices[0].address])
        #expect(report.benches.map(\.bench) == ["aaaa", "bbbb"])
        // Both failures are one reason once the address and numbers are set aside.
        #expect(report.problems.count == 1 && report.problems[0].count == 2)
        #expect(report.problems[0].reason == "ADDRESS did not answer after N tries")
        let filtered = FleetReport(
            source: "test", server: false, devices: devices, subjects: subjects, history: history,
            profiles: ["car": Self.car], filters: [.batteryBelow(40)], now: Self.now)
        #expect(filtered.rows.map(\.device.address) == [devices[0].address, devices[1].address])
        #expect(filtered.fleetSize == 7)
    }

    @Test func aDeviceBelowItsMinimumWithoutReadingsIsBelowThisQuarter() {
        let device = Self.device(1, battery: 12)
        let report = FleetReport(
            source: "test", server: false, devices: [device], subjects: [Self.subject(device)],
            history: FleetHistory(), profiles: ["car": Self.car], now: Self.now)
        #expect(report.projections.isEmpty)
        #expect(report.crossingThisQuarter.map(\.device) == [device.address])
        #expect(report.rows.first?.crossingDays == -1)
        #expect(ReportPage.html(report).contains(">last reading</td>"))
    }

    @Test func hostileTextNeverReachesThePageAsMarkup() {
        var device = Self.device(1)
        device.model = "<img src=x onerror=alert(1)></script><script>alert(2)</script>\u{1B}[2J\u{202E}"
        device.serial = "</script><!--"
        device.profile = "<b>car</b>"
        device.firmware = "<svg onload=alert(3)>"
        let history = FleetHistory(problems: [
            StepProblem(device: device.address, step: "<i>connect</i>", status: "failed", reason: "<script>x</script>")
        ])
        let report = FleetReport(
            source: "<title>", server: false, devices: [device], subjects: [Self.subject(device)], history: history,
            profiles: [:], now: Self.now)
        let page = ReportPage.html(report, nonce: "n")
        for raw in [
            "<img", "<script>alert", "<svg onload", "<b>car", "<i>connect", "</script><!--", "\u{1B}", "\u{202E}",
        ] {
            #expect(!page.contains(raw), "the page holds \(raw) as it is")
        }
        #expect(page.contains("&lt;b&gt;car&lt;/b&gt;"))
        // Exactly the page's own two scripts, and one style sheet.
        #expect(page.components(separatedBy: "<script").count == 3)
        #expect(page.components(separatedBy: "</script>").count == 3)
    }

    @Test func anEmptyInventoryStillHasEveryChart() {
        let report = FleetReport(
            source: "empty", server: false, devices: [], subjects: [], history: FleetHistory(), profiles: [:],
            now: Self.now)
        let page = ReportPage.html(report)
        for chart in [
            "battery", "trend", "projection", "firmware", "calibration-age", "calibration-vector", "drift", "findings",
            "duplicates", "activity", "failures",
        ] {
            #expect(page.contains("data-chart=\"\(chart)\" data-total=\"0\""), "\(chart)")
        }
    }

    @Test func reasonsAreGroupedWithoutAddressesAndNumbersButWithVersions() {
        #expect(FleetReport.reason("C0:FE:00:00:00:01: no answer in 10 s\nmore") == "ADDRESS: no answer in N s")
        #expect(FleetReport.reason("firmware 1.0.6 is older than 1.0.8") == "firmware 1.0.6 is older than 1.0.8")
        #expect(FleetReport.reason("battery 20 % is below 30 %") == "battery N % is below N %")
        #expect(FleetReport.reason("") == "(no reason given)")
    }

    @Test func quartersEndOnTheirFirstDayAfter() {
        #expect(UTC.day(UTC.quarterEnd(after: Self.now)) == "2027-01-01")
        #expect(UTC.day(UTC.quarterEnd(after: Inventory.parseTimestamp("2026-02-03T00:00:00.000Z")!)) == "2026-04-01")
        #expect(UTC.period(of: Self.now, unit: "week").0 == "week of 2026-11-09")
        #expect(UTC.minute(Self.now.addingTimeInterval(41 * 60 + 7)) == "2026-11-15 12:41")
    }
}
