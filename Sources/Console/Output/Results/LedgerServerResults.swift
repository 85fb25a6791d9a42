import InventorySync
import SafeText

// The benches' ledgers on the shared server: the office's audit and
// `--inventory postgresql://… ledger verify` (docs/ledger.md, "Several benches").

/// A bench ledger rewrite the server refused: a `ledger_rewrite` line (the
/// office's `audit`).
struct LedgerRewriteLine: ResultValue {
    static let code = "ledger-rewritten"
    var rewrite: LedgerRewrite

    var kind: ResultKind { .ledgerRewrite }

    var fields: [(String, JSONValue)] {
        [
            ("bench", .string(rewrite.bench)), ("at_entry", .int(rewrite.atEntry)),
            ("found_at", .string(rewrite.foundAt)), ("server_size", .int(rewrite.serverSize)),
            ("bench_size", .int(rewrite.benchSize)), ("detail", .string(rewrite.detail)),
            ("code", .string(Self.code)), ("finding", .string(rewrite.finding)), ("who", .string(rewrite.who)),
        ]
    }
}

/// The server's ledger triggers and functions, checked: a `ledger_server` line.
struct ServerLedgerLine: ResultValue {
    var findings: [String]

    var kind: ResultKind { .ledgerServer }

    var fields: [(String, JSONValue)] {
        [("ok", .bool(findings.isEmpty)), ("findings", .array(findings.map { .string($0) }))]
    }

    var lines: [PeopleLine] {
        guard !findings.isEmpty else {
            return [.result("the server's ledger triggers and functions are as beaconbench made them")]
        }
        return findings.map { .result("the server's ledger: \($0)") }
    }
}

/// One bench's ledger on the server, checked: a `ledger_bench` line.
struct BenchLedgerLine: ResultValue {
    var verification: BenchLedgerVerification

    var kind: ResultKind { .ledgerBench }

    var fields: [(String, JSONValue)] {
        [
            ("bench", .string(verification.bench)), ("ok", .bool(verification.ok)),
            ("size", .int(verification.size)), ("root", .string(verification.root)),
            ("checkpoints", .int(verification.checkpoints)), ("problem", .optional(verification.problem)),
            ("findings", .array(verification.findings.map { .string($0) })),
            (
                "rewrites",
                .array(
                    verification.rewrites.map {
                        .object([
                            "at_entry": .int($0.atEntry), "found_at": .string($0.foundAt), "detail": .string($0.detail),
                        ])
                    })
            ),
        ]
    }

    /// What people read of it: one line, then one per rewrite.
    var lines: [PeopleLine] {
        let v = verification
        var lines: [PeopleLine] = []
        if let problem = v.problem {
            lines.append(.result("bench \(v.bench): ledger on the server does not hold: \(problem)"))
            for finding in v.findings.dropFirst() { lines.append(.result("bench \(v.bench): \(finding)")) }
        } else {
            let checkpoints = v.checkpoints == 1 ? "1 checkpoint holds" : "\(v.checkpoints) checkpoints hold"
            lines.append(
                .result(
                    "bench \(v.bench): ledger on the server ok: \(v.size) \(v.size == 1 ? "entry" : "entries"), root \(v.root); \(checkpoints)"
                ))
        }
        for rewrite in v.rewrites {
            lines.append(.result("\(rewrite.finding) (refused \(rewrite.foundAt): \(rewrite.detail))"))
        }
        return lines
    }
}

/// `--inventory postgresql://… ledger verify`: a line per bench.
struct ServerLedgerDocument: ResultDocument {
    var structure: [String] = []
    var benches: [BenchLedgerVerification]

    var values: [any ResultValue] {
        [ServerLedgerLine(findings: structure)] + benches.map { BenchLedgerLine(verification: $0) as any ResultValue }
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        var lines = ServerLedgerLine(findings: structure).lines
        lines += benches.flatMap { BenchLedgerLine(verification: $0).lines }
        let failing = benches.filter { !$0.ok }.count
        if benches.isEmpty {
            lines.append(.message("the server holds no bench's ledger yet: sync a bench to it"))
        } else if failing > 0 {
            lines.append(
                .message(
                    "\(failing) of \(benches.count) bench\(benches.count == 1 ? "'s ledger does" : "es' ledgers do") not hold (the first problem of each is named; docs/ledger.md, \"Several benches\")"
                ))
        }
        return lines
    }
}
