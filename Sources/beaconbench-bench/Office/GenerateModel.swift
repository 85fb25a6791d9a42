// The fleet generator's history model (docs/office.md, "The fleet
// generator"): what each device of each bench is, and what happens to it
// over two years — every choice drawn from SplitMix64 streams derived from
// the seed, so the same seed gives the same fleet, byte for byte, and any
// bench can work out what another bench's device is without generating
// that bench.
import Foundation
import Inventory
import Profiles
import SBeaconProtocol

/// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit state, one addition and
/// three mixing steps per number.
struct SplitMix64 {
    var state: UInt64

    init(state: UInt64) { self.state = state }

    /// A stream for `parts` (the seed, a purpose, a bench, a device…):
    /// each part mixed in turn, so nearby parts give unrelated streams.
    init(_ parts: UInt64...) {
        var state: UInt64 = 0x6A09_E667_F3BC_C909
        for part in parts {
            var mixer = SplitMix64(state: state ^ part)
            state = mixer.next()
        }
        self.state = state
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// 0..<count (0 when count ≤ 1).
    mutating func below(_ count: Int) -> Int { count <= 1 ? 0 : Int(next() % UInt64(count)) }

    /// low...high.
    mutating func between(_ low: Int, _ high: Int) -> Int { high <= low ? low : low + below(high - low + 1) }

    /// [0, 1).
    mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    mutating func chance(_ probability: Double) -> Bool { unit() < probability }

    /// An element of `choices`, each as likely as its weight.
    mutating func weighted(_ weights: [Int]) -> Int {
        var pick = below(weights.reduce(0, +))
        for (index, weight) in weights.enumerated() {
            if pick < weight { return index }
            pick -= weight
        }
        return weights.count - 1
    }
}

/// Purposes a stream is drawn for (one of `SplitMix64.init(_:)`'s parts).
enum Stream: UInt64 {
    case bench = 1, device, benchID
}

/// The fixed two years every bench's history spans: it ends at
/// 2026-11-30T00:00:00Z, not now, so a seed always gives the same files.
enum History {
    static let end: Int64 = 1_795_996_800_000
    static let days = 730
    static let dayMilliseconds: Int64 = 86_400_000
    static let start = end - Int64(days) * dayMilliseconds
    /// Devices arrive (are first provisioned) in the first 700 days.
    static let arrivalDays = 700
    static func dayStart(_ day: Int) -> Int64 { start + Int64(day) * dayMilliseconds }

    /// Fleet-wide firmware releases: a device takes each one `firmwareLag`
    /// days after it.
    static let releases: [(day: Int, version: String)] = [(-200, "1.0.8"), (240, "1.0.9"), (540, "1.1.0")]

    /// Identities are unique fleet-wide at any size: each bench has a major
    /// per profile (the five shipped profiles' own majors hold 5 × 65,535
    /// minors, too few for a million beacons), minors in provisioning order.
    static let firstMajor = 1_000
    static func major(bench: Int, profile: Int, profiles: Int) -> UInt16 {
        UInt16(firstMajor + bench * profiles + profile)
    }

    /// Weights of the shipped profiles; another profile counts 5.
    static let profileWeights: [String: Int] = ["car": 50, "van": 25, "truck": 12, "bus": 8, "motorcycle": 5]

    static let operators = ["amira", "jonas", "li", "pedro"]
}

/// What the whole fleet is made of: the generator's options.
struct FleetSpec: Sendable {
    var benches: Int
    var devices: Int
    var outcomesPerDevice: Int
    var readingsPerDevice: Int
    var seed: UInt64
    /// By name.
    var profiles: [Profile]
    var weights: [Int]

    /// Each bench sees 10 % of the previous bench's devices too (none with one bench).
    var guestsPerBench: Int { benches > 1 ? (devices + 9) / 10 : 0 }
    /// Per guest device: two visits of two steps, five readings (less when the sizes are tiny).
    var guestOutcomes: Int { guestsPerBench == 0 ? 0 : min(4, outcomesPerDevice / 5) / 2 * 2 }
    var guestReadings: Int { guestOutcomes == 0 ? 0 : min(5, readingsPerDevice / 10) }

    var outcomesPerBench: Int { devices * outcomesPerDevice }
    var readingsPerBench: Int { devices * readingsPerDevice }

    /// The outcomes of the bench's own device `number`: the bench's total
    /// less what its guests take, shared evenly.
    func outcomeBudget(_ number: Int) -> Int {
        share(outcomesPerBench - guestsPerBench * guestOutcomes, number)
    }

    func readingBudget(_ number: Int) -> Int {
        share(readingsPerBench - guestsPerBench * guestReadings, number)
    }

    private func share(_ total: Int, _ number: Int) -> Int {
        total / devices + (number < total % devices ? 1 : 0)
    }

    /// The steps of a device's first provisioning (at most 8).
    func arrivalSteps(_ number: Int) -> Int { min(Visit.provisionSteps, outcomeBudget(number)) }

