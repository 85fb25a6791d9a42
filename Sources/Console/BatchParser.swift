import InventorySync
import Profiles
import SBeaconProtocol
import SafeText
import Workbench

/// An error in a batch (or a REPL line): where, and what; printed as
/// `FILE:LINE:COL: error: message` so that editors jump to it.
public struct BatchError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int
    public var message: String

    public var description: String { "\(file):\(line):\(column): error: \(message)" }
}

/// A command with the place it was written.
public struct LocatedCommand: Sendable, Equatable {
    public var command: Command
    public var line: Int
    public var column: Int
    /// Devices named on the line (`info a3b5c7d9`): the command acts on
    /// them instead of the selection.
    public var devices: [DeviceSelector] = []

    public init(command: Command, line: Int, column: Int, devices: [DeviceSelector] = []) {
        self.command = command
        self.line = line
        self.column = column
        self.devices = devices
    }
}

/// The batch language (docs/batch-language.md): one command per line, `#`
/// comments, `\` at the end of a line continues it, `${name}` variables
/// from `--set` or `set name value`, double quotes around values with
/// spaces. The whole text is checked before anything runs.
public struct BatchParser {
    public var file: String
    /// `--set` values: they win over `set` lines.
    public var overrides: [String: String]
    /// The profiles that exist, to check `apply`, `verify`, `audit` and
    /// `select profile=` names.
    public var profiles: Set<String>
    /// The profiles' identities, to check `identity PROFILE`.
    public var identityRules: [String: Profile.IdentityRule]
    /// Variables set before this text (earlier REPL lines); `set` lines
    /// and `--set` win over them.
    public var variables: [String: String]

    public init(
        file: String, overrides: [String: String] = [:], profiles: Set<String>,
        identityRules: [String: Profile.IdentityRule] = [:], variables: [String: String] = [:]
    ) {
        self.file = file
        self.overrides = overrides
        self.profiles = profiles
        self.identityRules = identityRules
        self.variables = variables
    }

    /// A parser that knows these profiles (names and identities).
    public init(
        file: String, overrides: [String: String] = [:], profiles: [String: Profile], variables: [String: String] = [:]
    ) {
        self.init(
            file: file, overrides: overrides, profiles: Set(profiles.keys),
            identityRules: profiles.compactMapValues(\.identity), variables: variables)
    }

    /// A character of a logical line, with where it was written.
    struct Placed {
        var character: Character
        var line: Int
        var column: Int
    }

    struct Token {
        var text: String
        var line: Int
        var column: Int
    }

    /// What a batch may not exceed (docs/batch-language.md, "Limits"): far
    /// beyond any real batch, far below what could exhaust memory. Each is
    /// an error naming the file and line.
    public struct Limits: Sendable {
        /// The batch file (and standard input).
        public static let fileBytes = 1 << 20
        /// A line as written (physical lines joined by `\`), in characters.
        public var lineCharacters = 64 * 1024
        /// A line once its variables are expanded, in characters.
        public var expandedLineCharacters = 64 * 1024
        /// All expansion in one text, in characters.
        public var expansionCharacters = 1 << 20
        /// Variables defined through variables: `set b ${a}` is depth 2.
        public var nestingDepth = 8
        /// A variable's name.
        public static let nameCharacters = 64

        public init() {}
    }

    /// The limits this parser keeps (the fuzzer makes them smaller).
    public var limits = Limits()

    /// `text` as a message quotes it: the first characters only, made
    /// visible (a file can hold any bytes).
    func quoted(_ text: some StringProtocol) -> String { "'" + Visible.text(text, limit: 60) + "'" }

