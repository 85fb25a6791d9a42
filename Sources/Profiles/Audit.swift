import FoundationEssentials
import SBeaconProtocol
import SafeText

/// What is known of one beacon for an audit, from whichever source: the
/// inventory (offline), a live read, or adverts alone. Unknown fields are
/// nil and are not judged, except where the rule is about knowing them.
public struct AuditSubject: Sendable, Equatable {
    public var address: String
    /// The profile assigned in the inventory, if any.
    public var assignedProfile: String?
    public var battery: UInt8?
    public var firmware: FirmwareVersion?
    /// The Firmware Revision string as read live, when it is not a version.
    public var unreadableFirmware: String?
    public var calibrated: Bool?
    public var calibratedAt: Date?
    public var calibrationVector: Vector?
    /// The config as read back (inventory, live).
    public var config: DrivingBehaviourConfig?
    /// Only the CRC of the config (adverts).
    public var configCRC: UInt16?
    /// When the config was last read back; nil = never.
    public var configReadAt: Date?
    public var lastSeen: Date?
    /// The identity it holds (inventory: as last read; live; adverts).
    public var identity: BeaconIdentity?
    /// The identity it was meant to get (the inventory's reservation).
    public var meantIdentity: BeaconIdentity?
    /// Why, in words: `profile van`, `explicit`, `found`, `server`.
    public var meantIdentitySource: String?
    /// Still in its factory state (adverts say so); nil = not known.
    public var factoryDefault: Bool?
    /// The benches that know it (a server inventory).
    public var benches: [String]?
    /// Values of its stored rows that failed their checks (each a
    /// `storedValue` finding; the field reads as unknown).
    public var storedFindings: [AuditFinding] = []

    public init(address: String) { self.address = address }

    /// Whether it is in service, so that its identity must be unique: a
    /// beacon fresh from the box shares the factory identity with its
    /// box-mates, which is no finding.
    public var isInService: Bool {
        if factoryDefault == true { return false }
        return assignedProfile != nil || meantIdentity != nil || factoryDefault == false
    }
}

/// One thing wrong with a beacon against its profile.
public enum AuditFinding: Sendable, Equatable, Codable, CustomStringConvertible {
    case noProfile
    case unknownProfile(String)
    case batteryLow(percent: Int, minimum: Int)
    case firmwareOld(version: String, minimum: String)
    /// Its Firmware Revision string is not MAJOR.MINOR.PATCH.
    case firmwareUnreadable(revision: String)
    case notCalibrated
    case calibrationTooOld(days: Int, maximum: Int)
    case calibrationImplausible(magnitude: Int)
    case configDiffers(field: String, holds: String, profile: String)
    case configCRCDiffers(holds: UInt16, profile: UInt16)
    case neverReadBack
    case notSeen(days: Int)
    /// It holds another identity than the one meant for it.
    case identityDiffers(holds: String, meant: String)
    /// Another beacon in service holds the same major.minor.
    case duplicateIdentity(identity: String, others: [String])
    /// Its last observed state differs from its desired state (`assign`):
    /// one finding per field, with when it was observed.
    case drift(field: String, desired: String, observed: String?, observedAt: String?)
    /// A value of its row in the inventory or on the server failed its
    /// check (range, type, form): it was read as unknown. `value` is shown
    /// visibly and bounded.
    case storedValue(table: String, row: String, field: String, value: String, reason: String)

    /// A short, stable code for tables, CSV and scripts.
    public var code: String {
        switch self {
        case .noProfile: "no-profile"
        case .unknownProfile: "unknown-profile"
        case .batteryLow: "battery-low"
        case .firmwareOld: "firmware-old"
        case .firmwareUnreadable: "firmware-unreadable"
        case .notCalibrated: "not-calibrated"
        case .calibrationTooOld: "calibration-old"
        case .calibrationImplausible: "calibration-implausible"
        case .configDiffers: "config-differs"
        case .configCRCDiffers: "config-crc-differs"
        case .neverReadBack: "never-read-back"
        case .notSeen: "not-seen"
        case .identityDiffers: "identity-differs"
        case .duplicateIdentity: "duplicate-identity"
        case .drift: "drift"
        case .storedValue: "stored-value"
        }
    }

