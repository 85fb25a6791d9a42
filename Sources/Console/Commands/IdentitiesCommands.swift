import InventorySync
import LocalBus
import SafeText

// Leased blocks of minors on the shared server (docs/office.md, "Identity
// claims under contention", "Leaked blocks"): the office lists them and
// gives back those of a bench killed, retired or never synced again.

/// `identities blocks [--bench BENCH]`: the server's live blocks of minors.
public struct IdentitiesBlocksCommand: ConsoleCommand {
    public var bench: String?
    public init(bench: String? = nil) { self.bench = bench }
    public static let spec = CommandSpec(
        name: "identities blocks",
        summary: "list the shared server's live blocks of minors, per bench (the office; --inventory postgresql://…)",
        example: "identities blocks --bench bench-7",
        options: [.value("--bench", "BENCH", .text, "only this bench's blocks (its id, as `sync` reports it)")],
        onlyReadsTheInventory: true, isFamilyDefault: true,
        detail:
            "A live block is leased to a bench and neither used up nor returned: its free minors are set aside for that bench. Each row: the bench, the major, the block's minors, its size, how many of them are claimed, when it was leased.",
        emits: [.minorBlock]
    ).shapeNotChecked(because: "needs a PostgreSQL server: ReturnBlocksTests checks its `minor_block` lines")
        .documented(
            in: "office.md")
    public init(_ arguments: inout ParsedArguments) {
        bench = arguments.text("--bench")
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.listMinorBlocks(bench: bench)
    }
}

/// `identities return-blocks --bench BENCH`: a bench's live blocks given back.
public struct IdentitiesReturnBlocksCommand: ConsoleCommand {
    public var bench: String
    public static let spec = CommandSpec(
        name: "identities return-blocks",
        summary:
            "give back a bench's live blocks of minors on the shared server (the office; --inventory postgresql://…)",
        example: "identities return-blocks --bench bench-7",
        options: [.value("--bench", "BENCH", .text, "the bench whose blocks go back (its id)", required: true)],
        detail:
            "For a bench killed, retired or never synced again. Sets returned_at on each of its blocks that is neither returned nor used up, in one transaction, and lists them: their free minors can be leased again by any bench, the minors claimed in them stay claimed (safe while the bench claims: docs/office.md, \"Leaked blocks\"). With beaconbench's --dry-run (or run FILE --dry-run) it lists them and changes nothing. A bench the server does not know is exit 1, nothing changed.",
        emits: [.minorBlock, .blocksReturned]
    ).shapeNotChecked(because: "needs a PostgreSQL server: ReturnBlocksTests checks its lines").documented(
        in: "office.md")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        guard let bench = arguments.text("--bench"), !bench.isEmpty else {
            throw arguments.fail(at: 0, "identities return-blocks needs --bench BENCH (usage: \(Self.spec.synopsis))")
        }
        self.bench = bench
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.returnMinorBlocks(bench: bench, dryRun: located.dryRun)
    }
    /// The office gives blocks back on the shared server.
    public var runsAgainstAServer: Bool { true }
}

extension Session {
    /// The server's URL, or a refusal: these commands have nothing to do
    /// on a bench's own inventory.
    private func blocksServer(_ command: String) throws(ConsoleFailure) -> String {
        guard invocation.inventoryIsServer, let url = invocation.inventoryPath else {
            throw ConsoleFailure(
                .badInput,
                "\(command) works on the shared server: give --inventory postgresql://… (a bench's own inventory leases no blocks)"
            )
        }
        return url
    }

    func listMinorBlocks(bench: String?) async throws(ConsoleFailure) {
        let url = try blocksServer("identities blocks")
        let blocks: [LiveMinorBlock]
        do {
            blocks = try await onThreadOfItsOwn { try ServerMinorBlocks.live(url: url, bench: bench) }
        } catch let error as SyncError {
            throw ConsoleFailure(.infrastructure, "identities blocks: \(error.message)")
        } catch {
            throw ConsoleFailure(.infrastructure, "identities blocks: \(error)")
        }
        output.render(MinorBlocksDocument(blocks: blocks))
    }

    func returnMinorBlocks(bench: String, dryRun lineDryRun: Bool) async throws(ConsoleFailure) {
        let url = try blocksServer("identities return-blocks")
        let dryRun = self.dryRun || lineDryRun
        let outcome: ServerMinorBlocks.Return?
        do {
            outcome = try await onThreadOfItsOwn {
                try ServerMinorBlocks.giveBack(url: url, bench: bench, dryRun: dryRun)
            }
        } catch let error as SyncError {
            throw ConsoleFailure(.infrastructure, "identities return-blocks: \(error.message) (nothing was returned)")
        } catch {
            throw ConsoleFailure(.infrastructure, "identities return-blocks: \(error) (nothing was returned)")
        }
        guard let outcome else {
            throw ConsoleFailure(
                .badInput,
                "identities return-blocks: the server knows no bench \(Visible.text(bench, limit: 120)) (nothing was changed; 'identities blocks' lists the benches holding blocks)"
            )
        }
        output.render(BlocksReturnedDocument(outcome: outcome))
    }
}
