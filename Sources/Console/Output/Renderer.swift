import SafeText

/// The one place that decides between JSON and people: a command hands it
/// result values (`ResultDocument`); with `--json` (for the run, or on the
/// command's line) each value is one JSON line on standard output, else
/// the people lines go where each says (standard output or standard
/// error), through the terminal's display sanitiser (`Terminal.visible`).
/// Nothing outside Sources/Console/Output reads the mode
/// (`OutputRuleTests`).
struct Renderer: Sendable {
    let terminal: Terminal
    /// JSON lines, not lines for people.
    private let json: Bool

    init(terminal: Terminal, json: Bool) {
        self.terminal = terminal
        self.json = json
    }

    /// The run's mode: `--json` for the whole run (`BEACONBENCH_JSON`).
    init(terminal: Terminal) { self.init(terminal: terminal, json: terminal.json) }

    /// The mode of these commands, carried out together: `--json` for the
    /// whole run, or on any of their lines.
    init(terminal: Terminal, for commands: [LocatedCommand]) {
        self.init(terminal: terminal, json: terminal.json || commands.contains(where: \.json))
    }

    /// JSON lines whatever the mode (`inventory export`, `records export`
    /// without `--csv`).
    var jsonLines: Renderer { Renderer(terminal: terminal, json: true) }

    /// JSON lines when either is (a recap gathered over several commands
    /// is JSON when one of them was).
    func joined(_ other: Renderer) -> Renderer { Renderer(terminal: terminal, json: json || other.json) }

    /// Whether people get the output: for what only people get and that is
    /// no line (the terminal's bell, a ticker redrawing the status line).
    var isForPeople: Bool { !json }

    /// `document`'s values as JSON lines, or its lines for people.
    func render(_ document: some ResultDocument) {
        if json {
            for value in document.values { emit(value) }
        } else {
            write(document.people(terminal))
        }
    }

    /// Something only people get, written only for them: the body builds
    /// it (styling, counting) only then.
    func forPeople(_ body: () -> Void) {
        if !json { body() }
    }

    /// One JSON line: `{"kind": …, "v": 1, …fields}`, keys sorted, every
    /// string escaped (`JSONText`) so the line is safe on a terminal.
    private func emit(_ value: any ResultValue) {
        var object = Dictionary(value.fields, uniquingKeysWith: { first, _ in first })
        object["kind"] = .string(value.kind.rawValue)
        object["v"] = .integer(jsonVersion)
        terminal.document(JSONValue.object(object).text)
    }

    private func write(_ lines: [PeopleLine]) {
        for line in lines {
            switch line {
            case .result(let text): terminal.result(text)
            case .message(let text): terminal.message(text)
            case .warning(let text): terminal.warning(text)
            case .event(let text): terminal.event(text)
            case .table(let header, let rows, let numeric):
                for text in table(header, rows, numeric: numeric) { terminal.result(text) }
            }
        }
    }
}
