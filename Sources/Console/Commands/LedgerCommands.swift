import Foundation
import Inventory
import Ledger

/// `ledger verify`: the ledger recomputed and the tables checked against it.
public struct LedgerVerifyCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "ledger verify",
        summary: "recompute the ledger's tree and check the inventory's tables are exactly what its entries say",
        example: "ledger verify", onlyReadsTheInventory: true, isFamilyDefault: true,
        detail:
            "Exit 0 when all holds; 2 naming the first entry or row that disagrees (an edit, deletion, reordering or insertion made outside beaconbench).",
        emits: [.ledger, .ledgerBench]
    ).documented(in: "ledger.md")
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.verifyLedger()
    }
}

extension Session {
    func verifyLedger() async throws(ConsoleFailure) {
        if invocation.inventoryIsServer, let url = invocation.inventoryPath {
            return try await verifyServerLedgers(url: url)
        }
        let inventory = try inventory()
        let verification: LedgerVerification
        do {
            guard try await inventory.hasLedger() else {
                throw ConsoleFailure(
                    .badInput,
                    "\(inventory.path) has no ledger yet (an older beaconbench's inventory): any command that writes to it starts one"
                )
            }
            verification = try await inventory.verifyLedger()
        } catch let failure as ConsoleFailure {
            throw failure
        } catch {
            throw ConsoleFailure(.infrastructure, "ledger verify: \(error)")
        }
        output.render(LedgerVerifyResult(verification: verification))
        if !verification.ok { note(.devicesFailed) }
    }
}
