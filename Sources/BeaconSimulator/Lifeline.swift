import Foundation

/// `--exit-with-parent FD`, `--bus-daemon PID`, `--bus-directory DIR`: how
/// the simulator follows the process that started it (`beaconbench --sim`,
/// through `SimulatorProcess`) and what it leaves tidy when that process
/// dies without stopping it (kill -9, a crash).
///
/// FD is the read end of a socket pair or pipe whose other end only the
/// parent holds: end of file there means the parent is gone, however it
/// died, and it stays readable, so a parent that dies while the simulator
/// starts is noticed too. (PR_SET_PDEATHSIG would follow the parent's
/// spawning *thread*, which in a Swift program may end while the process
/// runs on; see `SimulatorProcess`.) The simulator then stops as on
/// SIGTERM (its state saved), and only then — never on a signal, when the
/// parent stops the bus itself — stops the bus's daemon PID and removes
/// DIR.
public struct Lifeline: Sendable {
    public var descriptor: Int32
    /// The private bus's `dbus-daemon`, whose process group the simulator
    /// was started in.
    public var busDaemon: pid_t?
    /// The private bus's directory (socket, configuration, the simulator's
    /// output).
    public var busDirectory: String?

    public init(descriptor: Int32, busDaemon: pid_t? = nil, busDirectory: String? = nil) {
        self.descriptor = descriptor
        self.busDaemon = busDaemon
        self.busDirectory = busDirectory
    }

    /// Checks that the descriptor is open and is a pipe or socket (not
    /// given by mistake), and keeps it from any program started later.
    func check() throws(SimulatorCommandLine.UsageError) {
        var info = stat()
        guard descriptor >= 0, fstat(descriptor, &info) == 0,
            info.st_mode & S_IFMT == S_IFIFO || info.st_mode & S_IFMT == S_IFSOCK
        else {
            throw SimulatorCommandLine.UsageError(
                description: "--exit-with-parent \(descriptor): not an open pipe or socket")
        }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    }

    /// Calls `gone` once, on a thread of its own, when the parent has gone.
    func watch(_ gone: @escaping @Sendable () -> Void) {
        let descriptor = descriptor
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 64)
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count > 0 || (count < 0 && errno == EINTR) { continue }
                break  // end of file (or the descriptor failed): the parent is gone
            }
            gone()
        }
        thread.stackSize = 64 * 1024
        thread.start()
    }

    /// True when the parent has gone already (end of file waiting).
    var parentIsGone: Bool {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 0) == 1 else { return false }
        if poller.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return true }
        var byte: UInt8 = 0
        return recv(descriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 0
    }

    /// What the parent would have done: stops the bus's daemon (SIGTERM,
    /// SIGKILL after 2 s) and removes the bus's directory.
    func tidyAfterParent() {
        if let daemon = busDaemon, daemon > 0, getpgrp() == daemon {
            // Safe by pid: while this process is in the daemon's group, the
            // group's id, the daemon's pid, cannot be given to another process.
            kill(daemon, SIGTERM)
            let deadline = ContinuousClock.now + .seconds(2)
            while Self.isAlive(daemon), ContinuousClock.now < deadline { usleep(5_000) }
            if Self.isAlive(daemon) { kill(daemon, SIGKILL) }
        }
        if let directory = busDirectory {
            // Only a directory of this user's, not a link to one.
            var info = stat()
            if lstat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == getuid() {
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
    }

    /// Running: not gone, nor a zombie waiting for whoever reaps it.
    static func isAlive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first
        return state != "Z" && state != "X"
    }
}
