import Dispatch
import Foundation
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// Identity claims from blocks of minors leased per bench (server schema
/// 9; docs/inventory.md, "Identities"; docs/office.md, "Identity claims
/// under contention"): benches claiming in one major at once never share a
/// minor; blocks are leased, used, returned and leased again; a bench
/// killed holding a block blocks nobody.
@Suite("identity claims from leased blocks", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct IdentityBlocksTests {
    static let port = 54_344

    /// A bench's claims, one after another, as a `sequential` profile's
    /// inventory offers them (one above its highest), on a connection of
    /// its own.
    static func claims(
        _ server: PostgresConnection, bench: String, major: UInt16, count: Int, prefix: String
    ) throws(SyncError) -> [UInt16] {
        var highest: UInt16 = 0
        var minors: [UInt16] = []
        for index in 0..<count {
            let minor = try ServerIdentities.claim(
                on: server, address: prefix + String(format: "%02X:%02X", index >> 8, index & 0xFF), major: major,
                preferred: highest + 1, floor: highest, bench: bench)
            highest = max(highest, minor)
            minors.append(minor)
        }
        return minors
    }

    /// The blocks of `major` as (first minor, bench, state) rows.
    static func blocks(_ server: LocalPostgres, major: Int) async throws -> [[String]] {
        try await server.rows(
            """
            SELECT first_minor, coalesce(bench_id, '-'), CASE WHEN bench_id IS NULL THEN 'free'
                WHEN returned_at IS NOT NULL THEN 'returned' WHEN used_up THEN 'used up' ELSE 'live' END
            FROM minor_blocks WHERE major = \(major) AND bench_id IS NOT NULL ORDER BY first_minor
            """)
    }

    /// Two benches, then six, claiming in one major at the same moment:
    /// every minor handed out once, and the server holds each as handed out.
    @Test func benchesClaimingInOneMajorAtOnceNeverShareAMinor() async throws {
        try await withPostgres(port: Self.port) { server in
            for (major, benches, count) in [(500, 2, 300), (501, 6, 150)] {
                let url = server.url
                // Each connects first, then all start together.
                let ready = DispatchSemaphore(value: 0)
                let go = DispatchSemaphore(value: 0)
                let results = try await withThrowingTaskGroup(of: (Int, [UInt16]).self) { group in
                    for bench in 0..<benches {
                        group.addTask {
                            try await onThreadOfItsOwn { () throws -> (Int, [UInt16]) in
                                let connection = try PostgresConnection(url)
                                try InventorySync.prepareSchema(connection, creating: true)
                                ready.signal()
                                go.wait()
                                return (
                                    bench,
                                    try Self.claims(
                                        connection, bench: "bench-\(bench)", major: UInt16(major), count: count,
                                        prefix: String(format: "C5:%02X:%02X:", major & 0xFF, bench))
                                )
                            }
                        }
                    }
                    await onThreadOfItsOwn {
                        for _ in 0..<benches { ready.wait() }
                        for _ in 0..<benches { go.signal() }
                    }
                    var results: [Int: [UInt16]] = [:]
                    for try await (bench, minors) in group { results[bench] = minors }
                    return results
                }
                let all = results.values.flatMap { $0 }
                #expect(all.count == benches * count)
                #expect(Set(all).count == all.count, "\(benches) benches in major \(major): a minor given twice")
                #expect(!all.contains(0), "minor 0 is never given from a block")
                let held = try await server.rows(
                    "SELECT address, minor FROM identity_claims WHERE major = \(major) ORDER BY address")
                #expect(held.count == all.count)
                var expected: [[String]] = []
                for (bench, minors) in results {
                    for (index, minor) in minors.enumerated() {
                        expected.append([
                            String(format: "C5:%02X:%02X:%02X:%02X", major & 0xFF, bench, index >> 8, index & 0xFF),
                            String(minor),
                        ])
                    }
                }
                #expect(held == expected.sorted { $0[0] < $1[0] }, "the server holds the claims as handed out")
                // Every bench claimed from blocks of its own.
                let owners = try await server.rows(
                    """
                    SELECT count(*) FROM identity_claims c JOIN minor_blocks b ON b.major = c.major
                        AND c.minor BETWEEN b.first_minor AND b.first_minor + b.size - 1
                    WHERE c.major = \(major) AND b.bench_id <> c.bench_id
                    """)
                #expect(owners == [["0"]], "a claim in another bench's block")
            }
        }
    }

    /// One bench leases, uses up and leaves a block live; it is given back
    /// (by hand, then as a sync does after a day idle) and another bench
    /// leases it again, claiming above what was claimed in it.
    @Test func blocksAreLeasedUsedReturnedAndLeasedAgain() async throws {
        try await withPostgres(port: Self.port) { server in
            let url = server.url
            let size = ServerIdentities.blockSize
            let (first, second, returned, idle, stale, third) = try await onThreadOfItsOwn {
                () throws -> ([UInt16], [UInt16], Int, Int, Int, [UInt16]) in
                let connection = try PostgresConnection(url)
                try InventorySync.prepareSchema(connection, creating: true)
                // Block 0 gives 1–63 (minor 0 is not handed out), block 1 the rest.
                let first = try Self.claims(connection, bench: "A", major: 600, count: size + 6, prefix: "C6:00:00:00:")
                let returned = try ServerIdentities.returnBlocks(on: connection, bench: "A").count
                let second = try Self.claims(connection, bench: "B", major: 600, count: 5, prefix: "C6:00:00:01:")
                // Claimed a moment ago: not idle.
                let idle = try ServerIdentities.returnBlocks(on: connection, bench: "B", idleFor: 3_600).count
                // A day and more ago: idle, given back.
                try connection.exec(
                    "UPDATE minor_blocks SET leased_at = '2026-01-01T00:00:00Z' WHERE bench_id = 'B'")
                try connection.exec(
                    "UPDATE identity_claims SET claimed_at = '2026-01-01T00:00:00Z' WHERE bench_id = 'B'")
                let stale = try ServerIdentities.returnBlocks(
                    on: connection, bench: "B", idleFor: ServerIdentities.idleBlockSeconds
                ).count
                let third = try Self.claims(connection, bench: "C", major: 600, count: 2, prefix: "C6:00:00:02:")
                return (first, second, returned, idle, stale, third)
            }
            // A kept minor (not one above the bench's highest) is taken where
            // it is free and in no other bench's live block: not in C's.
            let (inLiveBlock, inFreeBlock) = try await onThreadOfItsOwn { () throws -> (UInt16, UInt16) in
                let connection = try PostgresConnection(url)
                return (
                    try ServerIdentities.claim(
                        on: connection, address: "C6:00:00:03:00:00", major: 600, preferred: UInt16(size + 20),
                        floor: 0, bench: "D"),
                    try ServerIdentities.claim(
                        on: connection, address: "C6:00:00:03:00:01", major: 600, preferred: 1_000, floor: 0,
                        bench: "D")
                )
            }
            #expect(inLiveBlock == UInt16(2 * size), "D leased a block of its own: \(inLiveBlock)")
            #expect(inFreeBlock == 1_000)
            #expect(first == (1...UInt16(size + 6)).map { $0 })
            #expect(returned == 1, "A's live block (its second) is given back; its used-up first stays A's")
            #expect(second == (UInt16(size + 7)...UInt16(size + 11)).map { $0 }, "B leased A's block again")
            #expect(idle == 0)
            #expect(stale == 1)
            #expect(third == [UInt16(size + 12), UInt16(size + 13)], "C leased the same block a third time")
            let blocks = try await Self.blocks(server, major: 600)
            #expect(
                blocks == [["0", "A", "used up"], [String(size), "C", "live"], [String(2 * size), "D", "live"]],
                "\(blocks)")
        }
    }

    /// A sync gives back the bench's blocks idle for a day, not the others.
    @Test func aSyncReturnsTheBenchsIdleBlocks() async throws {
        try await withSyncScene("sync-blocks") { scene in
            let bench = try await LargeInventory(path: scene.directory + "/inventory.sqlite", devices: 2, outcomes: 5)
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0)
            let id = try await bench.inventory.benchID()
            let url = scene.server.url
            try await onThreadOfItsOwn { () throws in
                let connection = try PostgresConnection(url)
                _ = try Self.claims(connection, bench: id, major: 610, count: 3, prefix: "C6:10:00:00:")
                _ = try Self.claims(connection, bench: id, major: 611, count: 3, prefix: "C6:11:00:00:")
                _ = try Self.claims(connection, bench: "other", major: 610, count: 3, prefix: "C6:10:00:01:")
                // The bench's block in 610 idle since January; the rest fresh.
                try connection.exec(
                    "UPDATE minor_blocks SET leased_at = '2026-01-01T00:00:00Z' WHERE major = 610")
                try connection.exec(
                    "UPDATE identity_claims SET claimed_at = '2026-01-01T00:00:00Z' WHERE major = 610")
            }
            await #expect(try scene.sync(bench).waitForExit().status >> 8 == 0)
            #expect(
                try await Self.blocks(scene.server, major: 610) == [["0", id, "returned"], ["64", "other", "live"]])
            #expect(try await Self.blocks(scene.server, major: 611) == [["0", id, "live"]])
        }
    }

    /// A bench process killed while it claims (SIGKILL: no return, no
    /// goodbye) leaves its block leased; the others go on claiming in the
    /// major at once, outside it; given back by hand, it is leased again.
    @Test func aBenchKilledHoldingABlockBlocksNobody() async throws {
        try await withPostgres(port: Self.port) { server in
            let directory = try scratchDirectory("claims-kill")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let url = server.url
            try await onThreadOfItsOwn { () throws in
                try InventorySync.prepareSchema(try PostgresConnection(url), creating: true)
            }
            let worker = try ChildProcess(
                builtProduct("beaconbench-bench"),
                [
                    "office", "claims", "--worker", "--to", server.url, "--bench", "doomed", "--address-prefix",
                    "C7:00:00:", "--major", "700", "--claims", "60000", "--design", "blocks",
                ], standardOutput: directory + "/out", standardError: directory + "/err")
            let claiming = try await SyncScene.waitUntil(
                "the doomed bench's first 20 claims", stopEarly: { !worker.isRunning }
            ) {
                try await server.count("SELECT count(*) FROM identity_claims WHERE bench_id = 'doomed'") >= 20
            }
            try #require(
                claiming,
                "the worker ended: \((try? String(contentsOfFile: directory + "/err", encoding: .utf8)) ?? "")")
            worker.send(SIGKILL)
            _ = await onThreadOfItsOwn { worker.waitForExit() }
            let doomed = try await server.rows(
                """
                SELECT first_minor, size FROM minor_blocks
                WHERE major = 700 AND bench_id = 'doomed' AND returned_at IS NULL AND NOT used_up
                """)
            #expect(doomed.count == 1, "the killed bench holds one live block: \(doomed)")
            let start = Int(doomed.first?.first ?? "") ?? -1
            // Killed between two claims: its block may be full (then the
            // newcomer leases it, finds nothing free and moves on).
            let room = try await server.count(
                """
                SELECT \(ServerIdentities.blockSize) - count(*) - (CASE WHEN \(start) = 0 THEN 1 ELSE 0 END)
                FROM identity_claims WHERE major = 700 AND minor BETWEEN \(start) AND \(start + ServerIdentities.blockSize - 1)
                """)
            let inDoomed = { (minor: UInt16) in Int(minor) >= start && Int(minor) < start + ServerIdentities.blockSize }
            let (others, afterReturn) = try await onThreadOfItsOwn { () throws -> ([UInt16], [UInt16]) in
                let connection = try PostgresConnection(url)
                let others = try Self.claims(connection, bench: "alive", major: 700, count: 200, prefix: "C7:00:01:")
                // The office gives the dead bench's block back.
                try ServerIdentities.returnBlocks(on: connection, bench: "doomed")
                let afterReturn = try Self.claims(
                    connection, bench: "newcomer", major: 700, count: 1, prefix: "C7:00:02:")
                return (others, afterReturn)
            }
            #expect(others.count == 200 && !others.contains(where: inDoomed), "\(others)")
            #expect(
                try await server.rows("SELECT bench_id FROM minor_blocks WHERE major = 700 AND first_minor = \(start)")
                    == [["newcomer"]], "the returned block leased again")
            if room > 0 { #expect(afterReturn.allSatisfy(inDoomed), "\(afterReturn) from the block at \(start)") }
            await #expect(
                try server.count(
                    "SELECT count(*) FROM (SELECT minor FROM identity_claims WHERE major = 700 GROUP BY minor HAVING count(*) > 1) d"
                ) == 0)
        }
    }
}
