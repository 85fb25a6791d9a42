import Workbench

/// `scan [DURATION] [--rssi DBM]`: discover beacons for a while.
public struct ScanCommand: ConsoleCommand {
    public var seconds: Double
    public var rssiFloor: Int16?

    public init(seconds: Double = 10, rssiFloor: Int16? = nil) {
        self.seconds = seconds
        self.rssiFloor = rssiFloor
    }

    public static let spec = CommandSpec(
        name: "scan", summary: "discover beacons for a while (default 10 s)", example: "scan 15s --rssi -80",
        operands: [.optional("DURATION", .duration(0.1...3600))],
        options: [.value("--rssi", "DBM", .integer(-127...0), "ignore beacons heard weaker than this")])

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        self.init(
            seconds: arguments.operandDuration(0) ?? 10, rssiFloor: arguments.integer("--rssi").map { Int16($0) })
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.scan(seconds: seconds, rssiFloor: rssiFloor)
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
        example: "devices c7d9", operands: [.optional("FILTER", .text)])
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
        example: "select new battery<30", operands: [.some("SELECTOR", .selector)])
    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        let parser = arguments.parser
        selectors = try arguments.each { token throws(BatchError) in try parser.selector(token) }
    }
    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.select(selectors, text: Session.selectorsText(selectors))
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(Session.selectorsText(selectors)) }
}
