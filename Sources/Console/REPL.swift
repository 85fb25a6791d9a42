import CReadline
import Foundation
import Synchronization

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
        editor = LineEditor()
    }

    /// Runs until `quit` or Ctrl-D.
    func run(interrupts: Interrupts) async {
        editor.loadHistory(historyPath, warn: { self.terminal.warning($0) })
        terminal.message("beaconbench \(BeaconbenchMain.version): type 'help', Tab completes, Ctrl-D leaves")
        while true {
            let facts = await session.promptFacts()
            Completion.update(
                profiles: Array(session.profiles.keys), seen: await session.seenCache,
                variables: Array(await session.variables.keys))
            terminal.setPromptHook { [editor] text in editor.printAbove(text) }
            interrupts.onInterrupt { [editor] in editor.cancelLine() }
            let line = await editor.readLine(prompt: prompt(facts))
            terminal.setPromptHook(nil)
            guard let line else {
                terminal.message("")
                break
            }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            editor.remember(trimmed, in: historyPath)
            let parser = BatchParser(
                file: "<repl>", overrides: [:], profiles: session.profiles,
                variables: await session.variables)
            let commands: [LocatedCommand]
            do {
                commands = try parser.parse(trimmed)
            } catch {
                let visible = Self.visibleLength(prompt(facts))
                terminal.message(String(repeating: " ", count: visible + error.column - 1) + "^")
                terminal.error(error.message)
                continue
            }
            if commands.contains(where: { $0.command == .quit }) { break }
            let task = Task { for command in commands { await self.session.execute(command) } }
            interrupts.onInterrupt {
                task.cancel()
                self.terminal.message("^C (cancelling)")
            }
            await task.value
            interrupts.onInterrupt(nil)
        }
    }

    func prompt(_ facts: (adapter: String, seen: Int, selected: Int?)) -> String {
        var inside = "\(facts.adapter) · \(facts.seen) seen"
        if let selected = facts.selected { inside += " · \(selected) selected" }
        guard terminal.color else { return "beaconbench [\(inside)]> " }
        // \u{1}…\u{2} tell readline that the escapes take no room.
        return "\u{1}\u{1B}[1;34m\u{2}beaconbench\u{1}\u{1B}[0m\u{2} [\(inside)]> "
    }

    static func visibleLength(_ prompt: String) -> Int {
        var count = 0
        var hidden = false
        for scalar in prompt.unicodeScalars {
            if scalar == "\u{1}" {
                hidden = true
            } else if scalar == "\u{2}" {
                hidden = false
            } else if !hidden {
                count += 1
            }
        }
        return count
    }
}

/// SIGINT, routed to whatever should stop: the running command, or the
/// line being typed. With nothing to stop (a batch already cancelled), it
/// exits at once with status 130.
final class Interrupts: @unchecked Sendable {
    // `source` is set once in init and never changed (DispatchSource is
    // thread-safe but not marked Sendable).
    private final class Routing: Sendable {
        let handler = Mutex<(@Sendable () -> Void)?>(nil)
    }
    private let routing = Routing()
    private let source: any DispatchSourceSignal

    init() {
        signal(SIGINT, SIG_IGN)
        source = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        source.setEventHandler { [routing] in
            if let action = routing.handler.withLock({ $0 }) {
                action()
            } else {
                _exit(130)
            }
        }
        source.resume()
    }

    func onInterrupt(_ action: (@Sendable () -> Void)?) { routing.handler.withLock { $0 = action } }
}

/// readline in its callback form, on a thread of its own that waits on
/// standard input and on a pipe that other threads write to, so that a line
/// can be printed above the prompt (or the line abandoned on Ctrl-C) while
/// the user types. readline is not thread-safe: only that thread calls it.
final class LineEditor: Sendable {
    private enum Request: Sendable {
        case print(String)
        case cancelLine
    }
    private let requests = Mutex<[Request]>([])
    private let wake: (read: Int32, write: Int32)

    init() {
        var fds: [Int32] = [0, 0]
        pipe(&fds)
        _ = fcntl(fds[0], F_SETFL, O_NONBLOCK)
        _ = fcntl(fds[1], F_SETFL, O_NONBLOCK)
        wake = (fds[0], fds[1])
        beaconbench_rl_setup("beaconbench", Completion.complete)
    }

    func printAbove(_ text: String) {
        requests.withLock { $0.append(.print(text)) }
        var byte: UInt8 = 1
        _ = Foundation.write(wake.write, &byte, 1)
    }

    func cancelLine() {
        requests.withLock { $0.append(.cancelLine) }
        var byte: UInt8 = 1
        _ = Foundation.write(wake.write, &byte, 1)
    }

    /// One line, or nil at end of input (Ctrl-D).
    func readLine(prompt: String) async -> String? {
        await withCheckedContinuation { continuation in
            let thread = Thread { [self] in continuation.resume(returning: self.readLineBlocking(prompt)) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    private func readLineBlocking(_ prompt: String) -> String? {
        LineState.reset()
        rl_callback_handler_install(prompt) { line in
            LineState.finish(line.map { String(cString: $0) })
            free(line)
        }
        defer { rl_callback_handler_remove() }
        while !LineState.isDone {
            var fds = [
                pollfd(fd: 0, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, -1)
            if ready < 0 { if errno == EINTR { continue } else { return nil } }
            if fds[1].revents != 0 { serviceRequests() }
            if fds[0].revents & Int16(POLLIN | POLLHUP) != 0 { rl_callback_read_char() }
        }
        return LineState.line
    }

    private func serviceRequests() {
        var byte = [UInt8](repeating: 0, count: 64)
        while Foundation.read(wake.read, &byte, 64) > 0 {}
        let pending = requests.withLock { requests in
            defer { requests = [] }
            return requests
        }
        for request in pending {
            switch request {
            case .print(let text): beaconbench_rl_print_above(text)
            case .cancelLine: beaconbench_rl_cancel_line()
            }
        }
    }

    // MARK: History

    func loadHistory(_ path: String, warn: (String) -> Void) {
        do {
            try Paths.makeParent(of: path)
        } catch {
            warn("history is not kept: \(error)")
            return
        }
        if !FileManager.default.fileExists(atPath: path) {
            let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            if fd >= 0 { close(fd) }
        }
        chmod(path, 0o600)
        stifle_history(1000)
        read_history(path)
    }

    /// Adds a line to the history and appends it to the file at once (a
    /// crash keeps it).
    func remember(_ line: String, in path: String) {
        if let last = beaconbench_last_history_line(), String(cString: last) == line { return }
        add_history(line)
        append_history(1, path)
        history_truncate_file(path, 1000)
    }
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
