import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol
import Synchronization
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

// Steps the fleet runner carries out on each device named on the line or
// selected; consecutive ones in a batch form one pipeline per device.

/// `info`: everything a beacon tells about itself.
public struct InfoCommand: DeviceStepCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "info", summary: "read everything a beacon tells about itself", example: "info a3b5c7d9",
        actsOnDevices: true, emits: [.device], showsWhatItRead: true
    ).shapeChecked(by: "info ${device}")
    public init(_ arguments: inout ParsedArguments) {}
    public func step(profiles: [String: Profile]) -> DeviceStep? { .info }
}

/// `require battery>=N | firmware>=X.Y.Z`: the rest of a device's steps only if it meets this.
public struct RequireCommand: DeviceStepCommand {
    public enum Requirement: Sendable, Hashable {
        case battery(atLeast: UInt8)
        case firmware(atLeast: FirmwareVersion)
    }
    public var requirement: Requirement
    public init(_ requirement: Requirement) { self.requirement = requirement }
    public static let spec = CommandSpec(
        name: "require", summary: "skip the rest of a device's steps unless it meets this",
        example: "require battery>=30", operands: [.required("CONDITION", .requirement)], actsOnDevices: true)
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        requirement = try arguments.parser.requirement(arguments.token(0))
    }
    public func step(profiles: [String: Profile]) -> DeviceStep? {
        switch requirement {
        case .battery(let minimum): .requireBattery(atLeast: minimum)
        case .firmware(let minimum): .requireFirmware(atLeast: minimum)
        }
    }
    public var stepName: String { step(profiles: [:])?.name ?? "require" }
}

/// `sync-time`: the power-on offset, when unset or off.
public struct SyncTimeCommand: DeviceStepCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "sync-time", summary: "write the power-on offset when unset or 2 s off", example: "sync-time",
        actsOnDevices: true, mayWriteToBeacons: true)
    public init(_ arguments: inout ParsedArguments) {}
    public func step(profiles: [String: Profile]) -> DeviceStep? { .syncTime }
}

/// `calibrate`: calibration at rest.
public struct CalibrateCommand: DeviceStepCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "calibrate", summary: "calibrate at rest (about 1.5 s; the beacon must lie still)",
        example: "calibrate", actsOnDevices: true, mayWriteToBeacons: true)
    public init(_ arguments: inout ParsedArguments) {}
    public func step(profiles: [String: Profile]) -> DeviceStep? { .calibrate }
}

/// `identity [PROFILE] [major=N|profile] [minor=auto|keep|N|profile]`.
public struct IdentityCommand: DeviceStepCommand {
    public enum MinorChoice: Sendable, Hashable { case auto, keep, fixed(UInt16) }
    /// The profile whose identity rule applies.
    public var profile: String?
    /// nil: the profile's.
    public var major: UInt16?
    /// nil: the profile's.
    public var minor: MinorChoice?

    public init(profile: String?, major: UInt16?, minor: MinorChoice?) {
        self.profile = profile
        self.major = major
        self.minor = minor
    }

