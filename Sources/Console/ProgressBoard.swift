import Foundation
import Inventory
import Synchronization
import Workbench

/// Shows a fleet run as it goes. On a terminal: one line at the bottom with
/// the counts and what the active devices are doing, each device's end
/// printed above it. Otherwise: a plain line per finished device (per step
/// with --verbose). With --json: one object per step outcome when verbose.
final class ProgressBoard: Sendable {
    let terminal: Terminal
    let total: Int
    let dryRun: Bool
    /// Steps and notes as JSON lines (docs/json.md: `step`, `note`).
    let json: Bool

    private struct Counts {
        var done = 0
        var failed = 0
        var active: [String: String] = [:]
        var steps: [String] = []
    }
    private let counts = Mutex(Counts())

    init(terminal: Terminal, total: Int, dryRun: Bool, json: Bool? = nil) {
        self.terminal = terminal
        self.total = total
        self.dryRun = dryRun
        self.json = json ?? terminal.json
    }

    func begin(_ steps: [String]) {
        counts.withLock { $0.steps = steps }
        if !json {
            terminal.message(
                "\(dryRun ? "dry run: " : "")\(steps.joined(separator: ", ")) on \(total) device\(total == 1 ? "" : "s")"
            )
        }
        redraw()
    }

    func end() { terminal.status(nil) }

    func handle(_ event: FleetProgress) {
        switch event {
        case .started(let address):
            counts.withLock { $0.active[address] = "connect" }
        case .note(let address, let text):
            if json {
                terminal.emit(.note, ["device": address.isEmpty ? .null : .string(address), "text": .string(text)])
            } else {
                if address.isEmpty { terminal.warning(text) } else { terminal.message("\(address)  \(text)") }
            }
        case .step(let address, let step, let status, let detail):
            counts.withLock { $0.active[address] = step }
            if json {
                let diff = dryRun ? detail.flatMap { $0.hasPrefix("dry run: ") ? String($0.dropFirst(9)) : nil } : nil
                if diff != nil || terminal.verbose {
                    terminal.emit(
                        .step,
                        [
                            "device": .string(address), "step": .string(step), "status": .string(status.rawValue),
                            "detail": diff == nil ? .optional(detail) : .null, "diff": .optional(diff),
                        ])
                }
            } else if dryRun, let detail, detail.hasPrefix("dry run: ") {
                terminal.message("\(address): \(detail.dropFirst(9))")
            } else if terminal.verbose || step == "info" {
                let shown = terminal.styled(status.rawValue, Self.style(status))
                terminal.message("\(address)  \(step)  \(shown)" + (detail.map { "  \($0)" } ?? ""))
            }
        case .tally: break  // counts kept here too; the tally's start time is for an estimate
        case .finished(let recap):
            counts.withLock { counts in
                counts.active[recap.address] = nil
                counts.done += 1
                if recap.failed > 0 { counts.failed += 1 }
            }
            if !json, !terminal.verbose || terminal.errorIsTerminal {
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
        }
        redraw()
    }

    static func style(_ status: Inventory.StepStatus) -> Terminal.Style {
        switch status {
        case .ok, .changed: .green
        case .unchanged: .dim
        case .skipped: .yellow
        case .failed, .interrupted: .red
        }
    }

    private func redraw() {
        guard terminal.errorIsTerminal, !json else { return }
        let line = counts.withLock { counts -> String in
            let active = counts.active.sorted { $0.key < $1.key }.prefix(3).map { "\($0.key.suffix(5)) \($0.value)" }
            var text = "[\(counts.done)/\(total) done, \(counts.active.count) active"
            if counts.failed > 0 { text += ", \(counts.failed) failed" }
            text += "]"
            if !active.isEmpty { text += " " + active.joined(separator: " · ") }
            return text
        }
        let width = Self.columns()
        terminal.status(String(line.prefix(max(20, width - 1))))
    }

    static func columns() -> Int {
        var size = winsize()
        if ioctl(2, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return 80
    }
}
