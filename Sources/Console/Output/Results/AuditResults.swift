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
        let rows = reports.flatMap { Self.rows($0, terminal) } + rewrites.map { Self.row($0, terminal) }
        return Self.title(source, terminal) + [.table(header: Self.header, rows: rows, numeric: [])]
            + [Self.count(reports: reports.count, clean: reports.filter(\.isClean).count, rewrites: rewrites.count)]
    }

    static let header = ["device", "profile", "code", "finding"]

    /// The lines before the table.
    static func title(_ source: AuditCommand.Source, _ terminal: Terminal) -> [PeopleLine] {
        [.result(""), .result(terminal.styled("AUDIT (\(source.rawValue))", .bold))]
    }

    /// A device's rows: `ok`, or a row per finding.
    static func rows(_ report: AuditReport, _ terminal: Terminal) -> [[String]] {
        var rows: [[String]] = []
        if report.isClean {
            rows.append([report.address, report.profile ?? "-", terminal.styled("ok", .green), ""])
        }
        for finding in report.findings {
            rows.append([report.address, report.profile ?? "-", terminal.styled(finding.code, .red), "\(finding)"])
        }
        return rows
    }

    /// A bench ledger rewrite's row.
    static func row(_ rewrite: LedgerRewrite, _ terminal: Terminal) -> [String] {
        [
            "bench " + String(rewrite.bench.prefix(8)), "-", terminal.styled(LedgerRewriteLine.code, .red),
            rewrite.finding + "; made by " + rewrite.who,
        ]
    }

    /// The line after the table.
    static func count(reports: Int, clean: Int, rewrites: Int) -> PeopleLine {
        let rewritten =
            rewrites == 0
            ? "" : "; \(rewrites) bench ledger rewrite\(rewrites == 1 ? "" : "s") refused by the server"
        return .result(
            "\(reports) device\(reports == 1 ? "" : "s"): \(clean) clean, \(reports - clean) with findings\(rewritten)")
    }
}
