import FoundationEssentials
import Inventory
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// `trips`, `events`, `incidents`: pulls one kind of record, stores it
/// (with the time offset that dates it), then clears the beacon's copy
/// when asked (never in a dry run).
struct PullStep: FleetStep {
    /// The kind of record: what it pulls, stores and clears.
    enum Kind: String, Sendable, Equatable {
        case trips, events, incidents
    }

    let kind: Kind
    let clear: Bool

    var name: String { kind.rawValue }
    var reads: Set<SBeacon.Observation.Kind> { [.timeOffset] }
    var writes: Set<SBeacon.Observation.Kind> { [] }
    var skippedStopsTheDevice: Bool { false }
    var onFailure: ForgetOnFailure { .forget([]) }
    var records: Set<StepRecord> { [record] }

    private var record: StepRecord {
        switch kind {
        case .trips: .trips
        case .events: .events
        case .incidents: .incidents
        }
    }

    func perform(on beacon: SBeacon, _ context: StepContext) async throws -> StepResult {
        let address = beacon.address
        let offset = try await beacon.readTimeOffset()
        switch kind {
        case .trips:
            return try await pull(beacon, context, { try await beacon.pullTrips() }, clearing: .clearTrips) {
                try await $0.storeTrips($1, device: address, timeOffset: offset, pulledAt: Date())
            }
        case .events:
            return try await pull(beacon, context, { try await beacon.pullEvents() }, clearing: .clearEvents) {
                try await $0.storeEvents($1, device: address, timeOffset: offset, pulledAt: Date())
            }
        case .incidents:
            return try await pull(beacon, context, { try await beacon.pullIncidents() }, clearing: .clearIncidents) {
                try await $0.storeIncidents($1, device: address, timeOffset: offset, pulledAt: Date())
            }
        }
    }

    /// Pulls, stores, clears when asked: "N trips, M new".
    private func pull<Record: Sendable>(
        _ beacon: SBeacon, _ context: StepContext, _ pull: () async throws -> [Record],
        clearing opcode: RecordOpcode, store: (Inventory, [Record]) async throws -> Int
    ) async throws -> StepResult {
        let pulled = try await pull()
        let added = try await context.record(record) { try await store($0, pulled) }
        if clear, !pulled.isEmpty, !context.dryRun { try await beacon.clear(opcode) }
        return StepResult(.ok, "\(pulled.count) \(kind.rawValue), \(added) new")
    }
}

extension DeviceStep {
    /// `trips [--clear]`.
    public static func pullTrips(clear: Bool) -> DeviceStep { DeviceStep(PullStep(kind: .trips, clear: clear)) }
    /// `events [--clear]`.
    public static func pullEvents(clear: Bool) -> DeviceStep { DeviceStep(PullStep(kind: .events, clear: clear)) }
    /// `incidents [--clear]`.
    public static func pullIncidents(clear: Bool) -> DeviceStep { DeviceStep(PullStep(kind: .incidents, clear: clear)) }
}
