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
    public var command: any ConsoleCommand
    public var line: Int
    public var column: Int
    /// Devices named on the line (`info a3b5c7d9`): the command acts on
    /// them instead of the selection.
    public var devices: [DeviceSelector] = []
    /// `--dry-run` on the line: nothing written to a beacon.
    public var dryRun = false
    /// `--json` on the line: this command's output as JSON.
    public var json = false

    public init(
        command: any ConsoleCommand, line: Int, column: Int, devices: [DeviceSelector] = [], dryRun: Bool = false,
        json: Bool = false
    ) {
        self.command = command
        self.line = line
        self.column = column
        self.devices = devices
        self.dryRun = dryRun
        self.json = json
    }

    public static func == (a: LocatedCommand, b: LocatedCommand) -> Bool {
        AnyHashable(a.command) == AnyHashable(b.command) && a.line == b.line && a.column == b.column
            && a.devices == b.devices && a.dryRun == b.dryRun && a.json == b.json
    }

    /// The command's spec.
    public var spec: CommandSpec { type(of: command).spec }

    /// Whether the command ends the run (`quit`).
    public var isQuit: Bool { spec.endsTheRun }
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
    /// Whether a `--set` the text never uses is an error (a batch file);
    /// a REPL line has no `--set`.
    public var checkOverridesUsed = true

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
        var used = Set<String>()
        for logical in try logicalLines(text) {
            let (expanded, depth) = try expand(
                logical, variables: variables, depths: depths, total: &expansion, used: &used)
            let tokens = try tokenize(expanded)
            guard let first = tokens.first else { continue }
            let located = try CommandTable.parse(tokens, parser: self)
            if let set = located.command.definesVariable {
                variables[set.name] = set.value
                used.insert(set.name)
                depths[set.name] = depth + 1
                if depth + 1 > limits.nestingDepth {
                    throw fail(
                        first,
                        "\(quoted(set.name)) is defined through \(depth + 1) levels of variables (at most \(limits.nestingDepth))"
                    )
                }
            }
            commands.append(located)
        }
        // A --set the batch never uses is a typo, not a choice.
        if checkOverridesUsed {
            for name in overrides.keys.sorted() where !used.contains(name) {
                let known = Array(used)
                throw fail(
                    0, 0,
                    "--set \(quoted(name)): the batch uses no variable of that name"
                        + (CommandTable.suggestion(name, among: known).map { " (did you mean '\($0)'?)" }
                            ?? (known.isEmpty ? "" : " (it uses \(known.sorted().joined(separator: ", ")))")))
            }
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
        var used = Set<String>()
        return try expand(line, variables: variables, depths: depths, total: &total, used: &used)
    }

    /// `expand`, also adding the names of the variables used to `used`.
    func expand(
        _ line: [Placed], variables: [String: String], depths: [String: Int] = [:], total: inout Int,
        used: inout Set<String>
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
            used.insert(name)
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

    // MARK: Values a command checks

    func profileName(_ token: Token) throws(BatchError) -> String {
        guard profiles.contains(token.text) else {
            throw fail(token, "no profile \(quoted(token.text)) (known: \(profiles.sorted().joined(separator: ", ")))")
        }
        return token.text
    }

    /// `10s`, `500ms`, `2m`, `1h`, or a number of seconds, in decimal
    /// (`ValueGrammar.duration`: no hex, exponent, sign, `inf` or `nan`).
    func duration(_ token: Token, range: ClosedRange<Double>) throws(BatchError) -> Double {
        guard let seconds = ValueGrammar.duration(token.text), range.contains(seconds) else {
            throw fail(
                token,
                "\(quoted(token.text)) is not a duration in \(Int(range.lowerBound * 1000)) ms–\(Int(range.upperBound)) s (decimal digits and a unit: 10s, 500ms, 2m, 1h; none is seconds)"
            )
        }
        return seconds
    }

    func requirement(_ token: Token) throws(BatchError) -> RequireCommand.Requirement {
        let text = token.text
        if text.hasPrefix("battery>=") {
            guard let value = ValueGrammar.whole(text.dropFirst(9), as: UInt8.self), value <= 100 else {
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

    func selector(_ token: Token) throws(BatchError) -> DeviceSelector {
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
            guard let value = ValueGrammar.whole(text.dropFirst(8), as: UInt8.self), value <= 100 else {
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
            let bounds = text.dropFirst(6).split(separator: "-", omittingEmptySubsequences: false).map {
                ValueGrammar.whole($0, as: UInt16.self)
            }
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
        if let address = MACEnding.address(text) { return .address(address) }
        if text.count == 8, text.allSatisfy(\.isHexDigit) { return .macEnding(text.lowercased()) }
        return nil
    }

    /// Edit distance, for "did you mean".
    static func distance(_ a: String, _ b: String) -> Int {
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
