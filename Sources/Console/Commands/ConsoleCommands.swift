import FoundationEssentials
import Inventory
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `set NAME VALUE`: a variable for `${NAME}` in later lines.
public struct SetCommand: ConsoleCommand {
    public var name: String
    public var value: String
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
    public static let spec = CommandSpec(
        name: "set", summary: "set a variable for ${NAME} in later lines (--set NAME=VALUE wins)",
        example: "set profile van", operands: [.required("NAME", .variable), .required("VALUE", .text)],
        onlyReadsTheInventory: true)
    public init(_ arguments: inout ParsedArguments) {
        name = arguments.operand(0) ?? ""
        value = arguments.parser.overrides[name] ?? arguments.operand(1) ?? ""
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        await session.setVariable(name, value)
    }
    public var definesVariable: (name: String, value: String)? { (name, value) }
}

/// `help [COMMAND]`, `help --man`.
public struct HelpCommand: ConsoleCommand {
    public var topic: String?
    public var manual: Bool
    public init(topic: String? = nil, manual: Bool = false) {
        self.topic = topic
        self.manual = manual
    }
    public static let spec = CommandSpec(
        name: "help", summary: "the commands, or one command with its options and an example",
        example: "help select", operands: [.optional("COMMAND", .command)],
        options: [.flag("--man", "the manual page (roff), as `make install` writes it")],
        onlyReadsTheInventory: true, emits: [.command])
    public init(_ arguments: inout ParsedArguments) {
        topic = arguments.operand(0)
        manual = arguments.flag("--man")
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        if manual {
            session.terminal.document(Manual.page(version: BeaconbenchMain.version))
        } else {
            await session.output.render(HelpDocument(topic: topic))
        }
    }
}

/// `completion bash|zsh|fish`: a shell's completion script, from the table.
public struct CompletionCommand: ConsoleCommand {
    public var shell: String
    public init(shell: String) { self.shell = shell }
    public static let spec = CommandSpec(
        name: "completion", summary: "print a shell's completion script (bash, zsh or fish)",
        example: "completion bash > ~/.local/share/bash-completion/completions/beaconbench",
        operands: [.required("SHELL", .choice(["bash", "zsh", "fish"]))], onlyReadsTheInventory: true
    ).shapeNotChecked(because: "writes a shell's completion script, not JSON lines")
    public init(_ arguments: inout ParsedArguments) { shell = arguments.operand(0) ?? "bash" }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        session.terminal.document(ShellCompletion.script(for: shell))
    }
}

/// `quit` (or `exit`, or Ctrl-D).
public struct QuitCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "quit", aliases: ["exit"], summary: "leave the REPL (Ctrl-D too); ends a batch",
        example: "quit", onlyReadsTheInventory: true, endsTheRun: true)
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {}
}

/// `doctor`: whether this machine can work beacons, each problem with its fix.
public struct DoctorCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "doctor",
        summary: "check bluetoothd, the adapter, the D-Bus policy, the inventory and the profiles, each with its fix",
        example: "doctor",
        detail: "Exit status 3 when a check failed; warnings leave it 0.", emits: [.check])
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.doctor()
    }
}

extension Session {
    /// Why `path` is not a plain file path for the inventory, or nil.
    static func refusedName(_ path: String) -> String? {
        do {
            try Database.checkName(path)
            return nil
        } catch {
            return error.description
        }
    }

    /// `doctor`: the workbench's checks of the bus, bluetoothd and the
    /// adapter, then the inventory and the profiles.
    func doctor() async throws(ConsoleFailure) {
        var checks = await Doctor.check(bus: try busAddress(), adapter: invocation.adapter)
        let path =
            invocation.inventoryPath
            ?? (invocation.simulation != nil ? Paths.simulatedInventory() : Paths.defaultInventory())
        if invocation.inventoryIsServer {
            do {
                _ = try await reader().devices()
                checks.append(DoctorCheck(name: "inventory", status: .ok, detail: "the server answers"))
            } catch {
                checks.append(
                    DoctorCheck(
                        name: "inventory", status: .failed, detail: "\(error)",
                        fix: "check the URL, and that PGPASSWORD, ~/.pgpass or PGSERVICE gives the password"))
            }
        } else if let refused = Self.refusedName(path) {
            checks.append(
                DoctorCheck(
                    name: "inventory", status: .failed, detail: refused, fix: "give --inventory a file's path"))
        } else if FileManager.default.fileExists(atPath: path) {
            do {
                let opened = try Inventory(path: path, readOnly: true)
                let count = try await opened.devices().count
                let writable = access(path, W_OK) == 0
                checks.append(
                    DoctorCheck(
                        name: "inventory", status: writable ? .ok : .warning,
                        detail: "\(path): \(count) device\(count == 1 ? "" : "s")"
                            + (writable ? "" : "; read-only here (lists and audits work, provisioning does not)"),
                        fix: writable ? nil : "use --inventory with a file of your own to provision"))
            } catch {
                checks.append(
                    DoctorCheck(
                        name: "inventory", status: .failed, detail: "\(path): \(error)",
                        fix: "move it aside (a new one is made), or give --inventory another file"))
            }
        } else {
            let parent = Paths.parent(of: path)
            checks.append(
                DoctorCheck(
                    name: "inventory", status: .ok,
                    detail: "\(path) does not exist yet; it is made (0600) at the first command that needs it"
                        + (FileManager.default.fileExists(atPath: parent) ? "" : " with its directory")))
        }
        if !invocation.inventoryIsServer, Self.refusedName(path) == nil,
            let directory = HostChecks.inventoryDirectory(path)
        {
            checks.append(directory)
        }
        let host = HostChecks()
        checks += HostChecks.libraries()
        checks.append(host.sshKeygen())
        if let station = host.station() { checks.append(station) }
        let names = profiles.keys.sorted()
        checks.append(
            names.isEmpty
                ? DoctorCheck(
                    name: "profiles", status: .warning, detail: "no profile found",
                    fix: "install beaconbench (make install) or give --profiles DIR")
                : DoctorCheck(
                    name: "profiles", status: .ok,
                    detail: "\(names.count) loaded and checked: \(names.joined(separator: ", "))"))
        output.render(Table(rows: checks.map(DoctorRow.init)))
        if checks.contains(where: { $0.status == .failed }) { note(.infrastructure) }
    }
}
