import DBusBinding
import Foundation
import SafeText
import Synchronization

/// `beaconbench-sim`'s command line: parsed here so the executable stays
/// thin and the parsing is tested.
public struct SimulatorCommandLine: Sendable {
    public var bus: BusAddress = .system
    public var options = SimulatorOptions()
    public var count = 10
    /// Every generated beacon straight from the box (factory default).
    public var fresh = false
    public var fleetPath: String?
    public var showHelp = false
    /// `--exit-with-parent FD` and what to tidy when the parent is gone.
    public var lifeline: Lifeline?

    public static let usage = """
        usage: beaconbench-sim [options]

        A simulated bluetoothd (BlueZ 5.66 on D-Bus) with a fleet of SBeacons in
        range. It owns org.bluez and org.beaconbench.Simulator on the bus it is
        given, prints one line `ready bus=<address> adapters=<n> beacons=<n>`
        when it serves, and exits 0 on SIGINT or SIGTERM.

        options:
          --bus system|session|ADDRESS   the bus (default: system, which honours
                                         DBUS_SYSTEM_BUS_ADDRESS)
          --adapters N                   adapters hci0…hciN-1 (default 1)
          --slots N                      LE links each adapter holds (default 5;
                                         --connections N is the old name); a
                                         connect beyond them fails
                                         le-connection-abort-by-local
          --fault-plan FILE              a fault plan (JSON, docs/simulator.md):
                                         rules that make BlueZ' failures happen
                                         at chosen moments; checked at start
          --count N                      simulated beacons (default 10)
          --fresh                        every generated beacon new from the box
          --split-adverts                with DuplicateData, ManufacturerData
                                         alternates between the iBeacon data
                                         (advert) and the bench summary (scan
                                         response), as real bluetoothd shows it
                                         (factory default; battery and firmware
                                         still vary)
          --seed S                       seed of the fleet and of every random
                                         choice (default 1)
          --latency none|realistic       radio timing (default none); realistic:
                                         connect 1 s (one at a time per adapter),
                                         service resolution 0.3 s, ATT request
                                         60 ms, calibration 1.5 s
          --connect-ms N, --resolve-ms N, --att-ms N, --calibration-ms N,
          --advert-ms N                  override one latency figure
          --connect-timeout-ms N         how long a connect to a beacon that is
                                         not there takes to fail (default: the
                                         connect latency; a real radio: 20000)
          --temporary-timeout S          seconds an unconnected device stays after
                                         discovery stops (default 30, as BlueZ)
          --faults KIND=P,…              inject faults with probability P each
                                         (`all=P` for every kind; shorthand for
                                         fault plan rules faults.KIND):
                                         connect-in-progress,
                                         connect-abort, services-never-resolved,
                                         disconnect-mid-operation, att-error,
                                         stalled-reply, dropped-notification,
                                         vanish, adapter-off
          --fleet FILE.json              the beacons, described one by one (see
                                         docs/simulator.md), instead of --count;
                                         their names and Device Information
                                         strings may be any bytes
          --state FILE                   keep the fleet's state in FILE across runs:
                                         read at start when it exists (then it is
                                         the fleet), written atomically after
                                         changes and at exit
          --stall-seconds S              how long a stalled reply stalls (default 30)
          --outage-seconds S             how long a vanished beacon or an adapter
                                         switched off stays so (default 5)
          --exit-with-parent FD          FD is the read end of a pipe or socket
                                         whose other end only the parent holds:
                                         at its end of file (the parent is gone,
                                         even killed with -9) stop as on SIGTERM
          --bus-daemon PID               with --exit-with-parent, when the parent
                                         is gone: stop this dbus-daemon too (only
                                         if started in its process group)
          --bus-directory DIR            with --exit-with-parent, when the parent
                                         is gone: remove DIR (the private bus's
                                         directory) too
          --help                         this text

        It refuses to start where org.bluez is already owned (a real bluetoothd).
        The control interface and the fleet's mix are described in
        docs/simulator.md.
        """

    public struct UsageError: Error, CustomStringConvertible {
        public let description: String
    }

    /// The largest fault plan file read (docs/simulator.md, "Fault plans").
    public static let maxPlanFile = 1 << 20

