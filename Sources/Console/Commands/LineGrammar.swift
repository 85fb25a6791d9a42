import FoundationEssentials
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// A value checked against its `ValueKind`.
public enum ParsedValue: Sendable, Hashable {
    case flag
    case duration(Double)
    case integer(Int)
    case time(Date)
    case text(String)

    var text: String? {
        if case .text(let text) = self { return text }
        return nil
    }
}

/// The words of a line after its command's name, split by the command's
/// spec into operands, options (anywhere on the line; `--` ends them) and
/// devices named at the end, each value checked against its kind.
public struct ParsedArguments {
    public let spec: CommandSpec
    /// The command's name as written (for errors).
    let name: BatchParser.Token
    /// Operands in order, with their checked values.
    var operands: [(token: BatchParser.Token, value: ParsedValue)]
    /// Options given, by name (`--rssi`), with their checked values.
    var options: [String: (token: BatchParser.Token, value: ParsedValue)]
    public var devices: [DeviceSelector]
    /// The parser, for its checks (profiles, selectors, requirements).
    let parser: BatchParser

    public func flag(_ name: String) -> Bool { options[name] != nil }

    public func duration(_ name: String) -> Double? {
        if case .duration(let seconds)? = options[name]?.value { return seconds }
        return nil
    }

    public func integer(_ name: String) -> Int? {
        if case .integer(let value)? = options[name]?.value { return value }
        return nil
    }

    public func time(_ name: String) -> Date? {
        if case .time(let date)? = options[name]?.value { return date }
        return nil
    }

    public func text(_ name: String) -> String? { options[name]?.value.text }

    /// The operand at `index` as written.
    public func operand(_ index: Int) -> String? { index < operands.count ? operands[index].token.text : nil }

    public func operandDuration(_ index: Int) -> Double? {
        guard index < operands.count, case .duration(let seconds) = operands[index].value else { return nil }
        return seconds
    }

    public var operandTexts: [String] { operands.map(\.token.text) }

    func token(_ index: Int) -> BatchParser.Token { index < operands.count ? operands[index].token : name }

    /// An error at the operand `index` (or the command's name).
    func fail(at index: Int, _ message: String) -> BatchError { parser.fail(token(index), message) }

    func fail(_ token: BatchParser.Token, _ message: String) -> BatchError { parser.fail(token, message) }

    /// The operands checked one by one with `check` (selectors, requirements).
    func each<T>(_ check: (BatchParser.Token) throws(BatchError) -> T) throws(BatchError) -> [T] {
        var values: [T] = []
        for operand in operands { values.append(try check(operand.token)) }
        return values
    }
}

/// Reading a line's words with the command table.
extension CommandTable {
    /// The command a line's tokens name, built from its checked arguments;
    /// also whether the line asked for `--dry-run` and `--json`.
    static func parse(_ tokens: [BatchParser.Token], parser: BatchParser) throws(BatchError) -> LocatedCommand {
        let first = tokens[0]
        var rest = Array(tokens.dropFirst())
        let type: any ConsoleCommand.Type
        if let second = rest.first, let entry = named("\(first.text) \(second.text)") {
            type = entry
            rest.removeFirst()
        } else if let entry = named(first.text) {
            type = entry
        } else if let members = family(first.text) {
            if let fallback = members.first(where: { $0.spec.isFamilyDefault }),
                rest.first.map({ $0.text.hasPrefix("-") }) ?? true
            {
                type = fallback
            } else {
                let words = members.map { String($0.spec.name.split(separator: " ").last ?? "") }
                let written = rest.first ?? first
                throw parser.fail(
                    written,
                    (rest.first.map { "unknown \(first.text) subcommand \(parser.quoted($0.text))" }
                        ?? "\(first.text) wants a subcommand")
                        + " (\(words.joined(separator: ", ")))"
                        + (rest.first.flatMap { suggestion($0.text, among: words) }.map { "; did you mean '\($0)'?" }
                            ?? ""))
            }
        } else {
            let names = Set(all.map { $0.spec.family } + all.flatMap { $0.spec.aliases }).sorted()
            throw parser.fail(
                first,
                "unknown command \(parser.quoted(first.text))"
                    + (suggestion(first.text, among: names).map { " (did you mean '\($0)'?)" } ?? "")
                    + " ('help' lists them)")
        }
        let spec = type.spec
        var arguments = try split(rest, spec: spec, name: first, parser: parser)
        let dryRun = arguments.flag("--dry-run")
        let json = arguments.flag("--json")
        let command = try type.init(&arguments)
        return LocatedCommand(
            command: command, line: first.line, column: first.column, devices: arguments.devices, dryRun: dryRun,
            json: json)
    }

    /// The closest of `names` to `word`, when it is close enough to be a typo.
    static func suggestion(_ word: String, among names: [String]) -> String? {
        let scored = names.map { ($0, BatchParser.distance($0, word)) }.min { $0.1 < $1.1 }
        guard let (name, distance) = scored, distance <= max(2, word.count / 3) else { return nil }
        return name
    }

