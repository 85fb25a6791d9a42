import Foundation

/// A private `dbus-daemon` with `beaconbench-sim` serving on it: what
/// `beaconbench --sim N`, the benchmarks and the end-to-end tests run
/// against when there is no radio.
public final class SimulatorProcess: Sendable {
    public let bus: PrivateBus
    public let process: ChildProcess
    /// `ready bus=… adapters=… beacons=…`.
    public let readyLine: String

    private init(bus: PrivateBus, process: ChildProcess, readyLine: String) {
        self.bus = bus
        self.process = process
        self.readyLine = readyLine
    }

    /// Starts the bus, then `executable` (beaconbench-sim) on it with
    /// `arguments`, and waits for its ready line.
    /// - Throws: `LocalBusError` with the simulator's own message when it
    ///   exits before it is ready (a bad fleet file, say), or on timeout.
    public static func start(
        executable: String, arguments: [String], timeout: Duration = .seconds(30)
    ) throws -> SimulatorProcess {
        let bus = try PrivateBus.start()
        let output = bus.directory + "/sim.out"
        let errors = bus.directory + "/sim.err"
        let process: ChildProcess
        do {
            process = try ChildProcess(
                executable, ["--bus", bus.address] + arguments, standardOutput: output, standardError: errors)
        } catch {
            bus.stop()
            throw error
        }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let text = try? String(contentsOfFile: output, encoding: .utf8), text.hasSuffix("\n"),
                let line = text.split(separator: "\n").first
            {
                return SimulatorProcess(bus: bus, process: process, readyLine: String(line))
            }
            guard process.isRunning else { break }
            usleep(5_000)
        }
        let message = (try? String(contentsOfFile: errors, encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        process.terminate()
        bus.stop()
        throw LocalBusError(
            "the simulator did not start" + (message.map { $0.isEmpty ? "" : ": \($0)" } ?? ""))
    }

    /// Stops the simulator (it saves its state file on SIGTERM), then the bus.
    public func stop() {
        process.terminate(grace: .seconds(10))
        bus.stop()
    }

    /// `NAME` beside the running executable, when it is there.
    public static func sibling(_ name: String) -> String? {
        guard let own = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
            return nil
        }
        let path = URL(fileURLWithPath: own).deletingLastPathComponent().appendingPathComponent(name).path
        return FileManager.default.isExecutableFile(atPath: path) ? path : nil
    }
}
