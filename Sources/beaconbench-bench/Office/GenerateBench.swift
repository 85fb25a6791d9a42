// One bench of the fleet generator: its two years written day by day
// through the Inventory (InventoryImport.swift and the inventory's own
// calls), so the ledger records every row as it would live.
import Foundation
import Inventory
import Ledger
import Profiles
import SBeaconProtocol
import Synchronization

/// The time the generator's inventory stamps on what it writes, set by the
/// generator before each write (whole seconds: a `Date` of whole seconds
/// converts to milliseconds exactly).
final class GeneratorClock: Sendable {
    private let seconds = Mutex<Int64>(0)

    func set(_ milliseconds: Int64) { seconds.withLock { $0 = milliseconds / 1000 } }
    var date: Date { Date(timeIntervalSince1970: Double(seconds.withLock { $0 })) }
}

/// What was written for one bench (the manifest's entry).
struct BenchResult: Codable, Sendable {
    struct Table: Codable, Sendable {
        var rows: Int
        var sha256: String
    }
    var index: Int
    var file: String
    var benchID: String
    var bytes: Int
    var ledgerSize: Int
    var ledgerRoot: String
    var tables: [String: Table]

    enum CodingKeys: String, CodingKey {
        case index, file, bytes, tables
        case benchID = "bench_id"
        case ledgerSize = "ledger_size"
        case ledgerRoot = "ledger_root"
    }
}

/// The tables the manifest counts and checksums.
let generatedTables = [
    "devices", "runs", "outcomes", "readings", "trips", "events", "incidents", "identities", "assignments", "ledger",
    "ledger_nodes", "ledger_head",
]

/// Writes bench `index` of `spec` to `path` (a new file).
struct BenchGenerator {
    let spec: FleetSpec
    let index: Int
    let path: String
    let clock = GeneratorClock()
    var random: SplitMix64
    /// The bench's own devices, then the guests (devices of the previous bench).
    var traits: [DeviceTraits] = []
    var identities: [BeaconIdentity?] = []
    var state: [DeviceState] = []
    let host: String
    let benchID: String

    /// What the bench knows of a device so far.
    struct DeviceState {
        var known = false
        var identity = BeaconIdentity(major: 0, minor: 0)
        var calibratedAt: Int64?
        var clockSet = false
        var config = DrivingBehaviourConfig.factoryDefault
        var applied = false
        var assigned = false
        var assignedOverrides = ConfigOverrides()
        var lastPull: Int64?
        var trips = 0
        var events = 0
        var incidents = 0
    }

    init(spec: FleetSpec, index: Int, path: String) {
        self.spec = spec
        self.index = index
        self.path = path
        random = SplitMix64(spec.seed, Stream.bench.rawValue, UInt64(index))
        var idStream = SplitMix64(spec.seed, Stream.benchID.rawValue, UInt64(index))
        let high = idStream.next()
        let low = idStream.next()
        // A version-4-shaped UUID from the seed.
        let hex = DeviceTraits.hex(high, 16) + DeviceTraits.hex(low & 0x0FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000, 16)
        let digits = Array(hex.lowercased())
        benchID =
            String(digits[0..<8]) + "-" + String(digits[8..<12]) + "-4" + String(digits[13..<16]) + "-"
            + String(digits[16..<20]) + "-" + String(digits[20..<32])
        host = "bench-" + String(format: "%03d", index)
    }

    /// Who did a bench's work: an operator of this bench.
    mutating func operatorName() -> String { History.operators[random.below(History.operators.count)] }

    // MARK: The plan

    /// Per day: the visits, the readings (time, device) and the devices assigned.
    struct Plan {
        var visits: [[Visit]] = Array(repeating: [], count: History.days)
        var readings: [[(time: Int64, device: Int32)]] = Array(repeating: [], count: History.days)
        var assignments: [[Int32]] = Array(repeating: [], count: History.days)
    }

