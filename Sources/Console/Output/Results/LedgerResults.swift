import Inventory
import SafeText

// The ledger: `ledger verify`, `ledger checkpoint`, `ledger prove`, `ledger check`.

/// `ledger verify`: the tree recomputed, the tables replayed, and what disagrees.
struct LedgerVerifyResult: SingleResult {
    var verification: LedgerVerification
    /// `--since`: the checkpoint the ledger was proved to have grown from.
    var since: (size: Int, signer: String?)?

    var kind: ResultKind { .ledger }
    var fields: [(String, JSONValue)] {
        [
            ("ok", .bool(verification.ok)), ("size", .int(verification.size)), ("root", .string(verification.root)),
            ("checkpoints", .int(verification.checkpoints)), ("in_flight", .int(verification.inFlight)),
            ("since", since.map { .int($0.size) } ?? .null),
            (
                "findings",
                .array(
                    verification.findings.map { finding in
                        .object(["seq": finding.seq.map { .int($0) } ?? .null, "message": .string(finding.message)])
                    })
            ),
            ("more_findings", .int(verification.truncated)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        let entries = verification.size == 1 ? "1 entry" : "\(verification.size) entries"
        let grown = since.map { "; it only grew since the checkpoint of \($0.size) entries" + ($0.signer.map { " signed by \($0)" } ?? "") } ?? ""
        guard !verification.ok else {
            let checkpoints =
                verification.checkpoints == 0
                ? "no checkpoint yet (beaconbench ledger checkpoint)"
                : "\(verification.checkpoints) checkpoint\(verification.checkpoints == 1 ? "" : "s") hold"
            return [
                .result(
                    "ledger ok: \(entries), root \(verification.root); the tables are what the entries say; \(checkpoints)\(grown)"
                )
            ]
        }
        var lines: [PeopleLine] = verification.findings.map { finding in .result("ledger: \(finding.message)") }
        if verification.truncated > 0 { lines.append(.result("ledger: … and \(verification.truncated) more")) }
        lines.append(
            .message(
                "the ledger and the inventory disagree (\(verification.findings.count + verification.truncated) finding\(verification.findings.count + verification.truncated == 1 ? "" : "s"); the first is where to look): the file was changed outside beaconbench (docs/ledger.md, \"When verify fails\")"
            ))
        return lines
    }
}
