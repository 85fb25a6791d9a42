import FoundationEssentials
import Inventory
import InventorySync
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

// The console's own: `help`, `doctor`, `report`, `sync`, stored values.

/// A command of the table (`help --json`): a `command` line. Only what
/// the help shows: the spec's declarations for the console's own code
/// (`emits`, `pulls`, …) stay out.
struct CommandHelpLine: ResultValue {
    var spec: CommandSpec

    var kind: ResultKind { .command }

    var fields: [(String, JSONValue)] {
        [
            ("name", .string(spec.name)), ("synopsis", .string(spec.synopsis)), ("summary", .string(spec.summary)),
            ("example", .string(spec.example)), ("acts_on_devices", .bool(spec.actsOnDevices)),
            ("writes_to_beacons", .bool(spec.mayWriteToBeacons)),
            ("only_reads_inventory", .bool(spec.onlyReadsTheInventory)),
            (
                "options",
                .array(
                    spec.allOptions.map { option in
                        .object([
                            "name": .string(option.name),
                            "value": .optional(option.value == nil ? nil : option.placeholder),
                            "summary": .string(option.summary),
                        ])
                    })
            ),
        ]
    }
}

/// `help [COMMAND]`: a `command` line per command (of the topic: the
/// command, or its family), or the help text.
struct HelpDocument: ResultDocument {
    var topic: String?

    var values: [any ResultValue] {
        let specs = CommandTable.specs
        return (topic.map { topic in specs.filter { $0.name == topic || $0.family == topic } } ?? specs)
            .map(CommandHelpLine.init)
    }

    func people(_ terminal: Terminal) -> [PeopleLine] { Manual.help(topic).map(PeopleLine.result) }
}

/// One check of `doctor`: a `check` line, or a row of its table.
struct DoctorRow: TableRow {
    var check: DoctorCheck

    var kind: ResultKind { .check }

    var fields: [(String, JSONValue)] {
        [
            ("name", .string(check.name)), ("status", .string(check.status.rawValue)),
            ("detail", .string(check.detail)), ("fix", .optional(check.fix)),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        [
            Column("check") { $0.check.name },
            Column("status") { row, terminal in
                let style: Terminal.Style =
                    switch row.check.status {
                    case .ok: .green
                    case .warning: .yellow
                    case .failed: .red
                    }
                return terminal.styled(row.check.status.rawValue, style)
            },
            Column("detail") { $0.check.detail }, Column("fix") { $0.check.fix ?? "" },
        ]
    }
}

/// The fleet report written: a `report` line, or one line saying what is
/// in it and where.
struct ReportWritten: SingleResult {
    var path: String
    var devices: Int
    var fleet: Int
    var bytes: Int
    var crossingThisQuarter: Int
    var withFindings: Int
    var seconds: Double

    var kind: ResultKind { .report }

    var fields: [(String, JSONValue)] {
        [
            ("path", .string(path)), ("devices", .int(devices)), ("fleet", .int(fleet)), ("bytes", .int(bytes)),
            ("crossing_this_quarter", .int(crossingThisQuarter)), ("with_findings", .int(withFindings)),
            ("seconds", .number(seconds)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        [
            .result(
                "report: \(devices) of \(fleet) devices, \(withFindings) with findings,"
                    + " \(crossingThisQuarter) below their battery minimum by the quarter's end"
                    + " → \(path) (\(bytes / 1024) KiB, \(CFormat.string("%.1f", seconds)) s)")
        ]
    }
}

/// A sync: a `sync` line, or what was sent (standard output) and the
/// assignments exchanged (standard error). Stopped by a signal, people
/// get nothing here: the error line that follows says what was sent.
struct SyncResult: SingleResult {
    var bench: String
    var sent: [String: Int]
    var heldBackRuns = 0
    var heldBackDevices = 0
    var exchange = ServerAssignments.Exchange()
    var refused: [RefusedRow] = []
    /// The server's tree of this bench's ledger after the sync (0 and ""
    /// when stopped: see `sent`).
    var ledgerSize = 0
    var ledgerRoot = ""
    var stoppedBy: String?

    var kind: ResultKind { .sync }

    var fields: [(String, JSONValue)] {
        [
            ("bench", .string(bench)), ("sent", .object(sent.mapValues { .int($0) })),
            ("held_back_runs", .int(heldBackRuns)), ("held_back_devices", .int(heldBackDevices)),
            ("assignments_pushed", .int(exchange.pushed)), ("assignments_pulled", .int(exchange.pulled)),
            ("assignments_converged", .int(exchange.converged)),
            ("assignment_conflicts", .array(exchange.conflicts.map { .string($0.description) })),
            ("assignments_not_pushed", .array(exchange.notPushed.map { .string($0) })),
            (
                "refused",
                .array(
                    refused.map {
                        .object([
                            "table": .string($0.table), "key": .string($0.key), "field": .string($0.field),
                            "reason": .string($0.reason), "value": .optional($0.value),
                        ])
                    })
            ),
            ("refused_count", .int(refused.count)), ("stopped_by", .optional(stoppedBy)),
            ("ledger_size", stoppedBy == nil ? .int(ledgerSize) : .null),
            ("ledger_root", stoppedBy == nil ? .string(ledgerRoot) : .null),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        guard stoppedBy == nil else { return [] }
        let counts = InventorySync.tableNames.map { "\($0) \(sent[$0] ?? 0)" }.joined(separator: ", ")
        return [
            .result("synced bench \(bench): sent \(counts)"),
            .message(
                "ledger: sent \(sent["ledger"] ?? 0) entries and \(sent["checkpoints"] ?? 0) checkpoints; the server holds"
                    + " \(ledgerSize) of this bench's entries, root \(ledgerRoot)"),
            .message(
                "assignments: pushed \(exchange.pushed), pulled \(exchange.pulled), converged here first \(exchange.converged)"
                    + ", refused \(exchange.refused.count)"),
        ]
    }
}

/// A stored value that failed its check: a `stored_value` line. People
/// get its error line in both modes (it is not a result).
struct StoredValueLine: SingleResult {
    var finding: StoredFinding

    var kind: ResultKind { .storedValue }

    var fields: [(String, JSONValue)] {
        [
            ("table", .string(finding.table)), ("row", .string(finding.row)), ("field", .string(finding.field)),
            ("value", .string(finding.value)), ("reason", .string(finding.reason)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] { [] }
}
