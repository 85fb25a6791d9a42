import Inventory
import Ledger
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
                : verification.checkpoints == 1 ? "its checkpoint holds" : "its \(verification.checkpoints) checkpoints hold"
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

/// `ledger checkpoint`: the signed checkpoint kept (and written).
struct CheckpointResult: SingleResult {
    var size: Int
    var root: String
    var origin: String
    var signer: [String]
    /// False when a checkpoint of this size was kept already (it is given again).
    var new: Bool
    var out: String?
    var note: String

    var kind: ResultKind { .checkpoint }
    var fields: [(String, JSONValue)] {
        [
            ("size", .int(size)), ("root", .string(root)), ("origin", .string(origin)),
            ("signers", .array(signer.map(JSONValue.string))), ("new", .bool(new)), ("out", .optional(out)),
            ("note", .string(note)),
        ]
    }
    func people(_ terminal: Terminal) -> [PeopleLine] {
        [
            .result(
                "checkpoint of \(size) entr\(size == 1 ? "y" : "ies"), root \(root), signed by \(signer.joined(separator: ", "))"
                    + (new ? "" : " (kept already)") + (out.map { "; written to \($0)" } ?? "; kept in the inventory"))
        ]
    }
}

/// `ledger prove`: the proof file written.
struct ProofWritten: SingleResult {
    var device: String
    var entries: Int
    var size: Int
    var signers: [String]
    var out: String
    var bytes: Int

    var kind: ResultKind { .proof }
    var fields: [(String, JSONValue)] {
        [
            ("device", .string(device)), ("entries", .int(entries)), ("size", .int(size)),
            ("signers", .array(signers.map(JSONValue.string))), ("out", .string(out)), ("bytes", .int(bytes)),
        ]
    }
    func people(_ terminal: Terminal) -> [PeopleLine] {
        [
            .result(
                "wrote \(out): \(entries) entr\(entries == 1 ? "y" : "ies") about \(device), proved in the ledger of \(size) entries signed by \(signers.joined(separator: ", ")) (\(bytes) bytes)"
            )
        ]
    }
}

/// `ledger check`: what a proof file showed, or why it failed.
struct ProofCheckResult: SingleResult {
    var file: String
    var report: ProofReport?
    var failure: String?

    var kind: ResultKind { .proofCheck }
    var fields: [(String, JSONValue)] {
        [
            ("ok", .bool(failure == nil)), ("file", .string(file)), ("device", .optional(report?.device)),
            ("size", report.map { .int($0.checkpoint.size) } ?? .null),
            ("origin", .optional(report?.checkpoint.origin)), ("signer", .optional(report?.signer)),
            (
                "entries",
                .array(
                    (report?.entries ?? []).map { entry in
                        .object([
                            "index": .int(entry.index), "at": .optional(entry.at), "event": .string(entry.event),
                            "table": .string(entry.table), "op": .string(entry.op), "key": .string(entry.key),
                        ])
                    })
            ),
            ("reason", .optional(failure)),
        ]
    }
    func people(_ terminal: Terminal) -> [PeopleLine] {
        guard let report, failure == nil else {
            return [.result("\(file): does not hold: \(failure ?? "")")]
        }
        var lines: [PeopleLine] = [
            .result(
                "\(file): holds: \(report.entries.count) entr\(report.entries.count == 1 ? "y" : "ies") about \(report.device), each in the ledger \(report.checkpoint.origin) of \(report.checkpoint.size) entries signed by \(report.signer)"
            )
        ]
        lines.append(
            .table(
                header: ["entry", "at", "event", "table", "op", "key"],
                rows: report.entries.map { [String($0.index), $0.at ?? "-", $0.event, $0.table, $0.op, $0.key] },
                numeric: [0]))
        return lines
    }
}
