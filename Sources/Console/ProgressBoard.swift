import FoundationEssentials
import Inventory
import Synchronization
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// Shows a fleet run as it goes. On a terminal that can be redrawn
/// (`Terminal.redraws`: not TERM=dumb, standard error a terminal): one line
/// at the bottom with the counts, the time elapsed, an estimate of the time
/// left once a device has finished, and what the active devices are doing,
/// redrawn as they change and every second; each device's end printed
/// above it. Otherwise: a plain line per finished device (per step with
/// --verbose). With --json: its notes, and its steps in a dry run or with
/// --verbose, as JSON lines (`RunNote`, `StepLine`).
final class ProgressBoard: Sendable {
    let terminal: Terminal
    let total: Int
    let dryRun: Bool
    /// Steps and notes as JSON lines (docs/json.md: `step`, `note`), or
    /// lines for people with the status line.
    let output: Renderer
    /// Seconds on a monotonic clock (a fake one in tests).
    let clock: @Sendable () -> Double

    private struct Counts {
        var done = 0
        var failed = 0
        var active: [String: String] = [:]
        var steps: [String] = []
        var started: Double?
        var ticker: Task<Void, Never>?
    }
    private let counts = Mutex(Counts())

    init(
        terminal: Terminal, total: Int, dryRun: Bool,
        output: Renderer? = nil, clock: @escaping @Sendable () -> Double = ProgressBoard.monotonicSeconds
    ) {
        self.terminal = terminal
        self.total = total
        self.dryRun = dryRun
        self.output = output ?? Renderer(terminal: terminal)
        self.clock = clock
    }

    @Sendable static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    func begin(_ steps: [String]) {
        let now = clock()
        counts.withLock { counts in
            counts.steps = steps
            if counts.started == nil { counts.started = now }
        }
        output.render(
            ForPeople(
                .message(
                    "\(dryRun ? "dry run: " : "")\(steps.joined(separator: ", ")) on \(total) device\(total == 1 ? "" : "s")"
                )))
        if terminal.redraws, output.isForPeople {
            // The elapsed time moves on between events too.
            let ticker = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    guard !Task.isCancelled, let self else { return }
                    self.redraw()
                }
            }
            counts.withLock { $0.ticker = ticker }
        }
        redraw()
    }

    func end() {
        let ticker = counts.withLock { counts in
            defer { counts.ticker = nil }
            return counts.ticker
        }
        ticker?.cancel()
        terminal.status(nil)
    }

    func handle(_ event: FleetProgress) {
        switch event {
        case .started(let address):
            counts.withLock { $0.active[address] = "connect" }
        case .note(let address, let text):
            output.render(RunNote(device: address, text: text))
        case .step(let address, let step, let status, let detail):
            counts.withLock { $0.active[address] = step }
            output.render(
                StepLine(
                    device: address, step: step, status: status, detail: detail, dryRun: dryRun,
                    verbose: terminal.verbose))
        case .tally: break  // counts kept here too; the tally's start time is for an estimate
        case .finished(let recap):
            counts.withLock { counts in
                counts.active[recap.address] = nil
                counts.done += 1
                if recap.failed > 0 { counts.failed += 1 }
            }
            if !terminal.verbose || terminal.redraws {
                output.forPeople { finishedLine(recap) }
            }
        }
        redraw()
    }

    /// A device's end, for people: `ADDRESS  changed (2) after 1 reconnect`.
    private func finishedLine(_ recap: DeviceRecap) {
        let verdict =
            recap.result == .interrupted || recap.result == .notStarted
            ? terminal.styled(recap.result == .interrupted ? "interrupted" : "not started", .yellow)
            : recap.failed > 0
                ? terminal.styled("failed", .red) + ": " + (recap.reason ?? "")
                : recap.reason != nil && recap.changed + recap.wouldChange == 0
                    ? terminal.styled("skipped", .yellow) + ": " + (recap.reason ?? "")
                    : recap.changed + recap.wouldChange > 0
                        ? terminal.styled(dryRun ? "would change" : "changed", .green)
                            + " (\(recap.changed + recap.wouldChange))"
                        : recap.unchanged > 0 ? "unchanged" : terminal.styled("ok", .green)
        let retried =
            recap.retries == 0 ? "" : " after \(recap.retries) reconnect\(recap.retries == 1 ? "" : "s")"
        terminal.message("\(recap.address)  \(verdict)\(retried)")
    }

    private func redraw() {
        guard terminal.redraws, output.isForPeople else { return }
        // Cut to the terminal's width by `Terminal.status`.
        terminal.status(statusLine())
    }

    /// The status line now: `[12/50 done · 3 active · 1 failed · 0:42
    /// elapsed · ~2:10 left]` and what up to three active devices are doing.
    func statusLine() -> String {
        let now = clock()
        return counts.withLock { counts -> String in
            let elapsed = max(0, now - (counts.started ?? now))
            let active = counts.active.sorted { $0.key < $1.key }.prefix(3).map { "\($0.key.suffix(5)) \($0.value)" }
            var parts = ["\(counts.done)/\(total) done", "\(counts.active.count) active"]
            if counts.failed > 0 { parts.append("\(counts.failed) failed") }
            parts.append("\(Self.clockText(elapsed)) elapsed")
            if let left = Self.estimate(elapsed: elapsed, done: counts.done, total: total) {
                parts.append("~\(Self.clockText(left)) left")
            }
            var text = "[" + parts.joined(separator: " · ") + "]"
            if !active.isEmpty { text += " " + active.joined(separator: ", ") }
            return text
        }
    }

    /// Seconds left: the devices not finished times the mean time per
    /// finished device (the time elapsed over the devices finished, so the
    /// devices worked on at once are accounted for); nil before the first
    /// device has finished, or when none is left.
    static func estimate(elapsed: Double, done: Int, total: Int) -> Double? {
        guard done > 0, done < total, elapsed >= 0 else { return nil }
        return Double(total - done) * elapsed / Double(done)
    }

    /// `m:ss`, or `h:mm:ss` from an hour; seconds rounded to the nearest.
    static func clockText(_ seconds: Double) -> String {
        let whole = Int(max(0, seconds).rounded())
        let (hours, minutes, rest) = (whole / 3600, whole / 60 % 60, whole % 60)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return hours > 0 ? "\(hours):\(two(minutes)):\(two(rest))" : "\(minutes):\(two(rest))"
    }
}
