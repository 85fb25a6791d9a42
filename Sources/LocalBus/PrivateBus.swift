import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A `dbus-daemon` of the test's own, on a socket in a temporary directory
/// that only this user can enter, admitting only this user's connections.
/// Tests, benchmarks and `beaconbench --sim` never touch the machine's
/// system or session bus.
///
/// ```swift
/// let bus = try PrivateBus.start()
/// defer { bus.stop() }
/// let connection = try await BusConnection.connect(.address(bus.address))
/// ```
public final class PrivateBus: CleanUp.Stoppable {
    /// The D-Bus address, `unix:path=…/bus`.
    public let address: String
    /// The temporary directory holding the socket and configuration: mode
    /// 0700, every file in it 0600, whatever the umask.
    public let directory: String
    /// The daemon; spawned and reaped here, not by Foundation's `Process`,
    /// so stopping never waits on a run loop. It leads a process group of
    /// its own, which the simulator on this bus joins (see
    /// `SimulatorProcess`).
    public let daemon: ChildProcess

    private var socketPath: String { directory + "/bus" }

    /// Makes the directory and configuration and spawns the daemon (not
    /// waiting for it).
    /// The read end of the pipe on which the daemon prints its address
    /// once it is ready (`--print-address=3`); closed by `start`.
    private let readiness: Int32

