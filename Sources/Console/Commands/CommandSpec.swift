import Inventory
import Profiles
import Workbench

/// How a value written on a command line is read, checked and completed.
/// The parser checks values of these kinds before a command sees them;
/// completion, `help`, the man page and the shell completions show them.
public enum ValueKind: Sendable, Equatable {
    /// `10s`, `500ms`, `2m`, `1h` or seconds (`ValueGrammar.duration`), within the range (in seconds).
    case duration(ClosedRange<Double>)
    case integer(ClosedRange<Int>)
    /// One of these words.
    case choice([String])
    /// A profile that exists.
    case profile
    /// An address or a MAC ending.
    case device
    /// A device selector (`new`, `battery<30`, …).
    case selector
    /// `battery>=N` or `firmware>=X.Y.Z`.
    case requirement
    /// `major=N`, `minor=auto|keep|N`.
    case identityKey
    /// A variable's name.
    case variable
    /// A command's name.
    case command
    /// A time: `2026-11-30`, an ISO 8601 instant, or an age (`7d`, `12h`, `30m`).
    case time
    /// A PostgreSQL URL or connection string.
    case url
    /// Free text (a filter).
    case text

    /// What a shell completes for it (man page and completion scripts).
    public var completionWords: [String] {
        switch self {
        case .choice(let words): words
        case .duration: ["10s", "30s", "1m"]
        case .requirement: ["battery>=", "firmware>="]
        case .identityKey: ["major=", "minor=auto", "minor=keep", "minor="]
        case .selector: ["all", "new", "unprovisioned", "in-range", "profile=", "battery<", "firmware<", "minor="]
        default: []
        }
    }
}

/// An option: `--name` alone (a flag) or `--name VALUE` / `--name=VALUE`.
public struct OptionSpec: Sendable {
    public var name: String
    public var value: ValueKind?
    /// What the value is called in the synopsis (`DBM`, `N`).
    public var placeholder: String
    public var summary: String
    /// The command needs it (`sync --to URL`): the synopsis shows it bare.
    public var required = false

    public static func flag(_ name: String, _ summary: String) -> OptionSpec {
        OptionSpec(name: name, value: nil, placeholder: "", summary: summary)
    }

    public static func value(
        _ name: String, _ placeholder: String, _ kind: ValueKind, _ summary: String, required: Bool = false
    ) -> OptionSpec {
        OptionSpec(name: name, value: kind, placeholder: placeholder, summary: summary, required: required)
    }
}

/// A word in its place after the command (`PROFILE`).
public struct OperandSpec: Sendable {
    public var name: String
    public var kind: ValueKind
    public var optional: Bool
    /// It may be written more than once (`select SELECTOR…`).
    public var repeating: Bool
    /// How the synopsis writes it, when not `NAME`, `[NAME]` or `NAME…`.
    public var written: String? = nil

    public static func required(_ name: String, _ kind: ValueKind) -> OperandSpec {
        OperandSpec(name: name, kind: kind, optional: false, repeating: false)
    }

    public static func optional(_ name: String, _ kind: ValueKind) -> OperandSpec {
        OperandSpec(name: name, kind: kind, optional: true, repeating: false)
    }

    public static func some(_ name: String, _ kind: ValueKind, atLeastOne: Bool = true) -> OperandSpec {
        OperandSpec(name: name, kind: kind, optional: !atLeastOne, repeating: true)
    }
}

/// Everything the console knows about a command except the code that runs
/// it: its name (one word, or a family and a word: `inventory forget`),
/// what it takes, what it is for, and what it may touch.
public struct CommandSpec: Sendable {
    public var name: String
    public var aliases: [String] = []
    public var summary: String
    public var example: String
    public var operands: [OperandSpec] = []
    public var options: [OptionSpec] = []
    /// Acts on devices: the selection, or addresses and MAC endings written
    /// at the end of the line.
    public var actsOnDevices = false
    /// It may write to a beacon: `--dry-run` shows what it would change.
    public var mayWriteToBeacons = false
    /// Runs without the radio, reading the inventory at most: it may run
    /// against a server inventory (`--inventory postgresql://…`).
    public var onlyReadsTheInventory = false
    /// The family's command when only the family is written (`profiles`).
    public var isFamilyDefault = false
    /// A paragraph for the man page, beyond the summary.
    public var detail: String?

    // What follows is for the console's own code and tests: none of it
    // enters `help --json`, the man page or the shell completions.

    /// The kinds of JSON lines the command writes (docs/json.md, "Which
    /// command writes which kinds"). A device step's session kinds (`step`,
    /// `note`, `recap`, `recovery`, `summary`) come with `isDeviceStep` and
    /// are not listed; nor is `stored_value`, which any command that read
    /// the inventory may write.
    public var emits: [ResultKind] = []
    /// A pull: after the run, the records of this kind it brought are
    /// shown (one PULLED block for the pulls of one group of steps).
    public var pulls: RecordKind? = nil
    /// After the run, the inventory's record of each device read is shown
    /// (`info`).
    public var showsWhatItRead = false
    /// It chooses the devices later lines act on (`select`): the batch
    /// checker lets the device commands after it go without devices.
    public var setsSelection = false
    /// It acts on devices without being a device step (`watch`): the batch
    /// checker wants a selection before it, or devices on its line.
    public var needsDevices = false
    /// It ends the REPL or the batch (`quit`).
    public var endsTheRun = false
    /// The line `JSONShapeTests` runs for this command, when `example`
    /// cannot run as written on a test bench (an address of the reader's,
    /// a redirection, a duration of minutes). It may name `${device}` and
    /// `${spare}` (beacons of the bench; the spare may be erased or
    /// forgotten), `${dir}` (a directory to write to) and `${count}` (the
    /// bench's beacons).
    public var jsonExample: String? = nil
    /// Why no example of this command runs in `JSONShapeTests` (what
    /// checks its lines instead).
    public var jsonExampleSkipped: String? = nil
    /// A page of docs/ that says more: the command table of
    /// docs/batch-language.md links to it.
    public var seeAlso: String? = nil
    /// It runs device steps without being one (`converge`, `audit --live`):
    /// its JSON has a device step's kinds too.
    public var runsDeviceSteps = false