    mutating func makePlan() -> Plan {
        var plan = Plan()
        let own = (0..<spec.devices).map { DeviceTraits(spec, home: index, number: $0) }
        identities = fleetIdentities(spec, bench: index, traits: own)
        traits = own
        if spec.guestsPerBench > 0 && spec.guestOutcomes > 0 {
            let hostBench = spec.host(ofGuestsOn: index)
            let hostTraits = (0..<spec.devices).map { DeviceTraits(spec, home: hostBench, number: $0) }
            let hostIdentities = fleetIdentities(spec, bench: hostBench, traits: hostTraits)
            for number in stride(from: 0, to: spec.devices, by: 10) {
                traits.append(hostTraits[number])
                identities.append(hostIdentities[number])
            }
        }
        state = Array(repeating: DeviceState(), count: traits.count)
        let last = History.days - 1
        for (position, device) in traits.enumerated() {
            let id = Int32(position)
            var stream = SplitMix64(spec.seed, Stream.bench.rawValue, UInt64(index), 0x5EED, UInt64(position))
            if device.home == index {
                var left = spec.outcomeBudget(device.number)
                let first = min(Visit.provisionSteps, left)
                if first > 0 {
                    plan.visits[device.arrival].append(Visit(device: id, kind: .arrival, steps: UInt8(first)))
                }
                left -= first
                var later: [Visit] = []
                if device.reprovision && left >= Visit.provisionSteps {
                    later.append(Visit(device: id, kind: .reprovision, steps: UInt8(Visit.provisionSteps)))
                    left -= Visit.provisionSteps
                }
                if device.records {
                    for pull in 0..<(1 + stream.below(2)) {
                        let steps = device.incident && pull == 0 ? 4 : 3
                        guard left >= steps else { break }
                        later.append(Visit(device: id, kind: .pull, steps: UInt8(steps)))
                        left -= steps
                    }
                }
                while left >= 2 {
                    later.append(Visit(device: id, kind: .audit, steps: 2))
                    left -= 2
                }
                if left == 1 { later.append(Visit(device: id, kind: .info, steps: 1)) }
                // In a random order, on random later days.
                for swap in stride(from: later.count - 1, to: 0, by: -1) {
                    later.swapAt(swap, stream.below(swap + 1))
                }
                let days = later.map { _ in stream.between(device.arrival + 1, last) }.sorted()
                for (visit, day) in zip(later, days) { plan.visits[day].append(visit) }
                for _ in 0..<spec.readingBudget(device.number) {
                    let day = stream.between(device.arrival + 1, last)
                    plan.readings[day].append((History.dayStart(day) + Int64(stream.below(86_400_000)), id))
                }
                switch device.assignment {
                case .none: break
                case .atArrival: plan.assignments[device.arrival].append(id)
                case .later(let day): plan.assignments[day].append(id)
                }
            } else {
                // A guest: seen here some time after its own bench provisioned it.
                let visits = spec.guestOutcomes / 2
                let first = stream.between(device.arrival + 1, last - 5)
                var days = [first] + (1..<max(1, visits)).map { _ in stream.between(first + 1, last) }
                days.sort()
                for day in days.prefix(visits) { plan.visits[day].append(Visit(device: id, kind: .guest, steps: 2)) }
                for _ in 0..<spec.guestReadings {
                    let day = stream.between(first + 1, last)
                    plan.readings[day].append((History.dayStart(day) + Int64(stream.below(86_400_000)), id))
                }
                // A few conflict with the assignment their own bench made.
                if device.number % 100 == 0, device.assignment != .none { plan.assignments[first].append(id) }
            }
        }
        for day in 0..<History.days {
            plan.visits[day].sort { $0.device < $1.device }
            plan.readings[day].sort { $0.time < $1.time || ($0.time == $1.time && $0.device < $1.device) }
        }
        return plan
    }

    // MARK: Writing

    /// What one day's runs leave to write after their rows.
    struct DayWork {
        var runs: [Inventory.ImportedRun] = []
        var firstSightings: [DeviceRecord] = []
        var reservations: [(device: Int, at: Int64, run: Int64)] = []
        var outcomes: [Inventory.ImportedOutcome] = []
        var updates: [DeviceRecord] = []
        var convergences: [(device: Int, at: Int64, run: Int64)] = []
        var pulls: [Pull] = []
    }

