import FoundationEssentials
import SafeText
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Where the console's words go: results to standard output, messages and
/// progress to standard error; colour only on a terminal that is not dumb,
/// without NO_COLOR or --no-color; a progress line kept at the bottom only
/// where the terminal can be redrawn (`redraws`); any line that comes while
/// the REPL waits for input printed above the prompt and the half-typed
/// line, which are drawn again below it.
///
/// Widths on the screen are measured with one function, `TextWidth` (colour
/// codes take no column, wide characters two, combining marks none):
/// `Terminal.width`, the tables (`table`), the status line's cut.
///
/// Every line written for people passes through `Terminal.visible` (that is,
/// `Visible.text`): text a device or a file chose never reaches the screen
/// raw, wherever it was put into a line. The console's own colours survive
/// because `styled` marks them with a code no outside text can hold (see
/// `StyleMark`). JSON lines are exact and escaped (`JSONText`), and exports
/// are written as their writers made them safe (`document`).
public final class Terminal: Sendable {
    public let outputIsTerminal: Bool
    public let errorIsTerminal: Bool
    /// TERM is `dumb`, empty or unset: a terminal that does nothing but
    /// print (an editor's shell buffer, a serial console).
    public let isDumb: Bool
    public let color: Bool
    /// Whether standard error is a terminal that can be redrawn: a status
    /// line at the bottom (`\r ESC[K`), progress redrawn in place. Not on a
    /// dumb terminal, nor when standard error is not a terminal: plain
    /// lines there, or none.
    public let redraws: Bool
    public let json: Bool
    public let verbose: Bool

    private struct State {
        var statusLine: String?
        /// Set by the REPL: prints a line (already rendered) for a
        /// descriptor above its prompt, and says whether it did (false:
        /// no prompt is up, the line is written as usual).
        var aboveThePrompt: (@Sendable (String, Int32) -> Bool)?
    }
    private let state = Mutex(State())

    /// `color` false: --no-color. Colour also needs both outputs on a
    /// terminal, TERM not dumb and NO_COLOR unset or empty.
    public convenience init(color: Bool, json: Bool, verbose: Bool) {
        self.init(
            color: color, json: json, verbose: verbose, environment: ProcessInfo.processInfo.environment,
            outputIsTerminal: isatty(1) == 1, errorIsTerminal: isatty(2) == 1)
    }

    /// The same with the facts given (tests).
    init(
        color: Bool, json: Bool, verbose: Bool, environment: [String: String], outputIsTerminal: Bool,
        errorIsTerminal: Bool
    ) {
        self.outputIsTerminal = outputIsTerminal
        self.errorIsTerminal = errorIsTerminal
        isDumb = Self.isDumb(term: environment["TERM"])
        let noColor = !(environment["NO_COLOR"] ?? "").isEmpty
        self.color = color && !noColor && outputIsTerminal && errorIsTerminal && !isDumb
        redraws = errorIsTerminal && !isDumb
        self.json = json
        self.verbose = verbose
    }

    /// Whether a terminal of type `term` can do no more than print: `dumb`,
    /// or no TERM at all.
    static func isDumb(term: String?) -> Bool {
        guard let term, !term.isEmpty else { return true }
        return term == "dumb"
    }

    public enum Style: String, Sendable {
        case bold = "1", dim = "2", red = "31", green = "32", yellow = "33", blue = "34", cyan = "36"
    }

    /// `text` in `style` when colour is on.
    public func styled(_ text: String, _ style: Style) -> String {
        color ? StyleMark.open(style.rawValue) + text + StyleMark.open("0") : text
    }

    /// A result line (standard output).
    public func result(_ text: String) { write(text, to: 1) }

    /// A message line (standard error).
    public func message(_ text: String) { write(text, to: 2) }

    public func warning(_ text: String) { write(styled("warning: ", .yellow) + text, to: 2) }

    public func error(_ text: String) { write(styled("error: ", .red) + text, to: 2) }

    /// Something that happened on its own (a device found, an event): a
    /// message, above the prompt when the REPL is waiting (as every line
    /// written then is).
    public func event(_ text: String) { message(text) }

    /// The progress line at the bottom of a terminal (nil clears it), cut
    /// to the terminal's width so that it never wraps; shown only where the
    /// terminal can be redrawn (`redraws`), and not while the REPL's prompt
    /// is up.
    public func status(_ text: String?) {
        guard redraws else { return }
        let line = text.map { Self.fitted(Self.rendered($0, color: color), columns: Self.columns() - 1) }
        state.withLock { state in
            guard state.aboveThePrompt?("", -1) != true else { return }
            state.statusLine = line
            Self.emit(2, "\r\u{1B}[K" + (line ?? ""))
        }
    }

    /// `line` (rendered) cut to `columns` (at least 10), an ellipsis ending
    /// what was cut.
    static func fitted(_ line: String, columns: Int) -> String {
        TextWidth.truncated(line, toColumns: max(10, columns), marker: "…")
    }

    /// The width of the terminal on standard error (else standard output),
    /// else $COLUMNS, else 80.
    static func columns() -> Int {
        for descriptor: Int32 in [2, 1] {
            var size = winsize()
            if ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        }
        if let text = ProcessInfo.processInfo.environment["COLUMNS"], let columns = Int(text), columns > 0 {
            return columns
        }
        return 80
    }

    /// Sets what prints a line above the REPL's prompt while it is up: it
    /// is handed lines already rendered, with the descriptor each is for,
    /// and returns false when no prompt is up (the line is then written as
    /// usual). Asked with descriptor -1, it only says whether a prompt is
    /// up.
    func setPromptHook(_ hook: (@Sendable (String, Int32) -> Bool)?) {
        state.withLock { $0.aboveThePrompt = hook }
    }

