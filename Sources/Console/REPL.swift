import CReadline
import Dispatch
import FoundationEssentials
import LocalBus
import SafeText
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The interactive console: GNU readline with completion and a history
/// file, a prompt with the adapter and the devices seen and selected,
/// events printed above the half-typed line, Ctrl-C cancelling the running
/// command (or the line being typed), Ctrl-D leaving.
final class REPL: Sendable {
    let session: Session
    let terminal: Terminal
    let historyPath: String
    let editor: LineEditor

    init(session: Session, terminal: Terminal, historyPath: String) {
        self.session = session
        self.terminal = terminal
        self.historyPath = historyPath
        editor = LineEditor(dumb: terminal.isDumb)
    }

    /// Runs until `quit` or Ctrl-D.
    func run(interrupts: Interrupts) async {
        let history = HistoryFile.open(historyPath, warn: { self.terminal.warning($0) })
        defer { history?.close() }
        editor.loadHistory(from: history)
        terminal.message("beaconbench \(BeaconbenchMain.version): type 'help', Tab completes, Ctrl-D leaves")
        // Every line written while the prompt is up goes above it.
        terminal.setPromptHook { [editor] text, descriptor in editor.printAbove(text, descriptor: descriptor) }
        defer { terminal.setPromptHook(nil) }
        // Tab on a profile's name before the first line loads them.
        Completion.loadProfiles = { [session] in ((try? session.profileSource.load()) ?? [:]).keys.sorted() }
        defer { Completion.loadProfiles = nil }
        while true {
            let facts = await session.promptFacts()
            Completion.update(
                profiles: Array(session.profiles.keys), seen: await session.seenCache,
                variables: Array(await session.variables.keys))
            interrupts.onInterrupt { [editor] in editor.cancelLine() }
            let line = await editor.readLine(prompt: prompt(facts))
            guard let line else {
                await editor.close()
                terminal.message("")
                break
            }
            let trimmed = line.trimmingBlanks()
            if trimmed.isEmpty { continue }
            editor.remember(trimmed, in: history)
            // The profiles, read at the first line rather than before the
            // prompt; one that cannot be read ends the session as it
            // ended the start before (the error names the file and key).
            do {
                _ = try session.profileSource.load()
            } catch {
                terminal.error("\(error)")
                await session.note(.badInput)
                await editor.close()
                break
            }
            let parser = BatchParser(
                file: "<repl>", overrides: [:], profiles: session.profiles,
                variables: await session.variables)
            let commands: [LocatedCommand]
            do {
                commands = try parser.parse(trimmed)
            } catch {
                let visible = Self.caretColumn(prompt: prompt(facts), line: line, column: error.column)
                terminal.message(String(repeating: " ", count: visible) + "^")
                terminal.error(error.message)
                continue
            }
            if commands.contains(where: \.isQuit) {
                await editor.close()
                break
            }
            let task = Task { for command in commands { await self.session.execute(command) } }
            interrupts.onInterrupt {
                task.cancel()
                self.terminal.message("^C (cancelling)")
            }
            await task.value
            interrupts.onInterrupt(nil)
            // SIGTERM, taken by a command that stopped cleanly (`sync`): the session ends.
            if await session.status == .terminated {
                await editor.close()
                break
            }
        }
    }

    func prompt(_ facts: (adapter: String, seen: Int, selected: Int?)) -> String {
        // The adapter's name comes from bluetoothd: shown, never obeyed.
        var inside = "\(Visible.text(facts.adapter, limit: 32)) · \(facts.seen) seen"
        if let selected = facts.selected { inside += " · \(selected) selected" }
        guard terminal.color else { return "beaconbench [\(inside)]> " }
        // \u{1}…\u{2} tell readline that the escapes take no room.
        return "\u{1}\u{1B}[1;34m\u{2}beaconbench\u{1}\u{1B}[0m\u{2} [\(inside)]> "
    }

    /// The columns the prompt takes (`TextWidth`: its colour codes and
    /// readline's markers take none).
    static func visibleLength(_ prompt: String) -> Int { TextWidth.columns(of: prompt) }

