import FoundationEssentials
import Inventory
import InventorySync
import Profiles
import SBeaconProtocol
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `assign PROFILE [major=N|profile] [minor=auto|keep|N] [cornering=MG …] DEVICE…`:
/// the desired state of devices, recorded without touching a beacon.
public struct AssignCommand: ConsoleCommand {
    public var profile: String
    public var major: UInt16?
    public var minorPolicy: Assignment.MinorPolicy
    public var minor: UInt16?
    public var overrides: [String: UInt16]

    public init(
        profile: String, major: UInt16? = nil, minorPolicy: Assignment.MinorPolicy = .auto, minor: UInt16? = nil,
        overrides: [String: UInt16] = [:]
    ) {
        self.profile = profile
        self.major = major
        self.minorPolicy = minorPolicy
        self.minor = minor
        self.overrides = overrides
    }

    public static let spec = CommandSpec(
        name: "assign",
        summary: "record the desired state of devices (profile, identity, overrides) without touching a beacon",
        example: "assign van major=250 minor=auto C0:FE:00:00:00:01",
        operands: [
            .required("PROFILE", .profile),
            OperandSpec(
                name: "KEY", kind: .identityKey, optional: true, repeating: true,
                written:
                    "[major=N|profile] [minor=auto|keep|N] [cornering=MG] [braking=MG] [acceleration=MG] [duration=MS]"
            ),
        ],
        actsOnDevices: true,
        detail:
            "Each device's assignment replaces its earlier one (the line says so). A bench brings a beacon to it when it sees it: station converges every assigned beacon that comes within range. drift lists what differs. docs/office.md.",
        emits: [.assignment]
    ).documented(in: "office.md")

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        let parser = arguments.parser
        profile = arguments.operand(0) ?? ""
        minorPolicy = .auto
        overrides = [:]
        var given: [String: BatchParser.Token] = [:]
        for (token, _) in arguments.operands.dropFirst() {
            let parts = token.text.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else {
                throw parser.fail(
                    token, "assign takes one profile, then KEY=VALUE, then devices: got \(parser.quoted(token.text))")
            }
            let (key, value) = (parts[0], parts[1])
            if let earlier = given[key] {
                throw parser.fail(
                    token,
                    "\(parser.quoted(key)) is given twice (first at \(earlier.line):\(earlier.column)); write each key once"
                )
            }
            given[key] = token
            switch key {
            case "major":
                if value == "profile" {
                    major = nil
                } else if let number = ValueGrammar.whole(value, as: UInt16.self) {
                    major = number
                } else {
                    throw parser.fail(token, "major must be 0–65535 or 'profile', got \(parser.quoted(value))")
                }
            case "minor":
                switch value {
                case "auto", "sequential": (minorPolicy, minor) = (.auto, nil)
                case "keep": (minorPolicy, minor) = (.keep, nil)
                default:
                    guard let number = ValueGrammar.whole(value, as: UInt16.self) else {
                        throw parser.fail(token, "minor must be auto, keep or 0–65535, got \(parser.quoted(value))")
                    }
                    (minorPolicy, minor) = (.fixed, number)
                }
            default:
                guard let rule = ConfigOverrides.keys.first(where: { $0.name == key }) else {
                    throw parser.fail(
                        token,
                        "unknown key \(parser.quoted(key)) (assign takes major=, minor=, "
                            + ConfigOverrides.keys.map { "\($0.name)=" }.joined(separator: ", ") + ")")
                }
                guard let number = ValueGrammar.whole(value, as: UInt16.self), rule.range.contains(number) else {
                    throw parser.fail(
                        token,
                        "\(key) must be \(rule.range.lowerBound)–\(rule.range.upperBound) \(rule.unit), got \(parser.quoted(value))"
                    )
                }
                overrides[key] = number
            }
        }
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.assign(self, devices: located.devices)
    }
    /// The office assigns on the shared server.
    public var runsAgainstAServer: Bool { true }

    /// The assignment of one device, made now by `by`.
    func assignment(_ address: String, by: String, at: String) -> Assignment {
        var changes = ConfigOverrides()
        for (key, value) in overrides { _ = changes.set(key, value) }
        return Assignment(
            address: address, profile: profile, major: major, minorPolicy: minorPolicy, minor: minor,
            overrides: changes, assignedAt: at, assignedBy: by)
    }
}

