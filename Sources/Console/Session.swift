import BlueZClient
import DBusBinding
import Foundation
import Inventory
import InventorySync
import LocalBus
import Profiles
import SBeaconProtocol
import Synchronization
import Workbench

/// One use of beaconbench: a REPL session, a batch, or one command. Holds
/// what commands share — profiles, variables, the selection, the bench
/// (opened at the first command that needs the radio), the inventory
/// (opened at the first that needs it) and the inventory run — and carries
/// out checked commands.
public actor Session {
    public let invocation: Invocation
    public nonisolated let terminal: Terminal
    public let profiles: [String: Profile]
    /// What the run is recorded as in the inventory (`run FILE`, `repl`, …).
    let runLabel: String
    let runDigest: String?

    public private(set) var variables: [String: String] = [:]
    /// The selected addresses, and the selectors that chose them.
    public private(set) var selection: [String]?
    private var selectionText = ""
    private var bench: Bench?
    private var inventoryHandle: Inventory?
    private var serverHandle: ServerInventory?
    private var sharedRegistry: (any SharedIdentities)?
    private var runID: Int64?
    private var simulator: SimulatorProcess?
    /// Recaps of this session's device commands, merged per device.
    private var recaps: [String: DeviceRecap] = [:]
    private var recapOrder: [String] = []
    /// What completion offers for devices, refreshed after each command.
    public private(set) var seenCache: [SeenBeacon] = []
    private var dryRun = false
    /// Whether the recap being gathered includes a dry run (`--dry-run` on a line).
    private var recapWasDry = false
    /// Whether the command being carried out answers in JSON: `--json` for
    /// the whole run, or on its line.
    private(set) var json = false
    /// Whether the recap being gathered is JSON (a device command had `--json`).
    private var recapIsJSON = false
    /// Why the inventory stopped a fleet run (disk full, I/O error…).
    private var inventoryFailure: String?
    /// Set when the user stopped the run (Ctrl-C): the run is recorded as interrupted.
    public private(set) var interrupted = false
    public func markInterrupted() { interrupted = true }
    private var backgroundWatcher: Task<Void, Never>?
    /// A person at the REPL: recaps after each command, beacons announced
    /// as they are found.
    public var isInteractive = false
    public private(set) var status: ExitStatus = .ok

    public init(
        invocation: Invocation, terminal: Terminal, profiles: [String: Profile], runLabel: String,
        runDigest: String? = nil
    ) {
        self.invocation = invocation
        self.terminal = terminal
        self.profiles = profiles
        self.runLabel = runLabel
        self.runDigest = runDigest
    }

    func note(_ status: ExitStatus) { self.status = max(self.status, status) }

    // MARK: Resources

    /// The bench's own inventory, opened on first use.
    func inventory() throws(ConsoleFailure) -> Inventory {
        if let inventoryHandle { return inventoryHandle }
        let path =
            invocation.inventoryPath
            ?? (invocation.simulation != nil ? Paths.simulatedInventory() : Paths.defaultInventory())
        if invocation.inventoryIsServer { throw ConsoleFailure(.badInput, Self.serverIsReadOnly(nil)) }
        do {
            try Paths.makeParent(of: path)
            // Read commands alone open it read-only: another user's, or one
            // on read-only media, can be listed and audited.
            let inventory = try Inventory(path: path, readOnly: onlyReadsTheInventory)
            if let caveat = inventory.caveat { terminal.warning(caveat) }
            inventoryHandle = inventory
            return inventory
        } catch let error as InventoryPathError {
            throw ConsoleFailure(.badInput, "cannot open the inventory: \(error)")
        } catch {
            throw ConsoleFailure(.infrastructure, "cannot open the inventory \(path): \(error)")
        }
    }

    /// Set by a batch (or one command) whose every command only reads the
    /// inventory; a REPL, which may write later, opens it read-write.
    private var onlyReadsTheInventory = false

    /// What the read commands read: the server when `--inventory` names
    /// one, else the bench's own inventory.
    func reader() throws(ConsoleFailure) -> any InventoryReader {
        guard invocation.inventoryIsServer, let url = invocation.inventoryPath else { return try inventory() }
        if let serverHandle { return serverHandle }
        do {
            let server = try ServerInventory(url: url)
            serverHandle = server
            return server
        } catch {
            throw ConsoleFailure(.infrastructure, "the server inventory: \(error.message)")
        }
    }

    /// Why a command cannot run against a server inventory (named as
    /// written: a device step with its argument, else its keyword).
    static func serverIsReadOnly(_ command: (any ConsoleCommand)?) -> String {
        (command.map { "'\($0.stepName)' needs" } ?? "this needs")
            + " a bench's own inventory: --inventory names a PostgreSQL server, which beaconbench only reads"
            + " (inventory, log, audit); benches write their SQLite inventory and 'sync --to' the server"
    }

    /// The bench, opened on first use (and the simulator started first when
    /// `--sim` asked for one).
    func openBench() async throws(ConsoleFailure) -> Bench {
        if let bench { return bench }
        let inventory = try inventory()
        let address = try busAddress()
        do {
            let bench = try await Bench.open(bus: address, adapter: invocation.adapter, inventory: inventory)
            self.bench = bench
            return bench
        } catch let error as BlueZError {
            if case .bus(let busError) = error.reason,
                busError.name == .nameHasNoOwner || busError.name == .serviceUnknown
            {
                throw ConsoleFailure(
                    .infrastructure,
                    "bluetoothd is not running on this bus (systemctl start bluetooth, or try --sim 10)")
            }
            throw ConsoleFailure(.infrastructure, "\(error)")
        } catch {
            throw ConsoleFailure(.infrastructure, "cannot use the bus: \(error)")
        }
    }

    /// bluetoothd's bus: the simulator's with `--sim` (started here).
    func busAddress() throws(ConsoleFailure) -> BusAddress {
        if let simulation = invocation.simulation {
            return .address(try startSimulator(simulation).bus.address)
        }
        switch invocation.bus {
        case .system: return .system
        case .session: return .session
        case .address(let text): return .address(text)
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
            let parent = (path as NSString).deletingLastPathComponent
            checks.append(
                DoctorCheck(
                    name: "inventory", status: .ok,
                    detail: "\(path) does not exist yet; it is made (0600) at the first command that needs it"
                        + (FileManager.default.fileExists(atPath: parent) ? "" : " with its directory")))
        }
        let names = profiles.keys.sorted()
        checks.append(
            names.isEmpty
                ? DoctorCheck(
                    name: "profiles", status: .warning, detail: "no profile found",
                    fix: "install beaconbench (make install) or give --profiles DIR")
                : DoctorCheck(
                    name: "profiles", status: .ok,
                    detail: "\(names.count) loaded and checked: \(names.joined(separator: ", "))"))
        if json {
            for check in checks {
                terminal.emit(
                    .check,
                    [
                        "name": .string(check.name), "status": .string(check.status.rawValue),
                        "detail": .string(check.detail), "fix": .optional(check.fix),
                    ])
            }
        } else {
            let rows = checks.map { check -> [String] in
                let style: Terminal.Style =
                    switch check.status {
                    case .ok: .green
                    case .warning: .yellow
                    case .failed: .red
                    }
                return [check.name, terminal.styled(check.status.rawValue, style), check.detail, check.fix ?? ""]
            }
            for line in table(["check", "status", "detail", "fix"], rows) { terminal.result(line) }
        }
        if checks.contains(where: { $0.status == .failed }) { note(.infrastructure) }
    }

    private func startSimulator(_ simulation: Invocation.Simulation) throws(ConsoleFailure) -> SimulatorProcess {
        if let simulator { return simulator }
        guard let executable = SimulatorProcess.sibling("beaconbench-sim") ?? Paths.inPath("beaconbench-sim") else {
            throw ConsoleFailure(.infrastructure, "beaconbench-sim is not installed beside beaconbench")
        }
        var arguments: [String] = []
        if let count = simulation.count { arguments += ["--count", String(count)] }
        if let fleet = simulation.fleetFile { arguments += ["--fleet", fleet] }
        if let state = simulation.stateFile { arguments += ["--state", state] }
        for option in simulation.options {
            arguments +=
                option.hasPrefix("--") && option.contains("=")
                ? option.split(separator: "=", maxSplits: 1).map(String.init) : [option]
        }
        do {
            let simulator = try SimulatorProcess.start(executable: executable, arguments: arguments)
            self.simulator = simulator
            if terminal.verbose { terminal.message("simulator: \(simulator.readyLine)") }
            return simulator
        } catch {
            throw ConsoleFailure(.infrastructure, "\(error)")
        }
    }

    /// The shared server's identity registry: `--server` (or
    /// BEACONBENCH_SERVER), else the server the inventory last synced to;
    /// `none` for none. Its password comes from the URL given, PGPASSWORD
    /// or ~/.pgpass (an inventory never keeps one).
    func sharedIdentities() async throws(ConsoleFailure) -> (any SharedIdentities)? {
        if let sharedRegistry { return sharedRegistry }
        let inventory = try inventory()
        var url = invocation.server
        if url == nil { url = try? await inventory.setting("server") }
        guard let url, url != "none", !url.isEmpty, let bench = try? await inventory.benchID() else { return nil }
        let registry = ServerIdentities(url: url, benchID: bench)
        sharedRegistry = registry
        return registry
    }

    /// The inventory run that this session's outcomes belong to.
    func currentRun() async throws(ConsoleFailure) -> Int64 {
        if let runID { return runID }
        let inventory = try inventory()
        do {
            let id = try await inventory.beginRun(
                Inventory.RunInfo(
                    command: runLabel, sha256: runDigest,
                    options: dryRun ? "dry-run" : nil, adapter: invocation.adapter,
                    simulated: invocation.simulation != nil))
            runID = id
            await inventory.keepSpaceInReserve()
            return id
        } catch {
            throw ConsoleFailure(.infrastructure, "the inventory refused a new run: \(error)")
        }
    }

    /// Ends the run, closes the bench and stops the simulator.
    public func finish() async {
        backgroundWatcher?.cancel()
        await backgroundWatcher?.value
        if let runID, let inventoryHandle {
            let ending: Inventory.RunStatus = interrupted ? .interrupted : status == .ok ? .finished : .failed
            do {
                try await inventoryHandle.endRun(
                    runID, ending,
                    reason: inventoryFailure.map { "the inventory failed: \($0)" }
                        ?? (interrupted ? "the run was interrupted" : nil))
            } catch {
                terminal.error("the inventory could not record the end of run \(runID): \(error)")
            }
        }
        if let bench { await bench.close() }
        bench = nil
        simulator?.stop()
        simulator = nil
    }

    // MARK: Running commands

    /// Runs checked commands in order, as a batch: consecutive device
    /// steps form one pipeline per device; at the end, one recap.
    public func runBatch(_ commands: [LocatedCommand], dryRun: Bool) async {
        self.dryRun = dryRun
        onlyReadsTheInventory = commands.allSatisfy(\.command.onlyReadsTheInventory)
        var index = 0
        while index < commands.count {
            if Task.isCancelled { break }
            let located = commands[index]
            if located.isQuit { break }
            if located.command.isDeviceStep, located.devices.isEmpty {
                var group = [located]
                while index + 1 < commands.count, commands[index + 1].command.isDeviceStep,
                    commands[index + 1].devices.isEmpty, commands[index + 1].dryRun == located.dryRun
                {
                    index += 1
                    group.append(commands[index])
                }
                json = terminal.json || group.contains(where: \.json)
                await perform { () async throws(ConsoleFailure) in try await self.runDeviceSteps(group, on: nil) }
            } else {
                await execute(located)
            }
            if status == .infrastructure { break }
            index += 1
        }
        printRecap()
    }

    /// Runs one command (a REPL line, or one of a batch).
    public func execute(_ located: LocatedCommand) async {
        json = terminal.json || located.json
        await perform { () async throws(ConsoleFailure) in try await self.carryOut(located) }
        refreshSeen()
    }

    private func perform(_ body: () async throws(ConsoleFailure) -> Void) async {
        do {
            try await body()
        } catch {
            terminal.error(error.message)
            note(error.status)
        }
    }

    private func refreshSeen() {
        guard let bench else { return }
        Task { self.seenCache = await bench.seen() }
    }

    /// Updates variables set on earlier lines (REPL).
    public func setVariable(_ name: String, _ value: String) { variables[name] = value }

    /// Dispatch: the command's own code runs it (see `CommandTable`).
    private func carryOut(_ located: LocatedCommand) async throws(ConsoleFailure) {
        let command = located.command
        if invocation.inventoryIsServer, !command.onlyReadsTheInventory {
            throw ConsoleFailure(.badInput, Self.serverIsReadOnly(command))
        }
        try await command.run(in: self, located)
    }

    // MARK: Discovery and selection

    func scan(seconds: Double, rssiFloor: Int16?) async throws(ConsoleFailure) {
        let bench = try await openBench()
        let terminal = self.terminal
        let announce = terminal.verbose || isInteractive
        let known = Set(seenCache.map(\.address))
        let started = ContinuousClock.now
        let lastFound = Mutex(ContinuousClock.now)
        do {
            if terminal.errorIsTerminal { terminal.status("scanning for \(Self.seconds(seconds))…") }
            let found = try await bench.scan(seconds: seconds, rssiFloor: rssiFloor) { beacon in
                lastFound.withLock { $0 = ContinuousClock.now }
                if announce, !known.contains(beacon.address) {
                    terminal.event(terminal.styled("[NEW] ", .green) + Format.seenLine(beacon))
                }
            }
            terminal.status(nil)
            seenCache = found
            let fresh = found.filter { $0.summary?.status.contains(.factoryDefault) ?? false }.count
            if json {
                let settled = lastFound.withLock { $0 } - started
                terminal.emit(
                    .scan,
                    [
                        "seen": .int(found.count), "new": .int(fresh), "seconds": .number(seconds),
                        "last_found_after": .number(
                            Double(settled.components.attoseconds) / 1e18 + Double(settled.components.seconds)),
                    ])
            } else {
                terminal.message(
                    "scan: \(found.count) SBeacon\(found.count == 1 ? "" : "s") seen, \(fresh) new"
                        + (Task.isCancelled ? " (stopped early)" : ""))
            }
        } catch {
            terminal.status(nil)
            throw ConsoleFailure(.infrastructure, "scan: \(error)")
        }
    }

    func backgroundScan(_ on: Bool) async throws(ConsoleFailure) {
        let bench = try await openBench()
        guard on else {
            guard let watcher = backgroundWatcher else { return terminal.message("no background scan running") }
            watcher.cancel()
            await watcher.value
            backgroundWatcher = nil
            terminal.message("background scan off")
            return
        }
        guard backgroundWatcher == nil else { return terminal.message("a background scan is running already") }
        do {
            try await bench.beginDiscovery()
        } catch {
            throw ConsoleFailure(.infrastructure, "scan on: \(error)")
        }
        let terminal = self.terminal
        var known = Set(seenCache.map(\.address))
        backgroundWatcher = Task {
            while !Task.isCancelled {
                // In range: heard lately, and still known to bluetoothd.
                let seen = await bench.inRange()
                let now = Set(seen.map(\.address))
                for beacon in seen where !known.contains(beacon.address) {
                    terminal.event(terminal.styled("[NEW] ", .green) + Format.seenLine(beacon))
                }
                for address in known.subtracting(now).sorted() {
                    terminal.event(terminal.styled("[DEL] ", .red) + "SBeacon \(address)")
                }
                known = now
                await self.updateSeen(seen)
                try? await Task.sleep(for: .milliseconds(250))
            }
            try? await Task { try await bench.endDiscovery() }.value
        }
        terminal.message("background scan on: beacons are announced as they come and go ('scan off' stops)")
    }

    private func updateSeen(_ seen: [SeenBeacon]) { seenCache = seen }

    func listDevices(_ filter: String?) async throws(ConsoleFailure) {
        let bench = try await openBench()
        let records = (try? await inventory().devicesByAddress()) ?? [:]
        let beacons = await bench.seen().filter { beacon in
            guard let filter = filter?.lowercased() else { return true }
            return beacon.address.lowercased().contains(filter) || beacon.macEnding.contains(filter)
                || (records[beacon.address]?.profile?.lowercased().contains(filter) ?? false)
        }
        seenCache = await bench.seen()
        let selected = Set(selection ?? [])
        if json {
            for beacon in beacons {
                terminal.emit(
                    .beacon,
                    Shapes.beacon(
                        beacon, profile: records[beacon.address]?.profile, selected: selected.contains(beacon.address)))
            }
            return
        }
        let rows = beacons.map { beacon in
            Format.seenRow(
                beacon, profile: records[beacon.address]?.profile, selected: selected.contains(beacon.address))
        }
        for line in table(Format.seenHeader, rows, numeric: [2]) { terminal.result(line) }
        terminal.message("\(beacons.count) SBeacon\(beacons.count == 1 ? "" : "s")")
    }

    func select(_ selectors: [DeviceSelector], text: String) async throws(ConsoleFailure) {
        let bench = try await openBench()
        do {
            let chosen = try await bench.select(selectors)
            selection = chosen
            selectionText = text
            if json {
                terminal.emit(
                    .selection, ["devices": .array(chosen.map(JSONValue.string)), "selectors": .string(text)])
            } else {
                terminal.message("selected \(chosen.count) device\(chosen.count == 1 ? "" : "s") (\(text))")
            }
        } catch let error as SelectionError {
            throw ConsoleFailure(.badInput, "select: \(error)")
        } catch {
            throw ConsoleFailure(.infrastructure, "select: the inventory: \(error)")
        }
    }

    static func selectorsText(_ selectors: [DeviceSelector]) -> String {
        selectors.map { selector in
            switch selector {
            case .all: "all"
            case .new: "new"
            case .unprovisioned: "unprovisioned"
            case .inRange: "in-range"
            case .profile(let name): "profile=\(name)"
            case .batteryBelow(let limit): "battery<\(limit)"
            case .firmwareBelow(let version): "firmware<\(version)"
            case .minorRange(let low, let high): "minor=\(low)-\(high)"
            case .address(let address): address
            case .macEnding(let ending): ending
            }
        }.joined(separator: " ")
    }

    /// The devices a device command acts on: those named on its line, or
    /// the selection.
    private func targets(_ named: [DeviceSelector]?) async throws(ConsoleFailure) -> [String] {
        let bench = try await openBench()
        if let named {
            do {
                return try await bench.select(named)
            } catch let error as SelectionError {
                throw ConsoleFailure(.badInput, "\(error)")
            } catch {
                throw ConsoleFailure(.infrastructure, "the inventory: \(error)")
            }
        }
        guard let selection else {
            throw ConsoleFailure(.badInput, "no devices selected: 'select …' first, or name a device on the line")
        }
        return selection
    }

    // MARK: Device steps

    func runDeviceSteps(_ group: [LocatedCommand], on named: [DeviceSelector]?) async throws(ConsoleFailure) {
        let steps = group.compactMap { $0.command.step(profiles: profiles) }
        // `--dry-run` on the line, or for the whole run.
        let dryRun = self.dryRun || group.contains(where: \.dryRun)
        let addresses = try await targets(named)
        guard !addresses.isEmpty else {
            terminal.message(
                "no devices selected: nothing to do for \(group.map(\.command.stepName).joined(separator: ", "))"
            )
            return
        }
        let bench = try await openBench()
        let run = try await currentRun()
        let board = ProgressBoard(terminal: terminal, total: addresses.count, dryRun: dryRun, json: json)
        // Whole seconds: the inventory keeps when a record was pulled to the second.
        let started = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        board.begin(steps.map(\.name))
        let result: FleetResult
        do {
            result = try await bench.run(
                steps, on: addresses, run: run, concurrency: try await concurrency(bench), dryRun: dryRun,
                profiles: profiles, sharedIdentities: sharedIdentities()
            ) { event in board.handle(event) }
        } catch {
            board.end()
            throw ConsoleFailure(.infrastructure, "\(error)")
        }
        board.end()
        let recaps = result.recaps
        if result.interrupted { interrupted = true }
        if dryRun { recapWasDry = true }
        if json { recapIsJSON = true }
        merge(recaps)
        if recaps.contains(where: { $0.failed > 0 }) { note(.devicesFailed) }
        if let failure = result.inventoryFailure {
            inventoryFailure = failure
            printRecap()
            throw ConsoleFailure(
                .infrastructure,
                "the inventory failed (\(failure)): the run stopped before writing anything more to a beacon")
        }
        // A pull: the records it brought, as data on standard output.
        let pulled = Set(
            group.compactMap { located -> RecordKind? in
                switch located.command {
                case is TripsCommand: .trip
                case is EventsCommand: .event
                case is IncidentsCommand: .incident
                default: nil
                }
            })
        if !pulled.isEmpty {
            try await showPulled(pulled, from: Set(addresses), since: started)
        }
        // `info`: what was read, as data on standard output.
        if group.contains(where: { $0.command is InfoCommand }) {
            try await showDevices(recaps.filter { $0.failed == 0 && !$0.notStarted }.map(\.address))
        }
        // A live audit: the report from what was just read into the inventory.
        for located in group {
            if let audit = located.command as? AuditCommand, audit.source == .live {
                let profile = audit.profile
                let read = Set(recaps.filter { $0.failed == 0 }.map(\.address))
                try await reportAudit(from: inventorySubjects().filter { read.contains($0.address) }, profile, .live)
            }
        }
        if Task.isCancelled { terminal.message("cancelled") }
        if isInteractive { printRecap() }
    }

    /// The records of `kinds` pulled from these devices since `since`.
    func showPulled(_ kinds: Set<RecordKind>, from devices: Set<String>, since: Date) async throws(ConsoleFailure) {
        let page: RecordPage
        do {
            page = try await inventory().records(RecordQuery(kinds: kinds, pulledSince: since))
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "the inventory: \(error)")
        }
        let records = page.all.filter { devices.contains($0.device) }
        if json {
            for record in records { terminal.emit(record.resultKind, Shapes.record(record)) }
            return
        }
        terminal.result("")
        terminal.result(
            terminal.styled("PULLED", .bold) + " \(records.count) record\(records.count == 1 ? "" : "s")"
                + " (records list shows them again)")
        if !records.isEmpty {
            for line in table(RecordRows.tableHeader, records.map(RecordRows.tableRow)) { terminal.result(line) }
        }
    }

    /// The inventory's records of these devices: JSON lines of kind
    /// `device`, or each one's details for people.
    func showDevices(_ addresses: [String]) async throws(ConsoleFailure) {
        let inventory = try inventory()
        for address in addresses {
            let record: DeviceRecord?
            do {
                record = try await inventory.device(address)
            } catch {
                throw ConsoleFailure(.infrastructure, "the inventory: \(error)")
            }
            guard let record else { continue }
            if json {
                terminal.emit(.device, Shapes.device(record))
            } else {
                for line in Format.recordDetail(record) { terminal.result(line) }
                terminal.result("")
            }
        }
    }

    /// Adds device recaps to the recap printed at the end.
    private func merge(_ recaps: [DeviceRecap]) {
        for recap in recaps {
            if var merged = self.recaps[recap.address] {
                merged.ok += recap.ok
                merged.changed += recap.changed
                merged.unchanged += recap.unchanged
                merged.skipped += recap.skipped
                merged.wouldChange += recap.wouldChange
                merged.failed += recap.failed
                merged.interrupted = merged.interrupted || recap.interrupted
                merged.reason = recap.reason ?? merged.reason
                self.recaps[recap.address] = merged
            } else {
                self.recaps[recap.address] = recap
                recapOrder.append(recap.address)
            }
        }
    }

    /// `--concurrency`, else 5 connection slots per adapter in use.
    private func concurrency(_ bench: Bench) async throws -> Int {
        if let concurrency = invocation.concurrency { return concurrency }
        return 5 * max(1, try await bench.adapters().count)
    }

    /// The recap of the device commands so far (then forgotten).
    public func printRecap() {
        guard !recapOrder.isEmpty else { return }
        let rows = recapOrder.compactMap { recaps[$0] }
        recaps = [:]
        recapOrder = []
        Format.recap(rows, terminal: terminal, json: terminal.json || recapIsJSON, dryRun: dryRun || recapWasDry)
        recapWasDry = false
        recapIsJSON = false
    }

    // MARK: Watching

    func watch(seconds: Double, devices: [DeviceSelector]) async throws(ConsoleFailure) {
        let addresses = try await targets(devices.isEmpty ? nil : devices)
        guard !addresses.isEmpty else {
            terminal.message("no devices selected: nothing to watch")
            return
        }
        let bench = try await openBench()
        let terminal = self.terminal
        terminal.message(
            "watching \(addresses.count) device\(addresses.count == 1 ? "" : "s") for \(Self.seconds(seconds)) (Ctrl-C stops)"
        )
        let counter = EventCounter()
        let json = self.json
        let slots = (try? await concurrency(bench)) ?? 5
        let results = await bench.watch(addresses, seconds: seconds, concurrency: slots, run: try await currentRun()) {
            event in
            counter.add(event)
            if json {
                terminal.emit(.watchEvent, Shapes.watchEvent(event))
            } else {
                terminal.event(Format.watchLine(event, terminal: terminal))
            }
        }
        for result in results where result.state == .failed {
            terminal.error("\(result.address): watch: \(result.reason ?? "failed")")
        }
        if results.contains(where: { $0.state == .failed }) { note(.devicesFailed) }
        merge(results.map(\.recap))
        if json {
            terminal.emit(
                .watchSummary,
                [
                    "devices": .int(addresses.count), "events": .int(counter.events),
                    "trip_changes": .int(counter.tripChanges),
                    "failed": .int(results.filter { $0.state == .failed }.count),
                ])
        } else {
            terminal.message(
                "watch: \(counter.events) real-time event(s), \(counter.tripChanges) trip status change(s)")
        }
    }

    // MARK: Audits

    func audit(profile: String?, source: AuditCommand.Source) async throws(ConsoleFailure) {
        let subjects: [AuditSubject]
        switch source {
        case .live:
            return  // a device step, run by the fleet runner
        case .inventory:
            subjects = try await inventorySubjects()
        case .passive:
            let bench = try await openBench()
            var seen = await bench.seen().filter { $0.summary != nil }
            if seen.isEmpty {
                do {
                    seen = try await bench.scan(seconds: 10).filter { $0.summary != nil }
                } catch {
                    throw ConsoleFailure(.infrastructure, "audit: scan: \(error)")
                }
            }
            let records = (try? await inventory().devicesByAddress()) ?? [:]
            let meant = (try? await inventory().meantIdentities()) ?? [:]
            subjects = seen.compactMap { beacon in
                guard let summary = beacon.summary else { return nil }
                var subject = Auditor.subject(address: beacon.address, summary: summary, seenAt: Date())
                subject.assignedProfile = records[beacon.address]?.profile
                subject.identity = beacon.identity
                if let meant = meant[beacon.address] {
                    subject.meantIdentity = meant.identity
                    subject.meantIdentitySource =
                        meant.source == "profile" ? "profile \(meant.profile ?? "")" : meant.source
                }
                return subject
            }
        }
        let chosen = selection.map(Set.init)
        try await reportAudit(from: subjects.filter { chosen?.contains($0.address) ?? true }, profile, source)
    }

    private func inventorySubjects() async throws(ConsoleFailure) -> [AuditSubject] {
        do {
            return try await reader().auditSubjects()
        } catch let error as ConsoleFailure {
            throw error
        } catch {
            throw ConsoleFailure(.infrastructure, "audit: \(error)")
        }
    }

    private func reportAudit(
        from subjects: [AuditSubject], _ profile: String?, _ source: AuditCommand.Source
    ) async throws(ConsoleFailure) {
        let reports = Auditor.auditFleet(subjects, profiles: profiles, profile: profile)
        Format.audit(reports, source: source, terminal: terminal, json: json)
        if reports.contains(where: { !$0.isClean }) { note(.devicesFailed) }
    }

    // MARK: Inventory and log

    func inventoryCommand(_ action: InventoryAction) async throws(ConsoleFailure) {
        let inventory = try reader()
        do {
            switch action {
            case .list:
                let devices = try await inventory.devices()
                if json {
                    for device in devices { terminal.emit(.device, Shapes.device(device)) }
                } else {
                    let (header, rows) = Format.recordTable(devices)
                    for line in table(header, rows) { terminal.result(line) }
                    terminal.message("\(devices.count) device\(devices.count == 1 ? "" : "s") in \(inventory.location)")
                }
            case .show(let name):
                guard let device = try await inventory.device(name) else {
                    throw ConsoleFailure(.badInput, "the inventory has no device \(name)")
                }
                let outcomes = try await inventory.outcomes(device: device.address, limit: 20)
                if json {
                    terminal.emit(.device, Shapes.device(device))
                    for outcome in outcomes { terminal.emit(.outcome, Shapes.outcome(outcome)) }
                } else {
                    for line in Format.recordDetail(device) { terminal.result(line) }
                    terminal.result("")
                    let (header, rows) = Format.outcomeTable(outcomes)
                    for line in table(header, rows) { terminal.result(line) }
                }
            case .exportCSV: terminal.document(try await inventory.deviceTable().csv())
            case .exportJSON:
                let table = try await inventory.deviceTable()
                for row in table.rows { terminal.emit(.deviceRow, Shapes.deviceRow(columns: table.columns, row: row)) }
            }
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
            if json {
                for outcome in outcomes { terminal.emit(.outcome, Shapes.outcome(outcome)) }
            } else {
                let (header, rows) = Format.outcomeTable(outcomes)
                for line in table(header, rows) { terminal.result(line) }
            }
        } catch {
            throw ConsoleFailure(.infrastructure, "log: \(error)")
        }
    }

    // MARK: Sync

    /// Pushes the inventory; the URL (it may hold a password) is never printed.
    func sync(to url: String, includeSimulated: Bool) async throws(ConsoleFailure) {
        let inventory = try inventory()
        let report: InventorySync.Report
        let terminal = self.terminal
        do {
            report = try await InventorySync.push(
                inventory, to: url, includeSimulated: includeSimulated,
                progress: { table, sent in
                    if terminal.errorIsTerminal { terminal.status("sync: \(table) \(sent)…") }
                },
                retrying: { error, wait, attempt in
                    terminal.status(nil)
                    terminal.warning(
                        "sync: \(error.message); trying again in \(Self.seconds(Double(wait.components.seconds)))"
                            + " (attempt \(attempt))")
                })
            terminal.status(nil)
        } catch {
            terminal.status(nil)
            throw ConsoleFailure(.infrastructure, "sync: \(error.message) (the local inventory is unchanged)")
        }
        // Remembered (without a password) as the server that hands out identities.
        if let remembered = ServerIdentities.rememberable(url) {
            try? await inventory.setSetting("server", remembered)
        }
        let order = InventorySync.tableNames
        if json {
            terminal.emit(
                .sync,
                [
                    "bench": .string(report.benchID),
                    "sent": .object(report.sent.mapValues { .int($0) }),
                    "held_back_runs": .int(report.heldBackRuns), "held_back_devices": .int(report.heldBackDevices),
                ])
        } else {
            let counts = order.map { "\($0) \(report.sent[$0] ?? 0)" }.joined(separator: ", ")
            terminal.result("synced bench \(report.benchID): sent \(counts)")
        }
        if report.heldBackRuns > 0 {
            terminal.message(
                "held back \(report.heldBackRuns) simulated run\(report.heldBackRuns == 1 ? "" : "s")"
                    + " (\(report.heldBackDevices) device\(report.heldBackDevices == 1 ? "" : "s") seen only there);"
                    + " --include-simulated pushes them")
        }
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
        if json {
            for address in report.forgotten {
                terminal.emit(.forgotten, ["device": .string(address)])
            }
        } else {
            for address in report.forgotten { terminal.result("forgot \(address)") }
        }
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

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : String(format: "%.1f s", value)
    }

    // MARK: For the REPL

    /// The prompt's facts: adapter, devices seen, devices selected.
    public func setInteractive() { isInteractive = true }

    public func promptFacts() -> (adapter: String, seen: Int, selected: Int?) {
        (invocation.adapter ?? "hci0", seenCache.count, selection?.count)
    }
}

/// Counts what a watch saw.
final class EventCounter: Sendable {
    private let counts = Mutex((events: 0, trips: 0))
    func add(_ event: WatchEvent) {
        counts.withLock { counts in
            switch event {
            case .realTime: counts.events += 1
            case .tripStatus: counts.trips += 1
            default: break
            }
        }
    }
    var events: Int { counts.withLock { $0.events } }
    var tripChanges: Int { counts.withLock { $0.trips } }
}

/// What `inventory` subcommands ask of `Session.inventoryCommand`.
enum InventoryAction: Sendable, Equatable { case list, show(String), exportCSV, exportJSON }
/// What `profiles` subcommands ask of `Session.profilesCommand`.
enum ProfilesAction: Sendable, Equatable { case list, show(String), check }