    /// Where a caret goes under the typed `line` to point at `column` (1-based,
    /// in characters, of the line without its leading blanks): the columns
    /// of the prompt and of what comes before, wide characters counted two.
    static func caretColumn(prompt: String, line: String, column: Int) -> Int {
        let leading = line.prefix { $0 == " " || $0 == "\t" }
        let trimmed = line.dropFirst(leading.count)
        return visibleLength(prompt) + TextWidth.columns(of: String(leading).replacingEvery("\t", with: " "))
            + TextWidth.columns(of: trimmed.prefix(max(0, column - 1)))
    }
}

/// SIGINT, routed to whatever should stop: the running command, or the
/// line being typed. With nothing to stop (a batch already cancelled), it
/// exits at once with status 130, after stopping what `--sim` started.
/// Creating it also installs the handlers of SIGTERM, SIGHUP and SIGPIPE
/// (`Signals`).
final class Interrupts: @unchecked Sendable {
    // `source` is set once in init and never changed (DispatchSource is
    // thread-safe but not marked Sendable).
    private final class Routing: Sendable {
        let handler = Mutex<(@Sendable () -> Void)?>(nil)
    }
    private let routing = Routing()
    private let source: any DispatchSourceSignal

    init() {
        Signals.install()
        signal(SIGINT, SIG_IGN)
        source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler { [routing] in
            if let action = routing.handler.withLock({ $0 }) {
                action()
            } else {
                Signals.leave(130)
            }
        }
        source.resume()
    }

    func onInterrupt(_ action: (@Sendable () -> Void)?) { routing.handler.withLock { $0 = action } }
}

/// readline in its callback form, on one thread of its own for the whole
/// session, which waits on standard input while a line is asked for and
/// on a pipe that other threads write to: so a line can be printed above
/// the prompt (or the line abandoned on Ctrl-C) while the user types.
/// readline is not thread-safe: only that thread calls it (once it runs).
///
/// The terminal stays as readline prepares it from the first prompt to
/// `close` (see `beaconbench_rl_keep_terminal`): a Ctrl-D typed while a
/// command runs, or right after it ends, waits for the next prompt and ends
/// the session there. The line handler removes itself, so readline never
/// draws a prompt of its own after a line (which the command's output
/// would then overwrite).
final class LineEditor: Sendable {
    private enum Request: Sendable {
        case print(String, Int32)
        case cancelLine
    }
    private struct Shared: Sendable {
        /// A prompt is on the screen (from just before it is drawn until
        /// its line has been read): lines go above it, through the thread.
        var promptUp = false
        var requests: [Request] = []
        var wanted: (prompt: String, reply: CheckedContinuation<String?, Never>)?
        var closing: CheckedContinuation<Void, Never>?
        var started = false
    }
    private let shared = Mutex(Shared())
    private let wake: (read: Int32, write: Int32)
    private let dumb: Bool

    init(dumb: Bool) {
        self.dumb = dumb
        var fds: [Int32] = [0, 0]
        pipe(&fds)
        _ = fcntl(fds[0], F_SETFL, O_NONBLOCK)
        _ = fcntl(fds[1], F_SETFL, O_NONBLOCK)
        wake = (fds[0], fds[1])
        beaconbench_rl_setup("beaconbench", Completion.complete)
    }

    /// Prints `text` to `descriptor` above the prompt, if one is up; false
    /// when none is (the caller writes it). Descriptor -1 only asks.
    func printAbove(_ text: String, descriptor: Int32) -> Bool {
        let up = shared.withLock { shared in
            if shared.promptUp, descriptor >= 0 { shared.requests.append(.print(text, descriptor)) }
            return shared.promptUp
        }
        if up, descriptor >= 0 { poke() }
        return up
    }

    /// Ctrl-C at the prompt: the line is abandoned (nothing without a prompt).
    func cancelLine() {
        let up = shared.withLock { shared in
            if shared.promptUp { shared.requests.append(.cancelLine) }
            return shared.promptUp
        }
        if up { poke() }
    }

    private func poke() {
        var byte: UInt8 = 1
        _ = Glibc.write(wake.write, &byte, 1)
    }

    /// One line, or nil at end of input (Ctrl-D).
    func readLine(prompt: String) async -> String? {
        await withCheckedContinuation { continuation in
            let start = shared.withLock { shared in
                shared.wanted = (prompt, continuation)
                defer { shared.started = true }
                return !shared.started
            }
            if start {
                detachThread(stackSize: 1 << 20) { [self] in self.serve() }
            }
            poke()
        }
    }

