import CReadline
import Foundation
import Workbench

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

    static func update(profiles: [String], seen: [SeenBeacon], variables: [String]) {
        self.profiles = profiles.sorted()
        addresses = seen.map(\.address)
        endings = seen.map(\.macEnding)
        minors = seen.compactMap { $0.identity.map { String($0.minor) } }
        self.variables = variables.sorted()
    }

    /// The candidates for the word being typed after `words` (the words
    /// before it on the line).
    static func candidates(after words: [String], prefix: String) -> [String] {
        guard let command = words.first else { return CommandSpec.all.map(\.name) + ["exit"] }
        let devices = addresses + endings
        let selectors =
            ["all", "new", "unprovisioned", "in-range", "battery<", "firmware<", "minor="]
            + profiles.map { "profile=\($0)" } + devices
        let isDevice = Command.deviceCommandNames.contains(command)
        var options: [String]
        switch command {
        case "scan": options = ["on", "off", "--rssi", "10s", "30s"]
        case "select":
            if prefix.hasPrefix("minor=") { return minors.map { "minor=\($0)-\($0)" } }
            options = selectors
        case "apply", "verify": options = words.count == 1 ? profiles : []
        case "audit": options = ["--live", "--passive"] + profiles
        case "trips", "events", "incidents": options = ["--clear"]
        case "identity": options = profiles + ["major=", "minor=auto", "minor=keep", "minor="]
        case "require": options = ["battery>=", "firmware>="]
        case "factory-reset": options = ["--yes"]
        case "watch": options = ["30s", "60s"]
        case "inventory":
            options =
                words.count == 1 ? ["list", "show", "export"] : words[1] == "export" ? ["--csv", "--json"] : devices
        case "log": options = devices
        case "profiles": options = words.count == 1 ? ["list", "show", "check"] : profiles
        case "help": options = CommandSpec.all.map(\.name)
        case "set": options = variables
        case "devices": options = endings
        default: options = []
        }
        if isDevice, command != "select" { options += devices }
        return options
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