    /// The bench whose devices `bench` also sees.
    func host(ofGuestsOn bench: Int) -> Int { (bench + benches - 1) % benches }
}

/// What a device is, from its own stream: the same on every bench that
/// sees it.
struct DeviceTraits {
    let home: Int
    let number: Int
    let address: String
    let profile: Int
    /// The day it is first provisioned (nondecreasing in `number`).
    let arrival: Int
    let serial: String
    let hardware: String
    let firmwareLag: Int
    let battery: Double
    /// Percent per day.
    let decay: Double
    let rssi: Int
    /// Epoch milliseconds at power-on (the stored time offset).
    let powerOn: Int64
    let calibration: Vector
    let records: Bool
    let incident: Bool
    let reprovision: Bool
    let assignment: Assignment
    let overrides: Bool

    enum Assignment: Equatable {
        case none
        /// Assigned on its arrival day, before the run that provisions it.
        case atArrival
        /// Assigned on a later day.
        case later(Int)
    }

    init(_ spec: FleetSpec, home: Int, number: Int) {
        var random = SplitMix64(spec.seed, Stream.device.rawValue, UInt64(home), UInt64(number))
        self.home = home
        self.number = number
        address = Self.address(home: home, number: number)
        profile = random.weighted(spec.weights)
        arrival = number * History.arrivalDays / max(1, spec.devices)
        serial = "SB" + Self.hex(UInt64(home), 4) + Self.hex(UInt64(number), 6)
        hardware = random.chance(0.7) ? "B" : "C"
        firmwareLag = random.below(61)
        battery = 90 + random.unit() * 10
        decay = 0.03 + random.unit() * 0.07
        rssi = -55 - random.below(31)
        powerOn =
            History.dayStart(arrival) - Int64(1 + random.below(30)) * History.dayMilliseconds
            - Int64(random.below(86_400_000))
        calibration = Vector(
            x: Int16(random.between(-60, 60)), y: Int16(random.between(-60, 60)), z: Int16(random.between(950, 1_050)))
        records = random.chance(0.3)
        incident = records && random.chance(1.0 / 6.0)
        reprovision = random.chance(0.2)
        let kind = random.unit()
        assignment =
            kind < 0.3 ? .atArrival : kind < 0.5 ? .later(random.between(arrival + 1, History.days - 1)) : .none
        overrides = assignment != .none && random.chance(0.04)
    }

    /// `D0:BB:BB:NN:NN:NN`: the bench and the device's number.
    static func address(home: Int, number: Int) -> String {
        let octets = [0xD0, home >> 8 & 0xFF, home & 0xFF, number >> 16 & 0xFF, number >> 8 & 0xFF, number & 0xFF]
        return octets.map { hex(UInt64($0), 2) }.joined(separator: ":")
    }

    static func hex(_ value: UInt64, _ digits: Int) -> String {
        let text = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }

    func day(_ time: Int64) -> Int { Int((time - History.start) / History.dayMilliseconds) }

    /// The firmware it runs at `time`.
    func firmware(at time: Int64) -> String {
        let today = day(time)
        var version = History.releases[0].version
        for release in History.releases where release.day + firmwareLag <= today { version = release.version }
        return version
    }

    /// Its battery at `time`, with `noise` percent added.
    func batteryLevel(at time: Int64, noise: Int) -> UInt8 {
        let days = Double(time - History.dayStart(arrival)) / Double(History.dayMilliseconds)
        let level = Int((battery - decay * max(0, days)).rounded()) + noise
        return UInt8(min(100, max(1, level)))
    }

    /// Beacon seconds (since power-on) of `time`.
    func beaconSeconds(_ time: Int64) -> UInt32 { UInt32(clamping: (time - powerOn) / 1000) }
}

/// The identity each device of a bench is given at its first provisioning:
/// minors in order of arrival under the bench's major for the profile.
/// nil: its first visit was too short to reach the identity step.
func fleetIdentities(_ spec: FleetSpec, bench: Int, traits: [DeviceTraits]) -> [BeaconIdentity?] {
    var next = [Int](repeating: 1, count: spec.profiles.count)
    return traits.map { device in
        guard spec.arrivalSteps(device.number) > Visit.identityStep else { return nil }
        let minor = next[device.profile]
        next[device.profile] += 1
        return BeaconIdentity(
            major: History.major(bench: bench, profile: device.profile, profiles: spec.profiles.count),
            minor: UInt16(minor))
    }
}

/// One visit of a device to the bench: a few steps in a run.
struct Visit {
    enum Kind: UInt8 {
        /// First provisioning, and a later one.
        case arrival, reprovision
        /// info, verify.
        case audit
        /// info, trips, events (, incidents).
        case pull
        /// info only.
        case info
        /// A device of another bench seen here: info, verify.
        case guest
    }
    var device: Int32
    var kind: Kind
    var steps: UInt8

    static let provisionSteps = 8
    /// The index of the identity step in a provisioning.
    static let identityStep = 5

    var provisions: Bool { kind == .arrival || kind == .reprovision }
}
