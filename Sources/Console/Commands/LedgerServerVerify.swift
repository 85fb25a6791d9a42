import InventorySync

extension Session {
    /// `--inventory postgresql://… ledger verify [--signers ALLOWED]`: the
    /// server's ledger triggers and functions checked against what the
    /// migrations made; every bench's ledger on the server recomputed from
    /// its stored entries and checked against its stored head and
    /// checkpoints (their signatures too, with `signers`), and the
    /// server's rows of the bench against what its entries say; rewrites
    /// the server refused listed. Exit 0 when all holds, else 2
    /// (docs/ledger.md, "Several benches").
    func verifyServerLedgers(url: String, signers: String? = nil) async throws(ConsoleFailure) {
        let verification: ServerLedger.ServerVerification
        do {
            verification = try ServerLedger.verifyServer(url: url, signers: signers)
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger verify: \(error.message)")
        }
        output.render(ServerLedgerDocument(structure: verification.structure, benches: verification.benches))
        if !verification.ok { note(.devicesFailed) }
    }
}
