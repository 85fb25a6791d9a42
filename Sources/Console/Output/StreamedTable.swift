import SafeText

/// One item of a streamed document: its JSON lines and its rows of the
/// table for people (an audit's device: one line, a row per finding).
struct StreamedItem {
    var values: [any ResultValue]
    var rows: [[String]]
}

extension Renderer {
    /// A table too large to hold (the office's whole-fleet reads, issue 31),
    /// written as its rows come, byte for byte as `table(…)` writes it
    /// whole. `pass` reads the rows from the beginning (the server: a new
    /// cursor of the same snapshot), handing each item to its second
    /// argument; the first says whether this pass writes. JSON: one pass,
    /// each value a line as it comes. People: a first pass measures the
    /// columns (nothing is kept but their widths), the second writes
    /// `before`, the header, the rows and `after` — `header` and `after`
    /// are asked after the first pass, so they may depend on it (a column
    /// only some rows need; counts). `started` is set before the first
    /// line is written.
    func streamed(
        before: [PeopleLine] = [], header: () -> [String], emptyShowsNothing: Bool = false,
        started: inout Bool, pass: (_ writing: Bool, _ item: (StreamedItem) -> Void) throws -> Void,
        after: () -> [PeopleLine]
    ) throws {
        func start() { started = true }
        guard isForPeople else {
            try pass(true) { item in
                guard !item.values.isEmpty else { return }
                start()
                render(ValuesOnly(item.values))
            }
            return
        }
        var measured: [Int] = []
        var rows = 0
        try pass(false) { item in
            for cells in item.rows {
                rows += 1
                for (index, cell) in cells.enumerated() {
                    let width = Terminal.width(Terminal.visible(cell, limit: tableCellLimit))
                    if index < measured.count {
                        measured[index] = max(measured[index], width)
                    } else {
                        measured.append(width)
                    }
                }
            }
        }
        let header = header().map { Terminal.visible($0, limit: tableCellLimit) }
        let widths = header.indices.map { index in
            max(Terminal.width(header[index]), index < measured.count ? measured[index] : 0)
        }
        // As `table(…)` renders a row.
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                let column = index < widths.count ? widths[index] : 0
                let pad = String(repeating: " ", count: max(0, column - Terminal.width(cell)))
                return index == cells.count - 1 ? cell : cell + pad
            }.joined(separator: "  ")
        }
        start()
        render(ForPeople(lines: before))
        if rows > 0 || !emptyShowsNothing {
            render(ForPeople(.result(line(header))))
            try pass(true) { item in
                for cells in item.rows {
                    render(ForPeople(.result(line(cells.map { Terminal.visible($0, limit: tableCellLimit) }))))
                }
            }
        }
        render(ForPeople(lines: after()))
    }
}

extension ForPeople {
    init(lines: [PeopleLine]) { self.lines = lines }
}