    /// Parses and checks a whole text.
    /// - Throws: the first `BatchError`, with its line and column.
    public func parse(_ text: String) throws(BatchError) -> [LocatedCommand] {
        var variables = self.variables
        // How deep each variable's definition goes through others.
        var depths: [String: Int] = [:]
        var expansion = 0
        var commands: [LocatedCommand] = []
        for (name, value) in overrides
        where value.count > limits.expandedLineCharacters || name.count > Limits.nameCharacters {
            throw fail(0, 0, "--set \(quoted(name)): longer than \(limits.expandedLineCharacters) characters")
        }
        for logical in try logicalLines(text) {
            let (expanded, depth) = try expand(logical, variables: variables, depths: depths, total: &expansion)
            let tokens = try tokenize(expanded)
            guard let first = tokens.first else { continue }
            var arguments = Array(tokens.dropFirst())
            var devices: [DeviceSelector] = []
            if Command.deviceCommandNames.contains(first.text) {
                while let last = arguments.last, let device = deviceName(last.text) {
                    devices.insert(device, at: 0)
                    arguments.removeLast()
                }
            }
            let command = try parseCommand(first, arguments)
            if !devices.isEmpty, !command.isDeviceStep, first.text != "watch" {
                throw fail(first, "\(quoted(first.text)) does not act on a device named on the line")
            }
            if case .set(let name, let value) = command {
                variables[name] = value
                depths[name] = depth + 1
                if depth + 1 > limits.nestingDepth {
                    throw fail(
                        first,
                        "\(quoted(name)) is defined through \(depth + 1) levels of variables (at most \(limits.nestingDepth))"
                    )
                }
            }
            commands.append(LocatedCommand(command: command, line: first.line, column: first.column, devices: devices))
        }
        return commands
    }

    func fail(_ line: Int, _ column: Int, _ message: String) -> BatchError {
        BatchError(file: file, line: line, column: column, message: message)
    }

    func fail(_ token: Token, _ message: String) -> BatchError { fail(token.line, token.column, message) }

