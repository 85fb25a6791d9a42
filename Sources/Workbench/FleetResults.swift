import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

/// What happened to one device in a fleet run. The counts are of steps;
/// `result` is the device's verdict, which the recap's summary counts.
public struct DeviceRecap: Sendable, Equatable, Codable {
    public var address: String
    public var ok = 0
    public var changed = 0
    public var unchanged = 0
    public var skipped = 0
    /// Dry runs: steps that would have written.
    public var wouldChange = 0
    /// Connections after the first (a transient failure retried).
    public var retries = 0
    /// 1 when the device failed (a step failed for good), else 0.
    public var failed = 0
    /// The run stopped (the inventory failed, Ctrl-C) before the device's turn.
    public var notStarted = false
    /// The run was cancelled (Ctrl-C) while the device's steps were under
    /// way: the step in flight is recorded `interrupted`.
    public var interrupted = false
    /// Why the device dropped out, or why its steps were skipped.
    public var reason: String?

    public init(address: String) { self.address = address }

    /// A device's verdict.
    public enum Result: String, Sendable, Codable, CaseIterable {
        /// Something was written (in a dry run: would be) and read back.
        case changed
        /// It holds what it should; nothing needed writing.
        case ok
        /// A `require` was not met, or another process had it: nothing written.
        case skipped
        case failed
        /// The run was cancelled (Ctrl-C) while its steps were under way.
        case interrupted
        /// Its turn never came.
        case notStarted = "not-started"
    }

    public var result: Result {
        if failed > 0 { return .failed }
        if interrupted { return .interrupted }
        if notStarted { return .notStarted }
        if changed + wouldChange > 0 { return .changed }
        if reason != nil { return .skipped }
        return .ok
    }
}

/// A fleet run's recaps, and why it stopped early, if it did.
public struct FleetResult: Sendable {
    public var recaps: [DeviceRecap]
    /// The inventory failed (disk full, I/O error, corruption): the run
    /// stopped before writing anything more to a beacon.
    public var inventoryFailure: String?
    /// The run's task was cancelled (Ctrl-C): devices under way are
    /// `interrupted`, those whose turn never came `notStarted`.
    public var interrupted = false
    /// The recoveries done in the run (each also a `recover` outcome row).
    public var recoveries: [RecoveryRecord] = []
    /// An adapter went away and did not come back in time: the run stopped
    /// (exit status 3), with this reason.
    public var adapterFailure: String?

    public init(
        recaps: [DeviceRecap], inventoryFailure: String? = nil, interrupted: Bool = false,
        recoveries: [RecoveryRecord] = [], adapterFailure: String? = nil
    ) {
        self.recaps = recaps
        self.inventoryFailure = inventoryFailure
        self.interrupted = interrupted
        self.recoveries = recoveries
        self.adapterFailure = adapterFailure
    }
}

/// How far a fleet run has come, for an elapsed time and an estimate.
public struct FleetTally: Sendable, Equatable {
    /// When the run began (wall clock, for display).
    public var startedAt: Date
    /// When the run began (monotonic, for arithmetic).
    public var started: ContinuousClock.Instant
    /// Devices finished, whatever their verdict (failed and "not seen" included).
    public var done: Int
    /// Devices in the run.
    public var total: Int
    /// Of the devices finished, those that failed.
    public var failed: Int

    public init(startedAt: Date, started: ContinuousClock.Instant, done: Int, total: Int, failed: Int) {
        self.startedAt = startedAt
        self.started = started
        self.done = done
        self.total = total
        self.failed = failed
    }

    /// Time since the run began.
    public var elapsed: Duration { ContinuousClock.now - started }

    /// The time left at the pace so far (nil until a device is done).
    public var estimatedRemaining: Duration? {
        guard done > 0 else { return nil }
        guard done < total else { return .zero }
        return elapsed / done * (total - done)
    }
}

/// What a fleet run reports as it goes, for progress lines.
public enum FleetProgress: Sendable {
    case started(address: String)
    case step(address: String, step: String, status: Inventory.StepStatus, detail: String?)
    /// Something a technician should know about a device (one line).
    case note(address: String, String)
    case finished(DeviceRecap)
    /// The run's counts: once as it begins (nothing done) and after every
    /// device that finishes (after its `finished`).
    case tally(FleetTally)
}

/// An inventory call failed: nothing more can be recorded, so the run stops.
struct InventoryFailure: Error, CustomStringConvertible {
    var error: any Error
    var description: String { "inventory: \(error)" }
}

/// The run was stopped (the inventory failed on another device).
struct RunStopped: Error, CustomStringConvertible {
    var description: String { "the run stopped: the inventory failed" }
}
