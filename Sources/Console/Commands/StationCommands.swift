import FoundationEssentials
import Inventory
import Profiles
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `station [--profile P] [--rssi-min DBM] [--for DURATION] [--count N]`:
/// the install bench, long-running.
public struct StationCommand: ConsoleCommand {
    public var profile: String?
    public var rssiMin: Int
    public var runFor: Double?
    public var count: Int?
    public var concurrency: Int?

    public static let defaultRSSIMin = -60

    public init(profile: String? = nil, rssiMin: Int = Self.defaultRSSIMin, runFor: Double? = nil, count: Int? = nil) {
        self.profile = profile
        self.rssiMin = rssiMin
        self.runFor = runFor
        self.count = count
    }

    public static let spec = CommandSpec(
        name: "station",
        summary: "install bench: converge each beacon that comes within range to its desired state, until Ctrl-C",
        example: "station --profile car --rssi-min -55",
        options: [
            .value("--profile", "P", .profile, "provision beacons that have no assignment with this profile"),
            .value(
                "--rssi-min", "DBM", .integer(-127...20),
                "only beacons heard at least this strong (default \(defaultRSSIMin)): the one on the bench, not the pallet"
            ),
            .value("--for", "DURATION", .duration(1...604_800), "stop after this long (default: until Ctrl-C)"),
            .value("--count", "N", .integer(1...1_000_000), "stop after N beacons are done"),
        ], mayWriteToBeacons: true,
        detail:
            "Discovers continuously. Each beacon heard at --rssi-min or stronger is brought to its assignment (assign), or provisioned with --profile when it has none, with the steps of provision-new.batch; one line per beacon, a running tally, a recap at the end. A beacon is never worked on twice at once; one done with is taken again only after it was away for 5 s; one taken away half-way is reported, not retried. docs/station.md.",
        emits: [.station, .recovery, .stationSummary]
    ).shapeChecked(by: "station --rssi-min -127 --count 1 --for 20s").documented(in: "station.md")

    public init(_ arguments: inout ParsedArguments) {
        profile = arguments.text("--profile")
        rssiMin = arguments.integer("--rssi-min") ?? Self.defaultRSSIMin
        runFor = arguments.duration("--for")
        count = arguments.integer("--count")
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.station(self, dryRun: located.dryRun)
    }
}

extension Session {
    func station(_ command: StationCommand, dryRun lineDryRun: Bool) async throws(ConsoleFailure) {
        let dryRun = self.dryRun || lineDryRun
        let bench = try await openBench()
        let run = try await currentRun()
        var options = StationOptions(profile: command.profile.flatMap { profiles[$0] }, rssiMin: Int16(command.rssiMin))
        options.runFor = command.runFor.map { .milliseconds(Int64($0 * 1000)) }
        options.stopAfter = command.count
        options.dryRun = dryRun
        options.adapterResets = invocation.adapterResets
        if let concurrency = invocation.concurrency { options.concurrency = concurrency }
        let terminal = self.terminal
        let output = self.output
        let assigned = (try? await bench.inventory.assignments().count) ?? 0
        terminal.message(
            "station: beacons heard at \(command.rssiMin) dBm or stronger are brought to their assignment ("
                + "\(assigned) assigned)"
                + (command.profile.map { ", else provisioned as \($0)" } ?? ", others skipped (no --profile)")
                + (dryRun ? "; dry run: nothing written" : "") + ". Ctrl-C ends.")
        let bell = terminal.errorIsTerminal && !terminal.isDumb && output.isForPeople
        let began = ContinuousClock.now
        let station = Station(
            bench: bench, run: run, options: options, profiles: profiles,
            sharedIdentities: try await sharedIdentities()
        ) { event in
            switch event {
            case .arrived(let address, let rssi, let target):
                if terminal.verbose {
                    output.render(
                        ForPeople(.message("\(address) on the bench (\(rssi.map { "\($0) dBm" } ?? "?")): \(target)")))
                }
            case .note(let text):
                terminal.status(nil)
                terminal.warning("station: \(text)")
            case .finished(let result, let tally):
                terminal.status(nil)
                output.render(StationLine(result: result, tally: tally))
                if bell, !result.succeeded { Terminal.emit(2, "\u{7}") }
                terminal.status("[station · \(tally.text) · \(tally.active) active]")
            }
        }
        let results = await station.run()
        let recoveries = await station.recoveries()
        terminal.status(nil)
        let elapsed = ContinuousClock.now - began
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        if Task.isCancelled { markInterrupted() }
        output.render(StationRecap(results: results, recoveries: recoveries, seconds: seconds))
        if results.contains(where: { [.failed, .takenAway, .missed].contains($0.verdict) }) { note(.devicesFailed) }
    }
}