    /// Reads and checks a fault plan file.
    /// - Throws: `UsageError` naming the file, and the rule and field.
    static func loadPlan(_ path: String) throws -> FaultPlan {
        // Checked before it is read (a regular file, opened without
        // blocking), and never more than the limit read (`BoundedFile`).
        let data: [UInt8]
        do {
            data = try BoundedFile.read(path, limit: maxPlanFile)
        } catch {
            throw UsageError(description: "--fault-plan \(path): \(error)")
        }
        guard let text = String(validating: data, as: UTF8.self) else {
            throw UsageError(description: "--fault-plan \(path): not UTF-8")
        }
        do {
            return try FaultPlan(json: text)
        } catch let error as FaultPlanError {
            throw UsageError(description: "--fault-plan \(path): \(error)")
        }
    }

    public init(arguments: [String]) throws {
        var rest = arguments[...]
        var parentDescriptor: Int32?
        var busDaemon: pid_t?
        var busDirectory: String?
        func value(_ option: String) throws -> String {
            guard let next = rest.popFirst() else { throw UsageError(description: "\(option) needs a value") }
            return next
        }
        func number<T: FixedWidthInteger>(_ option: String, _ range: ClosedRange<T>) throws -> T {
            let text = try value(option)
            guard let parsed = T(text), range.contains(parsed) else {
                throw UsageError(description: "\(option) wants a number in \(range), got '\(text)'")
            }
            return parsed
        }
        while let option = rest.popFirst() {
            switch option {
            case "--help", "-h": showHelp = true
            case "--bus": bus = BusAddress(parsing: try value(option))
            case "--adapters": options.adapters = try number(option, 1...16)
            case "--slots", "--connections": options.connectionsPerAdapter = try number(option, 1...64)
            case "--fault-plan":
                let path = try value(option)
                options.faultPlan = try Self.loadPlan(path)
            case "--count": count = try number(option, 0...100_000)
            case "--fresh": fresh = true
            case "--split-adverts": options.splitAdverts = true
            case "--seed": options.seed = try number(option, 0...UInt64.max)
            case "--latency":
                switch try value(option) {
                case "none": options.latency = .none
                case "realistic": options.latency = .realistic
                case let other: throw UsageError(description: "--latency is none or realistic, not '\(other)'")
                }
            case "--connect-ms": options.latency.connect = .milliseconds(try number(option, 0...600_000) as Int)
            case "--resolve-ms":
                options.latency.serviceResolution = .milliseconds(try number(option, 0...600_000) as Int)
            case "--att-ms": options.latency.attRequest = .milliseconds(try number(option, 0...600_000) as Int)
            case "--calibration-ms":
                options.latency.calibration = .milliseconds(try number(option, 0...600_000) as Int)
            case "--advert-ms": options.latency.advertInterval = .milliseconds(try number(option, 10...600_000) as Int)
            case "--connect-timeout-ms":
                options.latency.connectTimeout = .milliseconds(try number(option, 0...600_000) as Int)
            case "--temporary-timeout": options.temporaryTimeout = .seconds(try number(option, 0...86_400) as Int)
            case "--faults":
                do {
                    options.faults.merge(try Fault.parse(try value(option))) { $1 }
                } catch let error as FaultSpecificationError {
                    throw UsageError(description: "--faults: \(error)")
                }
            case "--fleet": fleetPath = try value(option)
            case "--state": options.statePath = try value(option)
            case "--stall-seconds": options.stall = .seconds(try number(option, 0...3600) as Int)
            case "--outage-seconds": options.outage = .seconds(try number(option, 0...3600) as Int)
            case "--exit-with-parent": parentDescriptor = try number(option, 0...65_535)
            case "--bus-daemon": busDaemon = try number(option, 1...pid_t.max)
            case "--bus-directory": busDirectory = try value(option)
            default: throw UsageError(description: "unknown option '\(option)'")
            }
        }
        if let parentDescriptor {
            lifeline = Lifeline(descriptor: parentDescriptor, busDaemon: busDaemon, busDirectory: busDirectory)
        } else if busDaemon != nil || busDirectory != nil {
            throw UsageError(description: "--bus-daemon and --bus-directory go with --exit-with-parent")
        }
    }
}

