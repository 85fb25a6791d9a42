import FoundationEssentials
import Inventory
import InventorySync
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// `inventory list [--limit N [--after ADDRESS]]`: every device the
/// inventory knows, or one page of them in address order.
public struct InventoryListCommand: ConsoleCommand {
    public var limit: Int?
    public var after: String?
    public init(limit: Int? = nil, after: String? = nil) {
        self.limit = limit
        self.after = after
    }
    public static let spec = CommandSpec(
        name: "inventory list", summary: "every device the inventory knows", example: "inventory list",
        options: [
            .value(
                "--limit", "N", .integer(1...1_000_000),
                "at most N devices, in address order (a page; it says which address the next starts after)"),
            .value("--after", "ADDRESS", .device, "the devices after this address (with --limit: the next page)"),
        ], onlyReadsTheInventory: true, isFamilyDefault: true, emits: [.device])
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        limit = arguments.integer("--limit")
        if let text = arguments.text("--after"), let token = arguments.options["--after"]?.token {
            guard let address = MACEnding.address(text) else {
                throw arguments.fail(token, "--after wants a device's whole address (AA:BB:CC:DD:EE:FF)")
            }
            after = address
        }
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        if limit != nil || after != nil {
            try await session.inventoryPage(after: after, limit: limit ?? Int.max)
        } else {
            try await session.inventoryCommand(.list)
        }
    }
}

/// `inventory show DEVICE`: one device and its latest step outcomes.
public struct InventoryShowCommand: ConsoleCommand {
    public var device: String
    public init(device: String) { self.device = device }
    public static let spec = CommandSpec(
        name: "inventory show", summary: "one device: what it holds and its latest step outcomes",
        example: "inventory show a3b5c7d9", operands: [.required("DEVICE", .device)], onlyReadsTheInventory: true,
        emits: [.device, .outcome]
    ).shapeChecked(by: "inventory show ${device}")
    public init(_ arguments: inout ParsedArguments) { device = arguments.operand(0) ?? "" }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.inventoryCommand(.show(device))
    }
}

/// `inventory export --csv|--json`: every column of every device.
public struct InventoryExportCommand: ConsoleCommand {
    public enum Format: String, Sendable, Hashable { case csv, jsonLines = "json" }
    public var format: Format
    public init(format: Format) { self.format = format }
    public static let spec = CommandSpec(
        name: "inventory export", summary: "every column of every device, as CSV (for spreadsheets) or JSON",
        example: "inventory export --csv > fleet.csv",
        options: [.flag("--csv", "RFC 4180 CSV, formula-safe (without it: JSON lines, docs/json.md)")],
        onlyReadsTheInventory: true, emits: [.deviceRow]
    ).shapeChecked(by: "inventory export")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        // JSON lines unless --csv (`--json` may have been given for the whole run).
        if arguments.flag("--csv"), arguments.flag("--json") {
            throw arguments.fail(at: 0, "inventory export takes --csv or --json, not both")
        }
        format = arguments.flag("--csv") ? .csv : .jsonLines
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.inventoryCommand(format == .csv ? .exportCSV : .exportJSON)
    }
}

/// `log [DEVICE] [--device D] [--since TIME] [--limit N]`: the step
/// outcomes recorded, newest first.
public struct LogCommand: ConsoleCommand {
    public var device: String?
    public var since: Date?
    public var limit: Int
    public init(device: String? = nil, since: Date? = nil, limit: Int = 50) {
        self.device = device
        self.since = since
        self.limit = limit
    }
    public static let spec = CommandSpec(
        name: "log", summary: "the step outcomes recorded, newest first, with when each started",
        example: "log --device a3b5c7d9 --since 1d", operands: [.optional("DEVICE", .device)],
        options: [
            .value("--device", "DEVICE", .device, "only this device (as DEVICE)"),
            .value("--since", "TIME", .time, "only outcomes since TIME (2026-11-30, an ISO 8601 time, or 7d)"),
            .value("--limit", "N", .integer(1...1_000_000), "at most N outcomes (default 50); it says when it cut"),
        ], onlyReadsTheInventory: true, emits: [.outcome]
    ).shapeChecked(by: "log --device ${device} --since 1d")
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        if arguments.operand(0) != nil, arguments.text("--device") != nil {
            throw arguments.fail(at: 0, "log takes DEVICE or --device, not both")
        }
        self.init(
            device: arguments.operand(0) ?? arguments.text("--device"), since: arguments.time("--since"),
            limit: arguments.integer("--limit") ?? 50)
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.log(device, since: since, limit: limit)
    }
}

