import Foundation

// How a test waits. First choice: an event (a signal subscribed to before
// the action, the simulator's `WaitFor`, a line a tool prints): `take`.
// Where a state changes with no event to wait for, `waitUntil` polls it.
// Either way the cap is generous (minutes): it only turns a hang into a
// failure that names what was awaited; it never decides an outcome.

/// A wait that reached its cap: "waited N s for WHAT".
public struct WaitTimedOut: Error, CustomStringConvertible {
    public let what: String
    public let cap: Duration

    public init(_ what: String, cap: Duration) {
        self.what = what
        self.cap = cap
    }

    public var description: String { "waited \(cap.components.seconds) s for \(what)" }
}

/// Waits until `condition` holds, asking it again every `interval`: the
/// poll of last resort, where the state has no event to wait for.
/// - Throws: `WaitTimedOut` naming `what` once `cap` has passed.
public func waitUntil(
    _ what: String, cap: Duration = .seconds(120), every interval: Duration = .milliseconds(20),
    _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + cap
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw WaitTimedOut(what, cap: cap) }
        try await Task.sleep(for: interval)
    }
}

/// The first `count` elements of `stream` (subscribed to before the action
/// that makes them).
/// - Throws: `WaitTimedOut` naming `what`, and what did come, when the
///   stream ends or `cap` passes first.
public func take<S: AsyncSequence & Sendable>(
    _ count: Int, from stream: S, _ what: String, cap: Duration = .seconds(120)
) async throws -> [S.Element] where S.Element: Sendable {
    let items = await collect(stream, count: count, within: cap)
    guard items.count >= count else {
        throw WaitTimedOut("\(what) (\(items.count) of \(count) came: \(items))", cap: cap)
    }
    return Array(items.prefix(count))
}

/// The elements of `stream` up to and including the first for which
/// `stop` is true.
/// - Throws: `WaitTimedOut` naming `what` when the stream ends or `cap`
///   passes first.
public func take<S: AsyncSequence & Sendable>(
    from stream: S, until stop: @escaping @Sendable (S.Element) -> Bool, _ what: String,
    cap: Duration = .seconds(120)
) async throws -> [S.Element] where S.Element: Sendable {
    let items = await collect(stream, until: stop, within: cap)
    guard let last = items.last, stop(last) else {
        throw WaitTimedOut("\(what) (\(items.count) other elements came)", cap: cap)
    }
    return items
}
