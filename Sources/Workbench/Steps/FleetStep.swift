import BlueZClient
import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// One kind of device step of a fleet run: what it is called, what it
/// reads and writes on a beacon, what its failure makes the inventory
/// forget, what it records, and how it is done. `FleetRunner` schedules,
/// claims, retries and records outcomes; everything particular to a step
/// is here, in the step's own file under `Steps/`.
///
/// Every requirement is without a default: a new step says each of them.
public protocol FleetStep: Sendable, Equatable {
    /// The name recorded in the inventory's `outcomes.step` (and shown on
    /// the board and in the JSON lines): `require battery>=30`, `apply car`.
    var name: String { get }
    /// What it reads from the beacon. Each read is told to the runner as it
    /// happens and recorded in the inventory after the step, also when the
    /// step then fails (see `onFailure`).
    var reads: Set<SBeacon.Observation.Kind> { get }
    /// What it writes on the beacon.
    var writes: Set<SBeacon.Observation.Kind> { get }
    /// Whether a `skipped` result skips the device's later steps, each
    /// with this step's detail (a `require` that is not met).
    var skippedStopsTheDevice: Bool { get }
    /// What the inventory must forget of the step's reads when it fails: a
    /// value the step writes, read before the write, may no longer be what
    /// the beacon holds (the write can land just before the link drops).
    var onFailure: ForgetOnFailure { get }
    /// What it records in the inventory beyond what it reads (a read is
    /// always recorded). `StepContext` checks each record against this in
    /// debug builds.
    var records: Set<StepRecord> { get }
    /// Does the step on a connected beacon.
    /// - Returns: the outcome's status and detail line.
    /// - Throws: the operation's error (the step failed), or the
    ///   inventory's (the run stops).
    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult
}

extension FleetStep {
    /// Equality across steps of any type: equal when of the same type and equal.
    func isEqual(to other: any FleetStep) -> Bool { (other as? Self) == self }
}

/// What the inventory forgets of a failed step's reads.
public enum ForgetOnFailure: Sendable, Equatable {
    /// Forget the reads of these kinds (every kind the step writes and reads).
    case forget(Set<SBeacon.Observation.Kind>)
    /// Keep every read, though the step writes what it read: why that read
    /// is still true.
    case keepAll(because: String)

    /// The observations of a failed step that still hold.
    func stillTrue(_ observations: [SBeacon.Observation]) -> [SBeacon.Observation] {
        guard case .forget(let kinds) = self else { return observations }
        return observations.filter { !kinds.contains($0.kind) }
    }
}

/// What a step records in the inventory beyond its reads.
public enum StepRecord: Sendable, Hashable, CaseIterable {
    /// The device's facts from a full read (model, serial, revisions, the
    /// calibration's real time…).
    case device
    /// The profile applied.
    case profile
    /// When it was calibrated.
    case calibratedAt
    /// The identity reserved for it (and claimed on the shared server).
    case identityReservation
    case trips
    case events
    case incidents
}

/// A step's outcome: its status and detail line.
public struct StepResult: Sendable, Equatable {
    public var status: Inventory.StepStatus
    public var detail: String?

    public init(_ status: Inventory.StepStatus, _ detail: String? = nil) {
        self.status = status
        self.detail = detail
    }
}

/// What a step may use of the run: the device, whether it is a dry run,
/// the profiles, and the inventory through calls whose failure stops the
/// run. Nothing else.
public struct StepContext: Sendable {
    /// The device's address, as the run was given it.
    public let address: String
    /// A dry run: nothing is written to the beacon.
    public let dryRun: Bool
    /// Every profile (for live audits against each device's assigned one).
    public let profiles: [String: Profile]
    let inventory: Inventory
    let recorder: InventoryRecorder
    let identities: IdentityReserver
    /// What the step declares it records (`FleetStep.records`).
    let declared: Set<StepRecord>
    /// Where `remember` keeps what it learns until the step ends, when the
    /// runner records it with the step's outcome (nil: at once).
    var remembered: RememberedFacts? = nil

    /// Records something in the inventory; its failure stops the run.
    func record<T: Sendable>(
        _ what: StepRecord, _ body: (Inventory) async throws -> T, file: StaticString = #file, line: UInt = #line
    ) async throws -> T {
        assert(declared.contains(what), "the step records \(what) but does not declare it", file: file, line: line)
        return try await recorder { try await body(inventory) }
    }

    /// Reads from the inventory; its failure stops the run.
    func read<T: Sendable>(_ body: (Inventory) async throws -> T) async throws -> T {
        try await recorder { try await body(inventory) }
    }

    /// Records what a step learnt of the device beyond what the reads
    /// themselves tell (the profile applied, when it calibrated, what
    /// `info` read as a whole); the fields left nil keep what the inventory
    /// holds. In a fleet run it is committed with the step's outcome
    /// (`remembered`), whether the step then succeeds or fails.
    func remember(
        _ what: StepRecord, file: StaticString = #file, line: UInt = #line, _ fill: (inout DeviceRecord) -> Void
    ) async throws {
        if let remembered {
            assert(declared.contains(what), "the step records \(what) but does not declare it", file: file, line: line)
            remembered.fill(address, fill)
            return
        }
        var device = DeviceRecord(address: address)
        fill(&device)
        let filled = device
        try await record(what, { try await $0.recordDevice(filled) }, file: file, line: line)
    }

    /// The identity meant for the device, reserved in the inventory (and
    /// first claimed on the shared server, when there is one).
    func reserveIdentity(_ plan: IdentityPlan, holds current: BeaconIdentity) async throws -> IdentityReservation {
        assert(declared.contains(.identityReservation), "the step reserves an identity but does not declare it")
        return try await identities.reserve(plan, for: address, holds: current, record: recorder)
    }

    /// The real time, epoch milliseconds.
    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

/// Runs inventory calls for a fleet run: a SQLite failure stops the run
/// (nothing more can be recorded, so nothing more is written to a beacon).
struct InventoryRecorder: Sendable {
    let stop: @Sendable (InventoryFailure) async -> Void

    func callAsFunction<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as SQLiteError {
            let failure = InventoryFailure(error: error)
            await stop(failure)
            throw failure
        }
    }
}

/// One device step of a batch, checked and resolved (profiles looked up):
/// a fleet step of any type. Each step's file adds its factory
/// (`.info`, `.apply(profile)`, `.requireBattery(atLeast:)`…).
public struct DeviceStep: Sendable, Equatable {
    public let step: any FleetStep

    public init(_ step: some FleetStep) { self.step = step }

    /// The name recorded in the inventory's `outcomes.step`.
    public var name: String { step.name }

    public static func == (a: DeviceStep, b: DeviceStep) -> Bool { a.step.isEqual(to: b.step) }
}