    struct Pull {
        var device: Int
        var at: Int64
        var trips: [TripRecord]
        var events: [DrivingEvent]
        var incidents: [Incident]
    }

    static let errors = [
        "org.bluez.Error.Failed: le-connection-abort-by-local",
        "no reply from the beacon within 10 s (GATT write)",
        "org.bluez.Error.InProgress: Operation already in progress",
        "the beacon disconnected (reason 0x08: supervision timeout)",
        "org.bluez.Error.Failed: Software caused connection abort",
    ]

    mutating func generate() async throws -> BenchResult {
        var plan = makePlan()
        clock.set(History.start)
        let clock = self.clock
        let inventory = try Inventory(path: path, clock: { clock.date }, benchID: benchID)
        try await inventory.tuneForImport()
        var nextRun: Int64 = 1
        for day in 0..<History.days {
            // The office's assignments of the day, before the day's runs.
            if !plan.assignments[day].isEmpty {
                let at = History.dayStart(day) + 6 * 3_600_000 + Int64(random.below(3_600)) * 1000
                clock.set(at)
                let by = operatorName() + "@" + host
                let made = plan.assignments[day].map { assignment(Int($0), at: at, by: by) }
                try await inventory.assign(made)
            }
            var work = DayWork()
            let visits = plan.visits[day]
            let provisioning = visits.filter(\.provisions)
            let service = visits.filter { !$0.provisions }
            var start = History.dayStart(day) + 8 * 3_600_000 + Int64(random.below(1_800)) * 1000
            for (visits, command) in [(provisioning, "run depot-provision.bb"), (service, "run depot-service.bb")]
            where !visits.isEmpty {
                start = run(visits, id: nextRun, command: command, start: start, into: &work) + 600_000
                nextRun += 1
            }
            // The runs and the devices seen for the first time…
            clock.set(work.runs.first?.startedAt ?? History.dayStart(day))
            var batch = Inventory.ImportBatch()
            batch.runs = work.runs
            batch.devices = work.firstSightings
            try await inventory.importHistory(batch)
            // …the identities reserved for them, before they are written…
            for reservation in work.reservations {
                clock.set(reservation.at)
                let device = traits[reservation.device]
                guard let meant = identities[reservation.device] else { continue }
                let reserved = try await inventory.reserveIdentity(
                    device: device.address,
                    plan: IdentityPlan(major: meant.major, minor: .next, source: .explicit),
                    holds: BeaconIdentity(major: 0, minor: 0), run: reservation.run)
                guard reserved.identity == meant else {
                    throw GeneratorError(
                        "bench \(index): \(device.address) was given \(reserved.identity.major).\(reserved.identity.minor),"
                            + " the plan says \(meant.major).\(meant.minor)")
                }
            }
            // …then what the runs did and the day's readings, in batches.
            var rows = Inventory.ImportBatch()
            func flush() async throws {
                guard !rows.isEmpty else { return }
                try await inventory.importHistory(rows)
                rows = Inventory.ImportBatch()
            }
            clock.set(History.dayStart(day) + History.dayMilliseconds - 1000)
            for update in work.updates {
                if rows.count >= Inventory.importLimit { try await flush() }
                rows.devices.append(update)
            }
            for outcome in work.outcomes {
                if rows.count >= Inventory.importLimit { try await flush() }
                rows.outcomes.append(outcome)
            }
            for (time, position) in plan.readings[day] {
                if rows.count >= Inventory.importLimit { try await flush() }
                let device = traits[Int(position)]
                rows.readings.append(
                    Inventory.ImportedReading(
                        device: device.address, at: time,
                        battery: device.batteryLevel(at: time, noise: random.between(-2, 2)),
                        rssi: Int16(min(-40, max(-95, device.rssi + random.between(-8, 8)))),
                        firmware: device.firmware(at: time)))
            }
            try await flush()
            plan.readings[day] = []
            for convergence in work.convergences {
                clock.set(convergence.at)
                try await inventory.markConverged(traits[convergence.device].address, run: convergence.run)
            }
            for pull in work.pulls {
                let device = traits[pull.device]
                clock.set(pull.at)
                let pulledAt = clock.date
                if !pull.trips.isEmpty {
                    _ = try await inventory.storeTrips(
                        pull.trips, device: device.address, timeOffset: device.powerOn, pulledAt: pulledAt)
                }
                if !pull.events.isEmpty {
                    _ = try await inventory.storeEvents(
                        pull.events, device: device.address, timeOffset: device.powerOn, pulledAt: pulledAt)
                }
                if !pull.incidents.isEmpty {
                    _ = try await inventory.storeIncidents(
                        pull.incidents, device: device.address, timeOffset: device.powerOn, pulledAt: pulledAt)
                }
            }
        }
        clock.set(History.end)
        try await inventory.checkpoint()
        var tables: [String: BenchResult.Table] = [:]
        for table in generatedTables {
            let digest = try await inventory.tableDigest(table)
            tables[table] = BenchResult.Table(rows: digest.rows, sha256: digest.sha256)
        }
        let head = try await inventory.ledgerTreeHead()
        try await inventory.checkpoint()
        var info = stat()
        let bytes = stat(path, &info) == 0 ? Int(info.st_size) : 0
        return BenchResult(
            index: index, file: URL(fileURLWithPath: path).lastPathComponent, benchID: benchID, bytes: bytes,
            ledgerSize: head.size, ledgerRoot: head.root.hex, tables: tables)
    }

