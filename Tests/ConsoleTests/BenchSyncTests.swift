import Foundation
import Inventory
import InventorySync
import Synchronization
import Testing

/// `BenchSync.run` without a server: how it ends when it is stopped or the
/// push fails, what it tells its caller on the way (each push ends once),
/// and that it remembers no server it did not sync with. Its successes and
/// the assignments half need PostgreSQL: SyncTests, SyncPeerTests.
@Suite("BenchSync: a sync's failures, typed", .timeLimit(.minutes(2)))
struct BenchSyncTests {
    /// What the callbacks saw.
    final class Calls: Sendable {
        let pushEnded = Mutex(0)
        let retries = Mutex<[Int]>([])
        let progress = Mutex(0)
    }

    static func withInventory(_ body: (Inventory) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("benchsync-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await body(try Inventory(path: directory.appendingPathComponent("inventory.sqlite").path))
    }

    static func run(
        _ inventory: Inventory, to url: String, stop: SyncStop, calls: Calls, stopOnRetry: Bool = false,
        retry: RetryPolicy = .standard
    ) async -> Result<BenchSync.Outcome, BenchSync.Failure> {
        do {
            return .success(
                try await BenchSync.run(
                    inventory, to: url, includeSimulated: false, profiles: [], stop: stop, retry: retry,
                    progress: { _, _ in calls.progress.withLock { $0 += 1 } },
                    retrying: { _, _, attempt in
                        calls.retries.withLock { $0.append(attempt) }
                        if stopOnRetry { stop.request("SIGINT") }
                    },
                    pushEnded: { calls.pushEnded.withLock { $0 += 1 } }))
        } catch {
            return .failure(error)
        }
    }

    @Test func aStopBeforeTheSyncEndsItStoppedHavingSentNothing() async throws {
        try await Self.withInventory { inventory in
            let stop = SyncStop()
            stop.request("SIGTERM")
            let calls = Calls()
            let result = await Self.run(inventory, to: "postgresql://127.0.0.1:1/fleet", stop: stop, calls: calls)
            guard case .failure(.stopped(let reason, let sent)) = result else {
                Issue.record("stopped before it began, the sync ended \(result)")
                return
            }
            #expect(reason == "SIGTERM")
            #expect(sent.values.reduce(0, +) == 0, "sent nothing: \(sent)")
            #expect(calls.pushEnded.withLock { $0 } == 1)
            #expect(calls.progress.withLock { $0 } == 0)
            let server = try await inventory.setting("server")
            #expect(server == nil, "no server remembered")
        }
    }

    @Test func aStopWhileWaitingToTryAgainEndsItStopped() async throws {
        try await Self.withInventory { inventory in
            let stop = SyncStop()
            let calls = Calls()
            // Nothing listens on port 1: a connection failure, worth trying again.
            let result = await Self.run(
                inventory, to: "postgresql://127.0.0.1:1/fleet", stop: stop, calls: calls, stopOnRetry: true)
            guard case .failure(.stopped(let reason, _)) = result else {
                Issue.record("stopped while waiting, the sync ended \(result)")
                return
            }
            #expect(reason == "SIGINT")
            #expect(calls.retries.withLock { $0 } == [2])
            #expect(calls.pushEnded.withLock { $0 } == 1)
            let server = try await inventory.setting("server")
            #expect(server == nil)
        }
    }

    @Test func aPushThatFailsIsAPushFailureAndRemembersNoServer() async throws {
        try await Self.withInventory { inventory in
            let calls = Calls()
            // libpq refuses the string before connecting: tried again for
            // the budget, then given up. The budget is 60 s: the waits
            // (0.5–1.5 s, then 1–3 s) fit twice in 20 s on a quiet machine,
            // but in the parallel tier-1 run beside a loaded machine an
            // attempt's tasks waited their turn long enough for a 20 s
            // budget to see one retry (three runs at load 20–100).
            let result = await Self.run(
                inventory, to: "nonsense_option=1", stop: SyncStop(), calls: calls,
                retry: RetryPolicy(budget: .seconds(60)))
            guard case .failure(.push(let error)) = result else {
                Issue.record("a push that cannot connect ended \(result)")
                return
            }
            #expect(error.message.hasPrefix("cannot connect to the server: "), "\(error.message)")
            #expect(error.stoppedBy == nil)
            let retries = calls.retries.withLock { $0 }
            #expect(retries.count >= 2 && retries == Array(2..<(2 + retries.count)), "\(retries)")
            #expect(calls.pushEnded.withLock { $0 } == 1)
            let server = try await inventory.setting("server")
            #expect(server == nil)
        }
    }
}