    /// Physical lines joined where one ends in `\`.
    /// - Throws: when the text or a line is longer than `Limits` allow.
    func logicalLines(_ text: String) throws(BatchError) -> [[Placed]] {
        guard text.utf8.count <= Limits.fileBytes else {
            throw fail(1, 1, "the batch is larger than \(Limits.fileBytes / 1024) KiB")
        }
        var lines: [[Placed]] = []
        var current: [Placed] = []
        var lineNumber = 1
        let physical = text.split(separator: "\n", omittingEmptySubsequences: false)
        for raw in physical {
            guard current.count + raw.count <= limits.lineCharacters else {
                throw fail(
                    lineNumber, 1,
                    "the line is longer than \(limits.lineCharacters) characters (it begins \(quoted(raw)))")
            }
            var characters = raw.enumerated().map { Placed(character: $1, line: lineNumber, column: $0 + 1) }
            if characters.last?.character == "\r" { characters.removeLast() }
            if characters.last?.character == "\\" {
                characters.removeLast()
                current += characters + [Placed(character: " ", line: lineNumber, column: characters.count + 1)]
            } else {
                current += characters
                lines.append(current)
                current = []
            }
            lineNumber += 1
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }

    /// Replaces `${name}` (outside comments) with its value; the value's
    /// characters keep the position of the `$`. Also answers how deep the
    /// deepest variable used goes, and adds what it expanded to `total`.
    /// - Throws: on an unknown or malformed variable, or past `Limits`.
    func expand(
        _ line: [Placed], variables: [String: String], depths: [String: Int] = [:], total: inout Int
    ) throws(BatchError) -> (line: [Placed], depth: Int) {
        var out: [Placed] = []
        var depth = 0
        var index = 0
        var quoted = false
        while index < line.count {
            let placed = line[index]
            if placed.character == "\"" { quoted.toggle() }
            if placed.character == "#", !quoted { return (out, depth) }
            guard placed.character == "$", index + 1 < line.count, line[index + 1].character == "{" else {
                out.append(placed)
                index += 1
                continue
            }
            guard let close = line[(index + 2)...].firstIndex(where: { $0.character == "}" }) else {
                throw fail(placed.line, placed.column, "'${' without a closing '}'")
            }
            let name = String(line[(index + 2)..<close].map(\.character))
            guard !name.isEmpty, name.count <= Limits.nameCharacters,
                name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" })
            else {
                throw fail(placed.line, placed.column, "\(self.quoted(name)) is not a variable name")
            }
            guard let value = overrides[name] ?? variables[name] else {
                throw fail(
                    placed.line, placed.column,
                    "variable \(self.quoted(name)) is not set (use --set \(name)=… or 'set \(name) …')"
                )
            }
            let length = value.count
            guard out.count + length + (line.count - close - 1) <= limits.expandedLineCharacters else {
                throw fail(
                    placed.line, placed.column,
                    "the line is longer than \(limits.expandedLineCharacters) characters once ${\(name)} is expanded")
            }
            total += length
            guard total <= limits.expansionCharacters else {
                throw fail(
                    placed.line, placed.column,
                    "variables expand to more than \(limits.expansionCharacters) characters in all")
            }
            out += value.map { Placed(character: $0, line: placed.line, column: placed.column) }
            depth = max(depth, overrides[name] == nil ? depths[name] ?? 1 : 1)
            index = close + 1
        }
        return (out, depth)
    }

    /// Splits on blanks; double quotes group, `\"` inside them is a quote.
    func tokenize(_ line: [Placed]) throws(BatchError) -> [Token] {
        var tokens: [Token] = []
        var index = 0
        while index < line.count {
            let start = line[index]
            if start.character == " " || start.character == "\t" {
                index += 1
                continue
            }
            var text = ""
            var quoted = false
            while index < line.count {
                let placed = line[index]
                if !quoted, placed.character == " " || placed.character == "\t" { break }
                if placed.character == "\"" {
                    quoted.toggle()
                } else if quoted, placed.character == "\\", index + 1 < line.count, line[index + 1].character == "\"" {
                    text.append("\"")
                    index += 1
                } else {
                    text.append(placed.character)
                }
                index += 1
            }
            if quoted { throw fail(start.line, start.column, "a quote is not closed") }
            tokens.append(Token(text: text, line: start.line, column: start.column))
        }
        return tokens
    }

    // MARK: Commands

    func parseCommand(_ name: Token, _ arguments: [Token]) throws(BatchError) -> Command {
        func none() throws(BatchError) {
            if let extra = arguments.first {
                throw fail(extra, "\(quoted(name.text)) takes no argument, got \(quoted(extra.text))")
            }
        }
        func atMost(_ count: Int) throws(BatchError) {
            if arguments.count > count {
                throw fail(arguments[count], "unexpected \(quoted(arguments[count].text)) (usage: \(usage(name.text)))")
            }
        }
        func clearFlag() throws(BatchError) -> Bool {
            try atMost(1)
            guard let flag = arguments.first else { return false }
            guard flag.text == "--clear" else { throw fail(flag, "unknown option \(quoted(flag.text)) (only --clear)") }
            return true
        }
        switch name.text {
        case "scan":
            if arguments.count == 1, arguments[0].text == "on" || arguments[0].text == "off" {
                return .backgroundScan(arguments[0].text == "on")
            }
            var seconds = 10.0
            var floor: Int16?
            var index = 0
            while index < arguments.count {
                let argument = arguments[index]
                if argument.text == "--rssi" {
                    guard index + 1 < arguments.count else { throw fail(argument, "--rssi needs a value in -127–0") }
                    let value = arguments[index + 1]
                    guard let number = Int16(value.text), (-127...0).contains(number) else {
                        throw fail(value, "--rssi wants dBm in -127–0, got \(quoted(value.text))")
                    }
                    floor = number
                    index += 2
                } else if argument.text.hasPrefix("--") {
                    throw fail(argument, "unknown option \(quoted(argument.text)) (scan takes --rssi N)")
                } else {
                    seconds = try duration(argument, range: 0.1...3600)
                    index += 1
                }
            }
            return .scan(seconds: seconds, rssiFloor: floor)
        case "devices":
            try atMost(1)
            return .devices(filter: arguments.first?.text)
        case "select":
            guard !arguments.isEmpty else { throw fail(name, "select needs a selector (usage: \(usage("select")))") }
            var selectors: [Command.Selector] = []
            for argument in arguments { selectors.append(try selector(argument)) }
            return .select(selectors)
        case "info": try none(); return .info
        case "sync-time": try none(); return .syncTime
        case "calibrate": try none(); return .calibrate
        case "reboot": try none(); return .reboot
        case "quit", "exit": try none(); return .quit
        case "require":
            guard arguments.count == 1 else {
                throw fail(
                    arguments.dropFirst().first ?? name, "require takes one condition: battery>=N or firmware>=X.Y.Z")
            }
            return .require(try requirement(arguments[0]))
        case "identity":
            // identity [PROFILE] [major=N|profile] [minor=auto|keep|N|profile]
            var profile: Token?
            var major: UInt16?
            var minor: Command.MinorChoice?
            var majorFromProfile: Token?
            for argument in arguments {
                let parts = argument.text.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2 else {
                    guard profile == nil else {
                        throw fail(argument, "identity takes one profile name (usage: \(usage("identity")))")
                    }
                    _ = try profileName(argument)
                    profile = argument
                    continue
                }
                switch parts[0] {
                case "major":
                    if parts[1] == "profile" {
                        major = nil
                        majorFromProfile = argument
                    } else if let value = UInt16(parts[1]) {
                        major = value
                        majorFromProfile = nil
                    } else {
                        throw fail(argument, "major must be 0–65535 or 'profile', got \(quoted(parts[1]))")
                    }
                case "minor":
                    switch parts[1] {
                    case "auto", "sequential": minor = .auto
                    case "keep": minor = .keep
                    case "profile": minor = nil
                    default:
                        guard let value = UInt16(parts[1]) else {
                            throw fail(
                                argument, "minor must be auto, keep, 'profile' or 0–65535, got \(quoted(parts[1]))")
                        }
                        minor = .fixed(value)
                    }
                default:
                    throw fail(
                        argument, "unknown key \(quoted(parts[0])) (identity takes a profile, major= and minor=)")
                }
            }
            if major == nil {
                guard let profile else {
                    throw fail(
                        majorFromProfile ?? name,
                        "identity needs a profile or major=N (usage: \(usage("identity")))")
                }
                guard identityRules[profile.text] != nil else {
                    throw fail(profile, "profile \(quoted(profile.text)) gives no identity: write major=N")
                }
            }
            return .identity(profile: profile?.text, major: major, minor: minor)
        case "apply", "verify":
            guard arguments.count == 1 else {
                throw fail(arguments.dropFirst().first ?? name, "\(name.text) takes one profile name")
            }
            let profile = try profileName(arguments[0])
            return name.text == "apply" ? .apply(profile: profile) : .verify(profile: profile)
        case "audit":
            var profile: String?
            var source = Command.AuditSource.inventory
            for argument in arguments {
                switch argument.text {
                case "--live": source = .live
                case "--passive": source = .passive
                case let text where text.hasPrefix("--"):
                    throw fail(argument, "unknown option \(quoted(text)) (audit takes --live or --passive)")
                default:
                    guard profile == nil else { throw fail(argument, "audit takes one profile name") }
                    profile = try profileName(argument)
                }
            }
            return .audit(profile: profile, source: source)
        case "trips": return .trips(clear: try clearFlag())
        case "events": return .events(clear: try clearFlag())
        case "incidents": return .incidents(clear: try clearFlag())
        case "watch":
            try atMost(1)
            return .watch(
                seconds: try arguments.first.map { token throws(BatchError) in try duration(token, range: 0.1...86_400)
                } ?? 30)
        case "factory-reset":
            guard arguments.map(\.text) == ["--yes"] else {
                throw fail(arguments.first ?? name, "factory-reset erases a beacon: write 'factory-reset --yes'")
            }
            return .factoryReset
        case "inventory":
            switch arguments.map(\.text) {
            case ["list"]: return .inventory(.list)
            case ["export", "--csv"]: return .inventory(.exportCSV)
            case ["export", "--json"]: return .inventory(.exportJSON)
            case let words where words.count == 2 && words[0] == "show": return .inventory(.show(words[1]))
            default: throw fail(arguments.first ?? name, "usage: \(usage("inventory"))")
            }
        case "log":
            try atMost(1)
            return .log(device: arguments.first?.text)
        case "profiles":
            switch arguments.map(\.text) {
            case ["list"], []: return .profiles(.list)
            case ["check"]: return .profiles(.check)
            case let words where words.count == 2 && words[0] == "show":
                return .profiles(.show(try profileName(arguments[1])))
            default: throw fail(arguments.first ?? name, "usage: \(usage("profiles"))")
            }
        case "help":
            try atMost(1)
            if let topic = arguments.first, CommandSpec.named(topic.text) == nil {
                throw fail(topic, "no command \(quoted(topic.text))")
            }
            return .help(command: arguments.first?.text)
        case "sync":
            guard arguments.count == 2, arguments[0].text == "--to" else {
                throw fail(arguments.first ?? name, "usage: \(usage("sync"))")
            }
            let url = arguments[1].text
            guard ServerInventory.isServerURL(url) || url.contains("=") else {
                throw fail(arguments[1], "sync wants a PostgreSQL URL (postgresql://…) or connection string")
            }
            return .sync(to: url)
        case "set":
            guard arguments.count == 2 else { throw fail(arguments.first ?? name, "usage: set NAME VALUE") }
            guard arguments[0].text.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
                throw fail(arguments[0], "\(quoted(arguments[0].text)) is not a variable name")
            }
            return .set(name: arguments[0].text, value: overrides[arguments[0].text] ?? arguments[1].text)
        default:
            let suggestion = CommandSpec.all.map(\.name).min { distance($0, name.text) < distance($1, name.text) }
            throw fail(
                name,
                "unknown command \(quoted(name.text))" + (suggestion.map { " (did you mean \(quoted($0))?)" } ?? ""))
        }
    }

