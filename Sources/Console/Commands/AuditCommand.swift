import Profiles
import Workbench

/// `audit [PROFILE] [--live|--passive]`: devices judged against profiles,
/// from the inventory (default), live (a device step), or adverts alone.
public struct AuditCommand: ConsoleCommand {
    public enum Source: String, Sendable, Hashable { case inventory, live, passive }
    public var profile: String?
    public var source: Source

    public init(profile: String? = nil, source: Source = .inventory) {
        self.profile = profile
        self.source = source
    }

    public static let spec = CommandSpec(
        name: "audit", summary: "judge devices against profiles: from the inventory, live, or adverts alone",
        example: "audit --passive", operands: [.optional("PROFILE", .profile)],
        options: [
            .flag("--live", "read each device now (connects)"),
            .flag("--passive", "judge from bench-summary adverts alone (no connection)"),
        ], actsOnDevices: true,
        detail:
            "Without --live or --passive the audit reads the inventory and may run against a server inventory. Exit status 2 when any device has a finding."
    )

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        if arguments.flag("--live"), arguments.flag("--passive") {
            throw arguments.fail(at: 0, "audit takes --live or --passive, not both")
        }
        self.init(
            profile: arguments.operand(0),
            source: arguments.flag("--live") ? .live : arguments.flag("--passive") ? .passive : .inventory)
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        if source == .live {
            try await session.runDeviceSteps([located], on: located.devices.isEmpty ? nil : located.devices)
        } else {
            try await session.audit(profile: profile, source: source)
        }
    }

    public func step(profiles: [String: Profile]) -> DeviceStep? {
        source == .live ? .auditLive(profile.flatMap { profiles[$0] }) : nil
    }
    public var isDeviceStep: Bool { source == .live }
    public var onlyReadsTheInventory: Bool { source == .inventory }
    public var stepName: String { "audit --\(source.rawValue)" }
}