/// `converge [--profile P] [DEVICE…]`: the devices named or selected
/// brought to their desired state now (as the station would).
public struct ConvergeCommand: ConsoleCommand {
    public var profile: String?
    public init(profile: String? = nil) { self.profile = profile }
    public static let spec = CommandSpec(
        name: "converge",
        summary: "bring devices to their desired state (assign) now: the steps of provision-new.batch, idempotent",
        example: "converge --profile car",
        options: [.value("--profile", "P", .profile, "provision devices that have no assignment with this profile")],
        actsOnDevices: true, mayWriteToBeacons: true,
        detail:
            "Each device gets its assignment's profile, thresholds and identity (else --profile's, else it is skipped); what it holds already is left unchanged. A success is recorded as the assignment's convergence, which sync reports to the server."
    ).runningDeviceSteps()
    public init(_ arguments: inout ParsedArguments) { profile = arguments.text("--profile") }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.converge(
            profile: profile, devices: located.devices.isEmpty ? nil : located.devices, dryRun: located.dryRun)
    }
}

/// `drift`: assigned devices whose last observed state differs from the
/// desired one, field by field, with when it was observed.
public struct DriftCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "drift",
        summary: "assigned devices whose last observed state differs from the desired, field by field",
        example: "drift", onlyReadsTheInventory: true,
        detail:
            "Compares each assignment with what was last read back from the beacon (thresholds, enable bits, profile, identity) and says when that was read. Exit status 2 when any device drifts.",
        emits: [.drift])
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.drift()
    }
}

extension Session {
    /// Who assigns: `user@host`.
    static var assigner: String {
        (ProcessInfo.processInfo.environment["USER"] ?? "unknown") + "@" + ProcessInfo.processInfo.hostName
    }

    /// Records assignments for the devices written (or the selection);
    /// a MAC ending must name one device the inventory knows. All or
    /// nothing: a bad name changes nothing.
    func assign(_ command: AssignCommand, devices: [DeviceSelector]) async throws(ConsoleFailure) {
        let inventory = try reader()
        var addresses: [String] = []
        if devices.isEmpty {
            guard let selection, !selection.isEmpty else {
                throw ConsoleFailure(
                    .badInput, "assign needs devices: write their addresses after the profile and keys, or select some")
            }
            addresses = selection
        }
        for device in devices {
            switch device {
            case .address(let address): addresses.append(address.uppercased())
            case .macEnding(let ending):
                let known = ((try? await inventory.devices()) ?? []).filter { $0.macEnding == ending.lowercased() }
                guard known.count == 1 else {
                    throw ConsoleFailure(
                        .badInput,
                        known.isEmpty
                            ? "assign: no device the inventory knows ends in \(ending): write its address (nothing was assigned)"
                            : "assign: \(ending) names \(known.count) devices: write the address (nothing was assigned)"
                    )
                }
                addresses.append(known[0].address)
            default:
                throw ConsoleFailure(.badInput, "assign takes addresses or MAC endings (nothing was assigned)")
            }
        }
        let now = Inventory.now()
        let assignments = Array(Set(addresses)).sorted().map { command.assignment($0, by: Self.assigner, at: now) }
        var replaced: [Assignment] = []
        var conflicts: [ServerAssignments.Conflict] = []
        if invocation.inventoryIsServer, let url = invocation.inventoryPath {
            // The office: on the shared server, under its conflict rule.
            do {
                (replaced, conflicts) = try ServerAssignments.assign(
                    assignments, url: url, profiles: Set(profiles.keys))
            } catch {
                throw ConsoleFailure(.infrastructure, "assign: \(error.message) (nothing was assigned)")
            }
        } else {
            do {
                replaced = try await self.inventory().assign(assignments)
            } catch let error as ConsoleFailure {
                throw error
            } catch {
                throw ConsoleFailure(.infrastructure, "assign: \(error) (nothing was assigned)")
            }
        }
        let lost = Set(conflicts.map(\.address))
        for conflict in conflicts { terminal.error("assign: \(conflict)") }
        if !conflicts.isEmpty { note(.badInput) }
        let earlier = Dictionary(replaced.map { ($0.address, $0) }) { first, _ in first }
        for assignment in assignments where !lost.contains(assignment.address) {
            let previous = earlier[assignment.address]
            output.render(AssignmentLine(assignment: assignment, replaced: previous))
            if let previous {
                terminal.message(
                    "\(assignment.address): replaces \(previous.summary) (assigned \(previous.assignedAt) by \(previous.assignedBy))"
                )
            }
        }
        let made = assignments.count - lost.count
        terminal.message(
            "\(made) device\(made == 1 ? "" : "s") assigned \(command.profile): nothing was written to a beacon; a bench converges each when it sees it"
        )
    }

