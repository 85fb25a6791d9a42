import FoundationEssentials
import Synchronization
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `scan [DURATION] [--rssi DBM]`: discover beacons for a while.
public struct ScanCommand: ConsoleCommand {
    public var seconds: Double
    public var rssiFloor: Int16?
    /// Ends the scan once this many beacons are heard (the duration is then a cap).
    public var until: Int?

    public init(seconds: Double = 10, rssiFloor: Int16? = nil, until: Int? = nil) {
        self.seconds = seconds
        self.rssiFloor = rssiFloor
        self.until = until
    }

    public static let spec = CommandSpec(
        name: "scan", summary: "discover beacons for a while (default 10 s)", example: "scan 15s --rssi -80",
        operands: [.optional("DURATION", .duration(0.1...3600))],
        options: [
            .value("--rssi", "DBM", .integer(-127...0), "ignore beacons heard weaker than this"),
            .value(
                "--until", "N", .integer(0...100_000),
                "stop as soon as N beacons are heard (the duration is then the longest wait; 0: no target)"),
        ], emits: [.scan]
    ).shapeChecked(by: "scan 10s --rssi -127 --until ${count}")

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        self.init(
            seconds: arguments.operandDuration(0) ?? 10, rssiFloor: arguments.integer("--rssi").map { Int16($0) },
            until: arguments.integer("--until").flatMap { $0 == 0 ? nil : $0 })
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.scan(seconds: seconds, rssiFloor: rssiFloor, until: until)
    }
}

/// `scan on`: discovery in the background, beacons announced as they come and go.
public struct ScanOnCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(
        name: "scan on", summary: "discover in the background, announcing beacons as they come and go",
        example: "scan on")
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.backgroundScan(true)
    }
}

/// `scan off`: ends `scan on`.
public struct ScanOffCommand: ConsoleCommand {
    public init() {}
    public static let spec = CommandSpec(name: "scan off", summary: "end the background scan", example: "scan off")
    public init(_ arguments: inout ParsedArguments) {}
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.backgroundScan(false)
    }
}

/// `devices [FILTER]`: the beacons seen.
public struct DevicesCommand: ConsoleCommand {
    public var filter: String?
    public init(filter: String? = nil) { self.filter = filter }
    public static let spec = CommandSpec(
        name: "devices", summary: "list the beacons seen (address, MAC ending or profile containing FILTER)",
        example: "devices c7d9", operands: [.optional("FILTER", .text)], emits: [.beacon]
    ).shapeChecked(by: "devices")
    public init(_ arguments: inout ParsedArguments) { filter = arguments.operand(0) }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.listDevices(filter)
    }
}

/// `select SELECTOR…`: choose the devices later commands act on.
public struct SelectCommand: ConsoleCommand {
    public var selectors: [DeviceSelector]
    public init(_ selectors: [DeviceSelector]) { self.selectors = selectors }
    public static let spec = CommandSpec(
        name: "select",
        summary:
            "choose devices: all, new, unprovisioned, in-range, profile=NAME, battery<N, firmware<X, minor=A-B, addresses, MAC endings",
        example: "select new battery<30", operands: [.some("SELECTOR", .selector)], emits: [.selection],
        setsSelection: true)
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        let parser = arguments.parser
        selectors = try arguments.each { token throws(BatchError) in try parser.selector(token) }
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.select(selectors, text: Session.selectorsText(selectors))
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(Session.selectorsText(selectors)) }
}

extension Session {
    // MARK: Discovery and selection

    func scan(seconds: Double, rssiFloor: Int16?, until: Int? = nil) async throws(ConsoleFailure) {
        let bench = try await openBench()
        let terminal = self.terminal
        let announce = terminal.verbose || isInteractive
        let known = Set(seenCache.map(\.address))
        let started = ContinuousClock.now
        let lastFound = Mutex(ContinuousClock.now)
        do {
            if terminal.errorIsTerminal { terminal.status("scanning for \(Self.seconds(seconds))…") }
            let found = try await bench.scan(seconds: seconds, rssiFloor: rssiFloor, until: until) { beacon in
                lastFound.withLock { $0 = ContinuousClock.now }
                if announce, !known.contains(beacon.address) {
                    terminal.event(terminal.styled("[NEW] ", .green) + Format.seenLine(beacon))
                }
            }
            terminal.status(nil)
            seenCache = found
            await recordScanRecoveries(bench)
            let fresh = found.filter { $0.summary?.status.contains(.factoryDefault) ?? false }.count
            let settled = lastFound.withLock { $0 } - started
            output.render(
                ScanSummary(
                    seen: found.count, fresh: fresh, seconds: seconds,
                    lastFoundAfter: Double(settled.components.attoseconds) / 1e18 + Double(settled.components.seconds),
                    stoppedEarly: Task.isCancelled, until: until))
        } catch {
            terminal.status(nil)
            await recordScanRecoveries(bench)
            throw ConsoleFailure(.infrastructure, "scan: \(error)")
        }
    }

    /// A scan's recoveries (a wedged adapter power-cycled): outcome rows
    /// in this session's run, lines on standard error, and the recap.
    func recordScanRecoveries(_ bench: Bench) async {
        let records = await bench.takeRecoveries()
        guard !records.isEmpty else { return }
        for record in records {
            terminal.warning(
                "scan: recover \(record.ok ? "ok" : "failed"): \(record.detail)"
                    + (record.error.map { ": \($0)" } ?? ""))
        }
        recoveries += records
        guard let run = try? await currentRun(), let inventory = try? inventory() else { return }
        for record in records {
            if let id = try? await inventory.beginStep(run: run, device: record.device, step: "recover") {
                try? await inventory.finishStep(
                    id, record.ok ? .ok : .failed, detail: record.detail, error: record.error)
            }
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
            var listed = -1
            var lookedAt = ContinuousClock.now
            while !Task.isCancelled {
                // Looked at again when a device came, went or changed its
                // adverts, and every second (a beacon falls silent without
                // a signal).
                let version = await bench.deviceListVersion
                guard version != listed || ContinuousClock.now - lookedAt >= .seconds(1) else {
                    try? await Task.sleep(for: .milliseconds(250))
                    continue
                }
                listed = version
                lookedAt = ContinuousClock.now
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

    func updateSeen(_ seen: [SeenBeacon]) { seenCache = seen }

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
        output.render(
            SeenBeaconRow.list(
                beacons.map { beacon in
                    SeenBeaconRow(
                        beacon, profile: records[beacon.address]?.profile,
                        selected: selected.contains(beacon.address))
                }))
    }

    func select(_ selectors: [DeviceSelector], text: String) async throws(ConsoleFailure) {
        let bench = try await openBench()
        do {
            let chosen = try await bench.select(selectors)
            selection = chosen
            selectionText = text
            output.render(SelectionResult(devices: chosen, selectors: text))
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
    func targets(_ named: [DeviceSelector]?) async throws(ConsoleFailure) -> [String] {
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
}
