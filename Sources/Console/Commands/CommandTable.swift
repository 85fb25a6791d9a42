/// The command table: every command of the REPL, the batch language and
/// one-shot invocations, in the order `help` lists them. The batch
/// checker, dispatch, completion, `help`, the man page and the shell
/// completions all read it. A new command is one type (its spec, how it
/// is built, what it runs) in the file of its family, and one line here.
public enum CommandTable {
    public static let all: [any ConsoleCommand.Type] = [
        // Discovery and selection (Discovery.swift)
        ScanCommand.self, ScanOnCommand.self, ScanOffCommand.self, DevicesCommand.self, SelectCommand.self,
        // Steps on devices (DeviceCommands.swift)
        InfoCommand.self, RequireCommand.self, SyncTimeCommand.self, CalibrateCommand.self, IdentityCommand.self,
        ApplyCommand.self, VerifyCommand.self, TripsCommand.self, EventsCommand.self, IncidentsCommand.self,
        WatchCommand.self, RebootCommand.self, FactoryResetCommand.self,
        // Audits (AuditCommand.swift)
        AuditCommand.self,
        // The inventory (InventoryCommands.swift)
        InventoryListCommand.self, InventoryShowCommand.self, InventoryExportCommand.self,
        InventoryForgetCommand.self, LogCommand.self, SyncCommand.self, LedgerVerifyCommand.self,
        LedgerCheckpointCommand.self, LedgerProveCommand.self, LedgerCheckCommand.self,
        // Leased blocks of minors on the shared server (IdentitiesCommands.swift)
        IdentitiesBlocksCommand.self, IdentitiesReturnBlocksCommand.self,
        // The fleet report (ReportCommand.swift)
        ReportCommand.self,
        // Desired state and the install bench (DesiredStateCommands.swift, StationCommands.swift)
        AssignCommand.self, DriftCommand.self, ConvergeCommand.self, StationCommand.self,
        // Pulled records (RecordsCommands.swift)
        RecordsListCommand.self, RecordsExportCommand.self,
        // Profiles (ProfilesCommands.swift)
        ProfilesListCommand.self, ProfilesShowCommand.self, ProfilesCheckCommand.self,
        // The console itself (ConsoleCommands.swift)
        DoctorCommand.self, SetCommand.self, HelpCommand.self, CompletionCommand.self, QuitCommand.self,
    ]

    /// The command written with this name (or alias).
    public static func named(_ name: String) -> (any ConsoleCommand.Type)? {
        all.first { $0.spec.name == name || $0.spec.aliases.contains(name) }
    }

    /// The commands of a family (`inventory`), when it has two-word members.
    public static func family(_ name: String) -> [any ConsoleCommand.Type]? {
        let members = all.filter { $0.spec.name.hasPrefix(name + " ") }
        return members.isEmpty ? nil : members
    }

    public static var specs: [CommandSpec] { all.map { $0.spec } }
}
