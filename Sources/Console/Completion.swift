import CReadline
import FoundationEssentials
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// Tab completion: commands, their options and subcommands, profile names,
/// selectors, and the addresses, MAC endings and minors of beacons seen.
enum Completion {
    /// What completion knows, refreshed before each prompt; only the
    /// readline thread reads it, while no prompt is up nobody writes it.
    nonisolated(unsafe) static var profiles: [String] = []
    nonisolated(unsafe) static var addresses: [String] = []
    nonisolated(unsafe) static var endings: [String] = []
    nonisolated(unsafe) static var minors: [String] = []
    nonisolated(unsafe) static var variables: [String] = []
    nonisolated(unsafe) static var matches: [String] = []
    /// Loads the profiles when they are not yet (the REPL reads them at
    /// its first line, not before the prompt): their names.
    nonisolated(unsafe) static var loadProfiles: (@Sendable () -> [String])?

    static func update(profiles: [String], seen: [SeenBeacon], variables: [String]) {
        self.profiles = profiles.sorted()
        addresses = seen.map(\.address)
        endings = seen.map(\.macEnding)
        minors = seen.compactMap { $0.identity.map { String($0.minor) } }
        self.variables = variables.sorted()
    }

    /// The candidates for the word being typed after `words` (the words
    /// before it on the line), from the command table: commands, then a
    /// family's subcommands, then the command's options and the values of
    /// the operand or option being written.
    static func candidates(after words: [String], prefix: String) -> [String] {
        guard let first = words.first else {
            return Array(Set(CommandTable.specs.map(\.family) + CommandTable.specs.flatMap(\.aliases))).sorted()
        }
        var rest = Array(words.dropFirst())
        let spec: CommandSpec
        if let second = rest.first, let entry = CommandTable.named("\(first) \(second)") {
            spec = entry.spec
            rest.removeFirst()
        } else if let members = CommandTable.family(first), rest.isEmpty {
            return members.map { String($0.spec.name.split(separator: " ")[1]) }
                + (members.first { $0.spec.isFamilyDefault }.map { $0.spec.allOptions.map(\.name) } ?? [])
        } else if let entry = CommandTable.named(first) {
            spec = entry.spec
        } else {
            return []
        }
        // The value of an option just written.
        if let last = rest.last, let option = spec.allOptions.first(where: { $0.name == last }), let kind = option.value
        {
            return values(kind, prefix: prefix)
        }
        let operandCount = rest.filter { !$0.hasPrefix("--") }.count
        var candidates = spec.allOptions.map(\.name).filter { !rest.contains($0) }
        if let operand = spec.operands.indices.contains(operandCount)
            ? spec.operands[operandCount] : spec.operands.last.flatMap({ $0.repeating ? $0 : nil })
        {
            candidates += values(operand.kind, prefix: prefix)
        }
        if spec.actsOnDevices, !(spec.operands.last?.kind == .selector) { candidates += addresses + endings }
        return candidates
    }

    /// The values completed for a kind: fixed words, profiles, variables,
    /// commands, the devices seen.
    static func values(_ kind: ValueKind, prefix: String) -> [String] {
        if profiles.isEmpty, let loadProfiles, kind == .profile || kind == .selector || kind == .identityKey {
            profiles = loadProfiles()
        }
        switch kind {
        case .profile: return profiles
        case .variable: return variables
        case .command: return Array(Set(CommandTable.specs.map(\.family))).sorted()
        case .device: return addresses + endings
        case .selector:
            if prefix.hasPrefix("minor=") { return minors.map { "minor=\($0)-\($0)" } }
            return ["all", "new", "unprovisioned", "in-range", "battery<", "firmware<", "minor="]
                + profiles.map { "profile=\($0)" } + addresses + endings
        case .identityKey: return profiles + kind.completionWords
        case .text: return endings
        default: return kind.completionWords
        }
    }

    /// readline's completion hook.
    static let complete:
        @convention(c) (UnsafePointer<CChar>?, Int32, Int32) -> UnsafeMutablePointer<
            UnsafeMutablePointer<CChar>?
        >? = { text, start, _ in
            let prefix = text.map { String(cString: $0) } ?? ""
            let before = String(
                decoding: String(cString: beaconbench_rl_line_buffer()).utf8.prefix(Int(start)), as: UTF8.self)
            let words = before.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            Completion.matches = candidates(after: words, prefix: prefix).filter { $0.hasPrefix(prefix) }
            // Options that want a value go on without a space.
            let wantsValue =
                Completion.matches.count == 1 && [("="), ("<")].contains { Completion.matches[0].hasSuffix($0) }
            beaconbench_rl_completion_settings(wantsValue ? 0 : 32)
            guard !Completion.matches.isEmpty, let text else { return nil }
            return rl_completion_matches(text, Completion.generate)
        }

    static let generate: @convention(c) (UnsafePointer<CChar>?, Int32) -> UnsafeMutablePointer<CChar>? = { _, state in
        let index = Int(state)
        guard index < Completion.matches.count else { return nil }
        return strdup(Completion.matches[index])
    }
}
