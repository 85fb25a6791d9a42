import FoundationEssentials
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

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
            output.render(Table(rows: profiles.values.sorted { $0.name < $1.name }.map(ProfileRow.init)))
        case .show(let name):
            guard let profile = profiles[name] else { return }
            output.render(ProfileDetail(profile: profile))
        case .check:
            // Every profile was checked when loaded; say so, one by one.
            output.render(Documents(profiles.values.sorted(by: { $0.name < $1.name }).map(ProfileCheck.init)))
        }
    }
}
