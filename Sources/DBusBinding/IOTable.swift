/// libdbus' watches and timeouts for one connection, kept for the event
/// loop's `poll`. Touched only on the connection's thread: libdbus calls the
/// functions below from inside calls the loop makes.
final class IOTable {
    private(set) var watches: [OpaquePointer] = []
    private var timeouts: [(timeout: OpaquePointer, deadline: UInt64?)] = []

    static func from(_ data: UnsafeMutableRawPointer?) -> IOTable {
        Unmanaged<IOTable>.fromOpaque(data!).takeUnretainedValue()
    }

    /// Registers the table with libdbus (`LibDBus.connectionSetWatchFunctions`,
    /// `connectionSetTimeoutFunctions`). The table must outlive the
    /// connection.
    func install(on connection: OpaquePointer) -> Bool {
        let data = Unmanaged.passUnretained(self).toOpaque()
        let watchesSet = LibDBus.connectionSetWatchFunctions(
            connection,
            add: { watch, data in
                IOTable.from(data).watches.append(watch!)
                return 1
            },
            remove: { watch, data in
                IOTable.from(data).watches.removeAll { $0 == watch }
            },
            toggled: { _, _ in
                // Enabled flags are read afresh before every poll.
            },
            data: data)
        let timeoutsSet = LibDBus.connectionSetTimeoutFunctions(
            connection,
            add: { timeout, data in
                IOTable.from(data).timeouts.append((timeout!, IOTable.deadline(of: timeout!)))
                return 1
            },
            remove: { timeout, data in
                IOTable.from(data).timeouts.removeAll { $0.timeout == timeout }
            },
            toggled: { timeout, data in
                IOTable.from(data).rearm(timeout!)
            },
            data: data)
        return watchesSet && timeoutsSet
    }

    private static func deadline(of timeout: OpaquePointer) -> UInt64? {
        guard LibDBus.timeoutGetEnabled(timeout) else { return nil }
        return monotonicNanoseconds() + UInt64(max(0, LibDBus.timeoutGetInterval(timeout))) * 1_000_000
    }

    private func rearm(_ timeout: OpaquePointer) {
        for index in timeouts.indices where timeouts[index].timeout == timeout {
            timeouts[index].deadline = Self.deadline(of: timeout)
        }
    }

    /// The earliest deadline of an enabled timeout.
    var nextDeadline: UInt64? { timeouts.compactMap(\.deadline).min() }

    /// Runs the timeouts that are due, each re-armed for its next interval.
    func fireDueTimeouts(now: UInt64) {
        let due = timeouts.filter { ($0.deadline ?? .max) <= now }.map(\.timeout)
        for timeout in due where timeouts.contains(where: { $0.timeout == timeout }) {
            rearm(timeout)
            LibDBus.timeoutHandle(timeout)
        }
    }

    func contains(_ watch: OpaquePointer) -> Bool { watches.contains(watch) }
}

/// Deadlines of pending calls, earliest first.
struct DeadlineHeap {
    private(set) var items: [(deadline: UInt64, serial: UInt32)] = []

    var count: Int { items.count }
    var earliest: UInt64? { items.first?.deadline }

    mutating func push(_ deadline: UInt64, _ serial: UInt32) {
        items.append((deadline, serial))
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard items[child].deadline < items[parent].deadline else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func popDue(_ now: UInt64) -> UInt32? {
        guard let first = items.first, first.deadline <= now else { return nil }
        let last = items.removeLast()
        if !items.isEmpty {
            items[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < items.count, items[left].deadline < items[smallest].deadline { smallest = left }
                if right < items.count, items[right].deadline < items[smallest].deadline { smallest = right }
                if smallest == parent { break }
                items.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first.serial
    }

    /// Drops the entries of calls that have already completed.
    mutating func rebuild(keeping live: some Sequence<(UInt64, UInt32)>) {
        items.removeAll(keepingCapacity: true)
        for (deadline, serial) in live { push(deadline, serial) }
    }
}