    /// Splits the words after a command's name by its spec.
    static func split(
        _ tokens: [BatchParser.Token], spec: CommandSpec, name: BatchParser.Token, parser: BatchParser
    ) throws(BatchError) -> ParsedArguments {
        let options = spec.allOptions
        var operandTokens: [BatchParser.Token] = []
        var given: [String: (token: BatchParser.Token, value: ParsedValue)] = [:]
        // Where each option was written: a value given twice is an error.
        var written: [String: BatchParser.Token] = [:]
        var index = 0
        var optionsEnded = false
        while index < tokens.count {
            let token = tokens[index]
            index += 1
            if optionsEnded || !token.text.hasPrefix("--") {
                operandTokens.append(token)
                continue
            }
            if token.text == "--" {
                optionsEnded = true
                continue
            }
            let parts = token.text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let optionName = String(parts[0])
            guard let option = options.first(where: { $0.name == optionName }) else {
                let names = options.map(\.name)
                throw parser.fail(
                    token,
                    "\(spec.name) has no option \(parser.quoted(optionName))"
                        + (suggestion(optionName, among: names).map { " (did you mean '\($0)'?)" } ?? "")
                        + (names.isEmpty ? "" : " (it takes \(names.joined(separator: ", ")))"))
            }
            guard let kind = option.value else {
                if parts.count == 2 { throw parser.fail(token, "\(optionName) takes no value") }
                given[optionName] = (token, .flag)
                continue
            }
            if let earlier = written[optionName], option.value != nil {
                throw parser.fail(
                    token, "\(optionName) is given twice (first at \(earlier.line):\(earlier.column)); write it once")
            }
            written[optionName] = token
            let valueToken: BatchParser.Token
            if parts.count == 2 {
                valueToken = BatchParser.Token(
                    text: String(parts[1]), line: token.line, column: token.column + optionName.count + 1)
            } else {
                guard index < tokens.count else {
                    throw parser.fail(token, "\(optionName) needs a value: \(option.placeholder) (\(option.summary))")
                }
                valueToken = tokens[index]
                index += 1
            }
            given[optionName] = (
                valueToken,
                try check(valueToken, kind, what: optionName, placeholder: option.placeholder, parser: parser)
            )
        }
        // Devices written at the end of a device command's line.
        var devices: [DeviceSelector] = []
        if spec.actsOnDevices {
            let fixed = spec.operands.filter { !$0.optional && !$0.repeating }.count
            while operandTokens.count > fixed, let last = operandTokens.last, let device = parser.deviceName(last.text)
            {
                devices.insert(device, at: 0)
                operandTokens.removeLast()
            }
        }
        // Operands: count, then each value by its kind.
        let required = spec.operands.filter { !$0.optional }.count
        let repeating = spec.operands.last?.repeating ?? false
        if operandTokens.count < required {
            let missing = spec.operands.filter { !$0.optional }[operandTokens.count]
            throw parser.fail(
                operandTokens.last ?? name, "\(spec.name) needs \(missing.name) (usage: \(spec.synopsis))")
        }
        if !repeating, operandTokens.count > spec.operands.count {
            let extra = operandTokens[spec.operands.count]
            throw parser.fail(
                extra,
                spec.operands.isEmpty
                    ? "\(spec.name) takes no argument\(spec.actsOnDevices ? " (only devices)" : ""), got \(parser.quoted(extra.text)) (usage: \(spec.synopsis))"
                    : "unexpected \(parser.quoted(extra.text)) (usage: \(spec.synopsis))")
        }
        var operands: [(token: BatchParser.Token, value: ParsedValue)] = []
        for (position, token) in operandTokens.enumerated() {
            let operand = spec.operands[min(position, spec.operands.count - 1)]
            operands.append(
                (token, try check(token, operand.kind, what: operand.name, placeholder: "a number", parser: parser)))
        }
        return ParsedArguments(
            spec: spec, name: name, operands: operands, options: given, devices: devices, parser: parser)
    }

    /// A value checked against its kind (kinds a command checks itself,
    /// such as selectors, pass as text).
    static func check(
        _ token: BatchParser.Token, _ kind: ValueKind, what: String, placeholder: String, parser: BatchParser
    ) throws(BatchError) -> ParsedValue {
        switch kind {
        case .duration(let range): return .duration(try parser.duration(token, range: range))
        case .integer(let range):
            guard let value = ValueGrammar.whole(token.text, signed: range.lowerBound < 0), range.contains(value) else {
                throw parser.fail(
                    token,
                    "\(what) wants \(placeholder) in \(range.lowerBound)–\(range.upperBound), got \(parser.quoted(token.text))"
                )
            }
            return .integer(value)
        case .choice(let words):
            guard words.contains(token.text) else {
                throw parser.fail(
                    token,
                    "\(what) wants \(words.joined(separator: ", ")), got \(parser.quoted(token.text))"
                        + (suggestion(token.text, among: words).map { " (did you mean '\($0)'?)" } ?? ""))
            }
            return .text(token.text)
        case .profile: return .text(try parser.profileName(token))
        case .command:
            guard CommandTable.named(token.text) != nil || CommandTable.family(token.text) != nil else {
                throw parser.fail(
                    token,
                    "no command \(parser.quoted(token.text))"
                        + (suggestion(token.text, among: CommandTable.all.map { $0.spec.family }).map {
                            " (did you mean '\($0)'?)"
                        } ?? ""))
            }
            return .text(token.text)
        case .time:
            do {
                return .time(try ValueGrammar.time(token.text))
            } catch {
                throw parser.fail(
                    token,
                    "\(what) wants a date (2026-11-30), a time (2026-11-30T14:00:00Z) or an age (7d, 12h, 30m), got \(parser.quoted(token.text)): \(error.reason)"
                )
            }
        case .variable:
            guard !token.text.isEmpty, token.text.count <= BatchParser.Limits.nameCharacters,
                token.text.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" })
            else { throw parser.fail(token, "\(parser.quoted(token.text)) is not a variable name") }
            return .text(token.text)
        case .device, .selector, .requirement, .identityKey, .url, .text:
            return .text(token.text)
        }
    }
}
