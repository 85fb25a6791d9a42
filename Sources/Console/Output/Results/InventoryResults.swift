import FoundationEssentials
import Inventory
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

// The inventory: its devices, their outcomes, `inventory export`, `forget`.

/// What the inventory knows of a device: a `device` line, or a row of the
/// device table (with a column of benches when a record comes from a
/// server inventory).
struct DeviceLine: TableRow {
    var record: DeviceRecord

    var kind: ResultKind { .device }

    var fields: [(String, JSONValue)] {
        [
            ("address", .string(record.address)), ("mac_ending", .string(record.macEnding)),
            ("last_seen", .string(Format.timestamp(record.seenAt))), ("major", .optional(record.identity?.major)),
            ("minor", .optional(record.identity?.minor)), ("model", .optional(record.model)),
            ("serial", .optional(record.serial)), ("hardware_revision", .optional(record.hardwareRevision)),
            ("firmware", .optional(record.firmware?.description)), ("battery", .optional(record.battery)),
            ("calibrated", record.calibration.map { .bool($0.calibrated) } ?? .null),
            ("calibrated_at", .optional(record.calibratedAt.map(Format.timestamp))),
            ("profile", .optional(record.profile)),
            (
                "config",
                record.config.map { config in
                    .object([
                        "cornering": .int(config.cornering), "braking": .int(config.braking),
                        "acceleration": .int(config.acceleration), "duration": .int(config.duration),
                        "enable": .int(config.enable.rawValue),
                    ])
                } ?? .null
            ),
            ("benches", record.benches.map { .array($0.map(JSONValue.string)) } ?? .null),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        let columns: [Column<Self>] = [
            Column("address") { $0.record.address }, Column("ending") { $0.record.macEnding },
            Column("major.minor") { row in row.record.identity.map { "\($0.major).\($0.minor)" } ?? "-" },
            Column("firmware") { $0.record.firmware?.description ?? "-" },
            Column("battery") { row in row.record.battery.map { "\($0) %" } ?? "-" },
            Column("calibrated") { row in row.record.calibration.map { $0.calibrated ? "yes" : "no" } ?? "-" },
            Column("profile") { $0.record.profile ?? "-" }, Column("last seen") { Format.timestamp($0.record.seenAt) },
        ]
        guard rows.contains(where: { $0.record.benches != nil }) else { return columns }
        return columns + [
            Column("benches") { ($0.record.benches ?? []).map(Format.shortBench).joined(separator: " ") }
        ]
    }

    /// Every field, a line each, for people (`inventory show`, `info`).
    var detail: [String] {
        var lines = [
            "address      \(record.address) (\(record.macEnding))",
            "identity     \(record.identity.map { "major \($0.major), minor \($0.minor)" } ?? "-")",
            "model        \(record.model ?? "-") serial \(record.serial ?? "-") hardware \(record.hardwareRevision ?? "-")",
            "firmware     \(record.firmware?.description ?? "-")",
            "battery      \(record.battery.map { "\($0) %" } ?? "-")",
        ]
        if let calibration = record.calibration {
            let vector = calibration.vector
            lines.append(
                "calibration  \(calibration.calibrated ? "yes" : "no") (\(vector.x), \(vector.y), \(vector.z) mG)"
                    + (record.calibratedAt.map { " at \(Format.timestamp($0))" } ?? ""))
        }
        lines.append("profile      \(record.profile ?? "-")")
        lines.append("config       \(record.config?.description ?? "-")")
        lines.append("last seen    \(Format.timestamp(record.seenAt))")
        if let benches = record.benches {
            lines.append("benches      \(benches.joined(separator: ", ")) (latest first)")
        }
        return lines
    }

    /// `inventory list`: the table, and how many where on standard error.
    static func list(_ records: [DeviceRecord], in location: String) -> Table<Self> {
        Table(
            rows: records.map(DeviceLine.init),
            after: [.message("\(records.count) device\(records.count == 1 ? "" : "s") in \(location)")])
    }
}

/// A device in detail: a `device` line, or its fields a line each and a
/// blank line (what `info` read); `inventory show` adds its outcomes.
struct DeviceDetail: ResultDocument {
    var device: DeviceLine
    /// `inventory show`: its latest step outcomes (a table, even empty).
    var outcomes: [OutcomeRow]?

    init(_ record: DeviceRecord, outcomes: [OutcomeRecord]? = nil) {
        device = DeviceLine(record: record)
        self.outcomes = outcomes?.map(OutcomeRow.init)
    }

    var values: [any ResultValue] { [device] + (outcomes ?? []).map { $0 as any ResultValue } }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        device.detail.map(PeopleLine.result) + [.result("")]
            + (outcomes.map { [OutcomeRow.table($0, terminal)] } ?? [])
    }
}

/// One step's outcome as recorded: an `outcome` line, or a row of the
/// outcome table (with the bench in front when the outcomes come from a
/// server inventory, several benches' histories).
struct OutcomeRow: TableRow {
    var outcome: OutcomeRecord

    var kind: ResultKind { .outcome }

    var fields: [(String, JSONValue)] {
        [
            ("id", .int(outcome.id)), ("run", .int(outcome.run)), ("device", .optional(outcome.device)),
            ("step", .string(outcome.step)), ("status", .string(outcome.status)),
            ("detail", .optional(outcome.detail)), ("error", .optional(outcome.error)),
            ("started_at", .string(outcome.startedAt)), ("duration_ms", .optional(outcome.durationMilliseconds)),
            ("bench", .optional(outcome.bench)),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        let columns: [Column<Self>] = [
            Column("started (UTC)") {
                String($0.outcome.startedAt.prefix(19)).replacingEvery("T", with: " ")
            },
            Column("run") { String($0.outcome.run) }, Column("device") { $0.outcome.device ?? "-" },
            Column("step") { $0.outcome.step }, Column("status") { $0.outcome.status },
            Column("ms") { $0.outcome.durationMilliseconds.map(String.init) ?? "" },
            Column("detail") { $0.outcome.error ?? $0.outcome.detail ?? "" },
        ]
        guard rows.contains(where: { $0.outcome.bench != nil }) else { return columns }
        return [Column("bench") { Format.shortBench($0.outcome.bench ?? "-") }] + columns
    }
}

/// A row of `inventory export`: a `device_row` line, every column as the
/// schema names it (always JSON: the export's own format).
struct DeviceExportRow: ResultValue {
    var columns: [String]
    var row: [SQLiteValue]

    var kind: ResultKind { .deviceRow }

    var fields: [(String, JSONValue)] {
        zip(columns, row).map { name, value in
            let field: JSONValue =
                switch value {
                case .null: .null
                case .integer(let number): .integer(Int(number))
                case .real(let number): .number(number)
                case .text, .blob: .optional(value.textForm)
                }
            return (name, field)
        }
    }
}

/// A device forgotten (`inventory forget --yes`): a `forgotten` line, or
/// `forgot ADDRESS`.
struct ForgottenDevice: SingleResult {
    var device: String

    var kind: ResultKind { .forgotten }
    var fields: [(String, JSONValue)] { [("device", .string(device))] }
    func people(_ terminal: Terminal) -> [PeopleLine] { [.result("forgot \(device)")] }
}