    private init(daemonPath: String) throws {
        directory = try Self.makePrivateDirectory()
        address = "unix:path=\(directory)/bus"
        let configPath = directory + "/bus.conf"
        var ends: [Int32] = [-1, -1]
        do {
            try Self.writePrivateFile(
                configPath, Self.configuration(socketPath: directory + "/bus", user: getuid()))
            guard pipe(&ends) == 0 else {
                throw LocalBusError("cannot make a pipe for dbus-daemon: \(String(cString: strerror(errno)))")
            }
            // Neither end leaks into other children (spawn's dup2 onto 3
            // gives the daemon its own, without the flag).
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            daemon = try ChildProcess(
                daemonPath,
                ["--config-file=\(configPath)", "--nofork", "--nopidfile", "--nosyslog", "--print-address=3"],
                descriptor: ends[1])
            close(ends[1])
            readiness = ends[0]
        } catch {
            for end in ends where end >= 0 { close(end) }
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// Waits until the daemon prints its address (it has made, listened on
    /// and set the mode of its socket, and is ready): a line on the pipe.
    /// - Returns: what it printed, or nil if it did not within `timeout`
    ///   or closed the pipe first (it exited).
    private func readAddressLine(timeout: Duration) -> String? {
        defer { close(readiness) }
        var line: [UInt8] = []
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            var descriptor = pollfd(fd: readiness, events: Int16(POLLIN), revents: 0)
            let left = deadline - ContinuousClock.now
            let milliseconds = Int32(max(1, min(1000, left.components.seconds * 1000 + 1)))
            let ready = poll(&descriptor, 1, milliseconds)
            if ready < 0, errno == EINTR { continue }
            guard ready >= 0 else { return nil }
            if ready == 0 { continue }
            var buffer = [UInt8](repeating: 0, count: 512)
            let count = buffer.withUnsafeMutableBytes { read(readiness, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return nil }
            line += buffer[..<count]
            if let end = line.firstIndex(of: UInt8(ascii: "\n")) {
                return String(decoding: line[..<end], as: UTF8.self)
            }
            guard line.count < 4096 else { return nil }
        }
        return nil
    }

    deinit { stop() }

    /// The daemon's configuration: a private listening socket; only `user`
    /// (this process's) may connect, and may own any name and send and
    /// receive anything; no eavesdropping (a monitor of the same user,
    /// `dbus-monitor` or `busctl monitor`, still works: dbus-daemon lets the
    /// bus's own user call BecomeMonitor whatever the policy). Limits high
    /// enough for the concurrency tests.
    public static func configuration(socketPath: String, user: uid_t = getuid()) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(socketPath)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <deny user="*"/>
            <allow user="\(user)"/>
            <deny own="*"/>
            <deny send_destination="*"/>
            <deny receive_sender="*"/>
          </policy>
          <policy user="\(user)">
            <allow own="*"/>
            <allow send_destination="*"/>
            <allow receive_sender="*"/>
          </policy>
          <limit name="max_incoming_bytes">1000000000</limit>
          <limit name="max_outgoing_bytes">1000000000</limit>
          <limit name="max_message_size">134217728</limit>
          <limit name="max_replies_per_connection">100000</limit>
          <limit name="max_match_rules_per_connection">100000</limit>
          <limit name="max_connections_per_user">10000</limit>
          <limit name="max_completed_connections">10000</limit>
          <limit name="reply_timeout">300000</limit>
        </busconfig>
        """
    }

    /// Starts `dbus-daemon` and waits until its socket accepts connections.
    /// - Throws: when `dbus-daemon` is missing or does not come up in 10 s.
    public static func start() throws -> PrivateBus {
        guard
            let daemonPath = ["/usr/bin/dbus-daemon", "/bin/dbus-daemon"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            throw LocalBusError("dbus-daemon is not installed (apt-get install dbus-daemon)")
        }
        let bus = try CleanUp.register { try PrivateBus(daemonPath: daemonPath) }
        // Ready when dbus-daemon says so (--print-address, after it listened
        // and set its socket's mode 0777), not when a connect first works:
        // a chmod of ours before its own would be undone (the socket was
        // found 0777 after a test: issue 27). A generous cap: 60 s.
        guard let printed = bus.readAddressLine(timeout: .seconds(60)), printed.contains(bus.socketPath),
            acceptsConnections(bus.socketPath)
        else {
            bus.stop()
            throw LocalBusError("dbus-daemon did not say it was ready on \(bus.socketPath) within 60 s")
        }
        // The daemon made its socket 0777; the directory, 0700, kept it
        // private meanwhile.
        guard chmod(bus.socketPath, 0o600) == 0 else {
            bus.stop()
            throw LocalBusError("cannot make \(bus.socketPath) private: \(String(cString: strerror(errno)))")
        }
        return bus
    }

    /// A new directory `beaconbench-bus-XXXXXXXX` in the temporary
    /// directory, mode 0700 whatever the umask; never one that was there.
    private static func makePrivateDirectory() throws -> String {
        let parent = FileManager.default.temporaryDirectory.path
        for _ in 0..<16 {
            let path = parent + "/beaconbench-bus-\(UUID().uuidString.prefix(8))"
            if mkdir(path, 0o700) == 0 {
                guard chmod(path, 0o700) == 0 else {
                    let reason = String(cString: strerror(errno))
                    rmdir(path)
                    throw LocalBusError("cannot make \(path) private: \(reason)")
                }
                return path
            }
            if errno != EEXIST {
                throw LocalBusError("cannot make a directory in \(parent): \(String(cString: strerror(errno)))")
            }
        }
        throw LocalBusError("cannot make a new directory in \(parent)")
    }

    /// Writes a new file, mode 0600 whatever the umask, never through a
    /// link or over a file that was there.
    private static func writePrivateFile(_ path: String, _ text: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw LocalBusError("cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fchmod(fd, 0o600) == 0 else {
            throw LocalBusError("cannot make \(path) private: \(String(cString: strerror(errno)))")
        }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else {
                throw LocalBusError("cannot write \(path): \(String(cString: strerror(errno)))")
            }
            bytes = bytes.dropFirst(written)
        }
    }

    /// True once something listens on the socket (the file appears at
    /// bind, before listen).
    private static func acceptsConnections(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in bytes.enumerated() { buffer[index] = byte }
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }

    private let stopped = Mutex(false)

    /// Stops the daemon (SIGTERM, then reaps it) and removes its directory.
    /// Safe to call from any thread and more than once: a second caller
    /// waits until the first is done.
    public func stop() {
        stopped.withLock { stopped in
            guard !stopped else { return }
            daemon.terminate()
            try? FileManager.default.removeItem(atPath: directory)
            stopped = true
        }
    }

    /// The daemon stopped (SIGSTOP): the bus carries nothing more, and no
    /// client sees it go.
    public func freezeBeforeExit() {
        stopped.withLock { stopped in
            if !stopped { daemon.send(SIGSTOP) }
        }
    }

    /// The directory removed, then the daemon killed (SIGKILL ends it even
    /// frozen) and not waited for: the process exits next, and clients
    /// that would see the bus go have no time to.
    public func stopBeforeExit() {
        stopped.withLock { stopped in
            guard !stopped else { return }
            try? FileManager.default.removeItem(atPath: directory)
            daemon.send(SIGKILL)
            stopped = true
        }
    }

    /// The environment a stock client (busctl, gdbus, bluetoothctl, Python)
    /// needs to use this bus as its system and session bus.
    public var clientEnvironment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = address
        environment["DBUS_SESSION_BUS_ADDRESS"] = address
        return environment
    }
}

/// A child process started with posix_spawn and reaped here.
public final class ChildProcess: CleanUp.Stoppable {
    public let pid: pid_t
    private let reaped = Mutex(false)

    /// Starts `path` with `arguments`; standard output to `standardOutput`
    /// (a file path) or /dev/null, the other streams to /dev/null;
    /// `descriptor`, when given, as its descriptor 3; in the process group
    /// `processGroup` (0: a new one of its own).
    public init(
        _ path: String, _ arguments: [String], standardOutput: String? = nil, standardError: String? = nil,
        descriptor: Int32? = nil, processGroup: pid_t = 0
    ) throws {
        pid = try spawn(
            path, arguments, standardOutput: standardOutput, standardError: standardError, descriptor: descriptor,
            processGroup: processGroup)
    }

    /// `terminate()`: what `CleanUp.stopAllBeforeExit` does to a child
    /// registered.
    public func stop() { terminate() }

    /// Sends `signal`, unless the process has been reaped (its pid may be
    /// another process's by then).
    public func send(_ signal: Int32) {
        reaped.withLock { reaped in
            if !reaped { kill(pid, signal) }
        }
    }

    /// SIGTERM, then the exit status as `waitpid` reports it (nil when it
    /// had to be killed or was already reaped).
    public func terminateReportingStatus(grace: Duration = .seconds(5)) -> Int32? {
        reaped.withLock { reaped -> Int32? in
            guard !reaped else { return nil }
            defer { reaped = true }
            kill(pid, SIGTERM)
            var status: Int32 = 0
            let deadline = ContinuousClock.now + grace
            while ContinuousClock.now < deadline {
                if waitpid(pid, &status, WNOHANG) == pid { return status }
                usleep(5_000)
            }
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
            return nil
        }
    }

    /// Waits for the process to exit by itself: its wait status and the
    /// resources it used (CPU time, peak RSS), as `wait4` reports them.
    public func waitForExit() -> (status: Int32, usage: rusage) {
        reaped.withLock { reaped in
            var status: Int32 = 0
            var usage = rusage()
            guard !reaped else { return (-1, usage) }
            while wait4(pid, &status, 0, &usage) < 0, errno == EINTR {}
            reaped = true
            return (status, usage)
        }
    }

    /// True while the process has not exited.
    public var isRunning: Bool {
        reaped.withLock { reaped in
            if reaped { return false }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { reaped = true }
            return !reaped
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for it either way.
    public func terminate(grace: Duration = .seconds(5)) {
        reaped.withLock { reaped in
            guard !reaped else { return }
            defer { reaped = true }
            kill(pid, SIGTERM)
            var status: Int32 = 0
            let deadline = ContinuousClock.now + grace
            while ContinuousClock.now < deadline {
                if waitpid(pid, &status, WNOHANG) == pid { return }
                usleep(5_000)
            }
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
        }
    }

    deinit { terminate() }
}

/// Starts a program with posix_spawn; standard input from /dev/null, the
/// output streams to the files given or /dev/null (made 0600: the umask can
/// only take bits away), `descriptor` as descriptor 3.
func spawn(
    _ path: String, _ arguments: [String], standardOutput: String? = nil, standardError: String? = nil,
    descriptor: Int32? = nil, processGroup: pid_t = 0
) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(
        &actions, 1, standardOutput ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(
        &actions, 2, standardError ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    var moved: Int32 = -1
    defer { if moved >= 0 { close(moved) } }
    if var descriptor {
        // dup2 onto 3 clears close-on-exec, except when it is 3 already.
        if descriptor == 3 {
            moved = fcntl(descriptor, F_DUPFD_CLOEXEC, 10)
            guard moved >= 0 else { throw LocalBusError("cannot pass a descriptor to \(path)") }
            descriptor = moved
        }
        posix_spawn_file_actions_adddup2(&actions, descriptor, 3)
    }
    // Nothing else of this process goes with it: descriptors opened without
    // close-on-exec (Foundation's Pipe opens its ends so) would otherwise
    // live in the child — a long-lived dbus-daemon then held the write end
    // of another thread's pipe, whose reader waited for an end of file that
    // came only when the daemon ended (issue 27: a whole test process
    // stalled with two pool threads blocked on such reads).
    guard addCloseFrom(&actions, descriptor == nil ? 3 : 4) == 0 else {
        throw LocalBusError("cannot start \(path): glibc's posix_spawn_file_actions_addclosefrom_np failed")
    }
    // The calling thread may be a dispatch worker with every signal
    // blocked; the child must start with none blocked and default handlers,
    // or it would never see SIGTERM.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var noSignals = sigset_t()
    sigemptyset(&noSignals)
    var defaultSignals = sigset_t()
    sigfillset(&defaultSignals)
    posix_spawnattr_setsigmask(&attributes, &noSignals)
    posix_spawnattr_setsigdefault(&attributes, &defaultSignals)
    // A process group of its own (or the one given): Ctrl-C at a terminal
    // (SIGINT to the foreground group) is for beaconbench, not for its bus
    // or simulator.
    posix_spawnattr_setpgroup(&attributes, processGroup)
    posix_spawnattr_setflags(
        &attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
    let argv = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
    guard result == 0 else { throw LocalBusError("cannot start \(path): \(String(cString: strerror(result)))") }
    return pid
}

/// Why a private bus or a process could not be started.
public struct LocalBusError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later),
/// which Swift's Glibc module does not declare: found by name.
private let addCloseFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 = {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
        // An older glibc: children inherit what was not opened close-on-exec.
        return { _, _ in 0 }
    }
    return unsafeBitCast(
        symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
}()
