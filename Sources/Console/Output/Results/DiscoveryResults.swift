import FoundationEssentials
import SBeaconProtocol
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

// Discovery and selection: `scan`, `devices`, `select`.

/// A beacon seen by discovery (`devices`): a `beacon` line, or a row of
/// the table of beacons seen.
struct SeenBeaconRow: TableRow {
    var address: String
    var macEnding: String
    var rssi: Int16?
    /// The iBeacon advert's major and minor.
    var identity: BeaconIdentity?
    /// The bench-summary advert.
    var summary: BenchSummary?
    /// The profile the inventory assigns it.
    var profile: String?
    var selected: Bool

    var kind: ResultKind { .beacon }

    var fields: [(String, JSONValue)] {
        [
            ("address", .string(address)), ("mac_ending", .string(macEnding)), ("rssi", .optional(rssi)),
            ("major", .optional(identity?.major)), ("minor", .optional(identity?.minor)),
            ("battery", .optional(summary?.battery)), ("firmware", .optional(summary?.firmware.description)),
            ("status", summary == nil ? .null : .string(Format.status(summary))),
            ("config_crc", .optional(summary.map { CFormat.string("%04x", $0.configCRC) })),
            ("profile", .optional(profile)), ("selected", .bool(selected)),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        [
            Column("") { $0.selected ? "*" : "" }, Column("address") { $0.address },
            Column("rssi", numeric: true) { $0.rssi.map(String.init) ?? "-" }, Column("ending") { $0.macEnding },
            Column("major.minor") { row in row.identity.map { "\($0.major).\($0.minor)" } ?? "-" },
            Column("battery") { row in row.summary.map { "\($0.battery) %" } ?? "-" },
            Column("firmware") { row in row.summary.map { "\($0.firmware)" } ?? "-" },
            Column("status") { Format.status($0.summary) }, Column("profile") { $0.profile ?? "-" },
        ]
    }

    /// `devices`: the table, and how many on standard error.
    static func list(_ rows: [Self]) -> Table<Self> {
        Table(rows: rows, after: [.message("\(rows.count) SBeacon\(rows.count == 1 ? "" : "s")")])
    }
}

extension SeenBeaconRow {
    init(_ beacon: SeenBeacon, profile: String?, selected: Bool) {
        self.init(
            address: beacon.address, macEnding: beacon.macEnding, rssi: beacon.rssi, identity: beacon.identity,
            summary: beacon.summary, profile: profile, selected: selected)
    }
}

/// The end of a scan (`scan`): a `scan` line, or a message.
struct ScanSummary: SingleResult {
    var seen: Int
    /// Of them, factory-default.
    var fresh: Int
    /// How long the scan was asked to last.
    var seconds: Double
    /// Seconds from the start until the last new beacon was found.
    var lastFoundAfter: Double
    /// The scan was stopped early (Ctrl-C).
    var stoppedEarly: Bool
    /// `--until N`.
    var until: Int?

    var kind: ResultKind { .scan }

    var fields: [(String, JSONValue)] {
        [
            ("seen", .int(seen)), ("new", .int(fresh)), ("seconds", .number(seconds)),
            ("last_found_after", .number(lastFoundAfter)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        [
            .message(
                "scan: \(seen) SBeacon\(seen == 1 ? "" : "s") seen, \(fresh) new"
                    + (stoppedEarly ? " (stopped early)" : "")
                    + (until.map { seen < $0 ? " (fewer than the \($0) awaited)" : "" } ?? ""))
        ]
    }
}

/// The devices chosen (`select`): a `selection` line, or a message.
struct SelectionResult: SingleResult {
    var devices: [String]
    /// The selectors as written.
    var selectors: String

    var kind: ResultKind { .selection }

    var fields: [(String, JSONValue)] {
        [("devices", .array(devices.map(JSONValue.string))), ("selectors", .string(selectors))]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        [.message("selected \(devices.count) device\(devices.count == 1 ? "" : "s") (\(selectors))")]
    }
}
