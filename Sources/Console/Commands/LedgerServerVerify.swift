import InventorySync

extension Session {
    /// `--inventory postgresql://… ledger verify`: every bench's ledger on
    /// the server recomputed from its stored entries and checked against
    /// its stored head and checkpoints; rewrites the server refused
    /// listed. Exit 0 when every bench's holds, else 2 (docs/ledger.md,
    /// "Several benches").
    func verifyServerLedgers(url: String) async throws(ConsoleFailure) {
        let benches: [BenchLedgerVerification]
        do {
            benches = try ServerLedger.verify(url: url)
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger verify: \(error.message)")
        }
        output.render(ServerLedgerDocument(benches: benches))
        if benches.contains(where: { !$0.ok }) { note(.devicesFailed) }
    }
}
