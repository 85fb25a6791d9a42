import Glibc

/// The thread that owns one connection: it runs the connection actor's jobs
/// and waits on the connection's socket, and nothing else touches libdbus
/// for that connection.
///
/// It is the `SerialExecutor` of `ConnectionCore`, so the compiler checks
/// that every use of the connection is isolated to this thread: a task that
/// calls the connection hops here, the reply resumes it on its own executor.
///
/// It is also a `TaskExecutor`: work that talks mostly to this connection
/// (a fleet run: calls, signals, registry lookups) can prefer this thread
/// (`withTaskExecutorPreference(connection.taskExecutor)`), and then a
/// reply resumes its caller here without waking another thread.
final class EventLoop: SerialExecutor, TaskExecutor, Sendable {
    private struct Queue {
        var jobs: [UnownedJob] = []
        /// True while the loop is (about to be) blocked in `poll`; the first
        /// job enqueued then writes one byte to the wake pipe.
        var sleeping = false
        var shutdownRequested = false
    }

    private struct Driver {
        weak var core: ConnectionCore?
    }

    private let queue = Locked(Queue())
    private let driver = Locked(Driver())
    private let threadID = Locked<pthread_t?>(nil)
    /// Read and write ends of the wake pipe.
    let wakeReadFD: Int32
    private let wakeWriteFD: Int32

    init() throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            throw BusError(.ioError, "Cannot create the event loop's wake pipe: errno \(errno)")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakeReadFD = fds[0]
        wakeWriteFD = fds[1]
        try startThread()
    }

    deinit {
        close(wakeReadFD)
        close(wakeWriteFD)
    }

    func attach(_ core: ConnectionCore) {
        driver.withLock { $0.core = core }
    }

    // MARK: SerialExecutor

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let wake = queue.withLock { queue in
            queue.jobs.append(job)
            defer { queue.sleeping = false }
            return queue.sleeping
        }
        if wake { signalWakePipe() }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    /// Lets `assumeIsolated` succeed on the loop's own thread, where the
    /// loop polls the connection between jobs.
    func checkIsolated() {
        precondition(isCurrentThread, "The connection was used off its event-loop thread")
    }

    var isCurrentThread: Bool {
        let me = pthread_self()
        return threadID.withLock { $0.map { pthread_equal($0, me) != 0 } ?? false }
    }

    // MARK: Lifecycle

    /// Asks the loop to stop once its connection has been released. Safe to
    /// call from any thread, more than once.
    func requestShutdown() {
        queue.withLock { $0.shutdownRequested = true }
        signalWakePipe()
    }

    var isShutdownRequested: Bool { queue.withLock { $0.shutdownRequested } }

    func signalWakePipe() {
        var byte: UInt8 = 1
        _ = write(wakeWriteFD, &byte, 1)
    }

    func drainWakePipe() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeReadFD, &buffer, buffer.count) > 0 {}
    }

    private func startThread() throws {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(
            &thread, nil,
            { context in
                let loop = Unmanaged<EventLoop>.fromOpaque(context!).takeRetainedValue()
                loop.run()
                return nil
            }, context)
        guard result == 0 else {
            Unmanaged<EventLoop>.fromOpaque(context).release()
            throw BusError(.noMemory, "Cannot start the connection thread: error \(result)")
        }
        pthread_detach(thread)
    }

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        let executor = asUnownedSerialExecutor()
        while true {
            let jobs = queue.withLock { queue in
                let jobs = queue.jobs
                queue.jobs.removeAll(keepingCapacity: true)
                return jobs
            }
            for job in jobs { job.runSynchronously(on: executor) }

            let (block, shutdown) = queue.withLock { queue in
                let block = queue.jobs.isEmpty
                if block { queue.sleeping = true }
                return (block, queue.shutdownRequested)
            }
            let core = driver.withLock { $0.core }
            if let core {
                core.assumeIsolated { $0.pollOnce(blocking: block) }
            } else if shutdown {
                // The connection is gone and nobody can enqueue work for it.
                break
            } else {
                waitOnWakePipe(blocking: block)
            }
            queue.withLock { $0.sleeping = false }
        }
    }

    private func waitOnWakePipe(blocking: Bool) {
        var fd = pollfd(fd: wakeReadFD, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, blocking ? -1 : 0)
        drainWakePipe()
    }
}

/// Milliseconds on the monotonic clock.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

extension Duration {
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}
