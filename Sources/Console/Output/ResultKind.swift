/// The kinds of JSON lines, each documented field by field in
/// docs/json.md. Every line is `{"kind": …, "v": 1, …fields}`.
public enum ResultKind: String, Sendable, CaseIterable {
    case beacon, scan, selection, step, note, recap, summary
    case watchEvent = "watch_event", watchSummary = "watch_summary"
    case audit, device, deviceRow = "device_row", outcome
    case profile, profileCheck = "profile_check", sync, command
    case trip, event, incident, forgotten, check, report
    case assignment, drift, station, stationSummary = "station_summary"
    case storedValue = "stored_value"
    case recovery
    case ledger, checkpoint, proof, proofCheck = "proof_check"
    case ledgerBench = "ledger_bench", ledgerRewrite = "ledger_rewrite", ledgerServer = "ledger_server"
    case minorBlock = "minor_block", blocksReturned = "blocks_returned"
}

/// The version of the JSON output: raised when a field changes meaning or
/// goes away (new fields and kinds do not raise it).
public let jsonVersion = 1
