import FoundationEssentials
import Inventory
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

// Desired state: `assign`, `drift`, and the install bench (`station`).

/// An assignment recorded (`assign`): an `assignment` line, or
/// `assigned ADDRESS  SUMMARY`.
struct AssignmentLine: SingleResult {
    var assignment: Assignment
    /// The assignment it replaced.
    var replaced: Assignment?

    var kind: ResultKind { .assignment }

    var fields: [(String, JSONValue)] {
        var overrides: [String: JSONValue] = [:]
        for (key, value) in [
            ("cornering", assignment.overrides.cornering), ("braking", assignment.overrides.braking),
            ("acceleration", assignment.overrides.acceleration), ("duration", assignment.overrides.duration),
        ] {
            if let value { overrides[key] = .int(Int(value)) }
        }
        return [
            ("device", .string(assignment.address)), ("profile", .string(assignment.profile)),
            ("major", .optional(assignment.major.map { Int($0) })),
            ("minor_policy", .string(assignment.minorPolicy.rawValue)),
            ("minor", .optional(assignment.minor.map { Int($0) })), ("overrides", .object(overrides)),
            ("assigned_at", .string(assignment.assignedAt)), ("assigned_by", .string(assignment.assignedBy)),
            ("source", .string(assignment.source.rawValue)), ("replaced", .optional(replaced?.summary)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        [.result("assigned \(assignment.address)  \(assignment.summary)")]
    }
}

/// A field where an assigned device drifts: a `drift` line, or a row of
/// the drift table (none when nothing drifts).
struct DriftRow: TableRow {
    var finding: DriftFinding

    var kind: ResultKind { .drift }

    var fields: [(String, JSONValue)] {
        [
            ("device", .string(finding.device)), ("field", .string(finding.field)),
            ("desired", .string(finding.desired)), ("observed", .optional(finding.observed)),
            ("observed_at", .optional(finding.observedAt)),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        [
            Column("device") { $0.finding.device }, Column("field") { $0.finding.field },
            Column("desired") { $0.finding.desired }, Column("observed") { $0.finding.observed ?? "never read" },
            Column("observed at") { $0.finding.observedAt ?? "—" },
        ]
    }

    static func table(_ findings: [DriftFinding]) -> Table<Self> {
        Table(rows: findings.map(Self.init), emptyShowsNothing: true)
    }
}

/// A beacon done at the station: a `station` line, or
/// `✔ C0:FE:00:00:00:01  converged   profile car → 100.3  4.2 s  [3 done: …]`.
struct StationLine: SingleResult {
    var result: StationResult
    var tally: StationTally

    var kind: ResultKind { .station }

    var fields: [(String, JSONValue)] {
        [
            ("device", .string(result.address)), ("verdict", .string(result.verdict.rawValue)),
            ("target", .string(result.target)), ("reason", .optional(result.reason)),
            ("seconds", .number(result.seconds)), ("rssi", .optional(result.rssi)), ("done", .int(tally.done)),
            ("identity", .optional(result.identity)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        let mark: String
        switch result.verdict {
        case .converged, .unchanged: mark = terminal.styled("✔", .green)
        case .skipped: mark = terminal.styled("–", .yellow)
        case .missed: mark = terminal.styled("?", .red)
        case .failed, .takenAway, .interrupted: mark = terminal.styled("✘", .red)
        }
        let verdict = result.verdict.rawValue.padded(to: 11)
        let styledVerdict = result.succeeded ? terminal.styled(verdict, .green) : terminal.styled(verdict, .red)
        let reason = result.reason.map { "  \($0)" } ?? ""
        let identity = result.identity.map { " → \($0)" } ?? ""
        return [
            .result(
                "\(mark) \(result.address)  \(styledVerdict) \(result.target)\(identity)  \(CFormat.string("%.1f", result.seconds)) s\(reason)  [\(tally.text)]"
            )
        ]
    }
}

/// The station's end: a `recovery` line per recovery and the
/// `station_summary`; for people, STATION RECAP on standard error.
struct StationRecap: ResultDocument {
    var results: [StationResult]
    var recoveries: [RecoveryRecord]
    /// How long the station ran.
    var seconds: Double

    var counts: [StationResult.Verdict: Int] {
        var counts: [StationResult.Verdict: Int] = [:]
        for result in results { counts[result.verdict, default: 0] += 1 }
        return counts
    }

    var values: [any ResultValue] {
        var values: [any ResultValue] = recoveries.map(RecoveryLine.init)
        values.append(StationSummary(done: results.count, seconds: seconds, counts: counts))
        return values
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        var tally = StationTally()
        tally.counts = counts
        var lines: [PeopleLine] = [
            .message(""), .message("STATION RECAP (\(Session.seconds(seconds)))"), .message(tally.text),
        ]
        for result in results where !result.succeeded {
            lines.append(.message("  \(result.address)  \(result.verdict.rawValue)  \(result.reason ?? "")"))
        }
        lines += recoveries.map { .message(RecoveryLine(record: $0).text) }
        return lines
    }
}

/// The station's tally when it stops: a `station_summary` line.
struct StationSummary: ResultValue {
    var done: Int
    var seconds: Double
    var counts: [StationResult.Verdict: Int]

    var kind: ResultKind { .stationSummary }

    var fields: [(String, JSONValue)] {
        [("done", .int(done)), ("seconds", .number(seconds))]
            + StationResult.Verdict.allCases.map { verdict -> (String, JSONValue) in
                (verdict.rawValue.replacingEvery("-", with: "_"), .int(counts[verdict, default: 0]))
            }
    }
}