    /// Puts the terminal back as it was and stops the thread (after the
    /// last line; nothing when no line was ever read).
    func close() async {
        guard shared.withLock({ $0.started }) else { return }
        await withCheckedContinuation { continuation in
            shared.withLock { $0.closing = continuation }
            poke()
        }
    }

    /// The thread: a prompt when a line is wanted, readline fed from
    /// standard input while it is up, requests served as they come.
    private func serve() {
        beaconbench_rl_keep_terminal()
        var reading = false
        while true {
            let next = shared.withLock { shared -> (prompt: String?, closing: CheckedContinuation<Void, Never>?) in
                guard !reading else { return (nil, nil) }
                if let wanted = shared.wanted {
                    shared.promptUp = true
                    return (wanted.prompt, nil)
                }
                return (nil, shared.closing)
            }
            if let prompt = next.prompt {
                LineState.reset()
                beaconbench_rl_refresh_size()
                rl_callback_handler_install(prompt) { line in
                    LineState.finish(line.map { String(cString: $0) })
                    free(line)
                    // No prompt of readline's own after the line.
                    rl_callback_handler_remove()
                }
                reading = true
            } else if let closing = next.closing {
                beaconbench_rl_release_terminal()
                shared.withLock { $0.closing = nil }
                closing.resume()
                return
            }
            var fds = [
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
                pollfd(fd: reading ? 0 : -1, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                // Nothing can be read any more: as at end of input.
                if reading {
                    rl_callback_handler_remove()
                    LineState.finish(nil)
                }
            } else {
                if fds[0].revents != 0 { serviceRequests(reading: reading) }
                if reading, fds[1].revents & Int16(POLLIN | POLLHUP) != 0 {
                    beaconbench_rl_follow_size()
                    rl_callback_read_char()
                } else if reading, fds[1].revents & Int16(POLLERR | POLLNVAL) != 0 {
                    rl_callback_handler_remove()
                    LineState.finish(nil)
                }
            }
            if reading, LineState.isDone {
                reading = false
                let (reply, left) = shared.withLock { shared in
                    shared.promptUp = false
                    defer {
                        shared.wanted = nil
                        shared.requests = []
                    }
                    return (shared.wanted?.reply, shared.requests)
                }
                // Lines that came as the line ended: the prompt is gone.
                for case .print(let text, let descriptor) in left { beaconbench_print_line(text, descriptor) }
                reply?.resume(returning: LineState.line)
            }
        }
    }

    private func serviceRequests(reading: Bool) {
        var byte = [UInt8](repeating: 0, count: 64)
        while Glibc.read(wake.read, &byte, 64) > 0 {}
        guard reading else { return }
        let pending = shared.withLock { shared in
            defer { shared.requests = [] }
            return shared.requests
        }
        for request in pending {
            switch request {
            case .print(let text, let descriptor): beaconbench_rl_print_above(text, descriptor, dumb ? 1 : 0)
            case .cancelLine: beaconbench_rl_cancel_line()
            }
        }
    }

    // MARK: History

    /// Gives readline the file's lines (Up, Ctrl-R).
    func loadHistory(from history: HistoryFile?) {
        stifle_history(Int32(HistoryFile.limit))
        for line in history?.lines() ?? [] { add_history(line) }
    }

    /// Adds a line to the history, its passwords replaced by `***`, and
    /// appends it to the file at once (a crash keeps it).
    func remember(_ line: String, in history: HistoryFile?) {
        let kept = Secrets.historyLine(line)
        if let last = beaconbench_last_history_line(), String(cString: last) == kept { return }
        add_history(kept)
        history?.append(kept)
    }
}

/// The REPL's history file (`$XDG_STATE_HOME/beaconbench/history`), read
/// and appended through one descriptor opened without following a symbolic
/// link: made here mode 0600 whatever the umask; a file that is there is
/// used only if it is a regular file of this user's with no other link,
/// and is never chmod-ed. Otherwise a warning, once, and no history kept.
/// (readline's own `read_history` and `append_history` follow links.)
struct HistoryFile: Sendable {
    static let limit = 1000
    /// The most of the file read: its last 4 MiB.
    static let maxBytes = 4 << 20
    let path: String
    let descriptor: Int32