    /// `converge`: each device's plan (its assignment, else `profile`), run
    /// through the fleet runner, devices with one plan together.
    func converge(profile: String?, devices: [DeviceSelector]?, dryRun lineDryRun: Bool) async throws(ConsoleFailure) {
        let dryRun = self.dryRun || lineDryRun
        let addresses = try await targets(devices)
        guard !addresses.isEmpty else {
            terminal.message("no devices selected: nothing to converge")
            return
        }
        let bench = try await openBench()
        let run = try await currentRun()
        let inventory = bench.inventory
        // By what they are brought to (the target names the whole plan).
        var groups: [String: (plan: DesiredPlan, members: [String])] = [:]
        var skipped: [DeviceRecap] = []
        for address in addresses {
            let assignment = try? await inventory.assignment(for: address)
            if let plan = DesiredPlan(
                assignment: assignment, otherwise: profile.flatMap { profiles[$0] }, profiles: profiles)
            {
                groups[plan.target, default: (plan, [])].members.append(address)
            } else {
                var recap = DeviceRecap(address: address)
                recap.reason = DesiredPlan.none(assignment)
                skipped.append(recap)
            }
        }
        merge(skipped)
        var failed = false
        for (plan, members) in groups.values.sorted(by: { $0.members[0] < $1.members[0] }) {
            let board = ProgressBoard(terminal: terminal, total: members.count, dryRun: dryRun, output: output)
            board.begin(plan.steps.map(\.name))
            let result: FleetResult
            do {
                result = try await bench.run(
                    plan.steps, on: members, run: run, concurrency: try await concurrency(bench), dryRun: dryRun,
                    profiles: profiles, sharedIdentities: sharedIdentities()
                ) { event in board.handle(event) }
            } catch {
                board.end()
                throw ConsoleFailure(.infrastructure, "\(error)")
            }
            board.end()
            merge(result.recaps)
            if result.interrupted { markInterrupted() }
            for recap in result.recaps where recap.failed > 0 { failed = true }
            if plan.assigned, !dryRun {
                for recap in result.recaps where recap.result == .changed || recap.result == .ok {
                    try? await inventory.markConverged(recap.address, run: run)
                }
            }
            if let failure = result.inventoryFailure {
                inventoryFailure = failure
                printRecap()
                throw ConsoleFailure(
                    .infrastructure,
                    "the inventory failed (\(failure)): the run stopped before writing anything more to a beacon")
            }
            if Task.isCancelled { break }
        }
        if failed { note(.devicesFailed) }
        if isInteractive { printRecap() }
    }

    /// `drift`: each assigned device's differing fields.
    func drift() async throws(ConsoleFailure) {
        let findings: [DriftFinding]
        let assigned: Int
        var unseen = 0
        if invocation.inventoryIsServer {
            // The office: every assignment against the merged fleet, streamed
            // (OfficeStreamCommands.swift).
            guard let server = try reader() as? ServerInventory else { return }
            let drifting: Int
            do {
                (drifting, assigned) = try await streamedDrift(server)
            } catch let error as SyncError {
                throw ConsoleFailure(.infrastructure, "drift: \(error.message)")
            } catch {
                throw ConsoleFailure(.infrastructure, "drift: \(error)")
            }
            terminal.message(
                "\(drifting) of \(assigned) assigned device\(assigned == 1 ? "" : "s") drift\(drifting == 1 ? "s" : "")"
            )
            if drifting > 0 { note(.devicesFailed) }
            return
        } else {
            let inventory = try inventory()
            do {
                (findings, assigned, unseen) = try await inventory.drift(profiles: profiles)
            } catch {
                throw ConsoleFailure(.infrastructure, "drift: \(error)")
            }
        }
        output.render(DriftRow.table(findings))
        let drifting = Set(findings.map(\.device)).count
        terminal.message(
            "\(drifting) of \(assigned) assigned device\(assigned == 1 ? "" : "s") drift\(drifting == 1 ? "s" : "")"
                + (unseen > 0 ? "; \(unseen) never seen on this bench (the server's drift covers every bench)" : ""))
        if drifting > 0 { note(.devicesFailed) }
    }
}
