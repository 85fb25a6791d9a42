import CPostgres
import Dispatch
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// How a sync tries again (docs/office.md, "Sync at scale"): what
/// PostgreSQL asks to retry (`SyncError.isRetryable`: a connection that
/// failed or broke, a serialization failure, a deadlock, a lock not
/// available, a server shutting down or starting) is tried again after a
/// wait that doubles from `first` up to `longest`, each wait multiplied by
/// a random factor between 0.5 and 1.5 (so that fifty benches cut off by
/// one restart do not all come back in the same instant), for as long as
/// the next attempt would still begin within `budget` of the first
/// failure. Anything else ends the sync at once.
public struct RetryPolicy: Sendable {
    /// How long after the first failure an attempt may still begin.
    public var budget: Duration
    public var first: Duration = .seconds(1)
    public var longest: Duration = .seconds(16)

    public init(budget: Duration = .seconds(120)) { self.budget = budget }

    /// The default budget: 120 s.
    public static let standard = RetryPolicy()

    /// The wait before attempt `attempt` (2 for the first retry) with the
    /// jitter `factor` (0.5…1.5).
    public func wait(before attempt: Int, factor: Double) -> Duration {
        let doubled = first * (1 << min(max(0, attempt - 2), 20))
        return min(doubled, longest) * min(1.5, max(0.5, factor))
    }

    /// A random jitter factor, 0.5…1.5.
    static func jitter() -> Double { Double.random(in: 0.5...1.5) }

    /// Runs `body` (given its attempt number, from 1), trying again as
    /// above; `retrying` is told of each wait before it. A stop requested
    /// (`stop`) ends the wait at once, as the stop's error.
    func run<T>(
        stop: SyncStop?,
        retrying: (_ error: SyncError, _ wait: Duration, _ attempt: Int) -> Void,
        _ body: (_ attempt: Int) async throws(SyncError) -> T
    ) async throws(SyncError) -> T {
        var firstFailure: (error: SyncError, at: ContinuousClock.Instant)?
        var attempt = 1
        while true {
            do {
                return try await body(attempt)
            } catch {
                if let stop, let reason = stop.requested { throw stop.error(reason) }
                // A refused ledger is the server's answer, not a failure to retry.
                if error.ledgerRefusal != nil { throw error }
                let failedAt = firstFailure?.at ?? ContinuousClock.now
                let wait = self.wait(before: attempt + 1, factor: Self.jitter())
                let within = ContinuousClock.now + wait <= failedAt + budget
                guard error.isRetryable, within, !Task.isCancelled else {
                    guard let first = firstFailure?.error, first.message != error.message else { throw error }
                    var combined = SyncError(
                        "\(first.message); then, after \(attempt - 1) more attempt\(attempt == 2 ? "" : "s"): \(error.message)",
                        isConnectionFailure: error.isConnectionFailure, sqlState: error.sqlState)
                    combined.stoppedBy = error.stoppedBy
                    throw combined
                }
                firstFailure = firstFailure ?? (error, failedAt)
                retrying(error, wait, attempt + 1)
                // The failed attempt's memory (a window of 50,000 ledger
                // entries, its rows) is freed but glibc keeps the pages,
                // and the next attempt's allocations fit around them
                // badly: a retried judged bench peaked at 130 MB against
                // 94 MB resumed in a new process (docs/office.md, "Memory
                // after a reconnect"). Given back before trying again.
                beaconbench_release_free_memory()
                // In steps, so that a stop is seen while waiting.
                let until = ContinuousClock.now + wait
                while ContinuousClock.now < until {
                    try stop?.check()
                    do {
                        try await Task.sleep(for: min(.milliseconds(100), until - ContinuousClock.now))
                    } catch {
                        throw SyncError("\(firstFailure?.error.message ?? "sync"); cancelled before trying again")
                    }
                }
                attempt += 1
            }
        }
    }
}

/// A client-side guard on every statement: a server (or a network path)
/// that answers nothing for `limit` seconds — libpq would wait for ever,
/// as TCP keepalives do not fire while the peer's kernel still
/// acknowledges — has the connection's socket shut, so the statement
/// returns as a lost connection, which the sync tries again (the server
/// rolls the statement back when it sees the connection gone). The limit:
/// `BEACONBENCH_SYNC_STATEMENT_TIMEOUT` seconds in the environment, else
/// 300 s; 0 turns the guard off.
enum StatementGuard {
    static let limit: Double = {
        guard let text = ProcessInfo.processInfo.environment["BEACONBENCH_SYNC_STATEMENT_TIMEOUT"],
            let value = Double(text), value >= 0, value.isFinite
        else { return 300 }
        return value
    }()

    /// One statement's watch: fired at most once, never after `finish`.
    final class Token: @unchecked Sendable {
        // `done` and `fired` only under `lock`.
        private let lock = PlainLock()
        private var done = false
        private var fired = false
        let socket: Int32

        init(socket: Int32) { self.socket = socket }

        func fire() {
            lock.withLock {
                guard !done else { return }
                fired = true
                _ = shutdown(socket, Int32(SHUT_RDWR))
            }
        }

        func finish() { lock.withLock { done = true } }

        var hasFired: Bool { lock.withLock { fired } }
    }

    static func arm(_ socket: Int32) -> Token? {
        guard socket >= 0, limit > 0 else { return nil }
        let token = Token(socket: socket)
        DispatchQueue.global().asyncAfter(deadline: .now() + limit) { token.fire() }
        return token
    }

    static func disarm(_ token: Token?) { token?.finish() }

    /// libpq's message, or what the guard did when it fired.
    static func explain(_ token: Token?, _ message: String) -> String {
        guard token?.hasFired == true else { return message }
        let shown = limit == limit.rounded() ? String(Int(limit)) : String(limit)
        return "the server answered nothing for \(shown) s: the statement was given up and the connection closed"
    }
}
