import Glibc

/// State guarded by a `pthread_mutex_t`.
///
/// Used instead of `Synchronization.Mutex` where threads meet (the event
/// loop's job queue): on Linux, `Mutex` is built on raw futex calls that
/// ThreadSanitizer cannot see, so it reports every access as a race;
/// `pthread_mutex_lock` is intercepted, so `swift test --sanitize=thread`
/// checks this code for real.
final class Locked<State>: @unchecked Sendable {
    // @unchecked: `state` is only read or written between lock and unlock
    // of `mutex`, which is what makes sharing this object safe.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var state: State

    init(_ state: State) {
        self.state = state
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