    public var description: String {
        switch self {
        case .noProfile: "no profile assigned"
        case .unknownProfile(let name): "profile '\(name)' does not exist"
        case .batteryLow(let percent, let minimum): "battery \(percent) % is below \(minimum) %"
        case .firmwareOld(let version, let minimum): "firmware \(version) is older than \(minimum)"
        case .firmwareUnreadable(let revision):
            "firmware revision '\(DeviceInformationText.excerpt(revision))' is not a version (MAJOR.MINOR.PATCH)"
        case .notCalibrated: "not calibrated"
        case .calibrationTooOld(let days, let maximum): "calibrated \(days) days ago (at most \(maximum))"
        case .calibrationImplausible(let magnitude): "calibration vector |g| = \(magnitude) mG is outside 1000 ± 150 mG"
        case .configDiffers(let field, let holds, let profile): "\(field) is \(holds), the profile says \(profile)"
        case .configCRCDiffers(let holds, let profile):
            "advertised config CRC \(CFormat.string("%04x", holds)) is not the profile's \(CFormat.string("%04x", profile))"
        case .neverReadBack: "its config was never read back"
        case .notSeen(let days): "not seen for \(days) days"
        case .identityDiffers(let holds, let meant): "identity is \(holds), it was meant to be \(meant)"
        case .duplicateIdentity(let identity, let others):
            "identity \(identity) is also held by \(others.joined(separator: ", "))"
        case .drift(let field, let desired, let observed, let observedAt):
            observed.map {
                "\(field) is \($0) (read \(observedAt ?? "at an unknown time")), its assignment says \(desired)"
            }
                ?? "\(field) was never read back; its assignment says \(desired)"
        case .storedValue(let table, let row, let field, let value, let reason):
            "stored value: \(table) row \(row), \(field): \(value) \(reason) (read as unknown)"
        }
    }
}

/// The findings for one beacon.
public struct AuditReport: Sendable, Equatable, Codable {
    public var address: String
    public var profile: String?
    public var findings: [AuditFinding]
    public var isClean: Bool { findings.isEmpty }

    public init(address: String, profile: String?, findings: [AuditFinding]) {
        self.address = address
        self.profile = profile
        self.findings = findings
    }
}

public enum Auditor {
    /// How far a calibration vector's magnitude may be from 1 g.
    public static let plausibleGravity = 850.0...1150.0

    /// Audits one beacon against `profile` (by name) or its assigned one.
    public static func audit(
        _ subject: AuditSubject, profiles: [String: Profile], profile named: String? = nil, now: Date = Date(),
        notSeenAfterDays: Int? = nil
    ) -> AuditReport {
        let name = named ?? subject.assignedProfile
        var findings: [AuditFinding] = subject.storedFindings
        if let notSeenAfterDays, let lastSeen = subject.lastSeen, let days = wholeDays(now.timeIntervalSince(lastSeen))
        {
            if days >= notSeenAfterDays { findings.append(.notSeen(days: days)) }
        }
        guard let name else {
            return AuditReport(address: subject.address, profile: nil, findings: findings + [.noProfile])
        }
        guard let profile = profiles[name] else {
            return AuditReport(address: subject.address, profile: name, findings: findings + [.unknownProfile(name)])
        }
        let requirements = profile.requirements
        if let battery = subject.battery, battery < requirements.minimumBatteryPercent {
            findings.append(.batteryLow(percent: Int(battery), minimum: Int(requirements.minimumBatteryPercent)))
        }
        if let firmware = subject.firmware, firmware < requirements.minimumFirmware {
            findings.append(
                .firmwareOld(version: firmware.description, minimum: requirements.minimumFirmware.description))
        } else if subject.firmware == nil, let revision = subject.unreadableFirmware {
            findings.append(.firmwareUnreadable(revision: revision))
        }
        if requirements.calibrationRequired, subject.calibrated == false {
            findings.append(.notCalibrated)
        }
        if subject.calibrated == true {
            if let maximum = requirements.maximumCalibrationAgeDays, let at = subject.calibratedAt,
                let days = wholeDays(now.timeIntervalSince(at))
            {
                if days > maximum { findings.append(.calibrationTooOld(days: days, maximum: maximum)) }
            }
            if let vector = subject.calibrationVector, !plausibleGravity.contains(vector.magnitude) {
                findings.append(.calibrationImplausible(magnitude: Int(vector.magnitude.rounded())))
            }
        }
        if let config = subject.config {
            let want = profile.config
            let fields: [(String, UInt16, UInt16, String)] = [
                ("cornering", config.cornering, want.cornering, " mG"),
                ("braking", config.braking, want.braking, " mG"),
                ("acceleration", config.acceleration, want.acceleration, " mG"),
                ("duration", config.duration, want.duration, " ms"),
            ]
            for (field, holds, wanted, unit) in fields where holds != wanted {
                findings.append(.configDiffers(field: field, holds: "\(holds)\(unit)", profile: "\(wanted)\(unit)"))
            }
            if config.enable != want.enable {
                findings.append(
                    .configDiffers(field: "enabled", holds: flags(config.enable), profile: flags(want.enable)))
            }
        } else if let crc = subject.configCRC {
            if crc != profile.config.crc { findings.append(.configCRCDiffers(holds: crc, profile: profile.config.crc)) }
        }
        if subject.config == nil, subject.configCRC == nil, subject.configReadAt == nil {
            findings.append(.neverReadBack)
        }
        if let finding = identityFinding(subject, profile) { findings.append(finding) }
        return AuditReport(address: subject.address, profile: name, findings: findings)
    }

