import SafeText

/// A value a command puts out: for programs, one JSON line of its kind
/// (docs/json.md). What people see of it is its document's (`ResultDocument`).
protocol ResultValue: Sendable {
    /// Its kind: per value, not per type (a pulled record is a `trip`, an
    /// `event` or an `incident`).
    var kind: ResultKind { get }
    /// Its fields in docs/json.md's order: every field, null when unknown,
    /// so that a kind has one shape wherever it appears. (The line is
    /// written with its keys sorted, `JSONValue.text`.)
    var fields: [(String, JSONValue)] { get }
}

/// A line for people, and the stream it goes to: data to standard output,
/// messages to standard error.
enum PeopleLine: Sendable, Equatable {
    /// Standard output (`Terminal.result`).
    case result(String)
    /// Standard error (`Terminal.message`).
    case message(String)
    /// Standard error, after `warning: ` (`Terminal.warning`).
    case warning(String)
    /// Standard error, above the REPL's prompt when it is up (`Terminal.event`).
    case event(String)
    /// A table on standard output (`table(…)`: cells made visible and bounded).
    case table(header: [String], rows: [[String]], numeric: Set<Int>)
}

/// What a command puts out at one time: its values, as JSON lines in their
/// order, or its lines for people, in theirs (a recap's JSON is recap,
/// recovery, summary; its table is followed by the summary, then the
/// recoveries). The `Renderer` chooses which.
protocol ResultDocument: Sendable {
    /// The JSON lines, in order (none: nothing for programs).
    var values: [any ResultValue] { get }
    /// The lines for people, in order (none: nothing for people).
    func people(_ terminal: Terminal) -> [PeopleLine]
}

/// A value that is a document by itself: one JSON line, or its lines.
protocol SingleResult: ResultValue, ResultDocument {}

extension SingleResult {
    var values: [any ResultValue] { [self] }
}

/// A column of a table: its header, whether it is right-aligned, and a
/// row's cell (styled through the terminal when it has colour).
struct Column<Row> {
    var header: String
    var numeric = false
    var cell: (Row, Terminal) -> String

    init(_ header: String, numeric: Bool = false, _ cell: @escaping (Row) -> String) {
        self.header = header
        self.numeric = numeric
        self.cell = { row, _ in cell(row) }
    }

    init(_ header: String, numeric: Bool = false, styled cell: @escaping (Row, Terminal) -> String) {
        self.header = header
        self.numeric = numeric
        self.cell = cell
    }
}

/// A value that is a row of a table for people: its columns, declared
/// once (some appear only when a row needs them: `benches`, `bench`).
protocol TableRow: ResultValue {
    static func columns(for rows: [Self]) -> [Column<Self>]
}

extension TableRow {
    /// The rows as one table.
    static func table(_ rows: [Self], _ terminal: Terminal) -> PeopleLine {
        let columns = columns(for: rows)
        return .table(
            header: columns.map(\.header), rows: rows.map { row in columns.map { $0.cell(row, terminal) } },
            numeric: Set(columns.indices.filter { columns[$0].numeric }))
    }
}

/// Rows: JSON lines, or a table with the lines people get before and
/// after it (a count on standard error).
struct Table<Row: TableRow>: ResultDocument {
    var rows: [Row]
    /// No table at all, not even its header, when there is no row.
    var emptyShowsNothing = false
    var before: [PeopleLine] = []
    var after: [PeopleLine] = []

    var values: [any ResultValue] { rows }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        before + (rows.isEmpty && emptyShowsNothing ? [] : [Row.table(rows, terminal)]) + after
    }
}

/// Lines for people alone: chatter that has no JSON (`PULLED`, a run's
/// first line).
struct ForPeople: ResultDocument {
    var lines: [PeopleLine]
    init(_ lines: PeopleLine...) { self.lines = lines }
    var values: [any ResultValue] { [] }
    func people(_ terminal: Terminal) -> [PeopleLine] { lines }
}

/// Documents one after the other: the values of each in turn, the lines
/// of each in turn.
struct Documents: ResultDocument {
    var parts: [any ResultDocument]
    init(_ parts: [any ResultDocument]) { self.parts = parts }
    var values: [any ResultValue] { parts.flatMap(\.values) }
    func people(_ terminal: Terminal) -> [PeopleLine] { parts.flatMap { $0.people(terminal) } }
}

/// Values that have no form for people: an export's rows, written as JSON
/// lines whatever the mode (`Renderer.jsonLines`).
struct ValuesOnly: ResultDocument {
    var values: [any ResultValue]
    init(_ values: [any ResultValue]) { self.values = values }
    func people(_ terminal: Terminal) -> [PeopleLine] { [] }
}
