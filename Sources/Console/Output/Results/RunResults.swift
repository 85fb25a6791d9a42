import FoundationEssentials
import Inventory
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

// A run of device steps: its steps and notes as they come, then its recap.

/// One step on one device as the run goes: a `step` line in a dry run
/// that would change something, or with `-v`; for people, the dry run's
/// diff, or the step with `-v` (and `info`'s always).
struct StepLine: SingleResult {
    var device: String
    var step: String
    var status: Inventory.StepStatus
    var detail: String?
    var dryRun: Bool
    var verbose: Bool

    var kind: ResultKind { .step }

    /// What a dry run would change: the detail after `dry run: `.
    var diff: String? {
        dryRun ? detail.flatMap { $0.hasPrefix("dry run: ") ? String($0.dropFirst(9)) : nil } : nil
    }

    var fields: [(String, JSONValue)] {
        [
            ("device", .string(device)), ("step", .string(step)), ("status", .string(status.rawValue)),
            ("detail", diff == nil ? .optional(detail) : .null), ("diff", .optional(diff)),
        ]
    }

    /// A line only with a diff or `-v`.
    var values: [any ResultValue] { diff != nil || verbose ? [self] : [] }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        if dryRun, let detail, detail.hasPrefix("dry run: ") { return [.message("\(device): \(detail.dropFirst(9))")] }
        guard verbose || step == "info" else { return [] }
        let shown = terminal.styled(status.rawValue, Self.style(status))
        return [.message("\(device)  \(step)  \(shown)" + (detail.map { "  \($0)" } ?? ""))]
    }

    static func style(_ status: Inventory.StepStatus) -> Terminal.Style {
        switch status {
        case .ok, .changed: .green
        case .unchanged: .dim
        case .skipped: .yellow
        case .failed, .interrupted: .red
        }
    }
}

/// A remark of the run (a retry, a device that went away): a `note` line,
/// or a warning (the run's) or a message (a device's).
struct RunNote: SingleResult {
    /// Empty: the run's as a whole.
    var device: String
    var text: String

    var kind: ResultKind { .note }

    var fields: [(String, JSONValue)] {
        [("device", device.isEmpty ? .null : .string(device)), ("text", .string(text))]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        [device.isEmpty ? .warning(text) : .message("\(device)  \(text)")]
    }
}

/// One device's result in a run: a `recap` line, or a row of the recap.
struct RecapRow: TableRow {
    var recap: DeviceRecap
    var dryRun: Bool

    var kind: ResultKind { .recap }

    var fields: [(String, JSONValue)] {
        [
            ("device", .string(recap.address)), ("result", .string(Self.result(recap.result, dryRun: dryRun))),
            ("ok", .int(recap.ok)), ("changed", .int(recap.changed)), ("would_change", .int(recap.wouldChange)),
            ("unchanged", .int(recap.unchanged)), ("skipped", .int(recap.skipped)), ("failed", .int(recap.failed)),
            ("retries", .int(recap.retries)), ("reason", .optional(recap.reason)), ("dry_run", .bool(dryRun)),
        ]
    }

    /// A device's result as JSON names it: in a dry run nothing changed,
    /// it would have (`would-change`).
    static func result(_ result: DeviceRecap.Result, dryRun: Bool) -> String {
        dryRun && result == .changed ? "would-change" : result.rawValue
    }

    static func changedWord(dryRun: Bool) -> String { dryRun ? "would change" : "changed" }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        let changedWord = changedWord(dryRun: rows.first?.dryRun ?? false)
        return [
            Column("device") { $0.recap.address },
            Column("result") { row, terminal in
                let recap = row.recap
                let result = recap.result == .changed ? changedWord : recap.result.rawValue
                return recap.result == .failed
                    ? terminal.styled(result, .red)
                    : recap.result == .skipped ? terminal.styled(result, .yellow) : result
            },
            Column("steps ok", numeric: true) { String($0.recap.ok) },
            Column("steps \(changedWord)", numeric: true) {
                String($0.dryRun ? $0.recap.wouldChange : $0.recap.changed)
            },
            Column("steps unchanged", numeric: true) { String($0.recap.unchanged) },
            Column("steps skipped", numeric: true) { String($0.recap.skipped) },
            Column("reconnects", numeric: true) { String($0.recap.retries) },
            Column("reason") { row, terminal in
                // The table names the device already.
                var reason = row.recap.reason ?? ""
                if reason.hasPrefix(row.recap.address + ": ") { reason.removeFirst(row.recap.address.count + 2) }
                return row.recap.failed > 0 ? terminal.styled(reason, .red) : reason
            },
        ]
    }
}

