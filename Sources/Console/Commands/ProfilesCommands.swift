/// `profiles list`: the profiles loaded.
public struct ProfilesListCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "profiles list", summary: "the profiles, with their thresholds", example: "profiles list",
        onlyReadsTheInventory: true, isFamilyDefault: true)
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
        operands: [.required("NAME", .profile)], onlyReadsTheInventory: true)
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
        example: "profiles check", onlyReadsTheInventory: true)
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        await session.profilesCommand(.check)
    }
}