    /// The family (`inventory`) of a two-word name, else the name.
    public var family: String { String(name.split(separator: " ").first ?? "") }

    /// The options every command takes besides its own.
    public var allOptions: [OptionSpec] {
        options + [.flag("--json", "machine-readable output (docs/json.md)")]
            + (mayWriteToBeacons ? [.flag("--dry-run", "write nothing: show what would change")] : [])
    }

    /// `apply PROFILE [DEVICE…] [--dry-run]`, from the parts.
    public var synopsis: String {
        var words = [name]
        for operand in operands {
            if let written = operand.written {
                words.append(written)
                continue
            }
            let word = operand.name + (operand.repeating ? "…" : "")
            words.append(operand.optional ? "[\(word)]" : word)
        }
        if actsOnDevices { words.append("[DEVICE…]") }
        for option in options {
            let word = option.name + (option.value == nil ? "" : " " + option.placeholder)
            words.append(option.required ? word : "[\(word)]")
        }
        if mayWriteToBeacons { words.append("[--dry-run]") }
        return words.joined(separator: " ")
    }
}

/// A command as the console runs it: one type per command, its spec, how
/// it is built from the checked words of a line, and what it does. The
/// table (`CommandTable.all`) lists the types; nothing else names them.
public protocol ConsoleCommand: Sendable, Hashable {
    /// The command's name, what it takes, and what it is for.
    static var spec: CommandSpec { get }
    /// Builds the command from the words of a line, already split into
    /// operands and options and checked against `spec`.
    init(_ arguments: inout ParsedArguments) throws(BatchError)
    /// Carries it out in `session`.
    func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure)
    /// The fleet runner's step, for a command that acts on each device in
    /// turn (nil for the others).
    func step(profiles: [String: Profile]) -> DeviceStep?
    /// How the command is named in recaps and messages (`apply van`).
    var stepName: String { get }
    /// This use defines a variable for later lines (`set NAME VALUE`).
    var definesVariable: (name: String, value: String)? { get }
    /// This use is a live audit: after its run, the devices read are
    /// judged against this profile (nil: each against its own).
    var liveAudit: LiveAudit? { get }
    /// This use may write to a beacon (`trips --clear` does, `trips` does not).
    var writesToBeacons: Bool { get }
    /// This use only reads the inventory (`audit` does, `audit --live` does not).
    var onlyReadsTheInventory: Bool { get }
    /// This use is a device step: consecutive ones of a batch form one
    /// pipeline per device.
    var isDeviceStep: Bool { get }
    /// This use may run with `--inventory postgresql://…`: the read
    /// commands, and `assign` (the office writes assignments there).
    var runsAgainstAServer: Bool { get }
}

extension ConsoleCommand {
    public func step(profiles: [String: Profile]) -> DeviceStep? { nil }
    public var stepName: String { Self.spec.name }
    public var definesVariable: (name: String, value: String)? { nil }
    public var liveAudit: LiveAudit? { nil }
    public var writesToBeacons: Bool { Self.spec.mayWriteToBeacons }
    public var onlyReadsTheInventory: Bool { Self.spec.onlyReadsTheInventory }
    public var isDeviceStep: Bool { false }
    public var runsAgainstAServer: Bool { onlyReadsTheInventory }
}

extension CommandSpec {
    /// The spec with the line `JSONShapeTests` runs instead of `example`.
    func shapeChecked(by line: String) -> CommandSpec { with(\.jsonExample, line) }

    /// The spec with why `JSONShapeTests` runs no example of it.
    func shapeNotChecked(because reason: String) -> CommandSpec { with(\.jsonExampleSkipped, reason) }

    /// The spec of a command that runs device steps without being one.
    func runningDeviceSteps() -> CommandSpec { with(\.runsDeviceSteps, true) }

    /// The spec with a page of docs/ that says more.
    func documented(in page: String) -> CommandSpec { with(\.seeAlso, page) }

    private func with<Value>(_ field: WritableKeyPath<CommandSpec, Value>, _ value: Value) -> CommandSpec {
        var spec = self
        spec[keyPath: field] = value
        return spec
    }
}

/// A live audit asked by a command (`audit --live [PROFILE]`).
public struct LiveAudit: Sendable, Equatable {
    /// The profile the devices are judged against; nil: each its own.
    public var profile: String?
    public init(profile: String?) { self.profile = profile }
}

/// A command that the fleet runner carries out on each device: running it
/// is running its step on the devices named or selected.
public protocol DeviceStepCommand: ConsoleCommand {}

extension DeviceStepCommand {
    public var isDeviceStep: Bool { true }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.runDeviceSteps([located], on: located.devices.isEmpty ? nil : located.devices)
    }
}