/// One recovery a run did without an operator: a `recovery` line, or a
/// line of the recap.
struct RecoveryLine: ResultValue {
    var record: RecoveryRecord

    var kind: ResultKind { .recovery }

    var fields: [(String, JSONValue)] {
        [
            ("action", .string(record.action)), ("status", .string(record.ok ? "ok" : "failed")),
            ("device", .optional(record.device)), ("adapter", .optional(record.adapter)),
            ("detail", .string(record.detail)), ("error", .optional(record.error)),
        ]
    }

    /// `  recover ok: …`, as the recap and the station's recap show it.
    var text: String {
        "  recover \(record.ok ? "ok" : "failed"): \(record.detail)"
            + (record.device.map { " (\($0))" } ?? "") + (record.error.map { ": \($0)" } ?? "")
    }
}

/// The end of a run of device steps: a `summary` line (devices counted by
/// result).
struct RunSummary: ResultValue {
    var recaps: [DeviceRecap]
    var dryRun: Bool

    var kind: ResultKind { .summary }

    func count(_ result: DeviceRecap.Result) -> Int { recaps.filter { $0.result == result }.count }

    var fields: [(String, JSONValue)] {
        let changed = count(.changed)
        return [
            ("devices", .int(recaps.count)), ("ok", .int(count(.ok))), ("changed", .int(dryRun ? 0 : changed)),
            ("would_change", .int(dryRun ? changed : 0)), ("skipped", .int(count(.skipped))),
            ("failed", .int(count(.failed))), ("not_started", .int(count(.notStarted))),
            ("interrupted", .int(count(.interrupted))), ("dry_run", .bool(dryRun)),
        ]
    }

    /// `3 devices: 1 changed, 2 ok, 0 skipped, 0 failed`.
    func text(_ terminal: Terminal) -> String {
        let changedWord = RecapRow.changedWord(dryRun: dryRun)
        var summary = "\(recaps.count) device\(recaps.count == 1 ? "" : "s"): "
        summary += "\(count(.changed)) \(changedWord), \(count(.ok)) ok, \(count(.skipped)) skipped, "
        summary += count(.failed) > 0 ? terminal.styled("\(count(.failed)) failed", .red) : "0 failed"
        if count(.interrupted) > 0 { summary += ", \(count(.interrupted)) interrupted" }
        if count(.notStarted) > 0 { summary += ", \(count(.notStarted)) not started" }
        return summary
    }
}

/// The recap of device commands: for programs `recap` per device, a
/// `recovery` per recovery, then the `summary`; for people a table, the
/// summary line, then the recoveries.
struct RecapDocument: ResultDocument {
    var recaps: [DeviceRecap]
    var recoveries: [RecoveryRecord]
    var dryRun: Bool

    var rows: [RecapRow] { recaps.map { RecapRow(recap: $0, dryRun: dryRun) } }
    var summary: RunSummary { RunSummary(recaps: recaps, dryRun: dryRun) }

    var values: [any ResultValue] {
        var values: [any ResultValue] = rows
        values += recoveries.map(RecoveryLine.init)
        values.append(summary)
        return values
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        var lines: [PeopleLine] = [
            .result(""), .result(terminal.styled(dryRun ? "RECAP (dry run: nothing written)" : "RECAP", .bold)),
            RecapRow.table(rows, terminal), .result(summary.text(terminal)),
        ]
        if !recoveries.isEmpty {
            lines.append(.result("recovered without an operator (\(recoveries.count)):"))
            for record in recoveries.map(RecoveryLine.init) {
                lines.append(.result(record.record.ok ? record.text : terminal.styled(record.text, .red)))
            }
        }
        return lines
    }
}