    /// The identity held against the one meant: the reservation when there
    /// is one, else the profile's major.
    static func identityFinding(_ subject: AuditSubject, _ profile: Profile) -> AuditFinding? {
        guard let holds = subject.identity else { return nil }
        let held = "\(holds.major).\(holds.minor)"
        if let meant = subject.meantIdentity {
            guard meant != holds else { return nil }
            let why = subject.meantIdentitySource.map { " (\($0))" } ?? ""
            return .identityDiffers(holds: held, meant: "\(meant.major).\(meant.minor)\(why)")
        }
        if let rule = profile.identity, rule.major != holds.major {
            return .identityDiffers(holds: held, meant: "major \(rule.major) (profile \(profile.name))")
        }
        return nil
    }

    /// Audits every subject (see `audit`) and reports the identities that
    /// more than one beacon in service holds, on each of them.
    public static func auditFleet(
        _ subjects: [AuditSubject], profiles: [String: Profile], profile named: String? = nil, now: Date = Date(),
        notSeenAfterDays: Int? = nil
    ) -> [AuditReport] {
        var reports = subjects.map {
            audit($0, profiles: profiles, profile: named, now: now, notSeenAfterDays: notSeenAfterDays)
        }
        var holders: [BeaconIdentity: [Int]] = [:]
        for (index, subject) in subjects.enumerated() where subject.isInService {
            if let identity = subject.identity { holders[identity, default: []].append(index) }
        }
        for (identity, indexes) in holders where indexes.count > 1 {
            for index in indexes {
                let others = indexes.filter { $0 != index }.map { other -> String in
                    let subject = subjects[other]
                    guard let benches = subject.benches, !benches.isEmpty else { return subject.address }
                    return "\(subject.address) (bench \(benches.joined(separator: ", ")))"
                }
                reports[index].findings.append(
                    .duplicateIdentity(identity: "\(identity.major).\(identity.minor)", others: others))
            }
        }
        return reports
    }

    /// Whole days in `seconds` (toward zero), or nil when that is no
    /// integer (a time far outside any a stored row may hold).
    public static func wholeDays(_ seconds: TimeInterval) -> Int? {
        Int(exactly: (seconds / 86_400).rounded(.towardZero))
    }

    public static func flags(_ enable: DrivingBehaviourConfig.EnableFlags) -> String {
        var names: [String] = []
        if enable.contains(.detection) { names.append("DB") }
        if enable.contains(.highPassFilter) { names.append("HP") }
        if enable.contains(.lowPassFilter) { names.append("LP") }
        return names.isEmpty ? "none" : names.joined(separator: "+")
    }

    /// An audit subject from adverts alone: battery, status bits, firmware
    /// and the config CRC of the bench summary.
    public static func subject(address: String, summary: BenchSummary, seenAt: Date) -> AuditSubject {
        var subject = AuditSubject(address: address)
        subject.battery = summary.battery
        subject.firmware = summary.firmware
        subject.calibrated = summary.status.contains(.calibrated)
        subject.configCRC = summary.configCRC
        subject.lastSeen = seenAt
        subject.factoryDefault = summary.status.contains(.factoryDefault)
        return subject
    }
}

/// Audit findings as CSV (one row per finding, clean devices as one row
/// with code `ok`; protected as `CSV` says) and JSON (exact, and safe on a
/// terminal).
public enum AuditExport {
    public static func csv(_ reports: [AuditReport]) -> String {
        var rows: [[String]] = []
        for report in reports {
            let findings = report.findings.isEmpty ? [("ok", "")] : report.findings.map { ($0.code, $0.description) }
            for (code, text) in findings { rows.append([report.address, report.profile ?? "", code, text]) }
        }
        return CSV.document(header: ["address", "profile", "code", "finding"], rows: rows)
    }

    public static func json(_ reports: [AuditReport]) throws -> String {
        struct Row: Encodable {
            var address: String
            var profile: String?
            var findings: [Finding]
            struct Finding: Encodable {
                var code: String
                var text: String
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let rows = reports.map { report in
            Row(
                address: report.address, profile: report.profile,
                findings: report.findings.map { Row.Finding(code: $0.code, text: $0.description) })
        }
        return JSONText.safe(String(decoding: try encoder.encode(rows), as: UTF8.self))
    }
}
