import FoundationEssentials
import SafeText
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A private `dbus-daemon` with `beaconbench-sim` serving on it: what
/// `beaconbench --sim N`, the benchmarks and the end-to-end tests run
/// against when there is no radio.
///
/// Neither may outlive this process, however it ends. Stopped in order,
/// they are stopped by `stop()` (or, on the way out of a process told to
/// go, `CleanUp.stopAllBeforeExit()`). When this process
/// dies without that (kill -9, a crash, a signal not handled), the
/// simulator notices: it holds the read end of a lifeline, a socket pair
/// whose other end only this process holds (close-on-exec, so no other
/// child inherits it), and end of file there means this process is gone.
/// It then saves its state, stops the bus's daemon and removes the bus's
/// directory itself (`--exit-with-parent 3 --bus-daemon PID --bus-directory
/// DIR`, docs/simulator.md). It can stop the daemon safely by its pid
/// because it joins the daemon's process group: the pid of a group's
/// leader is not reused while the group has a member.
///
/// Why not PR_SET_PDEATHSIG: posix_spawn cannot set it, and it fires when
/// the *thread* that spawned the child exits, not the process; the spawn
/// happens on a pooled thread (Swift concurrency, dispatch) that may end
/// while the process runs on. A pipe closes only when the process has gone,
/// whatever killed it, and its end of file stays to be read, so there is no
/// race with a parent that dies while the child starts.
public final class SimulatorProcess: Sendable {
    public let bus: PrivateBus
    public let process: ChildProcess
    /// `ready bus=… adapters=… beacons=…`.
    public let readyLine: String
    /// This end of the lifeline; closed once the simulator is stopped.
    private let lifeline: Mutex<Int32>

    private init(bus: PrivateBus, process: ChildProcess, readyLine: String, lifeline: Int32) {
        self.bus = bus
        self.process = process
        self.readyLine = readyLine
        self.lifeline = Mutex(lifeline)
    }

    deinit { stop() }

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
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            let reason = String(cString: strerror(errno))
            bus.stop()
            throw LocalBusError("cannot make the simulator's lifeline: \(reason)")
        }
        let lifeline = ends[0]
        let process: ChildProcess
        do {
            process = try CleanUp.register {
                try ChildProcess(
                    executable,
                    [
                        "--bus", bus.address, "--exit-with-parent", "3", "--bus-daemon", String(bus.daemon.pid),
                        "--bus-directory", bus.directory,
                    ] + arguments,
                    standardOutput: output, standardError: errors, descriptor: ends[1], processGroup: bus.daemon.pid)
            }
            close(ends[1])
        } catch {
            close(ends[0])
            close(ends[1])
            bus.stop()
            throw error
        }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let text = String(validating: BoundedFile.prefix(output, limit: 64 * 1024), as: UTF8.self),
                text.hasSuffix("\n"),
                let line = text.split(separator: "\n").first
            {
                return SimulatorProcess(bus: bus, process: process, readyLine: String(line), lifeline: lifeline)
            }
            guard process.isRunning else { break }
            usleep(5_000)
        }
        let message = String(decoding: BoundedFile.prefix(errors, limit: 64 * 1024), as: UTF8.self)
            .trimmingWhitespace()
        process.terminate()
        bus.stop()
        close(lifeline)
        throw LocalBusError(
            "the simulator did not start" + (message.isEmpty ? "" : ": \(message)"))
    }

    /// Stops the simulator (it saves its state file on SIGTERM), then the
    /// bus, and closes the lifeline. Safe from any thread and more than once.
    public func stop() {
        process.terminate(grace: .seconds(10))
        bus.stop()
        lifeline.withLock { descriptor in
            if descriptor >= 0 { close(descriptor) }
            descriptor = -1
        }
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
