import Foundation
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// The office's hand on leased blocks of minors (docs/office.md, "Leaked
/// blocks"): `--inventory postgresql://… identities blocks` and
/// `identities return-blocks --bench BENCH`, through the built binary
/// against a real PostgreSQL, with benches claiming on connections of
/// their own.
@Suite("the office lists and gives back leased blocks", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct ReturnBlocksTests {
    static let port = 54_361

    /// `beaconbench --inventory URL ARGUMENTS…`, in a directory of its own.
    static func office(_ server: LocalPostgres, _ directory: String, _ arguments: [String]) async throws -> ToolOutput {
        try await runTool(
            builtProduct("beaconbench"), ["--inventory", server.url] + arguments,
            environment: [
                "NO_COLOR": "1", "HOME": directory, "XDG_DATA_HOME": directory + "/data",
                "XDG_CONFIG_HOME": directory + "/config",
            ],
            timeout: 300)
    }

    /// Every row of `minor_blocks`, to tell that nothing changed.
    static func allBlocks(_ server: LocalPostgres) async throws -> [[String]] {
        try await server.rows(
            """
            SELECT major, first_minor, size, coalesce(bench_id, '-'), coalesce(leased_at, '-'),
                coalesce(returned_at, '-'), used_up FROM minor_blocks WHERE bench_id IS NOT NULL
            ORDER BY major, first_minor
            """)
    }

    /// The JSON lines of an output, each checked against docs/json.md.
    static func jsonLines(_ output: ToolOutput) throws -> [[String: Any]] {
        let kinds = try JSONShapeTests.documentedKinds()
        return try output.stdout.split(separator: "\n").map { line in
            for problem in JSONShapeTests.problems(String(line), kinds) { Issue.record(Comment(rawValue: problem)) }
            return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        }
    }

    /// A bench leases a block and claims in it; the office lists it, a dry
    /// run and an unknown bench change nothing, the return gives it back;
    /// another bench leases it again and gets none of the minors claimed.
    @Test func aBenchsBlockIsListedReturnedAndLeasedAgainWithoutAClaimedMinor() async throws {
        try await withPostgres(port: Self.port) { server in
            let directory = try scratchDirectory("return-blocks")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let url = server.url
            let size = ServerIdentities.blockSize
            let (retired, busy) = try await onThreadOfItsOwn { () throws -> ([UInt16], [UInt16]) in
                let connection = try PostgresConnection(url)
                try InventorySync.prepareSchema(connection, creating: true)
                return (
                    try IdentityBlocksTests.claims(
                        connection, bench: "retired", major: 800, count: 5, prefix: "C8:00:00:00:"),
                    try IdentityBlocksTests.claims(
                        connection, bench: "busy", major: 800, count: 3, prefix: "C8:00:00:01:")
                )
            }
            #expect(retired == [1, 2, 3, 4, 5] && busy == (UInt16(size)...UInt16(size + 2)).map { $0 })

            // The office lists both benches' live blocks.
            let listed = try await Self.office(server, directory, ["identities", "blocks", "--json"])
            #expect(listed.status == 0, "\(listed.stderr)")
            let blocks = try Self.jsonLines(listed)
            #expect(blocks.map { $0["kind"] as? String } == ["minor_block", "minor_block"], "\(listed.stdout)")
            #expect(
                blocks.map { [$0["bench"] as? String, "\($0["major"] ?? "")", "\($0["first_minor"] ?? "")"] }
                    == [["busy", "800", "\(size)"], ["retired", "800", "0"]], "\(listed.stdout)")
            #expect(blocks.map { $0["claimed"] as? Int } == [3, 5] && blocks.allSatisfy { $0["size"] as? Int == size })
            #expect(blocks.allSatisfy { ($0["leased_at"] as? String)?.hasPrefix("20") == true })
            let people = try await Self.office(server, directory, ["identities", "blocks", "--bench", "retired"])
            #expect(people.status == 0, "\(people.stderr)")
            #expect(people.stdout.contains("retired") && people.stdout.contains("0–\(size - 1)"), "\(people.stdout)")
            #expect(!people.stdout.contains("busy") && people.stderr.contains("1 live block of 1 bench"), "\(people)")

            let before = try await Self.allBlocks(server)
            // A dry run lists what would go back and changes nothing.
            let dry = try await Self.office(
                server, directory, ["identities", "return-blocks", "--bench", "retired", "--dry-run", "--json"])
            #expect(dry.status == 0, "\(dry.stderr)")
            let dryLines = try Self.jsonLines(dry)
            #expect(dryLines.map { $0["kind"] as? String } == ["minor_block", "blocks_returned"], "\(dry.stdout)")
            #expect(dryLines.last?["dry_run"] as? Bool == true && dryLines.last?["returned_at"] is NSNull)
            #expect(dryLines.last?["blocks"] as? Int == 1 && dryLines.last?["claimed"] as? Int == 5)
            #expect(try await Self.allBlocks(server) == before, "a dry run changed minor_blocks")
            let dryPeople = try await Self.office(
                server, directory, ["identities", "return-blocks", "--bench", "retired", "--dry-run"])
            #expect(dryPeople.status == 0 && dryPeople.stdout.contains("nothing was changed"), "\(dryPeople)")
            #expect(try await Self.allBlocks(server) == before, "a dry run changed minor_blocks")

            // In an office batch, `run FILE --dry-run` is a dry run too.
            let batch = directory + "/office.batch"
            try "identities blocks\nidentities return-blocks --bench retired\n".write(
                toFile: batch, atomically: true, encoding: .utf8)
            let batchDry = try await Self.office(server, directory, ["run", batch, "--dry-run"])
            #expect(batchDry.status == 0 && batchDry.stdout.contains("nothing was changed"), "\(batchDry)")
            #expect(try await Self.allBlocks(server) == before, "a batch's dry run changed minor_blocks")

            // A bench the server does not know: named, exit 1, nothing changed.
            let unknown = try await Self.office(
                server, directory, ["identities", "return-blocks", "--bench", "nobody\u{1B}[31m"])
            #expect(unknown.status == 1, "\(unknown)")
            #expect(unknown.stderr.contains("knows no bench nobody"), "\(unknown.stderr)")
            #expect(!unknown.stderr.contains("\u{1B}"), "the bench id as written reached the terminal raw")
            #expect(try await Self.allBlocks(server) == before, "an unknown bench changed minor_blocks")

            // The return: the retired bench's block goes back, busy's stays.
            let returned = try await Self.office(
                server, directory, ["identities", "return-blocks", "--bench", "retired", "--json"])
            #expect(returned.status == 0, "\(returned.stderr)")
            let lines = try Self.jsonLines(returned)
            #expect(lines.map { $0["kind"] as? String } == ["minor_block", "blocks_returned"], "\(returned.stdout)")
            #expect(lines.first?["bench"] as? String == "retired" && lines.first?["first_minor"] as? Int == 0)
            let summary = try #require(lines.last)
            #expect(summary["dry_run"] as? Bool == false && summary["blocks"] as? Int == 1)
            #expect(summary["claimed"] as? Int == 5 && summary["free"] as? Int == size - 5)
            let at = try #require(summary["returned_at"] as? String)
            #expect(
                try await Self.blocks(server, major: 800)
                    == [["0", "retired", "returned", at], ["\(size)", "busy", "live", "-"]])
            // Given back twice: nothing more to return, exit 0.
            let again = try await Self.office(server, directory, ["identities", "return-blocks", "--bench", "retired"])
            #expect(again.status == 0 && again.stdout.contains("holds no live block"), "\(again)")

            // Another bench leases it again: never a minor already claimed.
            let newcomer = try await onThreadOfItsOwn { () throws -> [UInt16] in
                try IdentityBlocksTests.claims(
                    try PostgresConnection(url), bench: "newcomer", major: 800, count: 10, prefix: "C8:00:00:02:")
            }
            #expect(Set(newcomer).isDisjoint(with: retired + busy), "\(newcomer)")
            #expect(newcomer == (6...15).map { UInt16($0) }, "the newcomer leased the returned block: \(newcomer)")
            #expect(
                try await Self.blocks(server, major: 800).map { Array($0.prefix(3)) }
                    == [["0", "newcomer", "live"], ["\(size)", "busy", "live"]])
            let relisted = try Self.jsonLines(
                try await Self.office(server, directory, ["identities", "blocks", "--bench", "newcomer", "--json"]))
            #expect(relisted.first?["claimed"] as? Int == 15, "the block holds both benches' claims")
            #expect(
                try await server.count(
                    "SELECT count(*) FROM (SELECT minor FROM identity_claims WHERE major = 800 GROUP BY minor HAVING count(*) > 1) d"
                ) == 0)

            // A bench id on the server is hostile text: never raw on a terminal, bounded.
            _ = try await server.psql(
                """
                UPDATE minor_blocks SET bench_id = E'evil\\x1b[2J\\u200b' || repeat('x', 5000)
                WHERE bench_id = 'busy'
                """)
            let hostile = try await Self.office(server, directory, ["identities", "blocks"])
            #expect(hostile.status == 0, "\(hostile.stderr)")
            #expect(!hostile.stdout.contains("\u{1B}") && !hostile.stdout.contains("\u{200B}"), "\(hostile.stdout)")
            #expect(hostile.stdout.contains("evil") && hostile.stdout.count < 2_000, "\(hostile.stdout)")
            let hostileJSON = try Self.jsonLines(
                try await Self.office(server, directory, ["identities", "blocks", "--json"]))
            let evil = try #require(hostileJSON.first { ($0["bench"] as? String)?.hasPrefix("evil") == true })
            let scalars = (evil["bench"] as? String)?.unicodeScalars.map(\.value) ?? []
            // 120 characters of it, two escaped as \u{…}, then "…".
            #expect(scalars.count < 200 && scalars.last == 0x2026, "\(evil)")
            #expect(!scalars.contains(0x1B) && !scalars.contains(0x200B), "\(evil)")

            // On a bench's own inventory there are no blocks: refused.
            let local = try await runTool(
                builtProduct("beaconbench"),
                ["--inventory", directory + "/inventory.sqlite", "identities", "blocks"],
                environment: ["NO_COLOR": "1", "HOME": directory])
            #expect(local.status == 1 && local.stderr.contains("works on the shared server"), "\(local)")
        }
    }

    /// The blocks of `major` leased so far as (first minor, bench, state, returned_at).
    static func blocks(_ server: LocalPostgres, major: Int) async throws -> [[String]] {
        try await server.rows(
            """
            SELECT first_minor, bench_id, CASE WHEN returned_at IS NOT NULL THEN 'returned' WHEN used_up
                THEN 'used up' ELSE 'live' END, coalesce(returned_at, '-')
            FROM minor_blocks WHERE major = \(major) AND bench_id IS NOT NULL ORDER BY first_minor
            """)
    }

    /// A connection used by one thread at a time, handed from one to the next.
    struct Held: @unchecked Sendable {
        let connection: PostgresConnection
    }

    /// The office returns a block while its bench is in the middle of a
    /// claim from it (the claim made, not committed): the return does not
    /// wait for the bench, and the bench that leases the block next, trying
    /// that very minor, waits for the claim and takes the next one.
    @Test func aReturnDuringTheBenchsClaimGivesNoMinorTwice() async throws {
        try await withPostgres(port: Self.port) { server in
            let directory = try scratchDirectory("return-blocks-race")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let url = server.url
            let owner = try await onThreadOfItsOwn { () throws -> Held in
                let connection = try PostgresConnection(url)
                try InventorySync.prepareSchema(connection, creating: true)
                _ = try IdentityBlocksTests.claims(
                    connection, bench: "owner", major: 810, count: 3, prefix: "C8:10:00:00:")
                // The fourth claim, made and held open.
                try connection.exec("BEGIN")
                return Held(connection: connection)
            }
            let inFlight = try await onThreadOfItsOwn { () throws -> [String?] in
                try owner.connection.exec(
                    """
                    SELECT claim_outcome, claim_minor::text FROM beaconbench_claim_identity(
                        810, 4, 'C8:10:00:00:00:03', 'owner', '2026-12-03T00:00:00Z', $1::bigint, true)
                    """, [String(ServerIdentities.blockSize)]
                ).first ?? []
            }
            #expect(inFlight == ["claimed", "4"], "\(inFlight)")

            // The office gives the block back meanwhile: it does not wait.
            let returned = try await Self.office(
                server, directory, ["identities", "return-blocks", "--bench", "owner", "--json"])
            #expect(returned.status == 0, "\(returned)")
            #expect(try Self.jsonLines(returned).last?["blocks"] as? Int == 1, "\(returned.stdout)")

            // The next lessee tries minor 4 and waits for the owner's claim.
            let next = Task {
                try await onThreadOfItsOwn { () throws -> [UInt16] in
                    try IdentityBlocksTests.claims(
                        try PostgresConnection(url), bench: "next", major: 810, count: 1, prefix: "C8:10:00:01:")
                }
            }
            let waiting = try await SyncScene.waitUntil("the next bench's claim waiting on a lock", cap: .seconds(120))
            {
                try await server.count(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%beaconbench_claim_identity%'"
                ) >= 1
            }
            #expect(waiting)
            try await onThreadOfItsOwn { () throws in try owner.connection.exec("COMMIT") }
            let taken = try await next.value
            #expect(taken == [5], "the next bench took \(taken), the owner holds 1–4")
            #expect(
                try await server.rows("SELECT minor, bench_id FROM identity_claims WHERE major = 810 ORDER BY minor")
                    == [["1", "owner"], ["2", "owner"], ["3", "owner"], ["4", "owner"], ["5", "next"]])
            #expect(try await Self.blocks(server, major: 810).map { Array($0.prefix(3)) } == [["0", "next", "live"]])
        }
    }
}