    /// The assignment the office makes for device `position`: its profile,
    /// the identity's major of its own bench, overrides for a few; on a
    /// bench that sees another bench's device, other overrides (a conflict
    /// the next sync settles).
    mutating func assignment(_ position: Int, at: Int64, by: String) -> Assignment {
        let device = traits[position]
        let profile = spec.profiles[device.profile]
        var overrides = ConfigOverrides()
        if device.home != index {
            overrides.braking = min(5_000, profile.config.braking + 100)
        } else if device.overrides {
            overrides.cornering = min(5_000, profile.config.cornering + 50)
        }
        state[position].assigned = true
        state[position].assignedOverrides = overrides
        return Assignment(
            address: device.address, profile: profile.name,
            major: History.major(bench: device.home, profile: device.profile, profiles: spec.profiles.count),
            minorPolicy: .auto, overrides: overrides, assignedAt: Inventory.ledgerTime(Self.date(at)), assignedBy: by)
    }

    /// One run of `visits` from `start`: its outcomes, device updates and
    /// what follows them, into `work`. Returns when it ended.
    mutating func run(_ visits: [Visit], id: Int64, command: String, start: Int64, into work: inout DayWork) -> Int64 {
        var time = start
        var failed = false
        var interrupted = false
        // 1 run in 100 is interrupted in its last step (as a killed run is
        // marked at the next open).
        let interrupts = random.chance(0.01)
        let operatorName = operatorName()
        for (number, visit) in visits.enumerated() {
            time += Int64(5_000 + random.below(55_000))
            let last = interrupts && number == visits.count - 1
            let ended = perform(visit, run: id, start: time, interruptLast: last, into: &work)
            failed = failed || ended.failed
            interrupted = interrupted || ended.interrupted
            time = ended.end
        }
        let status: Inventory.RunStatus = interrupted ? .interrupted : failed ? .failed : .finished
        work.runs.append(
            Inventory.ImportedRun(
                id: id, startedAt: start, endedAt: time + 1_000, command: command,
                sha256: commandDigests[command], operatorName: operatorName, host: host,
                pid: Int64(1_000 + random.below(60_000)), adapter: "hci0", status: status))
        return time + 1_000
    }

