import InventorySync
import Profiles
import SafeText

// `audit`: each device judged against its profile.

/// One device's audit: an `audit` line.
struct AuditLine: ResultValue {
    var report: AuditReport
    var source: AuditCommand.Source

    var kind: ResultKind { .audit }

    var fields: [(String, JSONValue)] {
        [
            ("device", .string(report.address)), ("profile", .optional(report.profile)),
            ("clean", .bool(report.isClean)), ("source", .string(source.rawValue)),
            (
                "findings",
                .array(report.findings.map { .object(["code": .string($0.code), "finding": .string($0.description)]) })
            ),
        ]
    }
}

/// An audit: `audit` per device, or a titled table (a row per finding, one
/// `ok` row per clean device) and a count.
struct AuditDocument: ResultDocument {
    var reports: [AuditReport]
    var source: AuditCommand.Source
    /// The office's audit (a server inventory): each bench ledger rewrite recorded.
    var rewrites: [LedgerRewrite] = []

    var values: [any ResultValue] {
        reports.map { AuditLine(report: $0, source: source) } + rewrites.map(LedgerRewriteLine.init)
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        var rows: [[String]] = []
        for report in reports {
            if report.isClean {
                rows.append([report.address, report.profile ?? "-", terminal.styled("ok", .green), ""])
            }
            for finding in report.findings {
                rows.append([report.address, report.profile ?? "-", terminal.styled(finding.code, .red), "\(finding)"])
            }
        }
        for rewrite in rewrites {
            rows.append([
                "bench " + String(rewrite.bench.prefix(8)), "-", terminal.styled(LedgerRewriteLine.code, .red),
                rewrite.finding,
            ])
        }
        let clean = reports.filter(\.isClean).count
        let rewritten =
            rewrites.isEmpty
            ? "" : "; \(rewrites.count) bench ledger rewrite\(rewrites.count == 1 ? "" : "s") refused by the server"
        return [
            .result(""), .result(terminal.styled("AUDIT (\(source.rawValue))", .bold)),
            .table(header: ["device", "profile", "code", "finding"], rows: rows, numeric: []),
            .result(
                "\(reports.count) device\(reports.count == 1 ? "" : "s"): \(clean) clean, \(reports.count - clean) with findings\(rewritten)"
            ),
        ]
    }
}