/// `inventory forget ADDRESS… --yes`: devices out of lists, audits and
/// exports (seen again, they come back); their history kept.
public struct InventoryForgetCommand: ConsoleCommand {
    public var devices: [String]
    public var confirmed: Bool
    public init(devices: [String], confirmed: Bool) {
        self.devices = devices
        self.confirmed = confirmed
    }
    public static let spec = CommandSpec(
        name: "inventory forget",
        summary: "take devices out of lists, audits and exports, keeping their history (needs --yes)",
        example: "inventory forget C0:FE:00:00:00:04 --yes", operands: [.some("DEVICE", .device)],
        options: [.flag("--yes", "yes, forget them (without it: what would be forgotten)")],
        detail:
            "Their step outcomes, readings and pulled records stay as history; their identity is released for reuse. A device forgotten and seen again comes back.",
        emits: [.forgotten])
    public init(_ arguments: inout ParsedArguments) {
        self.init(devices: arguments.operandTexts, confirmed: arguments.flag("--yes"))
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.forget(devices, confirmed: confirmed)
    }
}

/// `sync --to URL`: the inventory pushed to a shared PostgreSQL server.
public struct SyncCommand: ConsoleCommand {
    public var url: String
    public init(url: String) { self.url = url }
    public static let spec = CommandSpec(
        name: "sync", summary: "push the inventory to a shared PostgreSQL server (idempotent, resumable)",
        example: "sync --to postgresql://depot.example/fleet",
        options: [
            .value("--to", "URL", .url, "the server (a password comes from PGPASSWORD or ~/.pgpass)", required: true),
            .flag("--include-simulated", "also push runs made on a simulated bench (--sim)"),
            .value(
                "--retry-for", "DURATION", .duration(0...86_400),
                "keep trying again, after what the server asks to retry, for this long (default 120s)"),
            .flag("--full", "send every row, not only what changed since the last sync"),
        ], emits: [.sync]
    ).shapeNotChecked(because: "needs a PostgreSQL server: SyncTests checks its `sync` lines").documented(
        in: "office.md")
    public var includeSimulated = false
    /// How long to keep trying again (seconds).
    public var retryFor: Double = 120
    public var full = false
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        includeSimulated = arguments.flag("--include-simulated")
        retryFor = arguments.duration("--retry-for") ?? 120
        full = arguments.flag("--full")
        guard let url = arguments.text("--to") else {
            throw arguments.fail(at: 0, "sync needs --to URL (usage: \(Self.spec.synopsis))")
        }
        guard ServerLocator.isServer(url) else {
            throw arguments.fail(
                arguments.options["--to"]!.token,
                "sync wants a PostgreSQL URL (postgresql://…) or key=value connection string, not \(ServerLocator.shown(url))"
            )
        }
        self.url = url
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.sync(to: url, includeSimulated: includeSimulated, retryFor: retryFor, full: full)
    }
}

extension Session {
    // MARK: Inventory and log