    public static let spec = CommandSpec(
        name: "identity",
        summary: "give the identity meant for it: the profile's major unless major= says, a unique minor",
        example: "identity van minor=auto",
        operands: [
            OperandSpec(
                name: "PROFILE", kind: .identityKey, optional: true, repeating: true,
                written: "[PROFILE] [major=N] [minor=auto|keep|N]")
        ],
        actsOnDevices: true, mayWriteToBeacons: true,
        detail:
            "major=profile and minor=profile take the profile's rule; minor=auto takes the next free minor, minor=keep keeps the beacon's."
    )

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        let parser = arguments.parser
        var profile: BatchParser.Token?
        var majorFromProfile: BatchParser.Token?
        var given: [String: BatchParser.Token] = [:]
        for (token, _) in arguments.operands {
            let parts = token.text.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 {
                if let earlier = given[parts[0]] {
                    throw parser.fail(
                        token,
                        "\(parser.quoted(parts[0])) is given twice (first at \(earlier.line):\(earlier.column)); write each key once"
                    )
                }
                given[parts[0]] = token
            }
            guard parts.count == 2 else {
                guard profile == nil else {
                    throw parser.fail(token, "identity takes one profile name (usage: \(Self.spec.synopsis))")
                }
                _ = try parser.profileName(token)
                profile = token
                continue
            }
            switch parts[0] {
            case "major":
                if parts[1] == "profile" {
                    major = nil
                    majorFromProfile = token
                } else if let value = ValueGrammar.whole(parts[1], as: UInt16.self) {
                    major = value
                    majorFromProfile = nil
                } else {
                    throw parser.fail(token, "major must be 0–65535 or 'profile', got \(parser.quoted(parts[1]))")
                }
            case "minor":
                switch parts[1] {
                case "auto", "sequential": minor = .auto
                case "keep": minor = .keep
                case "profile": minor = nil
                default:
                    guard let value = ValueGrammar.whole(parts[1], as: UInt16.self) else {
                        throw parser.fail(
                            token, "minor must be auto, keep, 'profile' or 0–65535, got \(parser.quoted(parts[1]))")
                    }
                    minor = .fixed(value)
                }
            default:
                throw parser.fail(
                    token, "unknown key \(parser.quoted(parts[0])) (identity takes a profile, major= and minor=)")
            }
        }
        if major == nil {
            guard let profile else {
                throw parser.fail(
                    majorFromProfile ?? arguments.name,
                    "identity needs a profile or major=N (usage: \(Self.spec.synopsis))")
            }
            guard parser.identityRules[profile.text] != nil else {
                throw parser.fail(profile, "profile \(parser.quoted(profile.text)) gives no identity: write major=N")
            }
        }
        self.profile = profile?.text
    }

    /// The profile's major unless one is named, the profile's minor rule
    /// unless one is named (else the next free minor).
    public func step(profiles: [String: Profile]) -> DeviceStep? {
        let chosen = profile.flatMap { profiles[$0] }
        let rule = chosen?.identity
        guard let chosenMajor = major ?? rule?.major else { return nil }
        let minorPlan: IdentityPlan.Minor =
            switch minor ?? (rule?.minor == .keep ? .keep : .auto) {
            case .auto: .next
            case .keep: .keep
            case .fixed(let value): .fixed(value)
            }
        let source: IdentityPlan.Source = major == nil ? .profile(chosen?.name ?? "") : .explicit
        return .identity(IdentityPlan(major: chosenMajor, minor: minorPlan, source: source))
    }
}

/// `apply PROFILE`: a profile's thresholds, verified by read-back.
public struct ApplyCommand: DeviceStepCommand {
    public var profile: String
    public init(profile: String) { self.profile = profile }
    public static let spec = CommandSpec(
        name: "apply", summary: "write a profile's thresholds, verified by read-back (idempotent)",
        example: "apply van --dry-run", operands: [.required("PROFILE", .profile)], actsOnDevices: true,
        mayWriteToBeacons: true)
    public init(_ arguments: inout ParsedArguments) { profile = arguments.operand(0) ?? "" }
    public func step(profiles: [String: Profile]) -> DeviceStep? { profiles[profile].map(DeviceStep.apply) }
    public var stepName: String { "apply \(profile)" }
}

/// `verify PROFILE`: whether a beacon holds a profile (read only).
public struct VerifyCommand: DeviceStepCommand {
    public var profile: String
    public init(profile: String) { self.profile = profile }
    public static let spec = CommandSpec(
        name: "verify", summary: "check a beacon holds a profile (read only)", example: "verify van",
        operands: [.required("PROFILE", .profile)], actsOnDevices: true)
    public init(_ arguments: inout ParsedArguments) { profile = arguments.operand(0) ?? "" }
    public func step(profiles: [String: Profile]) -> DeviceStep? { profiles[profile].map(DeviceStep.verify) }
    public var stepName: String { "verify \(profile)" }
}

/// A pull of stored records (`trips`, `events`, `incidents`), cleared on
/// the beacon after they are stored when `--clear` says.
public protocol PullCommand: DeviceStepCommand {
    var clear: Bool { get }
    init(clear: Bool)
}

extension PullCommand {
    public init(_ arguments: inout ParsedArguments) { self.init(clear: arguments.flag("--clear")) }
    public var writesToBeacons: Bool { clear }
    static func pullSpec(_ name: String, _ what: String, _ kind: RecordKind, _ emits: ResultKind) -> CommandSpec {
        CommandSpec(
            name: name, summary: "pull \(what) into the inventory", example: "\(name) --clear",
            options: [.flag("--clear", "clear them on the beacon once stored")], actsOnDevices: true,
            mayWriteToBeacons: true, emits: [emits], pulls: kind)
    }
}

public struct TripsCommand: PullCommand {
    public var clear: Bool
    public init(clear: Bool = false) { self.clear = clear }
    public static let spec = pullSpec("trips", "trip records", .trip, .trip)
    public func step(profiles: [String: Profile]) -> DeviceStep? { .pullTrips(clear: clear) }
}

