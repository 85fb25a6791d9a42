import Dispatch
import FoundationEssentials
import LocalBus
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// SIGTERM, SIGHUP and SIGPIPE (standard output or error closed, as under
/// `| head -1`): beaconbench stops what it started (the private bus and
/// simulator of `--sim`, through `CleanUp.stopAllBeforeExit`: the bus
/// frozen first, so that the run sees nothing go), puts the terminal back
/// as it found it, and exits with 128 + the signal's number (143, 129,
/// 141), printing nothing more. A run cut short so is marked `interrupted`
/// by the next beaconbench to open the inventory, as after a crash.
/// (SIGINT is `Interrupts`', which ends here too when there is nothing left
/// to stop.) A command that can stop cleanly takes SIGTERM for itself while
/// it runs (`onTerminate`: `sync` stops, says what it sent and exits 143; a
/// batch, `run` or one command such as `station`, stops as on Ctrl-C — its
/// steps under way recorded `interrupted`, the recap printed — and exits
/// 143); a second SIGTERM ends the process here at once.
///
/// Should beaconbench follow its own parent (PR_SET_PDEATHSIG)? No: a
/// closed terminal sends SIGHUP, a parent gone closes the pipes it gave
/// (end of input, then SIGPIPE on output), and otherwise a process whose
/// parent has gone runs on, as any Unix command does (nohup). Its children
/// follow it, whatever ends it: see `SimulatorProcess`.
enum Signals {
    /// Installs the handlers, once; `Interrupts` does it as it starts.
    static func install() { _ = installed }

    /// The sources, kept for the life of the process (set once, then only
    /// held).
    nonisolated(unsafe) private static let installed: [any DispatchSourceProtocol] = {
        _ = savedTerminal
        var sources: [any DispatchSourceProtocol] = []
        // SIGTERM and SIGHUP come to the process: a dispatch source gets
        // them (libdispatch blocks them and reads a signalfd).
        for number in [SIGTERM, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                // Once: the handler is taken as it is called.
                if number == SIGTERM,
                    let action = terminateHandler.withLock({ held in
                        defer { held = nil }
                        return held?.action
                    })
                {
                    action()
                } else {
                    leave(128 + number)
                }
            }
            source.resume()
            sources.append(source)
        }
        // SIGPIPE comes to the thread that wrote, and a dispatch source
        // never sees it (its signalfd reads only the process's and its
        // own thread's signals; tried: writes to a closed pipe from the
        // main thread, a Task and a Thread all went unreported). A handler
        // of our own, which runs on the writing thread, writes a byte to a
        // socket that a read source watches. (The write itself then fails
        // with EPIPE, which `Terminal.emit` ignores.)
        var ends: [Int32] = [-1, -1]
        let kind = Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue | SOCK_NONBLOCK.rawValue)
        guard socketpair(AF_UNIX, kind, 0, &ends) == 0 else { return sources }
        pipeWake = ends[1]
        let source = DispatchSource.makeReadSource(fileDescriptor: ends[0], queue: .global())
        source.setEventHandler { leave(128 + SIGPIPE) }
        source.resume()
        sources.append(source)
        signal(SIGPIPE) { _ in
            let saved = errno
            var byte: UInt8 = 1
            _ = send(pipeWake, &byte, 1, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            errno = saved
        }
        return sources
    }()

    /// The socket the SIGPIPE handler writes to: set once, before the
    /// handler is installed, and only read after.
    nonisolated(unsafe) private static var pipeWake: Int32 = -1

    /// The terminal's settings before readline changed them.
    private static let savedTerminal: termios? = {
        guard isatty(0) == 1 else { return nil }
        var settings = termios()
        return tcgetattr(0, &settings) == 0 ? settings : nil
    }()

    private static let leaving = Mutex(false)

    /// SIGTERM's handler, and which `onTerminate` installed it.
    private static let terminateHandler = Mutex<(scope: Int, action: @Sendable () -> Void)?>(nil)
    private static let scopes = Mutex(0)

    /// Whether a signal taken by a handler (`onTerminate`) has come.
    final class Received: Sendable {
        private let flag = Mutex(false)
        func note() { flag.withLock { $0 = true } }
        var happened: Bool { flag.withLock { $0 } }
    }

    /// A cancellation asked for before what it cancels exists (a signal
    /// handler installed before its task): done when it is set.
    final class CancelLater: Sendable {
        private let state = Mutex<(asked: Bool, cancel: (@Sendable () -> Void)?)>((false, nil))
        func set(_ cancel: @escaping @Sendable () -> Void) {
            let asked = state.withLock {
                $0.cancel = cancel
                return $0.asked
            }
            if asked { cancel() }
        }
        func now() {
            let cancel = state.withLock {
                $0.asked = true
                return $0.cancel
            }
            cancel?()
        }
    }

    /// A handler installed by `onTerminate`, and the one it replaced.
    struct TerminateScope: Sendable {
        fileprivate let id: Int
        fileprivate let previous: (scope: Int, action: @Sendable () -> Void)?

        /// Puts back the handler this one replaced, unless a SIGTERM took
        /// this one (then none: a second SIGTERM ends the process at once)
        /// or another was installed since.
        func end() {
            Signals.terminateHandler.withLock { held in
                if held?.scope == id { held = previous }
            }
        }
    }

    /// What the next SIGTERM does instead of ending the process, until the
    /// scope returned ends (`TerminateScope.end`): a command inside a batch
    /// (`sync`) takes SIGTERM for itself and gives it back to the batch.
    /// Used once: a second SIGTERM ends the process.
    static func onTerminate(_ action: @escaping @Sendable () -> Void) -> TerminateScope {
        install()
        let id = scopes.withLock {
            $0 += 1
            return $0
        }
        return terminateHandler.withLock { held in
            defer { held = (id, action) }
            return TerminateScope(id: id, previous: held)
        }
    }

    /// Stops what was started, restores the terminal and exits with
    /// `status`, printing nothing more. The first caller does it; any other
    /// waits for the exit.
    static func leave(_ status: Int32) -> Never {
        let first = leaving.withLock { leaving in
            defer { leaving = true }
            return !leaving
        }
        guard first else {
            while true { sleep(60) }
        }
        // Silence: the run, cut short, would report the bus going away.
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        if null >= 0 {
            dup2(null, 1)
            dup2(null, 2)
        }
        if var settings = savedTerminal {
            // Even from the background: SIGTTOU blocked on this thread.
            var block = sigset_t()
            sigemptyset(&block)
            sigaddset(&block, SIGTTOU)
            pthread_sigmask(SIG_BLOCK, &block, nil)
            tcsetattr(0, TCSANOW, &settings)
        }
        CleanUp.stopAllBeforeExit()
        _exit(status)
    }
}
