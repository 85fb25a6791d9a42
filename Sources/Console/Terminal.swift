import Foundation
import Synchronization

/// Where the console's words go: results to standard output, messages and
/// progress to standard error; colour only on a terminal and without
/// NO_COLOR; a progress line kept at the bottom on a terminal; events that
/// arrive while the REPL waits for input printed above the half-typed line.
public final class Terminal: Sendable {
    public let outputIsTerminal: Bool
    public let errorIsTerminal: Bool
    public let color: Bool
    public let json: Bool
    public let verbose: Bool

    private struct State {
        var statusLine: String?
        /// Set by the REPL while its prompt is up: prints a line above it.
        var aboveThePrompt: (@Sendable (String) -> Void)?
    }
    private let state = Mutex(State())

    public init(color: Bool, json: Bool, verbose: Bool) {
        outputIsTerminal = isatty(1) == 1
        errorIsTerminal = isatty(2) == 1
        self.color = color && outputIsTerminal && errorIsTerminal
        self.json = json
        self.verbose = verbose
    }

    public enum Style: String, Sendable {
        case bold = "1", dim = "2", red = "31", green = "32", yellow = "33", blue = "34", cyan = "36"
    }

    /// `text` in `style` when colour is on.
    public func styled(_ text: String, _ style: Style) -> String {
        color ? "\u{1B}[\(style.rawValue)m\(text)\u{1B}[0m" : text
    }

    /// A result line (standard output).
    public func result(_ text: String) { write(text, to: 1) }

    /// A message line (standard error).
    public func message(_ text: String) { write(text, to: 2) }

    public func warning(_ text: String) { write(styled("warning: ", .yellow) + text, to: 2) }

    public func error(_ text: String) { write(styled("error: ", .red) + text, to: 2) }

    /// Something that happened on its own (a device found, an event): above
    /// the prompt when the REPL is waiting, else a message.
    public func event(_ text: String) {
        let hook = state.withLock { $0.aboveThePrompt }
        if let hook { hook(text) } else { message(text) }
    }

    /// The progress line at the bottom of a terminal (nil clears it); not
    /// shown when standard error is not a terminal.
    public func status(_ text: String?) {
        guard errorIsTerminal else { return }
        state.withLock { state in
            state.statusLine = text
            Self.emit(2, "\r\u{1B}[K" + (text ?? ""))
        }
    }

    func setPromptHook(_ hook: (@Sendable (String) -> Void)?) {
        state.withLock { $0.aboveThePrompt = hook }
    }

    private func write(_ text: String, to descriptor: Int32) {
        state.withLock { state in
            if let status = state.statusLine, errorIsTerminal {
                Self.emit(2, "\r\u{1B}[K")
                Self.emit(descriptor, text + "\n")
                Self.emit(2, status)
            } else {
                Self.emit(descriptor, text + "\n")
            }
        }
    }

    static func emit(_ descriptor: Int32, _ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }

    /// One JSON object per line, keys sorted.
    public func jsonLine(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        result(String(decoding: data, as: UTF8.self))
    }
}

/// Columns padded to their widest cell; numbers right-aligned.
func table(_ header: [String], _ rows: [[String]], numeric: Set<Int> = []) -> [String] {
    var widths = header.map(\.count)
    for row in rows {
        for (index, cell) in row.enumerated() where index < widths.count {
            widths[index] = max(widths[index], cell.count)
        }
    }
    func render(_ cells: [String]) -> String {
        cells.enumerated().map { index, cell in
            let pad = String(repeating: " ", count: max(0, widths[index] - cell.count))
            if index == cells.count - 1 { return numeric.contains(index) ? pad + cell : cell }
            return numeric.contains(index) ? pad + cell : cell + pad
        }.joined(separator: "  ")
    }
    return [render(header)] + rows.map(render)
}