    /// A visit's steps, with their times and what they did.
    mutating func perform(
        _ visit: Visit, run: Int64, start: Int64, interruptLast: Bool, into work: inout DayWork
    ) -> (end: Int64, failed: Bool, interrupted: Bool) {
        let position = Int(visit.device)
        let device = traits[position]
        let profile = spec.profiles[device.profile]
        var time = start
        if !state[position].known {
            state[position].known = true
            var record = DeviceRecord(address: device.address, seenAt: Self.date(start))
            record.model = "SB-1"
            record.serial = device.serial
            record.hardwareRevision = device.hardware
            work.firstSightings.append(record)
            // A guest arrives here provisioned by its own bench.
            if device.home != index, let identity = identities[position] {
                state[position].identity = identity
                state[position].calibratedAt = History.dayStart(device.arrival) + 9 * 3_600_000
                state[position].clockSet = true
                state[position].config = profile.config
                state[position].applied = true
            }
        }
        let names: [String]
        switch visit.kind {
        case .arrival, .reprovision:
            names = [
                "info", "require battery>=\(profile.requirements.minimumBatteryPercent)",
                "require firmware>=\(profile.requirements.minimumFirmware)", "sync-time", "calibrate", "identity",
                "apply \(profile.name)", "verify \(profile.name)",
            ]
        case .audit, .guest: names = ["info", "verify \(profile.name)"]
        case .pull: names = ["info", "trips", "events", "incidents"]
        case .info: names = ["info"]
        }
        let steps = Array(names.prefix(Int(visit.steps)))
        let pull = visit.kind == .pull ? makePull(position, at: start, incidents: steps.count > 3) : nil
        var failedStep: String?
        var visitFailed = false
        var interrupted = false
        var converges = visit.provisions && state[position].assigned
        for (stepIndex, step) in steps.enumerated() {
            let stepStart = time
            var duration: Int64
            switch step {
            case "info": duration = 900 + Int64(random.below(1_600))
            case "sync-time": duration = 300 + Int64(random.below(600))
            case "calibrate": duration = 3_000 + Int64(random.below(3_500))
            case "identity": duration = 400 + Int64(random.below(800))
            case "trips": duration = 1_000 + Int64(random.below(3_000))
            case "events": duration = 1_500 + Int64(random.below(3_500))
            case "incidents": duration = 3_000 + Int64(random.below(6_000))
            default: duration = step.hasPrefix("require") ? Int64(random.below(40)) : 400 + Int64(random.below(1_400))
            }
            var end = Inventory.StepEnd(.ok)
            if let failedStep {
                end = Inventory.StepEnd(.skipped, detail: "not run: \(failedStep)")
                duration = 0
            } else {
                // 10 % of steps are tried again (1–3 times), 3 % fail; a
                // first provisioning fails only after its identity step.
                if random.chance(0.1) {
                    end.retries = 1 + random.below(3)
                    end.error = Self.errors[random.below(Self.errors.count)]
                    duration += Int64(end.retries) * (2_000 + Int64(random.below(4_000)))
                }
                let mayFail = visit.kind != .arrival || stepIndex > Visit.identityStep
                if mayFail && random.chance(0.03) {
                    end.status = .failed
                    end.error = Self.errors[random.below(Self.errors.count)]
                    failedStep = "\(step) failed"
                    visitFailed = true
                } else {
                    describe(step, position, profile, at: stepStart, pull: pull, into: &end)
                    if end.status == .skipped { failedStep = "\(step) is not met" }
                }
            }
            if interruptLast && stepIndex == steps.count - 1 && end.status != .skipped
                && (visit.kind != .arrival || stepIndex > Visit.identityStep)
            {
                end = Inventory.StepEnd(.interrupted, error: "the run was interrupted")
                interrupted = true
            }
            let stepEnd = stepStart + duration
            if step == "identity", visit.kind == .arrival, end.status != .skipped {
                work.reservations.append((position, stepStart, run))
            }
            if [.failed, .skipped, .interrupted].contains(end.status) {
                converges = false
            } else {
                effect(step, position, profile, at: stepEnd)
            }
            end.durationMilliseconds = duration
            work.outcomes.append(
                Inventory.ImportedOutcome(
                    run: run, device: device.address, step: step, end, startedAt: stepStart, endedAt: stepEnd))
            time = stepEnd + Int64(random.below(300))
        }
        if steps.count < Visit.provisionSteps { converges = false }
        if converges { work.convergences.append((position, time, run)) }
        if let pull { work.pulls.append(pull) }
        work.updates.append(observed(position, at: start))
        return (time, visitFailed, interrupted)
    }

