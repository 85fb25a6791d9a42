import FoundationEssentials
import InventorySync

#if canImport(Glibc)
    import Glibc
#endif

/// The command line, parsed: global options (each with an environment
/// variable) and what to do.
public struct Invocation: Sendable, Equatable {
    public enum Bus: Sendable, Equatable {
        case system, session
        case address(String)
    }

    public enum Mode: Sendable, Equatable {
        /// No command: the REPL on a terminal, else commands from stdin.
        case interactive
        case run(file: String, overrides: [String: String], dryRun: Bool)
        /// Any REPL command once (its words, as given).
        case oneShot([String])
        case help
        case version
    }

    /// A simulated bench for this run (`--sim N`, `--sim-fleet FILE`).
    public struct Simulation: Sendable, Equatable {
        public var count: Int?
        public var fleetFile: String?
        public var stateFile: String?
        /// Extra `beaconbench-sim` options (`--sim-option=--latency=realistic`).
        public var options: [String] = []
    }

    public var bus: Bus = .system
    public var adapter: String?
    public var inventoryPath: String?
    /// Whether `--inventory` names a PostgreSQL server (read commands only).
    public var inventoryIsServer: Bool { inventoryPath.map(ServerInventory.isServerURL) ?? false }
    public var profileDirectories: [String] = []
    /// The shared server asked for identities (`--server`), `none` for none;
    /// nil: the one the last `sync --to` used.
    public var server: String?
    public var concurrency: Int?
    /// `--no-adapter-reset`: a wedged adapter is never power-cycled.
    public var adapterResets = true
    public var json = false
    /// `--dry-run`: nothing is written to a beacon; what would change is shown.
    public var dryRun = false
    /// `--checkpoint`: a signed checkpoint of the ledger when the run ends.
    public var checkpoint = false
    public var color = true
    public var verbose = false
    /// `--require-tls` (BEACONBENCH_REQUIRE_TLS=1): a server not reached
    /// over verified TLS is refused, not warned about.
    public var requireTLS = false
    public var simulation: Simulation?
    public var mode: Mode = .interactive

