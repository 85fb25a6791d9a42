import Foundation
import Profiles
import SBeaconProtocol
import Testing

@Suite("Audit findings for a table of device states", .timeLimit(.minutes(2)))
struct AuditTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let van = Profile(
        name: "van", description: "van",
        config: DrivingBehaviourConfig(
            cornering: 320, braking: 330, acceleration: 380, duration: 350, enable: [.detection, .lowPassFilter]),
        requirements: .init(
            minimumBatteryPercent: 30, minimumFirmware: FirmwareVersion(major: 1, minor: 0, patch: 8),
            calibrationRequired: true, maximumCalibrationAgeDays: 365),
        identity: nil)

    static func healthy() -> AuditSubject {
        var subject = AuditSubject(address: "C1:00:00:00:00:01")
        subject.assignedProfile = "van"
        subject.battery = 80
        subject.firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)
        subject.calibrated = true
        subject.calibratedAt = now.addingTimeInterval(-30 * 86_400)
        subject.calibrationVector = Vector(x: 20, y: -10, z: 995)
        subject.config = van.config
        subject.configReadAt = now.addingTimeInterval(-86_400)
        subject.lastSeen = now.addingTimeInterval(-3_600)
        return subject
    }

    static let cases: [(String, @Sendable (inout AuditSubject) -> Void, [AuditFinding])] = [
        ("healthy", { _ in }, []),
        ("low battery", { $0.battery = 12 }, [.batteryLow(percent: 12, minimum: 30)]),
        (
            "old firmware", { $0.firmware = FirmwareVersion(major: 1, minor: 0, patch: 6) },
            [.firmwareOld(version: "1.0.6", minimum: "1.0.8")]
        ),
        ("not calibrated", { $0.calibrated = false }, [.notCalibrated]),
        (
            "calibration too old", { $0.calibratedAt = now.addingTimeInterval(-400 * 86_400) },
            [.calibrationTooOld(days: 400, maximum: 365)]
        ),
        (
            "implausible vector", { $0.calibrationVector = Vector(x: 0, y: 0, z: 700) },
            [.calibrationImplausible(magnitude: 700)]
        ),
        (
            "config differs",
            {
                $0.config?.braking = 400; $0.config?.enable = .all
            },
            [
                .configDiffers(field: "braking", holds: "400 mG", profile: "330 mG"),
                .configDiffers(field: "enabled", holds: "DB+HP+LP", profile: "DB+LP"),
            ]
        ),
        (
            "never read back",
            {
                $0.config = nil; $0.configReadAt = nil
            }, [.neverReadBack]
        ),
        ("not seen", { $0.lastSeen = now.addingTimeInterval(-40 * 86_400) }, [.notSeen(days: 40)]),
        ("no profile", { $0.assignedProfile = nil }, [.noProfile]),
        ("unknown profile", { $0.assignedProfile = "hovercraft" }, [.unknownProfile("hovercraft")]),
    ]

    @Test func findingsForEachState() {
        for (name, change, expected) in Self.cases {
            var subject = Self.healthy()
            change(&subject)
            let report = Auditor.audit(subject, profiles: ["van": Self.van], now: Self.now, notSeenAfterDays: 30)
            #expect(report.findings == expected, "\(name)")
        }
    }

    @Test func advertsAloneCompareTheConfigCRC() {
        var summary = BenchSummary(
            macEnding: try! MACEnding(address: "C1:00:00:00:00:01"), battery: 25, status: [.detectionEnabled],
            firmware: FirmwareVersion(major: 1, minor: 0, patch: 8), configCRC: Self.van.config.crc)
        var subject = Auditor.subject(address: "C1:00:00:00:00:01", summary: summary, seenAt: Self.now)
        var report = Auditor.audit(subject, profiles: ["van": Self.van], profile: "van", now: Self.now)
        #expect(report.findings == [.batteryLow(percent: 25, minimum: 30), .notCalibrated])
        summary.configCRC = 0xBEEF
        summary.battery = 90
        summary.status.insert(.calibrated)
        subject = Auditor.subject(address: "C1:00:00:00:00:01", summary: summary, seenAt: Self.now)
        report = Auditor.audit(subject, profiles: ["van": Self.van], profile: "van", now: Self.now)
        #expect(report.findings == [.configCRCDiffers(holds: 0xBEEF, profile: Self.van.config.crc)])
    }

    @Test func exportsAsCSVAndJSON() throws {
        var bad = Self.healthy()
        bad.address = "C1:00:00:00:00:02"
        bad.battery = 5
        let reports = [Self.healthy(), bad].map {
            Auditor.audit($0, profiles: ["van": Self.van], now: Self.now)
        }
        #expect(
            AuditExport.csv(reports)
                == "address,profile,code,finding\r\nC1:00:00:00:00:01,van,ok,\r\n"
                + "C1:00:00:00:00:02,van,battery-low,battery 5 % is below 30 %\r\n")
        let json = try AuditExport.json(reports)
        #expect(json.contains("\"code\" : \"battery-low\""))
    }
}
