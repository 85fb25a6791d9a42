import Foundation
import Profiles

/// `profiles list`: the profiles loaded.
public struct ProfilesListCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "profiles list", summary: "the profiles, with their thresholds", example: "profiles list",
        onlyReadsTheInventory: true, isFamilyDefault: true, emits: [.profile])
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        await session.profilesCommand(.list)
    }
}

/// `profiles show NAME`.
public struct ProfilesShowCommand: ConsoleCommand {
    public var name: String
    public init(name: String) { self.name = name }
    public static let spec = CommandSpec(
        name: "profiles show", summary: "one profile, every field", example: "profiles show truck",
        operands: [.required("NAME", .profile)], onlyReadsTheInventory: true, emits: [.profile])
    public init(_ arguments: inout ParsedArguments) { name = arguments.operand(0) ?? "" }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        await session.profilesCommand(.show(name))
    }
}

/// `profiles check`: every profile checked (they were, when loaded).
public struct ProfilesCheckCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "profiles check", summary: "check every profile file (ranges, names, identities)",
        example: "profiles check", onlyReadsTheInventory: true, emits: [.profileCheck])
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        await session.profilesCommand(.check)
    }
}

extension Session {
    // MARK: Profiles

    func profilesCommand(_ action: ProfilesAction) {
        switch action {
        case .list:
            let sorted = profiles.values.sorted { $0.name < $1.name }
            if json {
                for profile in sorted { terminal.emit(.profile, Shapes.profile(profile)) }
            } else {
                for line in table(Format.profileHeader, sorted.map(Format.profileRow)) { terminal.result(line) }
            }
        case .show(let name):
            guard let profile = profiles[name] else { return }
            if json {
                terminal.emit(.profile, Shapes.profile(profile))
            } else {
                for line in Format.profileDetail(profile) { terminal.result(line) }
            }
        case .check:
            // Every profile was checked when loaded; say so, one by one.
            for profile in profiles.values.sorted(by: { $0.name < $1.name }) {
                let crc = String(format: "%04x", profile.config.crc)
                if json {
                    terminal.emit(.profileCheck, ["name": .string(profile.name), "ok": true, "crc": .string(crc)])
                } else {
                    terminal.result("\(profile.name): ok (crc \(crc))")
                }
            }
        }
    }
}
