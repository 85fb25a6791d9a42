import SBeaconProtocol
import Workbench

/// A command, checked: what the REPL, a batch line and a one-shot
/// invocation all turn into. Values are typed and in range.
public enum Command: Sendable, Equatable {
    case scan(seconds: Double, rssiFloor: Int16?)
    /// `scan on` / `scan off`: discovery in the background, beacons
    /// announced as they come and go (REPL).
    case backgroundScan(Bool)
    case devices(filter: String?)
    case select([Selector])
    case info
    case require(Requirement)
    case syncTime
    case calibrate
    /// `identity [PROFILE] [major=N|profile] [minor=auto|keep|N|profile]`:
    /// nil major or minor is the profile's.
    case identity(profile: String?, major: UInt16?, minor: MinorChoice?)
    case apply(profile: String)
    case verify(profile: String)
    case audit(profile: String?, source: AuditSource)
    case trips(clear: Bool)
    case events(clear: Bool)
    case incidents(clear: Bool)
    case watch(seconds: Double)
    case reboot
    case factoryReset
    case inventory(InventoryAction)
    case log(device: String?)
    case profiles(ProfilesAction)
    case help(command: String?)
    case set(name: String, value: String)
    /// `sync --to URL`: push the inventory to a PostgreSQL server.
    case sync(to: String)
    case quit

    public enum MinorChoice: Sendable, Equatable { case auto, keep, fixed(UInt16) }
    public enum AuditSource: String, Sendable, Equatable { case inventory, live, passive }
    public enum InventoryAction: Sendable, Equatable {
        case list, show(String), exportCSV, exportJSON
    }
    public enum ProfilesAction: Sendable, Equatable { case list, show(String), check }

    public enum Requirement: Sendable, Equatable {
        case battery(atLeast: UInt8)
        case firmware(atLeast: FirmwareVersion)
    }

    /// One way to choose devices (see `DeviceSelector`).
    public typealias Selector = DeviceSelector

    /// The word the command is written with (its `help` entry).
    public var keyword: String {
        switch self {
        case .scan, .backgroundScan: "scan"
        case .devices: "devices"
        case .select: "select"
        case .info: "info"
        case .require: "require"
        case .syncTime: "sync-time"
        case .calibrate: "calibrate"
        case .identity: "identity"
        case .apply: "apply"
        case .verify: "verify"
        case .audit: "audit"
        case .trips: "trips"
        case .events: "events"
        case .incidents: "incidents"
        case .watch: "watch"
        case .reboot: "reboot"
        case .factoryReset: "factory-reset"
        case .inventory: "inventory"
        case .log: "log"
        case .profiles: "profiles"
        case .help: "help"
        case .set: "set"
        case .sync: "sync"
        case .quit: "quit"
        }
    }

    /// Whether the command only reads the inventory (or nothing at all),
    /// so that it can run against a shared server inventory.
    public var onlyReadsTheInventory: Bool {
        switch self {
        case .inventory, .log, .profiles, .help, .set, .quit: true
        case .audit(_, let source): source == .inventory
        default: false
        }
    }

    /// Whether the command acts on each selected device (a device step of
    /// a batch, run by the fleet runner per device).
    public var isDeviceStep: Bool {
        switch self {
        case .info, .require, .syncTime, .calibrate, .identity, .apply, .verify, .trips, .events, .incidents, .reboot,
            .factoryReset:
            true
        case .audit(_, let source): source == .live
        default: false
        }
    }

    /// Names of the commands that act on devices: the selection, or the
    /// addresses and MAC endings written after their arguments.
    public static let deviceCommandNames: Set<String> = [
        "info", "require", "sync-time", "calibrate", "identity", "apply", "verify", "audit", "trips", "events",
        "incidents", "watch", "reboot", "factory-reset",
    ]

    /// Whether it may write to a beacon (refused by `--dry-run`, which
    /// reports the diff instead).
    public var writesToBeacons: Bool {
        switch self {
        case .syncTime, .calibrate, .identity, .apply, .reboot, .factoryReset: true
        case .trips(let clear), .events(let clear), .incidents(let clear): clear
        default: false
        }
    }
}

