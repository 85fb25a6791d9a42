import FoundationEssentials
import Inventory
import InventorySync
import LocalBus
import Profiles
import SBeaconProtocol
import SafeText
import Synchronization
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// One use of beaconbench: a REPL session, a batch, or one command. Holds
/// what commands share — profiles, variables, the selection, the bench
/// (opened at the first command that needs the radio), the inventory
/// (opened at the first that needs it) and the inventory run — and carries
/// out checked commands.
public actor Session {
    public let invocation: Invocation
    public nonisolated let terminal: Terminal
    /// The profiles: a batch's are loaded before it is checked; the
    /// REPL's at its first line (`ProfileSource`), not before the prompt.
    public nonisolated let profileSource: ProfileSource
    /// The profiles loaded so far (all of them once `profileSource` has loaded).
    public nonisolated var profiles: [String: Profile] { profileSource.loaded }
    /// What the run is recorded as in the inventory (`run FILE`, `repl`, …).
    let runLabel: String
    let runDigest: String?

    public private(set) var variables: [String: String] = [:]
    /// The selected addresses, and the selectors that chose them.
    public internal(set) var selection: [String]?
    var selectionText = ""
    var bench: Bench?
    private var inventoryHandle: Inventory?
    private var serverHandle: ServerInventory?
    /// Stored values that failed their checks, read other than through a
    /// reader (the server's drift): reported with the readers' own.
    var pendingStoredFindings: [StoredFinding] = []
    private var sharedRegistry: (any SharedIdentities)?
    private var runID: Int64?
    private var simulator: SimulatorProcess?
    /// Recaps of this session's device commands, merged per device.
    var recaps: [String: DeviceRecap] = [:]
    /// The recoveries of the runs since the last recap.
    var recoveries: [RecoveryRecord] = []
    var recapOrder: [String] = []
    /// What completion offers for devices, refreshed after each command.
    public internal(set) var seenCache: [SeenBeacon] = []
    var dryRun = false
    /// Whether the recap being gathered includes a dry run (`--dry-run` on a line).
    private var recapWasDry = false
    /// How the command being carried out answers: JSON with `--json` for
    /// the whole run or on its line, else for people.
    private(set) var output: Renderer
    /// How the recap being gathered answers: JSON when the run is, or when
    /// one of its device commands had `--json`.
    private var recapOutput: Renderer
    /// Why the inventory stopped a fleet run (disk full, I/O error…).
    var inventoryFailure: String?
    /// Set when the user stopped the run (Ctrl-C): the run is recorded as interrupted.
    public private(set) var interrupted = false
    public func markInterrupted() { interrupted = true }
    var backgroundWatcher: Task<Void, Never>?
    /// A person at the REPL: recaps after each command, beacons announced
    /// as they are found.
    public var isInteractive = false
    public private(set) var status: ExitStatus = .ok

    public init(
        invocation: Invocation, terminal: Terminal, profiles: [String: Profile], runLabel: String,
        runDigest: String? = nil
    ) {
        self.init(
            invocation: invocation, terminal: terminal, profileSource: ProfileSource(profiles), runLabel: runLabel,
            runDigest: runDigest)
    }

    public init(
        invocation: Invocation, terminal: Terminal, profileSource: ProfileSource, runLabel: String,
        runDigest: String? = nil
    ) {
        self.invocation = invocation
        self.terminal = terminal
        self.profileSource = profileSource
        self.runLabel = runLabel
        self.runDigest = runDigest
        output = Renderer(terminal: terminal)
        recapOutput = Renderer(terminal: terminal)
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
            // Before any directory is made: `file:/a/b` is no path to make.
            try Database.checkName(path)
            try Paths.makeParent(of: path)
            // Read commands alone open it read-only: another user's, or one
            // on read-only media, can be listed and audited.
            let inventory = try Inventory(path: path, readOnly: onlyReadsTheInventory)
            if let caveat = inventory.caveat { terminal.warning(caveat) }
            inventoryHandle = inventory
            return inventory
        } catch let error as InventoryNameError {
            throw ConsoleFailure(.badInput, "cannot open the inventory: \(error)")
        } catch let error as InventoryPathError {
            throw ConsoleFailure(.infrastructure, "cannot open the inventory: \(error)")
        } catch {
            throw ConsoleFailure(.infrastructure, "cannot open the inventory \(path): \(error)")
        }
    }

    /// The files no output file (`report --out`, `--sim-state`) may be
    /// written over: the open inventory's (its `-wal`, `-shm`, `-journal`,
    /// reserve), and those of the inventory this invocation names and of
    /// the default ones, open or not.
    func protectedFiles() -> [OutputFile.Protected] {
        var paths = [Paths.defaultInventory(), Paths.simulatedInventory()]
        if let configured = invocation.inventoryPath, !invocation.inventoryIsServer { paths.append(configured) }
        if let inventoryHandle { paths.append(inventoryHandle.path) }
        return paths.flatMap(OutputFile.inventoryFiles)
    }

    /// Set by a batch (or one command) whose every command only reads the
    /// inventory; a REPL, which may write later, opens it read-write.
    private var onlyReadsTheInventory = false

    /// What the read commands read: the server when `--inventory` names
    /// one, else the bench's own inventory.
    func reader() throws(ConsoleFailure) -> any InventoryReader {
        guard invocation.inventoryIsServer, let url = invocation.inventoryPath else { return try inventory() }
        if let serverHandle { return serverHandle }
        try checkTransport(url)
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
            + " (inventory, log, audit, report); benches write their SQLite inventory and 'sync --to' the server"
    }

    /// The bench, opened on first use (and the simulator started first when
    /// `--sim` asked for one).
    func openBench() async throws(ConsoleFailure) -> Bench {
        if let bench { return bench }
        let inventory = try inventory()
        let address = try busAddress()
        do {
            let bench = try await Bench.open(bus: address, adapter: invocation.adapter, inventory: inventory)
            await bench.setAdapterResets(invocation.adapterResets)
            self.bench = bench
            return bench
        } catch {
            if Bench.isBluetoothdMissing(error) {
                throw ConsoleFailure(
                    .infrastructure,
                    "bluetoothd is not running on this bus (systemctl start bluetooth, or try --sim 10;"
                        + " beaconbench doctor checks the rest)")
            }
            throw ConsoleFailure(.infrastructure, Bench.isBusError(error) ? "\(error)" : "cannot use the bus: \(error)")
        }
    }

    /// bluetoothd's bus: the simulator's with `--sim` (started here).
    func busAddress() throws(ConsoleFailure) -> BenchBus {
        if let simulation = invocation.simulation {
            return .address(try startSimulator(simulation).bus.address)
        }
        switch invocation.bus {
        case .system: return .system
        case .session: return .session
        case .address(let text): return .address(text)
        }
    }

    private func startSimulator(_ simulation: Invocation.Simulation) throws(ConsoleFailure) -> SimulatorProcess {
        if let simulator { return simulator }
        guard let executable = SimulatorProcess.sibling("beaconbench-sim") ?? Paths.inPath("beaconbench-sim") else {
            throw ConsoleFailure(.infrastructure, "beaconbench-sim is not installed beside beaconbench")
        }
        var arguments: [String] = []
        if let count = simulation.count { arguments += ["--count", String(count)] }
        if let fleet = simulation.fleetFile { arguments += ["--fleet", fleet] }
        if let state = simulation.stateFile {
            do {
                _ = try OutputFile.check(state, protecting: protectedFiles())
            } catch {
                throw ConsoleFailure(.badInput, "--sim-state: \(error)")
            }
            arguments += ["--state", state]
        }
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
        try checkTransport(url)
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
            let ending: Inventory.RunStatus =
                interrupted || status == .terminated ? .interrupted : status == .ok ? .finished : .failed
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
        await simulator?.stop()
        simulator = nil
        // `--checkpoint`: the ledger signed as the run left it.
        if invocation.checkpoint, !interrupted, !invocation.inventoryIsServer {
            do {
                try await checkpointLedger(key: nil, signer: nil, out: nil)
            } catch {
                terminal.error("--checkpoint: \(error.message)")
                note(error.status)
            }
        }
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
                output = Renderer(terminal: terminal, for: group)
                await perform { () async throws(ConsoleFailure) in try await self.runDeviceSteps(group, on: nil) }
            } else {
                await execute(located)
            }
            if status == .infrastructure || status == .terminated { break }
            index += 1
        }
        printRecap()
    }

    /// Runs one command (a REPL line, or one of a batch).
    public func execute(_ located: LocatedCommand) async {
        output = Renderer(terminal: terminal, for: [located])
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
        await reportStoredFindings()
    }

    /// The stored values that failed their checks in what the command read
    /// (the inventory's or the server's rows; docs/inventory.md, "Values
    /// read back"): each one line on standard error (with `--json`, a
    /// `stored_value` line too), after the command's output; exit status 2.
    func reportStoredFindings() async {
        var found = pendingStoredFindings
        pendingStoredFindings = []
        var more = 0
        for reader in [inventoryHandle as (any InventoryReader)?, serverHandle].compactMap({ $0 }) {
            let taken = await reader.takeStoredFindings()
            found += taken.findings
            more += taken.more
        }
        guard !found.isEmpty || more > 0 else { return }
        for finding in found {
            output.render(StoredValueLine(finding: finding))
            terminal.error("stored value: \(finding)")
        }
        if more > 0 { terminal.error("stored value: \(more) more values failed their checks") }
        let count = found.count + more
        terminal.message(
            "\(count) stored value\(count == 1 ? "" : "s") failed \(count == 1 ? "its check" : "their checks"):"
                + " not used (read as unknown, or the row left out); the rest is shown."
                + " docs/inventory.md, \"Values read back\"")
        note(.devicesFailed)
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
        if invocation.inventoryIsServer, !command.runsAgainstAServer {
            throw ConsoleFailure(.badInput, Self.serverIsReadOnly(command))
        }
        try await command.run(in: self, located)
    }

    // MARK: Device steps

    func runDeviceSteps(_ group: [LocatedCommand], on named: [DeviceSelector]?) async throws(ConsoleFailure) {
        let steps = group.compactMap { $0.command.step(profiles: profiles) }
        // `--dry-run` on the line, or for the whole run.
        let dryRun = self.dryRun || group.contains(where: \.dryRun)
        var addresses = try await targets(named)
        // Nothing found while an adapter went away (or came back under
        // another name) is not "nothing to do": wait for it, look again.
        if addresses.isEmpty, let bench, await bench.adaptersChanged() {
            let absent = await bench.waitForAdapters(timeout: Recovery.adapterReturnTimeout)
            if let (address, path) = absent.first {
                throw ConsoleFailure(
                    .infrastructure,
                    "adapter \(address) (\(path.components.last ?? "")) went away during the scan and did not return"
                        + " within \(Int(Recovery.adapterReturnTimeout.components.seconds)) s: no devices could be selected"
                )
            }
            addresses = try await targets(named)
        }
        guard !addresses.isEmpty else {
            terminal.message(
                "no devices selected: nothing to do for \(group.map(\.command.stepName).joined(separator: ", "))"
            )
            return
        }
        let bench = try await openBench()
        let run = try await currentRun()
        let board = ProgressBoard(terminal: terminal, total: addresses.count, dryRun: dryRun, output: output)
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
        recoveries += result.recoveries
        if result.interrupted { interrupted = true }
        if dryRun { recapWasDry = true }
        recapOutput = recapOutput.joined(output)
        merge(recaps)
        if recaps.contains(where: { $0.failed > 0 }) { note(.devicesFailed) }
        if let failure = result.inventoryFailure {
            inventoryFailure = failure
            printRecap()
            throw ConsoleFailure(
                .infrastructure,
                "the inventory failed (\(failure)): the run stopped before writing anything more to a beacon")
        }
        if let failure = result.adapterFailure {
            printRecap()
            throw ConsoleFailure(.infrastructure, "\(failure): the run stopped")
        }
        // A pull: the records it brought, as data on standard output.
        let pulled = Set(group.compactMap(\.spec.pulls))
        if !pulled.isEmpty {
            try await showPulled(pulled, from: Set(addresses), since: started)
        }
        // `info`: what was read, as data on standard output.
        if group.contains(where: \.spec.showsWhatItRead) {
            try await showDevices(recaps.filter { $0.failed == 0 && !$0.notStarted }.map(\.address))
        }
        // A live audit: the report from what was just read into the inventory.
        for located in group {
            if let audit = located.command.liveAudit {
                let profile = audit.profile
                let read = Set(recaps.filter { $0.failed == 0 }.map(\.address))
                try await reportAudit(from: inventorySubjects().filter { read.contains($0.address) }, profile, .live)
            }
        }
        if Task.isCancelled { terminal.message("cancelled") }
        if isInteractive { printRecap() }
    }

    /// The inventory's records of these devices (`DeviceDetail`).
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
            output.render(DeviceDetail(record))
        }
    }

    /// Adds device recaps to the recap printed at the end.
    func merge(_ recaps: [DeviceRecap]) {
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
    func concurrency(_ bench: Bench) async throws -> Int {
        if let concurrency = invocation.concurrency { return concurrency }
        return 5 * max(1, try await bench.adapters().count)
    }

    /// The recap of the device commands so far (then forgotten).
    public func printRecap() {
        guard !recapOrder.isEmpty else { return }
        let rows = recapOrder.compactMap { recaps[$0] }
        recaps = [:]
        recapOrder = []
        recapOutput.render(RecapDocument(recaps: rows, recoveries: recoveries, dryRun: dryRun || recapWasDry))
        recoveries = []
        recapWasDry = false
        recapOutput = Renderer(terminal: terminal)
    }

    static func seconds(_ value: Double) -> String {
        if value == value.rounded(), let whole = Int(exactly: value) { return "\(whole) s" }
        return CFormat.string("%.1f s", value)
    }

    // MARK: For the REPL

    /// The prompt's facts: adapter, devices seen, devices selected.
    public func setInteractive() { isInteractive = true }

    public func promptFacts() -> (adapter: String, seen: Int, selected: Int?) {
        (invocation.adapter ?? "hci0", seenCache.count, selection?.count)
    }
}