/// Runs the simulator until SIGINT or SIGTERM, or until its parent is gone
/// (`--exit-with-parent`).
public enum SimulatorMain {
    /// Returns once the simulator has stopped (its state saved); the
    /// executable then exits 0. When it throws, the executable calls
    /// `tidyAfterFailure` (not here: the optimiser of Swift 6.3.1 crashes
    /// splitting this async function with a do/catch around its body).
    public static func run(_ commandLine: SimulatorCommandLine) async throws {
        let lifeline = commandLine.lifeline
        try lifeline?.check()
        let now = SimulatedBluetoothd.now()
        let fleet: [BeaconState]
        if let path = commandLine.options.statePath, let saved = try StateFile.load(path) {
            fleet = saved
        } else if let path = commandLine.fleetPath {
            fleet = try FleetFile.load(path, now: now)
        } else {
            fleet = FleetGenerator.make(
                count: commandLine.count, seed: commandLine.options.seed, now: now, fresh: commandLine.fresh)
        }
        if let path = commandLine.options.statePath { try StateFile.save(fleet, to: path) }
        let bus = try await BusConnection.connect(commandLine.bus)
        let daemon = SimulatedBluetoothd(bus: bus, options: commandLine.options, fleet: fleet)
        try await daemon.start()
        try await bus.export(SimulatorControl.interface(for: daemon), at: SimulatorControl.path)
        _ = try await bus.requestName(SimulatorControl.busName)
        // Listening for the end before saying ready: a parent may send
        // SIGTERM the moment it reads the line.
        let endings = Endings(lifeline)
        print("ready bus=\(bus.address) adapters=\(await daemon.adapterCount) beacons=\(await daemon.beaconCount)")
        fflush(nil)
        let ending = await endings.first()
        await daemon.saveNow()
        await bus.close()
        if ending == .parentGone { lifeline?.tidyAfterParent() }
    }

    /// After `run` threw: a parent that died while this started tidies
    /// nothing, so this does.
    public static func tidyAfterFailure(_ commandLine: SimulatorCommandLine) {
        if let lifeline = commandLine.lifeline, lifeline.parentIsGone { lifeline.tidyAfterParent() }
    }

    enum Ending { case signal, parentGone }

    /// SIGINT or SIGTERM, or the parent gone, from the moment it is made.
    ///
    /// The signals are caught by a handler installed here and now with
    /// `sigaction`, which writes a byte to a pipe (the self-pipe trick); a
    /// thread of its own reads it. Not a Dispatch signal source: that had
    /// the disposition set to SIG_IGN first, and its own handler installed
    /// later, asynchronously, on Dispatch's manager thread; under load a
    /// SIGTERM sent the moment the ready line was read fell into that
    /// window, the kernel discarded it, and the simulator never ended
    /// ("simulator not exited 30 s after SIGTERM").
    final class Endings {
        private let stream: AsyncStream<Ending>

        init(_ lifeline: Lifeline?) {
            let (stream, continuation) = AsyncStream.makeStream(of: Ending.self)
            self.stream = stream
            var ends: [Int32] = [-1, -1]
            if pipe(&ends) == 0 {
                for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
                endingSignalPipe = ends[1]
                var action = sigaction()
                action.__sigaction_handler.sa_handler = { _ in
                    var byte: UInt8 = 1
                    _ = write(endingSignalPipe, &byte, 1)
                }
                sigemptyset(&action.sa_mask)
                action.sa_flags = Int32(SA_RESTART)
                sigaction(SIGINT, &action, nil)
                sigaction(SIGTERM, &action, nil)
                let reader = ends[0]
                let waiter = Thread {
                    var byte: UInt8 = 0
                    while true {
                        let count = read(reader, &byte, 1)
                        if count > 0 || (count < 0 && errno != EINTR) { break }
                    }
                    continuation.yield(.signal)
                }
                waiter.stackSize = 64 * 1024
                waiter.start()
            }
            lifeline?.watch { continuation.yield(.parentGone) }
        }

        /// The first ending (a signal before this was called included).
        func first() async -> Ending {
            var iterator = stream.makeAsyncIterator()
            return await iterator.next() ?? .signal
        }
    }
}

/// The write end of the pipe the SIGINT and SIGTERM handler writes to
/// (set once, before the handler is installed; read only by the handler).
nonisolated(unsafe) private var endingSignalPipe: Int32 = -1