/// The command table: names, usage, examples; completion and `help` read it.
public struct CommandSpec: Sendable {
    public var name: String
    public var usage: String
    public var summary: String
    public var example: String

    public static let all: [CommandSpec] = [
        .init(
            name: "scan", usage: "scan [DURATION] [--rssi N] | scan on|off",
            summary: "discover beacons for a while (default 10s), or in the background until 'scan off'",
            example: "scan 15s --rssi -80"),
        .init(name: "devices", usage: "devices [FILTER]", summary: "list the beacons seen", example: "devices c7d9"),
        .init(
            name: "select", usage: "select SELECTOR…",
            summary:
                "choose devices: all, new, unprovisioned, in-range, profile=NAME, battery<N, firmware<X, minor=A-B, addresses, MAC endings",
            example: "select new battery<30"),
        .init(name: "info", usage: "info", summary: "read everything a beacon tells about itself", example: "info"),
        .init(
            name: "require", usage: "require battery>=N | firmware>=X.Y.Z",
            summary: "skip the rest of a device's steps unless it meets this", example: "require battery>=30"),
        .init(
            name: "sync-time", usage: "sync-time", summary: "write the power-on offset when unset or 2 s off",
            example: "sync-time"),
        .init(name: "calibrate", usage: "calibrate", summary: "calibrate at rest (about 1.5 s)", example: "calibrate"),
        .init(
            name: "identity", usage: "identity [PROFILE] [major=N] [minor=auto|keep|N]",
            summary: "give the identity meant for it: the profile's major unless major= says, a unique minor",
            example: "identity van"),
        .init(
            name: "apply", usage: "apply PROFILE", summary: "write a profile's thresholds, verified by read-back",
            example: "apply van"),
        .init(
            name: "verify", usage: "verify PROFILE", summary: "check a beacon holds a profile (read only)",
            example: "verify van"),
        .init(
            name: "audit", usage: "audit [PROFILE] [--live|--passive]",
            summary: "judge devices against profiles: from the inventory, live, or adverts alone",
            example: "audit --passive"),
        .init(
            name: "trips", usage: "trips [--clear]", summary: "pull trip records (clear after storing them)",
            example: "trips --clear"),
        .init(name: "events", usage: "events [--clear]", summary: "pull driving-behaviour events", example: "events"),
        .init(
            name: "incidents", usage: "incidents [--clear]", summary: "pull incidents with their samples",
            example: "incidents"),
        .init(
            name: "watch", usage: "watch [DURATION]", summary: "show real-time events and trip status (shake test)",
            example: "watch 30s"),
        .init(name: "reboot", usage: "reboot", summary: "reboot the beacon", example: "reboot"),
        .init(
            name: "factory-reset", usage: "factory-reset --yes", summary: "restore factory defaults (needs --yes)",
            example: "factory-reset --yes"),
        .init(
            name: "inventory", usage: "inventory list | show DEVICE | export --csv|--json",
            summary: "what the inventory knows", example: "inventory export --csv"),
        .init(
            name: "log", usage: "log [DEVICE]", summary: "the step outcomes recorded, newest first",
            example: "log a3b5c7d9"),
        .init(
            name: "profiles", usage: "profiles list | show NAME | check", summary: "the profiles and their checks",
            example: "profiles show truck"),
        .init(
            name: "sync", usage: "sync --to postgresql://…",
            summary: "push the inventory to a shared PostgreSQL server (idempotent, resumable)",
            example: "sync --to postgresql://depot.example/fleet"),
        .init(
            name: "set", usage: "set NAME VALUE", summary: "set a variable for ${NAME} in later lines",
            example: "set profile van"),
        .init(
            name: "help", usage: "help [COMMAND]", summary: "this list, or one command with an example",
            example: "help select"),
        .init(name: "quit", usage: "quit", summary: "leave the REPL (Ctrl-D too)", example: "quit"),
    ]

    public static func named(_ name: String) -> CommandSpec? { all.first { $0.name == name } }
}
