/// The method calls a connection is waiting on.
///
/// Shared by the tasks that make calls and the connection's thread: a task
/// encodes its message and hands it to libdbus itself (libdbus' connection
/// lock allows sending from any thread once libdbus' threads are initialised), so a call costs no hop onto the connection's thread; the
/// connection's thread routes replies here by serial and expires deadlines.
/// Registration and sending happen under one lock, so a reply can never be
/// routed before its call is known.
final class PendingCalls: Sendable {
    struct Entry {
        var continuation: CheckedContinuation<BusMessage, any Error>
        var token: Int
        var deadline: UInt64
        var call: MethodCall
        var timeout: Duration

        /// Resumes the caller with the reply read (an error reply throws
        /// its error), or with why it could not be read.
        func complete(with reply: Result<BusMessage, any Error>) {
            switch reply {
            case .success(let message) where message.kind == .error: continuation.resume(throwing: message.asError)
            case .success(let message): continuation.resume(returning: message)
            case .failure(let error): continuation.resume(throwing: error)
            }
        }
    }

    private struct State {
        /// The open connection, or nil once closed. Read only under the lock,
        /// and closed by its owner only after it has been set to nil here.
        var connection: OpaquePointer?
        var closeReason: BusError = .closed
        var entries: [UInt32: Entry] = [:]
        var serialsByToken: [Int: UInt32] = [:]
        var deadlines = DeadlineHeap()
        var nextToken = 0
        /// When the connection's thread will next wake by itself (it is in
        /// `poll`); `.max` when it waits with no timeout, 0 when it is awake.
        var loopSleepsUntil: UInt64 = 0
    }

    private let state = Locked(State())
    private let loop: EventLoop

    init(loop: EventLoop) {
        self.loop = loop
    }

    func attach(_ connection: OpaquePointer) {
        state.withLock { $0.connection = connection }
    }

    /// Forgets the connection and returns every pending call, for the
    /// caller to fail with `reason`.
    func detach(reason: BusError) -> [Entry] {
        state.withLock { state in
            state.connection = nil
            state.closeReason = reason
            let entries = Array(state.entries.values)
            state.entries.removeAll()
            state.serialsByToken.removeAll()
            state.deadlines = DeadlineHeap()
            return entries
        }
    }

    func makeToken() -> Int {
        state.withLock { state in
            state.nextToken += 1
            return state.nextToken
        }
    }

    /// Sends `message` and registers its continuation, under the lock.
    /// - Throws: the close reason, or `NoMemory`; nothing is registered then.
    func send(
        _ message: OpaquePointer, token: Int, call: MethodCall, timeout: Duration,
        continuation: CheckedContinuation<BusMessage, any Error>
    ) throws {
        let wake = try state.withLock { state -> Bool in
            guard let connection = state.connection else { throw state.closeReason }
            guard let serial = LibDBus.connectionSend(connection, message) else {
                throw BusError(.noMemory, "Out of memory while sending")
            }
            let deadline = monotonicNanoseconds() + timeout.nanoseconds
            state.entries[serial] = Entry(
                continuation: continuation, token: token, deadline: deadline, call: call, timeout: timeout)
            state.serialsByToken[token] = serial
            state.deadlines.push(deadline, serial)
            // Wake the connection's thread when libdbus could not write it
            // all now (it must poll for writability), or when it sleeps past
            // this call's deadline.
            return LibDBus.connectionHasMessagesToSend(connection) || deadline < state.loopSleepsUntil
        }
        if wake { loop.signalWakePipe() }
    }

    /// Removes a call whose task was cancelled.
    func cancel(token: Int) -> Entry? {
        state.withLock { state in
            guard let serial = state.serialsByToken.removeValue(forKey: token) else { return nil }
            return state.entries.removeValue(forKey: serial)
        }
    }

    /// Removes the call a reply answers.
    func complete(serial: UInt32) -> Entry? {
        state.withLock { state in
            guard let entry = state.entries.removeValue(forKey: serial) else { return nil }
            state.serialsByToken[entry.token] = nil
            return entry
        }
    }

    /// Removes the calls whose deadline has passed.
    func expire(now: UInt64) -> [Entry] {
        state.withLock { state in
            var expired: [Entry] = []
            while let serial = state.deadlines.popDue(now) {
                guard let entry = state.entries[serial], entry.deadline <= now else { continue }
                state.entries[serial] = nil
                state.serialsByToken[entry.token] = nil
                expired.append(entry)
            }
            if state.deadlines.count > 2 * state.entries.count + 1024 {
                state.deadlines.rebuild(keeping: state.entries.map { ($0.value.deadline, $0.key) })
            }
            return expired
        }
    }

    /// Called by the connection's thread just before it sleeps: returns the
    /// time it must wake by (the earlier of `other` and the next call
    /// deadline), and records it, so that a call with an earlier deadline
    /// wakes the thread.
    func prepareToSleep(other: UInt64?) -> UInt64? {
        state.withLock { state in
            let next = [other, state.deadlines.earliest].compactMap { $0 }.min()
            state.loopSleepsUntil = next ?? .max
            return next
        }
    }

    /// Called by the connection's thread before it lingers (see
    /// `ConnectionCore.coalescing`): a call sent meanwhile wakes it, and
    /// returns whether no call is pending (only then may it linger).
    func prepareToLinger() -> Bool {
        state.withLock { state in
            guard state.entries.isEmpty else { return false }
            state.loopSleepsUntil = .max
            return true
        }
    }

    func markAwake() {
        state.withLock { $0.loopSleepsUntil = 0 }
    }

    var count: Int { state.withLock { $0.entries.count } }
}
