import InventorySync

/// `inventory list`: every device the inventory knows.
public struct InventoryListCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "inventory list", summary: "every device the inventory knows", example: "inventory list",
        onlyReadsTheInventory: true, isFamilyDefault: true)
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.inventoryCommand(.list)
    }
}

/// `inventory show DEVICE`: one device and its latest step outcomes.
public struct InventoryShowCommand: ConsoleCommand {
    public var device: String
    public init(device: String) { self.device = device }
    public static let spec = CommandSpec(
        name: "inventory show", summary: "one device: what it holds and its latest step outcomes",
        example: "inventory show a3b5c7d9", operands: [.required("DEVICE", .device)], onlyReadsTheInventory: true)
    public init(_ arguments: inout ParsedArguments) { device = arguments.operand(0) ?? "" }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.inventoryCommand(.show(device))
    }
}

/// `inventory export --csv|--json`: every column of every device.
public struct InventoryExportCommand: ConsoleCommand {
    public enum Format: String, Sendable, Hashable { case csv, json }
    public var format: Format
    public init(format: Format) { self.format = format }
    public static let spec = CommandSpec(
        name: "inventory export", summary: "every column of every device, as CSV (for spreadsheets) or JSON",
        example: "inventory export --csv > fleet.csv", options: [.flag("--csv", "RFC 4180 CSV, formula-safe")],
        onlyReadsTheInventory: true)
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        guard arguments.flag("--csv") != arguments.flag("--json") else {
            throw arguments.fail(at: 0, "inventory export takes --csv or --json")
        }
        format = arguments.flag("--csv") ? .csv : .json
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.inventoryCommand(format == .csv ? .exportCSV : .exportJSON)
    }
}

/// `log [DEVICE]`: the step outcomes recorded, newest first.
public struct LogCommand: ConsoleCommand {
    public var device: String?
    public init(device: String? = nil) { self.device = device }
    public static let spec = CommandSpec(
        name: "log", summary: "the step outcomes recorded, newest first", example: "log a3b5c7d9",
        operands: [.optional("DEVICE", .device)], onlyReadsTheInventory: true)
    public init(_ arguments: inout ParsedArguments) { device = arguments.operand(0) }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.log(device)
    }
}

/// `sync --to URL`: the inventory pushed to a shared PostgreSQL server.
public struct SyncCommand: ConsoleCommand {
    public var url: String
    public init(url: String) { self.url = url }
    public static let spec = CommandSpec(
        name: "sync", summary: "push the inventory to a shared PostgreSQL server (idempotent, resumable)",
        example: "sync --to postgresql://depot.example/fleet",
        options: [.value("--to", "URL", .url, "the server (a password comes from PGPASSWORD or ~/.pgpass)")])
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        guard let url = arguments.text("--to") else {
            throw arguments.fail(at: 0, "sync needs --to URL (usage: \(Self.spec.synopsis))")
        }
        guard ServerInventory.isServerURL(url) || url.contains("=") else {
            throw arguments.fail(
                arguments.options["--to"]!.token, "sync wants a PostgreSQL URL (postgresql://…) or connection string")
        }
        self.url = url
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.sync(to: url)
    }
}
