import InventorySync
import SafeText

// Leased blocks of minors on the shared server: `--inventory postgresql://…
// identities blocks` and `identities return-blocks` (docs/office.md,
// "Leaked blocks"). Text from the server arrives made safe to show
// (`ServerMinorBlocks`); table cells are bounded and made visible again.

/// A live block of minors: a `minor_block` line, or a row of the table.
struct MinorBlockLine: TableRow {
    var block: LiveMinorBlock

    var kind: ResultKind { .minorBlock }

    var fields: [(String, JSONValue)] {
        [
            ("bench", .string(block.bench)), ("major", .int(block.major)), ("first_minor", .int(block.firstMinor)),
            ("size", .int(block.size)), ("claimed", .int(block.claimed)), ("leased_at", .optional(block.leasedAt)),
        ]
    }

    static func columns(for rows: [Self]) -> [Column<Self>] {
        [
            Column("bench") { $0.block.bench }, Column("major", numeric: true) { String($0.block.major) },
            Column("minors") { "\($0.block.firstMinor)–\($0.block.firstMinor + $0.block.size - 1)" },
            Column("size", numeric: true) { String($0.block.size) },
            Column("claimed", numeric: true) { String($0.block.claimed) },
            Column("leased at") { $0.block.leasedAt ?? "-" },
        ]
    }
}

/// What `identities return-blocks` did (or would do): a `blocks_returned` line.
struct BlocksReturnedLine: ResultValue {
    var outcome: ServerMinorBlocks.Return

    var kind: ResultKind { .blocksReturned }

    var fields: [(String, JSONValue)] {
        [
            ("bench", .string(outcome.bench)), ("blocks", .int(outcome.blocks.count)),
            ("claimed", .int(outcome.blocks.reduce(0) { $0 + $1.claimed })), ("free", .int(free)),
            ("dry_run", .bool(outcome.returnedAt == nil)), ("returned_at", .optional(outcome.returnedAt)),
        ]
    }

    /// Minors of the blocks no device claimed: leasable again once returned.
    var free: Int { outcome.blocks.reduce(0) { $0 + Int($1.size) - $1.claimed } }

    var sentence: String {
        let bench = Visible.text(outcome.bench, limit: 120)
        let count = outcome.blocks.count
        let blocks = count == 1 ? "1 live block" : "\(count) live blocks"
        if count == 0 { return "bench \(bench) holds no live block: nothing to return" }
        let claimed = outcome.blocks.reduce(0) { $0 + $1.claimed }
        let minors = "\(claimed) of \(count == 1 ? "its" : "their") \(claimed + free) minors"
        if outcome.returnedAt == nil {
            return
                "dry run: bench \(bench)'s \(blocks) would be returned (\(minors) claimed, \(free) free); nothing was changed"
        }
        return
            "bench \(bench): \(blocks) returned (\(minors) are claimed and stay so; the \(free) free can be leased again by any bench)"
    }
}

/// `identities blocks`: a line per live block, then a count.
struct MinorBlocksDocument: ResultDocument {
    var blocks: [LiveMinorBlock]

    var values: [any ResultValue] { blocks.map(MinorBlockLine.init) }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        guard !blocks.isEmpty else { return [.message("no live block of minors on the server")] }
        let benches = Set(blocks.map(\.bench)).count
        return [
            MinorBlockLine.table(blocks.map(MinorBlockLine.init), terminal),
            .message(
                "\(blocks.count) live block\(blocks.count == 1 ? "" : "s") of \(benches) bench\(benches == 1 ? "" : "es")"
            ),
        ]
    }
}

/// `identities return-blocks`: the blocks returned (or that would be),
/// then what was done.
struct BlocksReturnedDocument: ResultDocument {
    var outcome: ServerMinorBlocks.Return

    var values: [any ResultValue] { outcome.blocks.map(MinorBlockLine.init) + [BlocksReturnedLine(outcome: outcome)] }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        (outcome.blocks.isEmpty ? [] : [MinorBlockLine.table(outcome.blocks.map(MinorBlockLine.init), terminal)])
            + [.result(BlocksReturnedLine(outcome: outcome).sentence)]
    }
}
