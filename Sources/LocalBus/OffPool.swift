import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

// Everything in this module that waits (for a process to exit, for a
// daemon to say it is ready, for psql) blocks the thread it runs on.
// Swift's cooperative pool has only as many threads as cores: two such
// waits on a 2-core machine, and every task of the process stalls
// (simulators, clients, timers). So each blocking call has an `async`
// overload of the same name that runs it on a thread of its own; in an
// async context Swift picks the overload, and the compiler asks for the
// `await` that shows the wait.

/// Runs `body` on a new thread and resumes the caller with its result.
/// The cooperative pool is never held while it blocks.
public func onThreadOfItsOwn<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        detachThread { continuation.resume(with: Result { try body() }) }
    }
}

/// The same for a `body` that cannot fail.
public func onThreadOfItsOwn<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        detachThread { continuation.resume(returning: body()) }
    }
}

/// Runs `body` on a new detached thread (pthread; Foundation's `Thread`
/// did the same), with a stack of `stackSize` bytes (else the default).
public func detachThread(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
    final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
    let argument = Unmanaged.passRetained(Body(body)).toOpaque()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
    var thread = pthread_t()
    let created = pthread_create(
        &thread, &attributes,
        { raw in
            Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, argument)
    precondition(created == 0, "cannot start a thread: \(String(cString: strerror(created)))")
}

extension CleanUp.Stoppable {
    /// `stop()` on a thread of its own.
    public func stop() async {
        await onThreadOfItsOwn { self.stop() }
    }
}

extension PrivateBus {
    /// `start()` on a thread of its own.
    public static func start() async throws -> PrivateBus {
        try await onThreadOfItsOwn { try start() }
    }
}

extension SimulatorProcess {
    /// `start(executable:arguments:timeout:)` on a thread of its own.
    public static func start(
        executable: String, arguments: [String], timeout: Duration = .seconds(30)
    ) async throws -> SimulatorProcess {
        try await onThreadOfItsOwn { try start(executable: executable, arguments: arguments, timeout: timeout) }
    }

    /// `stop()` on a thread of its own.
    public func stop() async {
        await onThreadOfItsOwn { self.stop() }
    }
}

extension ChildProcess {
    /// `waitForExit()` on a thread of its own.
    public func waitForExit() async -> (status: Int32, usage: rusage) {
        let (status, usage) = await onThreadOfItsOwn { () -> UsageBox in
            let (status, usage) = self.waitForExit()
            return UsageBox(status: status, usage: usage)
        }.pair
        return (status, usage)
    }

    /// `terminate(grace:)` on a thread of its own.
    public func terminate(grace: Duration = .seconds(5)) async {
        await onThreadOfItsOwn { self.terminate(grace: grace) }
    }

    /// `terminateReportingStatus(grace:)` on a thread of its own.
    public func terminateReportingStatus(grace: Duration = .seconds(5)) async -> Int32? {
        await onThreadOfItsOwn { self.terminateReportingStatus(grace: grace) }
    }
}

/// `rusage` is a plain C struct; carried across threads by value.
private struct UsageBox: @unchecked Sendable {
    var status: Int32
    var usage: rusage
    var pair: (Int32, rusage) { (status, usage) }
}

extension LocalPostgres {
    /// A new cluster (initdb), made on a thread of its own; in
    /// `directory` when given (kept; an existing cluster there reused).
    public static func create(port: Int = 54_329, directory: String? = nil) async throws -> LocalPostgres {
        try await onThreadOfItsOwn { try LocalPostgres(port: port, directory: directory) }
    }

    /// `start()` on a thread of its own.
    public func start() async throws {
        try await onThreadOfItsOwn { try self.start() }
    }

    /// `stop()` on a thread of its own.
    public func stop() async {
        await onThreadOfItsOwn { self.stop() }
    }

    /// `remove()` on a thread of its own.
    public func remove() async {
        await onThreadOfItsOwn { self.remove() }
    }

    /// `psql(_:)` on a thread of its own.
    public func psql(_ sql: String) async throws -> String {
        try await onThreadOfItsOwn { try self.psql(sql) }
    }

    /// `rows(_:)` on a thread of its own.
    public func rows(_ sql: String) async throws -> [[String]] {
        try await onThreadOfItsOwn { try self.rows(sql) }
    }

    /// `count(_:)` on a thread of its own.
    public func count(_ sql: String) async throws -> Int {
        try await onThreadOfItsOwn { try self.count(sql) }
    }
}