    func usage(_ name: String) -> String { CommandSpec.named(name)?.usage ?? name }

    func profileName(_ token: Token) throws(BatchError) -> String {
        guard profiles.contains(token.text) else {
            throw fail(token, "no profile \(quoted(token.text)) (known: \(profiles.sorted().joined(separator: ", ")))")
        }
        return token.text
    }

    /// `10s`, `500ms`, `2m`, or a number of seconds.
    func duration(_ token: Token, range: ClosedRange<Double>) throws(BatchError) -> Double {
        let text = token.text
        let (number, scale): (Substring, Double) =
            text.hasSuffix("ms")
            ? (text.dropLast(2), 0.001)
            : text.hasSuffix("s")
                ? (text.dropLast(), 1)
                : text.hasSuffix("m") ? (text.dropLast(), 60) : (Substring(text), 1)
        guard let value = Double(number), value.isFinite, range.contains(value * scale) else {
            throw fail(
                token,
                "\(quoted(text)) is not a duration in \(Int(range.lowerBound * 1000)) ms–\(Int(range.upperBound)) s (write 10s, 500ms or 2m)"
            )
        }
        return value * scale
    }

    func requirement(_ token: Token) throws(BatchError) -> Command.Requirement {
        let text = token.text
        if text.hasPrefix("battery>=") {
            guard let value = UInt8(text.dropFirst(9)), value <= 100 else {
                throw fail(token, "battery>= wants a percentage 0–100, got \(quoted(text.dropFirst(9)))")
            }
            return .battery(atLeast: value)
        }
        if text.hasPrefix("firmware>=") {
            guard let version = try? FirmwareVersion(String(text.dropFirst(10))) else {
                throw fail(token, "firmware>= wants a version like 1.0.8, got \(quoted(text.dropFirst(10)))")
            }
            return .firmware(atLeast: version)
        }
        throw fail(token, "unknown requirement \(quoted(text)) (battery>=N or firmware>=X.Y.Z)")
    }

