import FoundationEssentials
import Profiles
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

// `profiles list|show|check`.

/// A profile: a `profile` line, a row of the profiles table, or every
/// field a line each (`profiles show`).
struct ProfileRow: TableRow {
    var profile: Profile

    var kind: ResultKind { .profile }

    var fields: [(String, JSONValue)] {
        let config = profile.config
        let requirements = profile.requirements
        return [
            ("name", .string(profile.name)), ("description", .string(profile.description)),
            ("cornering", .int(config.cornering)), ("braking", .int(config.braking)),
            ("acceleration", .int(config.acceleration)), ("duration", .int(config.duration)),
            ("enable", .string(Auditor.flags(config.enable))), ("crc", .string(CFormat.string("%04x", config.crc))),
            ("minimum_battery", .int(requirements.minimumBatteryPercent)),
            ("minimum_firmware", .string(requirements.minimumFirmware.description)),
            ("identity_major", .optional(profile.identity?.major)),
            ("identity_minor", .optional(profile.identity?.minor.rawValue)),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        [
            Column("name") { $0.profile.name }, Column("cornering") { "\($0.profile.config.cornering) mG" },
            Column("braking") { "\($0.profile.config.braking) mG" },
            Column("acceleration") { "\($0.profile.config.acceleration) mG" },
            Column("duration") { "\($0.profile.config.duration) ms" },
            Column("enable") { Auditor.flags($0.profile.config.enable) },
            Column("description") { $0.profile.description },
        ]
    }
}

/// One profile in full (`profiles show`): a `profile` line, or a line per field.
struct ProfileDetail: SingleResult {
    var profile: Profile

    var kind: ResultKind { .profile }
    var fields: [(String, JSONValue)] { ProfileRow(profile: profile).fields }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        let config = profile.config
        let requirements = profile.requirements
        var lines = [
            "\(profile.name): \(profile.description)",
            "  cornering     \(config.cornering) mG",
            "  braking       \(config.braking) mG",
            "  acceleration  \(config.acceleration) mG",
            "  duration      \(config.duration) ms",
            "  enable        \(Auditor.flags(config.enable))",
            "  config crc    \(CFormat.string("%04x", config.crc))",
            "  requires      battery ≥ \(requirements.minimumBatteryPercent) %, firmware ≥ \(requirements.minimumFirmware)"
                + (requirements.calibrationRequired ? ", calibrated" : "")
                + (requirements.maximumCalibrationAgeDays.map { " within \($0) days" } ?? ""),
        ]
        if let identity = profile.identity {
            lines.append("  identity      major \(identity.major), minor \(identity.minor.rawValue)")
        }
        return lines.map(PeopleLine.result)
    }
}

/// A profile checked (`profiles check`): a `profile_check` line, or
/// `NAME: ok (crc …)`.
struct ProfileCheck: SingleResult {
    var name: String
    var crc: String

    init(_ profile: Profile) {
        name = profile.name
        crc = CFormat.string("%04x", profile.config.crc)
    }

    var kind: ResultKind { .profileCheck }
    var fields: [(String, JSONValue)] { [("name", .string(name)), ("ok", true), ("crc", .string(crc))] }
    func people(_ terminal: Terminal) -> [PeopleLine] { [.result("\(name): ok (crc \(crc))")] }
}