    static func open(_ path: String, warn: (String) -> Void) -> HistoryFile? {
        do {
            try Paths.makeParent(of: path)
        } catch {
            warn("history is not kept: \(error)")
            return nil
        }
        let flags = O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
        var descriptor = Glibc.open(path, flags | O_CREAT | O_EXCL, 0o600)
        if descriptor >= 0 {
            // The umask may have taken bits away; this is the file just made.
            guard fchmod(descriptor, 0o600) == 0 else {
                warn("history is not kept: \(path): \(String(cString: strerror(errno)))")
                Glibc.close(descriptor)
                return nil
            }
            return HistoryFile(path: path, descriptor: descriptor)
        }
        if errno == EEXIST { descriptor = Glibc.open(path, flags) }
        guard descriptor >= 0 else {
            let reason = errno == ELOOP ? "is a symbolic link" : "cannot be opened: \(String(cString: strerror(errno)))"
            warn("history is not kept: \(path) \(reason) (beaconbench keeps it only in a file of its own)")
            return nil
        }
        var info = stat()
        let problem: String? =
            if fstat(descriptor, &info) != 0 {
                String(cString: strerror(errno))
            } else if info.st_mode & S_IFMT != S_IFREG {
                "is not a regular file"
            } else if info.st_uid != geteuid() {
                "belongs to user \(info.st_uid)"
            } else if info.st_nlink != 1 {
                "has other hard links"
            } else {
                nil
            }
        if let problem {
            Glibc.close(descriptor)
            warn("history is not kept: \(path) \(problem) (beaconbench keeps it only in a file of its own)")
            return nil
        }
        if info.st_mode & 0o077 != 0 {
            warn(
                "\(path) can be read by others (mode \(String(info.st_mode & 0o777, radix: 8))): chmod 600 it")
        }
        let history = HistoryFile(path: path, descriptor: descriptor)
        history.tidy()
        return history
    }

    /// The lines kept, oldest first: the last `limit`.
    func lines() -> [String] {
        // At most the last `maxBytes` (the last 1000 lines of any REPL
        // use fit in far less): a file grown, or made sparse, to gigabytes
        // is not read whole. A line cut at the start is dropped.
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return [] }
        let start = max(0, info.st_size - off_t(Self.maxBytes))
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var offset = start
        while bytes.count < Self.maxBytes {
            let count = pread(descriptor, &chunk, min(chunk.count, Self.maxBytes - bytes.count), offset)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
            offset += off_t(count)
        }
        if start > 0 { bytes = Array(bytes.drop { $0 != UInt8(ascii: "\n") }) }
        let lines = bytes.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
            .filter { !$0.isEmpty && !Self.isTimestamp($0) }
        return Array(lines.suffix(Self.limit))
    }

    /// readline writes `#1700000000` lines before entries when asked to
    /// keep times; they are not commands.
    static func isTimestamp(_ line: String) -> Bool {
        line.hasPrefix("#") && line.count > 1 && line.dropFirst().allSatisfy(\.isNumber)
    }

    /// Appends one line (`O_APPEND`: several sessions append safely).
    func append(_ line: String) {
        write(Array((line + "\n").utf8))
    }

    /// At open: a file longer than `limit` lines, or holding a password
    /// written by an older beaconbench, is rewritten in place (through the
    /// same descriptor) with its last `limit` lines, passwords replaced.
    private func tidy() {
        let kept = lines()
        let redacted = kept.map(Secrets.historyLine)
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return }
        let size = kept.reduce(0) { $0 + $1.utf8.count + 1 }
        guard redacted != kept || off_t(size) != info.st_size else { return }
        guard ftruncate(descriptor, 0) == 0 else { return }
        write(Array(redacted.map { $0 + "\n" }.joined().utf8))
    }

    private func write(_ bytes: [UInt8]) {
        var rest = bytes[...]
        while !rest.isEmpty {
            let written = rest.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { return }
            rest = rest.dropFirst(written)
        }
    }

    func close() { Glibc.close(descriptor) }
}

/// The line being read; only the readline thread touches it.
enum LineState {
    nonisolated(unsafe) static var line: String?
    nonisolated(unsafe) static var isDone = false
    static func reset() {
        line = nil
        isDone = false
    }
    static func finish(_ value: String?) {
        line = value
        isDone = true
    }
}