    func selector(_ token: Token) throws(BatchError) -> Command.Selector {
        let text = token.text
        switch text {
        case "all": return .all
        case "new": return .new
        case "unprovisioned": return .unprovisioned
        case "in-range": return .inRange
        default: break
        }
        if text.hasPrefix("profile=") {
            return .profile(
                try profileName(Token(text: String(text.dropFirst(8)), line: token.line, column: token.column + 8)))
        }
        if text.hasPrefix("battery<") {
            guard let value = UInt8(text.dropFirst(8)), value <= 100 else {
                throw fail(token, "battery< wants a percentage 0–100, got \(quoted(text.dropFirst(8)))")
            }
            return .batteryBelow(value)
        }
        if text.hasPrefix("firmware<") {
            guard let version = try? FirmwareVersion(String(text.dropFirst(9))) else {
                throw fail(token, "firmware< wants a version like 1.0.8, got \(quoted(text.dropFirst(9)))")
            }
            return .firmwareBelow(version)
        }
        if text.hasPrefix("minor=") {
            let bounds = text.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false).map { UInt16($0) }
            guard bounds.count == 2, let low = bounds[0], let high = bounds[1], low <= high else {
                throw fail(token, "minor= wants a range A-B with A ≤ B in 0–65535, got \(quoted(text.dropFirst(6)))")
            }
            return .minorRange(low, high)
        }
        if let device = deviceName(text) { return device }
        throw fail(
            token,
            "unknown selector \(quoted(text)) (all, new, unprovisioned, in-range, profile=NAME, battery<N, firmware<X, minor=A-B, an address or a MAC ending)"
        )
    }

    /// An address (`A1:B2:A3:B5:C7:D9`) or a MAC ending (`a3b5c7d9`).
    func deviceName(_ text: String) -> DeviceSelector? {
        if text.count == 17, (try? MACEnding(address: text)) != nil { return .address(text.uppercased()) }
        if text.count == 8, text.allSatisfy(\.isHexDigit) { return .macEnding(text.lowercased()) }
        return nil
    }

    /// Edit distance, for "did you mean".
    func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1]
            for (j, y) in b.enumerated() {
                current.append(min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1)))
            }
            previous = current
        }
        return previous[b.count]
    }
}