    /// A step's status and detail line as the step would write it.
    mutating func describe(
        _ step: String, _ position: Int, _ profile: Profile, at time: Int64, pull: Pull?,
        into end: inout Inventory.StepEnd
    ) {
        let device = traits[position]
        let known = state[position]
        switch step {
        case "info": end.detail = infoLine(position, at: time, pull: pull)
        case "sync-time":
            if known.clockSet {
                end.status = .unchanged
            } else {
                end.status = .changed
                end.detail = "time offset 0 → \(device.powerOn)"
            }
        case "calibrate":
            if known.calibratedAt != nil {
                end.status = .unchanged
                end.detail = "already calibrated"
            } else {
                end.status = .changed
                let vector = device.calibration
                end.detail = "calibrated: \(vector.x), \(vector.y), \(vector.z) mG"
            }
        case "identity":
            guard let meant = identities[position] else { return }
            if known.identity == meant {
                end.status = .unchanged
            } else {
                end.status = .changed
                end.detail =
                    "identity \(known.identity.major).\(known.identity.minor) → \(meant.major).\(meant.minor) (explicit)"
            }
        case "trips", "events", "incidents":
            let count =
                step == "trips"
                ? pull?.trips.count ?? 0 : step == "events" ? pull?.events.count ?? 0 : pull?.incidents.count ?? 0
            end.detail = "\(count) \(step), \(count) new"
        default:
            if step.hasPrefix("require battery") {
                let battery = device.batteryLevel(at: time, noise: 0)
                let minimum = profile.requirements.minimumBatteryPercent
                end.detail = "battery \(battery) %" + (battery < minimum ? " is below \(minimum) %" : "")
                if battery < minimum { end.status = .skipped }
            } else if step.hasPrefix("require firmware") {
                end.detail = "firmware \(device.firmware(at: time))"
            } else if step.hasPrefix("apply") {
                let wanted = state[position].assignedOverrides.applied(to: profile.config)
                if known.config == wanted {
                    end.status = .unchanged
                } else {
                    end.status = .changed
                    end.detail = "config \(known.config) → \(wanted)"
                }
            } else if step.hasPrefix("verify") {
                end.detail = "holds \(profile.name)"
            }
        }
    }

    /// What a step that succeeded changed on the beacon.
    mutating func effect(_ step: String, _ position: Int, _ profile: Profile, at time: Int64) {
        switch step {
        case "sync-time": state[position].clockSet = true
        case "calibrate": if state[position].calibratedAt == nil { state[position].calibratedAt = time }
        case "identity": if let meant = identities[position] { state[position].identity = meant }
        default:
            if step.hasPrefix("apply") {
                state[position].config = state[position].assignedOverrides.applied(to: profile.config)
                state[position].applied = true
            }
        }
    }

    /// `info`'s line (InfoStep.describe's shape).
    func infoLine(_ position: Int, at time: Int64, pull: Pull?) -> String {
        let device = traits[position]
        let known = state[position]
        let calibration =
            known.calibratedAt == nil
            ? "not calibrated"
            : "calibrated (\(device.calibration.x), \(device.calibration.y), \(device.calibration.z) mG)"
        return "SB-1 \(device.serial) hw \(device.hardware), firmware \(device.firmware(at: time)), "
            + "battery \(device.batteryLevel(at: time, noise: 0)) %, identity \(known.identity.major).\(known.identity.minor), "
            + "\(calibration), clock \(known.clockSet ? "set" : "not set"), \(known.config), trip IDLE, "
            + "unsynced \(pull?.trips.count ?? 0) trips \(pull?.events.count ?? 0) events \(pull?.incidents.count ?? 0) incidents"
    }

