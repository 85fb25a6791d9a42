import Inventory

/// A bench's whole sync with the shared server, as `beaconbench sync` runs
/// it: the inventory pushed (`InventorySync.push`, trying again after a
/// connection failure), the server remembered (without a password) as the
/// one that hands out identities, then desired state exchanged both ways
/// (`ServerAssignments.exchange`, docs/office.md). The caller keeps what
/// people see: it says how far the push is (`progress`), that it tries
/// again (`retrying`), and that the push ended (`pushEnded`, once, whether
/// it succeeded or not, before anything else happens), and it renders the
/// outcome or the failure.
public enum BenchSync {
    /// What a sync did.
    public struct Outcome: Sendable, Equatable {
        public var report: InventorySync.Report
        public var exchange: ServerAssignments.Exchange
        /// Server rows refused by the push, then by the exchange.
        public var refused: [RefusedRow] { report.refused + exchange.refused }
    }

    /// Why a sync ended early.
    public enum Failure: Error, Sendable {
        /// Asked to stop (`SyncStop`, a task cancelled: `SIGINT`) for
        /// `reason`, having sent (committed) `sent` rows per table; the
        /// assignments were not exchanged.
        case stopped(reason: String, sent: [String: Int])
        /// The server refused the bench's ledger (its history was
        /// rewritten, or its tree is damaged): nothing of the sync was
        /// applied; a rewrite is recorded on the server for the office.
        case ledgerRefused(ServerLedger.Refusal)
        /// The push failed: the local inventory is unchanged.
        case push(SyncError)
        /// The exchange of assignments failed, after the push succeeded.
        case assignments(SyncError)
    }

    /// Runs the sync. `stop` ends it at the next statement (the one in
    /// flight cancelled); a cancelled task requests `SIGINT` on it.
    public static func run(
        _ inventory: Inventory, to url: String, includeSimulated: Bool, profiles: Set<String>, stop: SyncStop,
        retry: RetryPolicy = .standard, full: Bool = false,
        progress: (_ table: String, _ sent: Int) -> Void = { _, _ in },
        retrying: (_ error: SyncError, _ wait: Duration, _ attempt: Int) -> Void = { _, _, _ in },
        pushEnded: () -> Void = {}
    ) async throws(Failure) -> Outcome {
        let sent = InventorySync.SentRows()
        let pushed: Result<InventorySync.Report, SyncError>
        do {
            pushed = .success(
                try await stoppable(stop) { () async throws(SyncError) in
                    try await InventorySync.push(
                        inventory, to: url, retry: retry, includeSimulated: includeSimulated, full: full, stop: stop,
                        sent: sent, progress: progress, retrying: retrying)
                })
        } catch {
            pushed = .failure(error)
        }
        pushEnded()
        let report: InventorySync.Report
        switch pushed {
        case .success(let value): report = value
        case .failure(let error):
            if let reason = error.stoppedBy { throw .stopped(reason: reason, sent: sent.snapshot) }
            if let refusal = error.ledgerRefusal { throw .ledgerRefused(refusal) }
            throw .push(error)
        }
        // Remembered (without a password) as the server that hands out identities.
        if let remembered = ServerIdentities.rememberable(url) {
            try? await inventory.setSetting("server", remembered)
        }
        // Desired state both ways (docs/office.md).
        let exchange: ServerAssignments.Exchange
        do {
            // Tried again as the push is (a deadlock, a restart…): each
            // attempt is whole, its transactions committed or rolled back.
            exchange = try await stoppable(stop) { () async throws(SyncError) in
                try await retry.run(stop: stop, retrying: retrying) { (_: Int) async throws(SyncError) in
                    try await ServerAssignments.exchange(
                        inventory, url: url, profiles: profiles, full: full, stop: stop)
                }
            }
        } catch {
            if let reason = error.stoppedBy { throw .stopped(reason: reason, sent: sent.snapshot) }
            throw .assignments(error)
        }
        return Outcome(report: report, exchange: exchange)
    }

    /// Runs `body`, a stop requested when the task is cancelled (Ctrl-C).
    static func stoppable<T: Sendable>(
        _ stop: SyncStop, _ body: () async throws(SyncError) -> T
    ) async throws(SyncError) -> T {
        do {
            return try await withTaskCancellationHandler {
                try await body()
            } onCancel: {
                stop.request("SIGINT")
            }
        } catch let error as SyncError {
            throw error
        } catch {
            throw SyncError("\(error)")
        }
    }
}