    /// A document a writer made safe itself (a CSV or JSON export), written
    /// as it is to standard output.
    public func document(_ text: String) {
        // Bytes, not characters: a CSV record ends with CRLF, one Character.
        var bytes = Array(text.utf8)
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        writeLine(String(decoding: bytes, as: UTF8.self), to: 1)
    }

    /// The longest line written: a table row is far shorter; a line this
    /// long is text from outside that escaped every other bound.
    static let lineLimit = 16 * 1024

    /// `text` as it goes to the screen: outside text made visible and
    /// bounded, the console's own style marks turned into colour codes (or
    /// dropped without colour).
    static func rendered(_ text: String, color: Bool, limit: Int? = lineLimit) -> String {
        if isPlain(text, limit: limit) { return text }
        var line = ""
        for (index, piece) in visible(text, limit: limit).components(separatedBy: StyleMark.mark).enumerated() {
            if index == 0 {
                line += piece
            } else if let code = StyleMark.code(at: piece) {
                if color { line += "\u{1B}[\(code)m" }
                line += piece.dropFirst(code.count + 1)
            }
        }
        return line
    }

    /// `text` made visible (`Visible.text`) except for the console's own
    /// style marks, which stay for `rendered` to turn into colour; at most
    /// `limit` characters.
    static func visible(_ text: String, limit: Int? = Visible.defaultLimit) -> String {
        if isPlain(text, limit: limit) { return text }
        guard text.contains(StyleMark.mark) else { return Visible.text(text, limit: limit) }
        return text.components(separatedBy: StyleMark.mark).map { Visible.text($0, limit: limit) }
            .joined(separator: StyleMark.mark)
    }

    /// `text` and spaces up to `columns` columns (`width`); as it is when
    /// it is that wide already. For hand-made alignment (a help listing).
    static func padded(_ text: String, toColumns columns: Int) -> String {
        text + String(repeating: " ", count: max(0, columns - width(text)))
    }

    /// How many columns `text` takes on the screen once made visible
    /// (`TextWidth`): its style marks and colour codes take none, a wide
    /// character two, a combining mark none.
    static func width(_ text: String) -> Int {
        if isPlain(text, limit: nil) { return text.utf8.count }
        return TextWidth.columns(of: rendered(text, color: false, limit: nil))
    }

    /// Whether `text` is printable ASCII alone (a space to `~`), at most
    /// `limit` characters: shown as it is, a column per character, with no
    /// style mark — what `visible`, `rendered` and `width` would find the
    /// long way (issue 31: a million table rows spent most of their time
    /// there).
    static func isPlain(_ text: String, limit: Int?) -> Bool {
        var count = 0
        for byte in text.utf8 {
            guard byte >= 0x20, byte < 0x7F else { return false }
            count += 1
        }
        return limit.map { count <= $0 } ?? true
    }

    private func write(_ text: String, to descriptor: Int32) {
        writeLine(Self.rendered(text, color: color), to: descriptor)
    }

    private func writeLine(_ text: String, to descriptor: Int32) {
        state.withLock { state in
            if let above = state.aboveThePrompt, above(text, descriptor) { return }
            if let status = state.statusLine, redraws {
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
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            bytes = bytes.dropFirst(written)
        }
    }
}

/// The console's own colours inside a line: a mark no text from outside can
/// hold, then the SGR code and `m`. The mark is three private-use code
/// points chosen at random when the process starts; `Visible.text` shows any
/// private-use character from outside as an escape, so outside text can
/// neither forge a mark nor, knowing none, guess one.
enum StyleMark {
    static let mark: String = {
        var generator = SystemRandomNumberGenerator()
        let scalars = (0..<3).map { _ in Unicode.Scalar(UInt32.random(in: 0xF0000...0xFFFFD, using: &generator))! }
        return String(String.UnicodeScalarView(scalars))
    }()

    static func open(_ code: String) -> String { mark + code + "m" }

    /// The SGR code at the start of `text` (what follows a mark), if it is one.
    static func code(at text: some StringProtocol) -> String? {
        let digits = text.prefix { $0.isASCII && ($0.isNumber || $0 == ";") }
        guard !digits.isEmpty, digits.count <= 8, text.dropFirst(digits.count).first == "m" else { return nil }
        return String(digits)
    }
}

/// Columns padded to their widest cell; numbers right-aligned. Each cell is
/// made visible (`Terminal.visible`) and bounded before it is measured, so
/// outside text keeps the columns straight; widths are `Terminal.width`'s:
/// colour takes no column, a wide character two, a combining mark none.
func table(_ header: [String], _ rows: [[String]], numeric: Set<Int> = []) -> [String] {
    let header = header.map { Terminal.visible($0, limit: tableCellLimit) }
    let rows = rows.map { $0.map { Terminal.visible($0, limit: tableCellLimit) } }
    var widths = header.map(Terminal.width)
    for row in rows {
        for (index, cell) in row.enumerated() where index < widths.count {
            widths[index] = max(widths[index], Terminal.width(cell))
        }
    }
    func render(_ cells: [String]) -> String {
        cells.enumerated().map { index, cell in
            let column = index < widths.count ? widths[index] : 0  // a row longer than the header
            let pad = String(repeating: " ", count: max(0, column - Terminal.width(cell)))
            if index == cells.count - 1 { return numeric.contains(index) ? pad + cell : cell }
            return numeric.contains(index) ? pad + cell : cell + pad
        }.joined(separator: "  ")
    }
    return [render(header)] + rows.map(render)
}

/// The widest a table cell is shown: a device's name or an error longer
/// than this is cut (`Visible.text`), the whole value kept in the inventory.
let tableCellLimit = 200