    public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
        public var message: String
        public init(message: String) { self.message = message }
        public var description: String { "beaconbench: \(message) (see beaconbench --help)" }
    }

    public static let usage = """
        usage: beaconbench [OPTIONS]                      the REPL (commands from stdin when it is not a terminal)
               beaconbench [OPTIONS] run FILE [--set NAME=VALUE]… [--dry-run]
               beaconbench [OPTIONS] COMMAND [ARGS…]      one command, then exit

        Provisions SBeacon vehicle beacons over BlueZ: scan, select, check, sync
        the clock, calibrate, set the identity, apply threshold profiles and read
        them back; audits and an SQLite inventory of everything done.

        options (environment variable in brackets):
          --bus system|session|ADDRESS  the D-Bus bus of bluetoothd (default system) [BEACONBENCH_BUS]
          --adapter hciN                the adapter (default: the first powered one) [BEACONBENCH_ADAPTER]
          --inventory PATH|URL          the SQLite inventory (default $XDG_DATA_HOME/beaconbench/inventory.sqlite),
                                        or postgresql://… to read a shared server (inventory, log, audit)
                                        [BEACONBENCH_INVENTORY]
          --profiles DIR                a profile directory, repeatable (default ./profiles when present, else
                                        $XDG_CONFIG_HOME/beaconbench/profiles; the shipped ones always)
                                        [BEACONBENCH_PROFILES, colon-separated]
          --server URL|none             the shared PostgreSQL server that hands out identities fleet-wide
                                        (default: the last 'sync --to' server) [BEACONBENCH_SERVER]
          --concurrency N               devices worked on at once (default 5, an adapter's connection slots)
                                        [BEACONBENCH_CONCURRENCY]
          --no-adapter-reset            never power-cycle a wedged adapter (docs/reliability.md)
          --require-tls                 refuse a server that is not local unless sslmode=verify-full or
                                        verify-ca (else a warning) [BEACONBENCH_REQUIRE_TLS=1]
          --json                        machine-readable output: one JSON object per line (docs/json.md)
                                        [BEACONBENCH_JSON=1]
          --dry-run                     write nothing to a beacon: show what would change
          --checkpoint                  sign a checkpoint of the ledger when the run ends (ledger checkpoint;
                                        the key and name from BEACONBENCH_LEDGER_KEY, BEACONBENCH_LEDGER_SIGNER)
          --no-color                    no colour (also when NO_COLOR is set or output is not a terminal)
          -v, --verbose                 every step of every device, not just each device's end
                                        [BEACONBENCH_VERBOSE=1]
          --sim N                       run against N simulated beacons: a private dbus-daemon and
                                        beaconbench-sim for this run only; recorded in an inventory of
                                        its own ($XDG_DATA_HOME/beaconbench/simulated.sqlite) unless
                                        --inventory is given
          --sim-fleet FILE              the same, with the beacons described in FILE
          --sim-state FILE              keep the simulated fleet's state in FILE across runs
          --sim-option OPTION           pass OPTION to beaconbench-sim (e.g. --sim-option=--latency=realistic)
          --version, --help

        Options go anywhere on the line, the command's own included; `--` ends them.
        `beaconbench COMMAND --help` shows one command.

        exit status: 0 all went well; 1 bad usage or input (nothing was touched);
        2 some devices failed, an audit found problems, or values read back from the
        inventory or the server failed their checks; 3 the bus, BlueZ, the adapter
        or the inventory is unusable; 130 interrupted (Ctrl-C); 143 stopped
        by SIGTERM (sync says what it sent).

        Type `help` in the REPL, `man beaconbench`, or see docs/batch-language.md.
        """

    /// Parses `arguments` (without the program name) over `environment`.
    public static func parse(
        _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(UsageError) -> Invocation {
        var invocation = Invocation()
        try invocation.applyEnvironment(environment)
        var index = 0
        func value(_ option: String) throws(UsageError) -> String {
            if let equals = arguments[index].firstIndex(of: "=") {
                return String(arguments[index][arguments[index].index(after: equals)...])
            }
            index += 1
            guard index < arguments.count else { throw UsageError(message: "\(option) needs a value") }
            return arguments[index]
        }
        // Global options go anywhere before `--`; the other words are the
        // command's (its own options included, which its line parser checks).
        var commandWords: [String] = []
        var runArguments: [String]?
        var optionsEnded = false
        var helpAsked = false
        while index < arguments.count {
            let argument = arguments[index]
            if optionsEnded {
                if runArguments != nil {
                    runArguments?.append(argument)
                } else {
                    commandWords.append(argument)
                    // The command's own line parser ends options there too.
                    if commandWords.count == 1 { commandWords.append("--") }
                }
                index += 1
                continue
            }
            let name = argument.split(separator: "=", maxSplits: 1).first.map(String.init) ?? argument
            switch name {
            case "--":
                optionsEnded = true
                if !commandWords.isEmpty { commandWords.append("--") }
            case "--bus": invocation.bus = Self.bus(try value(name))
            case "--adapter": invocation.adapter = try Self.adapter(try value(name))
            case "--inventory": invocation.inventoryPath = try value(name)
            case "--server": invocation.server = try value(name)
            case "--profiles": invocation.profileDirectories.append(try value(name))
            case "--concurrency": invocation.concurrency = try Self.concurrency(try value(name))
            case "--no-adapter-reset": invocation.adapterResets = false
            case "--json": invocation.json = true
            case "--require-tls": invocation.requireTLS = true
            case "--dry-run": invocation.dryRun = true
            case "--checkpoint": invocation.checkpoint = true
            case "--no-color", "--no-colour": invocation.color = false
            case "-v", "--verbose": invocation.verbose = true
            case "--sim":
                let text = try value(name)
                guard let count = ValueGrammar.whole(text, signed: false), (1...10_000).contains(count) else {
                    throw UsageError(message: "--sim wants a number of beacons 1–10000, got '\(text)'")
                }
                invocation.simulation = invocation.simulation ?? Simulation()
                invocation.simulation?.count = count
            case "--sim-fleet":
                invocation.simulation = invocation.simulation ?? Simulation()
                invocation.simulation?.fleetFile = try value(name)
            case "--sim-state":
                invocation.simulation = invocation.simulation ?? Simulation()
                invocation.simulation?.stateFile = try value(name)
            case "--sim-option":
                invocation.simulation = invocation.simulation ?? Simulation()
                invocation.simulation?.options.append(try value(name))
            case "--version": invocation.mode = .version
            case "-h", "--help": helpAsked = true
            case "run" where commandWords.isEmpty && runArguments == nil: runArguments = []
            default:
                if runArguments != nil {
                    // `--set NAME=VALUE` takes the next word.
                    runArguments?.append(argument)
                    if argument == "--set", index + 1 < arguments.count {
                        index += 1
                        runArguments?.append(arguments[index])
                    }
                } else if commandWords.isEmpty, argument.hasPrefix("-") {
                    throw UsageError(message: "unknown option '\(argument)'")
                } else {
                    commandWords.append(argument)
                }
            }
            index += 1
        }
        // `beaconbench scan --help` is `help scan`.
        if helpAsked {
            if let first = commandWords.first {
                invocation.mode = .oneShot(["help", first])
                return invocation
            }
            invocation.mode = .help
        }
        if invocation.mode == .help || invocation.mode == .version { return invocation }
        try invocation.checkLocators()
        if let simulation = invocation.simulation {
            guard simulation.count != nil || simulation.fleetFile != nil || simulation.stateFile != nil else {
                throw UsageError(message: "--sim-option needs --sim N, --sim-fleet FILE or --sim-state FILE")
            }
            if simulation.count != nil, simulation.fleetFile != nil {
                throw UsageError(message: "--sim and --sim-fleet exclude each other")
            }
        }
        if let runArguments {
            invocation.mode = try Self.run(runArguments, dryRun: invocation.dryRun)
        } else if !commandWords.isEmpty {
            invocation.mode = .oneShot(commandWords)
        }
        return invocation
    }

    /// `--inventory` and `--server` (or their environment variables):
    /// a server locator or a path, nothing in between (`ServerLocator`);
    /// the message never holds the password.
    func checkLocators() throws(UsageError) {
        if let path = inventoryPath, case .invalid(let reason) = ServerLocator.kind(path) {
            throw UsageError(message: "--inventory is neither a path nor a PostgreSQL server: \(reason)")
        }
        if let server, server != "none", case .invalid(let reason) = ServerLocator.kind(server) {
            throw UsageError(message: "--server is not a PostgreSQL URL or connection string: \(reason)")
        }
        if let server, server != "none", ServerLocator.kind(server) == .path {
            throw UsageError(
                message:
                    "--server wants a PostgreSQL URL (postgresql://…) or key=value connection string, not \(ServerLocator.shown(server))"
            )
        }
    }

    mutating func applyEnvironment(_ environment: [String: String]) throws(UsageError) {
        if let text = environment["BEACONBENCH_BUS"], !text.isEmpty { bus = Self.bus(text) }
        if let text = environment["BEACONBENCH_ADAPTER"], !text.isEmpty { adapter = try Self.adapter(text) }
        if let text = environment["BEACONBENCH_INVENTORY"], !text.isEmpty { inventoryPath = text }
        if let text = environment["BEACONBENCH_SERVER"], !text.isEmpty { server = text }
        if let text = environment["BEACONBENCH_PROFILES"], !text.isEmpty {
            profileDirectories = text.split(separator: ":").map(String.init)
        }
        if let text = environment["BEACONBENCH_CONCURRENCY"], !text.isEmpty {
            concurrency = try Self.concurrency(text)
        }
        if environment["BEACONBENCH_JSON"].map(Self.isTrue) ?? false { json = true }
        if environment["BEACONBENCH_VERBOSE"].map(Self.isTrue) ?? false { verbose = true }
        if environment["BEACONBENCH_REQUIRE_TLS"].map(Self.isTrue) ?? false { requireTLS = true }
        if let text = environment["NO_COLOR"], !text.isEmpty { color = false }
    }

    static func isTrue(_ text: String) -> Bool { ["1", "true", "yes", "on"].contains(text.lowercased()) }

    static func bus(_ text: String) -> Bus {
        switch text {
        case "system": .system
        case "session": .session
        default: .address(text)
        }
    }

    static func adapter(_ text: String) throws(UsageError) -> String {
        guard text.hasPrefix("hci"), ValueGrammar.whole(text.dropFirst(3), signed: false) != nil else {
            throw UsageError(message: "--adapter wants hciN, got '\(text)'")
        }
        return text
    }

    static func concurrency(_ text: String) throws(UsageError) -> Int {
        guard let value = ValueGrammar.whole(text, signed: false), (1...64).contains(value) else {
            throw UsageError(message: "--concurrency wants 1–64, got '\(text)'")
        }
        return value
    }

    static func run(_ arguments: [String], dryRun: Bool = false) throws(UsageError) -> Mode {
        var file: String?
        var overrides: [String: String] = [:]
        var dryRun = dryRun
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--dry-run": dryRun = true
            case "--set":
                index += 1
                guard index < arguments.count else { throw UsageError(message: "--set needs NAME=VALUE") }
                try Self.set(arguments[index], into: &overrides)
            case let text where text.hasPrefix("--set="):
                try Self.set(String(text.dropFirst(6)), into: &overrides)
            case let text where text.hasPrefix("-") && text != "-":
                throw UsageError(message: "unknown option '\(text)' for run (--set NAME=VALUE, --dry-run)")
            default:
                guard file == nil else { throw UsageError(message: "run takes one batch file, got '\(argument)' too") }
                file = argument
            }
            index += 1
        }
        guard let file else { throw UsageError(message: "run needs a batch file (run FILE)") }
        return .run(file: file, overrides: overrides, dryRun: dryRun)
    }

    static func set(_ text: String, into overrides: inout [String: String]) throws(UsageError) {
        let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty,
            parts[0].allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" })
        else { throw UsageError(message: "--set wants NAME=VALUE, got '\(text)'") }
        guard overrides[parts[0]] == nil else {
            throw UsageError(message: "--set \(parts[0]) is given twice; set each variable once")
        }
        overrides[parts[0]] = parts[1]
    }
}

extension Terminal {
    /// The terminal of this invocation: its colour, `--json` for the whole
    /// run (the `Renderer` reads it), `--verbose`.
    convenience init(for invocation: Invocation) {
        self.init(color: invocation.color, json: invocation.json, verbose: invocation.verbose)
    }
}