public struct EventsCommand: PullCommand {
    public var clear: Bool
    public init(clear: Bool = false) { self.clear = clear }
    public static let spec = pullSpec("events", "driving-behaviour events", .event, .event)
    public func step(profiles: [String: Profile]) -> DeviceStep? { .pullEvents(clear: clear) }
}

public struct IncidentsCommand: PullCommand {
    public var clear: Bool
    public init(clear: Bool = false) { self.clear = clear }
    public static let spec = pullSpec("incidents", "incidents with their samples", .incident, .incident)
    public func step(profiles: [String: Profile]) -> DeviceStep? { .pullIncidents(clear: clear) }
}

/// `watch [DURATION]`: real-time events and trip status (the shake test).
public struct WatchCommand: ConsoleCommand {
    public var seconds: Double
    public init(seconds: Double = 30) { self.seconds = seconds }
    public static let spec = CommandSpec(
        name: "watch", summary: "show real-time events and trip status (the bench shake test)",
        example: "watch 30s", operands: [.optional("DURATION", .duration(0.1...86_400))], actsOnDevices: true,
        emits: [.watchEvent, .watchSummary], needsDevices: true
    ).runningDeviceSteps().shapeChecked(by: "watch 1s")
    public init(_ arguments: inout ParsedArguments) { seconds = arguments.operandDuration(0) ?? 30 }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.watch(seconds: seconds, devices: located.devices)
    }
}

/// `reboot`.
public struct RebootCommand: DeviceStepCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "reboot", summary: "reboot the beacon", example: "reboot a3b5c7d9", actsOnDevices: true,
        mayWriteToBeacons: true
    ).shapeChecked(by: "reboot ${device}")
    public init(_ arguments: inout ParsedArguments) {}
    public func step(profiles: [String: Profile]) -> DeviceStep? { .reboot }
}

/// `factory-reset --yes`.
public struct FactoryResetCommand: DeviceStepCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "factory-reset", summary: "restore factory defaults (erases the beacon: needs --yes)",
        example: "factory-reset --yes a3b5c7d9", options: [.flag("--yes", "yes, erase it")], actsOnDevices: true,
        mayWriteToBeacons: true
    ).shapeChecked(by: "factory-reset --yes ${spare}")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        guard arguments.flag("--yes") else {
            throw arguments.fail(at: 0, "factory-reset erases a beacon: write 'factory-reset --yes'")
        }
    }
    public func step(profiles: [String: Profile]) -> DeviceStep? { .factoryReset }
}

extension Session {
    // MARK: Watching

    func watch(seconds: Double, devices: [DeviceSelector]) async throws(ConsoleFailure) {
        let addresses = try await targets(devices.isEmpty ? nil : devices)
        guard !addresses.isEmpty else {
            terminal.message("no devices selected: nothing to watch")
            return
        }
        let bench = try await openBench()
        let terminal = self.terminal
        terminal.message(
            "watching \(addresses.count) device\(addresses.count == 1 ? "" : "s") for \(Self.seconds(seconds)) (Ctrl-C stops)"
        )
        let counter = EventCounter()
        let output = self.output
        let slots = (try? await concurrency(bench)) ?? 5
        let results = await bench.watch(addresses, seconds: seconds, concurrency: slots, run: try await currentRun()) {
            event in
            counter.add(event)
            output.render(WatchEventLine(event: event))
        }
        for result in results where result.state == .failed {
            terminal.error("\(result.address): watch: \(result.reason ?? "failed")")
        }
        if results.contains(where: { $0.state == .failed }) { note(.devicesFailed) }
        merge(results.map(\.recap))
        output.render(
            WatchSummary(
                devices: addresses.count, events: counter.events, tripChanges: counter.tripChanges,
                failed: results.filter { $0.state == .failed }.count))
    }
}

/// Counts what a watch saw.
final class EventCounter: Sendable {
    private let counts = Mutex((events: 0, trips: 0))
    func add(_ event: WatchEvent) {
        counts.withLock { counts in
            switch event {
            case .realTime: counts.events += 1
            case .tripStatus: counts.trips += 1
            default: break
            }
        }
    }
    var events: Int { counts.withLock { $0.events } }
    var tripChanges: Int { counts.withLock { $0.trips } }
}

/// What `inventory` subcommands ask of `Session.inventoryCommand`.
enum InventoryAction: Sendable, Equatable { case list, show(String), exportCSV, exportJSON }
/// What `profiles` subcommands ask of `Session.profilesCommand`.
enum ProfilesAction: Sendable, Equatable { case list, show(String), check }