    func inventoryCommand(_ action: InventoryAction) async throws(ConsoleFailure) {
        let inventory = try reader()
        do {
            switch action {
            case .list:
                if let server = inventory as? ServerInventory {
                    // The whole fleet, streamed (OfficeStreamCommands.swift).
                    try await streamedInventoryList(server)
                } else {
                    output.render(DeviceLine.list(try await inventory.devices(), in: inventory.location))
                }
            case .show(let name):
                guard let device = try await inventory.device(name) else {
                    throw ConsoleFailure(.badInput, "the inventory has no device \(name)")
                }
                let outcomes = try await inventory.outcomes(device: device.address, limit: 20)
                output.render(DeviceDetail(device, outcomes: outcomes))
            case .exportCSV: terminal.document(try await inventory.deviceTable().csv())
            case .exportJSON:
                let table = try await inventory.deviceTable()
                // JSON lines without --json too: the export's own format.
                output.jsonLines.render(
                    ValuesOnly(table.rows.map { DeviceExportRow(columns: table.columns, row: $0) }))
            }
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "inventory: \(error)")
        }
    }

    /// `inventory list --limit N --after ADDRESS`: one page by address;
    /// when more follow, it says where the next page starts.
    func inventoryPage(after: String?, limit: Int) async throws(ConsoleFailure) {
        let inventory = try reader()
        do {
            let (rows, more) = try await inventory.devices(after: after, limit: limit)
            if more, let last = rows.last {
                terminal.message(
                    "showing \(rows.count) devices: there are more (inventory list --limit \(limit) --after \(last.address))"
                )
            }
            output.render(DeviceLine.list(rows, in: inventory.location))
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "inventory: \(error)")
        }
    }

    func log(_ device: String?, since: Date?, limit: Int) async throws(ConsoleFailure) {
        let inventory = try reader()
        do {
            let (outcomes, truncated) = try await inventory.outcomes(device: device, since: since, limit: limit)
            if truncated {
                terminal.message(
                    "showing the newest \(outcomes.count) outcomes: there are more (--limit N, --since TIME)")
            }
            output.render(Table(rows: outcomes.map(OutcomeRow.init)))
        } catch {
            throw ConsoleFailure(.infrastructure, "log: \(error)")
        }
    }

    // MARK: Sync

    /// Pushes the inventory; the URL (it may hold a password) is never printed.
    /// Server rows that fail the checks are named and make the status 2
    /// (nothing of them taken, nothing of them changed). SIGINT or SIGTERM
    /// stops it at the next statement, the one in flight cancelled: it
    /// says what was sent, then 130 or 143.
    func sync(
        to url: String, includeSimulated: Bool, retryFor: Double = 120, full: Bool = false
    ) async throws(ConsoleFailure) {
        try checkTransport(url)
        let inventory = try inventory()
        let terminal = self.terminal
        let stop = SyncStop()
        // The first SIGTERM is the sync's (a second ends the process at once).
        let terminate = Signals.onTerminate { stop.request("SIGTERM") }
        defer { terminate.end() }
        let outcome: BenchSync.Outcome
        do {
            outcome = try await BenchSync.run(
                inventory, to: url, includeSimulated: includeSimulated, profiles: Set(profiles.keys), stop: stop,
                retry: RetryPolicy(budget: .milliseconds(Int64(retryFor * 1_000))), full: full,
                progress: { table, sent in
                    if terminal.errorIsTerminal { terminal.status("sync: \(table) \(sent)…") }
                },
                retrying: { error, wait, attempt in
                    terminal.status(nil)
                    terminal.warning(
                        "sync: \(error.message); trying again in \(Self.seconds(Self.tenths(wait)))"
                            + " (attempt \(attempt))")
                },
                pushEnded: { terminal.status(nil) })
        } catch {
            switch error {
            case .stopped(let reason, let sent): return await syncStopped(reason, inventory, sent: sent)
            case .ledgerRefused(let refusal):
                // Refused as a whole, like a row the server would not take: exit 2.
                throw ConsoleFailure(.devicesFailed, "sync: \(refusal.message)")
            case .push(let error):
                throw ConsoleFailure(.infrastructure, "sync: \(error.message) (the local inventory is unchanged)")
            case .assignments(let error):
                throw ConsoleFailure(.infrastructure, "sync: assignments: \(error.message) (the rows above were sent)")
            }
        }
        let (report, exchange) = (outcome.report, outcome.exchange)
        let refused = outcome.refused
        output.render(
            SyncResult(
                bench: report.benchID, sent: report.sent, heldBackRuns: report.heldBackRuns,
                heldBackDevices: report.heldBackDevices, exchange: exchange, refused: refused,
                ledgerSize: report.ledgerSize, ledgerRoot: report.ledgerRoot))
        if report.checkpointsNotSent > 0 {
            terminal.warning(
                "sync: \(report.checkpointsNotSent) checkpoint\(report.checkpointsNotSent == 1 ? "" : "s") of this bench not sent:"
                    + " older than the ledger the server already held, which takes a checkpoint only with the entries it signs"
            )
        }
        // The bench's rows on the server that are not what its ledger says:
        // the server's doing, named; exit 2 (docs/office.md).
        if !report.serverDifferences.isEmpty {
            for difference in report.serverDifferences {
                terminal.error("sync: on the server: \(difference)")
            }
            terminal.message(
                report.restored
                    ? "sync: the server held rows of this bench that its ledger does not say (above); --full sent this bench's rows, which put them back"
                    : "sync: the server holds rows of this bench that its ledger does not say (above): left as they are; the office's ledger verify names them too; sync --full puts this bench's back, saying so"
            )
            note(.devicesFailed)
        }
        if !report.serverDifferencesAfter.isEmpty {
            for difference in report.serverDifferencesAfter {
                terminal.error("sync: on the server after this sync: \(difference)")
            }
            note(.devicesFailed)
        }
        for conflict in exchange.conflicts { terminal.warning("sync: assignment conflict: \(conflict)") }
        for row in refused {
            terminal.error(
                "sync: refused \(row.table) row \(row.key): \(row.field) \(row.value.map { "'\($0)'" } ?? "NULL")"
                    + " \(row.reason); not applied here, left on the server as it is")
        }
        for address in exchange.notPushed {
            terminal.warning(
                "sync: \(address): this bench's assignment was not pushed: the server's row for the device is refused"
                    + " (above), and a sync never writes over one")
        }
        if !refused.isEmpty {
            terminal.message(
                "\(refused.count) server row\(refused.count == 1 ? "" : "s") refused (docs/office.md, \"Rows the server"
                    + " holds\"): fix or delete \(refused.count == 1 ? "it" : "them") on the server; the rest was synced"
            )
            note(.devicesFailed)
        }
        if report.heldBackRuns > 0 {
            terminal.message(
                "held back \(report.heldBackRuns) simulated run\(report.heldBackRuns == 1 ? "" : "s")"
                    + " (\(report.heldBackDevices) device\(report.heldBackDevices == 1 ? "" : "s") seen only there);"
                    + " --include-simulated pushes them")
        }
    }

    /// A wait in seconds, to the tenth (a retry's wait has jitter).
    static func tenths(_ wait: Duration) -> Double {
        let seconds = Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18
        return (seconds * 10).rounded() / 10
    }

    /// A sync stopped by `reason` (a signal): what it sent, then the exit
    /// status the signal means (130, or 143 for SIGTERM).
    func syncStopped(_ reason: String, _ inventory: Inventory, sent: [String: Int]) async {
        let names = InventorySync.tableNames + InventorySync.ledgerNames
        let counts = names.map { "\($0) \(sent[$0] ?? 0)" }.joined(separator: ", ")
        output.render(
            SyncResult(
                bench: (try? await inventory.benchID()) ?? "",
                sent: Dictionary(uniqueKeysWithValues: names.map { ($0, sent[$0] ?? 0) }),
                stoppedBy: reason))
        terminal.error(
            "sync: stopped by \(reason): sent \(counts); each chunk sent is committed on the server, the statement"
                + " under way was cancelled (rolled back); assignments were not exchanged; the local inventory is"
                + " unchanged; sync again to finish")
        if reason == "SIGTERM" { note(.terminated) } else { markInterrupted() }
    }

    // MARK: Forgetting

    /// `inventory forget`: without `confirmed`, what would be forgotten.
    func forget(_ devices: [String], confirmed: Bool) async throws(ConsoleFailure) {
        let inventory = try inventory()
        guard confirmed else {
            var known: [String] = []
            for name in devices {
                if let record = try? await inventory.device(name) { known.append(record.address) }
            }
            terminal.message(
                "would forget \(known.count) device\(known.count == 1 ? "" : "s")"
                    + (known.isEmpty ? "" : " (\(known.joined(separator: ", ")))")
                    + "; their history stays. Add --yes to forget them.")
            note(.badInput)
            return
        }
        let report: ForgetReport
        do {
            report = try await inventory.forget(devices)
        } catch {
            throw ConsoleFailure(.infrastructure, "inventory forget: \(error)")
        }
        output.render(Documents(report.forgotten.map(ForgottenDevice.init)))
        let kept = [
            ("step outcome", report.keptOutcomes), ("reading", report.keptReadings), ("trip", report.keptTrips),
            ("event", report.keptEvents), ("incident", report.keptIncidents),
        ].map { "\($0.1) \($0.0)\($0.1 == 1 ? "" : "s")" }.joined(separator: ", ")
        if !report.forgotten.isEmpty {
            terminal.message(
                "kept as history: \(kept); \(report.releasedIdentities) identit\(report.releasedIdentities == 1 ? "y" : "ies") released. Seen again, a device comes back."
            )
        }
        for address in report.alreadyForgotten { terminal.message("\(address) was forgotten already") }
        for (ending, addresses) in report.ambiguous.sorted(by: { $0.key < $1.key }) {
            terminal.error(
                "\(ending) names \(addresses.count) devices (\(addresses.joined(separator: ", "))): write the address")
        }
        for name in report.unknown { terminal.error("the inventory has no device \(name)") }
        if !report.unknown.isEmpty || !report.ambiguous.isEmpty { note(.badInput) }
    }
}