    /// The device as the visit left it (`recordDevice`'s record).
    func observed(_ position: Int, at time: Int64) -> DeviceRecord {
        let device = traits[position]
        let known = state[position]
        var record = DeviceRecord(address: device.address, seenAt: Self.date(time))
        // The factory's 0.0 is no identity of the fleet's: left unknown.
        if known.identity.major != 0 || known.identity.minor != 0 { record.identity = known.identity }
        record.model = "SB-1"
        record.serial = device.serial
        record.hardwareRevision = device.hardware
        record.firmware = try? FirmwareVersion(device.firmware(at: time))
        record.battery = device.batteryLevel(at: time, noise: 0)
        if let calibratedAt = known.calibratedAt {
            record.calibration = CalibrationState(
                calibrated: true, calibratedAt: device.beaconSeconds(calibratedAt), vector: device.calibration)
            record.calibratedAt = Self.date(calibratedAt)
        } else {
            record.calibration = .uncalibrated
        }
        if known.clockSet { record.timeOffset = device.powerOn }
        record.config = known.config
        if known.applied { record.profile = spec.profiles[device.profile].name }
        return record
    }

    /// The records a pull finds: trips and events since the last pull, an incident for some.
    mutating func makePull(_ position: Int, at time: Int64, incidents: Bool) -> Pull {
        let device = traits[position]
        let since = state[position].lastPull ?? History.dayStart(device.arrival) + History.dayMilliseconds
        let window = max(3_600_000, time - since)
        func moment() -> Int64 { since + Int64(random.below(Int(min(window, Int64(Int.max))))) }
        var trips: [TripRecord] = []
        for start in (0..<(2 + random.below(5))).map({ _ in moment() }).sorted() {
            let end = min(time - 60_000, start + Int64(600_000 + random.below(4_800_000)))
            guard end > start else { continue }
            trips.append(
                TripRecord(
                    index: UInt8(state[position].trips % 100), start: device.beaconSeconds(start),
                    end: device.beaconSeconds(end)))
            state[position].trips += 1
        }
        var events: [DrivingEvent] = []
        for at in (0..<(3 + random.below(8))).map({ _ in moment() }).sorted() {
            let type: DrivingEventType =
                random.chance(0.01) ? .accident : [.acceleration, .braking, .cornering][random.below(3)]
            let average = UInt16(300 + random.below(600))
            events.append(
                DrivingEvent(
                    index: UInt8(state[position].events % 80), type: type, timestamp: device.beaconSeconds(at),
                    duration: UInt16(300 + random.below(1_700)), averageMagnitude: average,
                    maximumMagnitude: average + UInt16(random.below(600)),
                    average: Vector(
                        x: Int16(random.between(-900, 900)), y: Int16(random.between(-900, 900)),
                        z: Int16(random.between(-200, 200)))))
            state[position].events += 1
        }
        var found: [Incident] = []
        if incidents {
            let at = moment()
            let samples = (0..<32).map { _ in
                Vector(
                    x: Int16(random.between(-4_000, 4_000)), y: Int16(random.between(-4_000, 4_000)),
                    z: Int16(random.between(-2_000, 2_000)))
            }
            let average = UInt16(800 + random.below(1_200))
            found.append(
                Incident(
                    id: UInt16(state[position].incidents + 1), timestamp: device.beaconSeconds(at),
                    maximumResultant: average + UInt16(random.below(2_000)), averageResultant: average,
                    average: Vector(
                        x: Int16(random.between(-2_000, 2_000)), y: Int16(random.between(-2_000, 2_000)),
                        z: Int16(random.between(-1_000, 1_000))), samples: samples))
            state[position].incidents += 1
        }
        state[position].lastPull = time
        return Pull(device: position, at: time, trips: trips, events: events, incidents: found)
    }

    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds / 1000)) }
}

/// The run commands' digests (as a batch file's, which a run records).
let commandDigests: [String: String] = {
    var digests: [String: String] = [:]
    for command in ["run depot-provision.bb", "run depot-service.bb"] {
        digests[command] = (try? Digest.sha256(Array(command.utf8)).hex) ?? ""
    }
    return digests
}()

struct GeneratorError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
