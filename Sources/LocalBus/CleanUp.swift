import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What this process started and must not leave behind: the private buses
/// and simulators running now. `PrivateBus.start` and
/// `SimulatorProcess.start` register them as they spawn them; a process
/// that is told to go (beaconbench on SIGTERM, SIGHUP, SIGPIPE or a second
/// Ctrl-C) calls `stopAllBeforeExit()`, then `_exit`.
///
/// This is the orderly way out. When the process dies without it (kill -9,
/// a crash), the simulator notices that its lifeline pipe has closed and
/// stops the bus and removes its directory itself (see `SimulatorProcess`).
public enum CleanUp {
    /// Something running that `stopAllBeforeExit` stops. Each call must be
    /// safe from any thread and more than once.
    public protocol Stoppable: AnyObject, Sendable {
        /// Stops it in order, waiting until it has stopped.
        func stop()
        /// First step of the way out: make it unable to change anything
        /// the process's other threads could see (a bus frozen: no reply,
        /// no disconnection that a run could record as a failure).
        func freezeBeforeExit()
        /// Second step, once everything is frozen: stop it, waiting until
        /// it has (a simulator saves its state), or as quickly as can be
        /// when the exit follows (a frozen bus: its directory removed, its
        /// daemon killed and left to be reaped).
        func stopBeforeExit()
    }

    private struct Entry {
        weak var object: (any Stoppable)?
    }

    private struct State: ~Copyable {
        var entries: [Entry] = []
        var closing = false
    }

    private static let state = Mutex(State())

    /// Runs `start`, which spawns something and returns what stops it, and
    /// registers the result. The register stays locked meanwhile, so that
    /// `stopAllBeforeExit` on another thread either runs first (and then `start` is
    /// not run) or sees what `start` spawned: nothing slips between.
    /// `start` must be quick (spawn, no waiting) and must not call `CleanUp`.
    /// - Throws: `LocalBusError` once `stopAllBeforeExit` has begun; what `start` throws.
    public static func register<Object: Stoppable>(_ start: () throws -> Object) throws -> Object {
        try state.withLock { state in
            guard !state.closing else { throw LocalBusError("the process is exiting: nothing more is started") }
            let object = try start()
            // Objects are held weakly (their owners stop them, or their
            // deinit does); entries whose object is gone are dropped here.
            state.entries.removeAll { $0.object == nil }
            state.entries.append(Entry(object: object))
            return object
        }
    }

    /// For a process about to `_exit`: freezes everything registered, then
    /// stops it, newest first (a simulator before its bus), and refuses to
    /// start anything more. Safe from any thread and more than once;
    /// returns once all of it is stopped.
    public static func stopAllBeforeExit() {
        let objects = state.withLock { state -> [any Stoppable] in
            state.closing = true
            // Kept: a second caller stops the same objects, which waits
            // for the first caller's stop to finish.
            return state.entries.reversed().compactMap(\.object)
        }
        for object in objects { object.freezeBeforeExit() }
        for object in objects { object.stopBeforeExit() }
    }
}

extension CleanUp.Stoppable {
    public func freezeBeforeExit() {}
    public func stopBeforeExit() { stop() }
}
