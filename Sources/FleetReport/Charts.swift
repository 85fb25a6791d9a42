import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Charts as SVG, drawn by the tool: no script draws them, so they print,
/// work with scripts off and hold only escaped text. Colours come from
/// classes (`s0`…`s7`, `bad`, `line0`…) that the page's style sheet sets
/// for light and dark; every mark carries `data-label` and `data-value`
/// and a `<title>` (a tooltip, and what a screen reader says).
enum Chart {
    struct Series {
        var name: String
        var values: [Int]
        /// Class of each value's mark (nil: the series' own `sN`).
        var classes: [String?] = []
    }

    static let width = 760.0

    /// A `<figure>`: caption, the chart (an image to assistive technology,
    /// labelled by its title and description) and its numbers as a table.
    static func figure(
        id: String, title: String, description: String, svg: String, table: String, total: Int,
        extra: [(String, String)] = [], note: String? = nil
    ) -> String {
        let attributes = extra.map { " data-\($0.0)=\"\(HTML.escape($0.1))\"" }.joined()
        return """
            <figure class="chart" id="chart-\(id)" data-chart="\(id)" data-total="\(total)"\(attributes)>
            <figcaption><h3>\(HTML.escape(title))</h3><p>\(HTML.escape(description))</p></figcaption>
            <div class="chart-body"><div class="chart-plot">\(svg)
            \(note.map { "<p class=\"note\">\(HTML.escape($0))</p>" } ?? "")</div>
            \(table)</div>
            </figure>
            """
    }

    /// The opening of an `<svg>` labelled by its title and description.
    static func open(id: String, height: Double, title: String, description: String) -> String {
        """
        <svg viewBox="0 0 \(Int(width)) \(Int(height))" role="img" aria-labelledby="\(id)-t \(id)-d" \
        preserveAspectRatio="xMinYMin meet" class="plot"><title id="\(id)-t">\(HTML.escape(title))</title>\
        <desc id="\(id)-d">\(HTML.escape(description))</desc>
        """
    }

    /// A round ceiling for an axis: 1, 2 or 5 times a power of ten.
    static func niceCeiling(_ value: Double) -> Double {
        guard value > 0 else { return 1 }
        let power = pow(10, (log10(value)).rounded(.down))
        for step in [1.0, 2, 5, 10] where step * power >= value { return step * power }
        return 10 * power
    }

    static func f(_ value: Double) -> String { HTML.decimal(value, 1) }

    static func empty(_ text: String, height: Double) -> String {
        "<text class=\"empty\" x=\"\(f(width / 2))\" y=\"\(f(height / 2))\" text-anchor=\"middle\">\(HTML.escape(text))</text>"
    }

    /// Vertical columns, one per category, stacked by series.
    static func columns(
        id: String, title: String, description: String, categories: [String], series: [Series],
        yLabel: String, emptyText: String
    ) -> String {
        let height = 280.0
        let (left, right, top, bottom) = (56.0, 12.0, 14.0, 64.0)
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        var svg = open(id: id, height: height + (series.count > 1 ? 24 : 0), title: title, description: description)
        let totals = categories.indices.map { index in
            series.reduce(0) { $0 + (index < $1.values.count ? $1.values[index] : 0) }
        }
        // Whole-number ticks, a round step apart (1, 2 or 5 times a power of ten).
        let highest = Double(max(1, totals.max() ?? 0))
        let step = max(1, niceCeiling(highest / 4))
        let ticks = Int((highest / step).rounded(.up))
        let maximum = step * Double(ticks)
        // Axis and grid.
        for tick in 0...ticks {
            let value = step * Double(tick)
            let y = top + plotHeight - plotHeight * Double(tick) / Double(ticks)
            svg += "<line class=\"grid\" x1=\"\(f(left))\" x2=\"\(f(width - right))\" y1=\"\(f(y))\" y2=\"\(f(y))\"/>"
            svg +=
                "<text class=\"tick\" x=\"\(f(left - 6))\" y=\"\(f(y + 4))\" text-anchor=\"end\">\(HTML.number(Int(value.rounded())))</text>"
        }
        svg +=
            "<text class=\"axis\" x=\"12\" y=\"\(f(top + plotHeight / 2))\" transform=\"rotate(-90 12 \(f(top + plotHeight / 2)))\" text-anchor=\"middle\">\(HTML.escape(yLabel))</text>"
        if totals.allSatisfy({ $0 == 0 }) {
            svg += empty(emptyText, height: height)
        }
        let band = categories.isEmpty ? plotWidth : plotWidth / Double(categories.count)
        let barWidth = max(1, band * 0.78)
        let labelEvery = max(1, Int((Double(categories.count) / 14).rounded(.up)))
        for (index, category) in categories.enumerated() {
            let x = left + band * Double(index) + (band - barWidth) / 2
            var stacked = 0
            for (number, serie) in series.enumerated() {
                let value = index < serie.values.count ? serie.values[index] : 0
                guard value > 0 else { continue }
                let y0 = top + plotHeight - plotHeight * Double(stacked) / maximum
                let y1 = top + plotHeight - plotHeight * Double(stacked + value) / maximum
                let markClass = (index < serie.classes.count ? serie.classes[index] : nil) ?? "s\(number % 8)"
                let label = series.count > 1 ? "\(category) · \(serie.name)" : category
                svg +=
                    "<rect class=\"\(markClass)\" x=\"\(f(x))\" y=\"\(f(y1))\" width=\"\(f(barWidth))\" height=\"\(f(max(0.5, y0 - y1)))\" data-label=\"\(HTML.text(label, limit: 120))\" data-series=\"\(HTML.text(serie.name, limit: 60))\" data-value=\"\(value)\"><title>\(HTML.text(label, limit: 120)): \(HTML.number(value))</title></rect>"
                stacked += value
            }
            if index % labelEvery == 0 {
                let cx = left + band * Double(index) + band / 2
                let y = top + plotHeight + 14
                let rotate = categories.count > 8
                svg +=
                    "<text class=\"tick\" x=\"\(f(cx))\" y=\"\(f(y))\" text-anchor=\"\(rotate ? "end" : "middle")\"\(rotate ? " transform=\"rotate(-35 \(f(cx)) \(f(y)))\"" : "")>\(HTML.text(category, limit: 24))</text>"
            }
        }
        if series.count > 1 { svg += legend(series.map(\.name), y: height + 4) }
        return svg + "</svg>"
    }

    static func legend(_ names: [String], y: Double) -> String {
        var svg = ""
        var x = 56.0
        for (number, name) in names.enumerated() {
            let label = HTML.text(name, limit: 28)
            svg += "<rect class=\"s\(number % 8)\" x=\"\(f(x))\" y=\"\(f(y))\" width=\"12\" height=\"12\"/>"
            svg += "<text class=\"tick\" x=\"\(f(x + 16))\" y=\"\(f(y + 10))\">\(label)</text>"
            x += 28 + Double(min(28, name.count)) * 7
            if x > width - 80 { break }
        }
        return svg
    }

    /// Horizontal bars, one per row, stacked by series (at most `limit` rows).
    static func bars(
        id: String, title: String, description: String, rows: [String], series: [Series], emptyText: String,
        labelWidth: Double = 300
    ) -> String {
        let rowHeight = 24.0
        let top = 8.0
        let height = top + max(1, Double(rows.count)) * rowHeight + (series.count > 1 ? 30 : 8)
        var svg = open(id: id, height: height, title: title, description: description)
        let totals = rows.indices.map { index in
            series.reduce(0) { $0 + (index < $1.values.count ? $1.values[index] : 0) }
        }
        let maximum = Double(max(1, totals.max() ?? 0))
        let plotWidth = width - labelWidth - 70
        if rows.isEmpty || totals.allSatisfy({ $0 == 0 }) { svg += empty(emptyText, height: max(height, 40)) }
        for (index, row) in rows.enumerated() {
            let y = top + Double(index) * rowHeight
            svg +=
                "<text class=\"tick\" x=\"\(f(labelWidth - 8))\" y=\"\(f(y + 15))\" text-anchor=\"end\">\(HTML.text(row, limit: Int(labelWidth / 7)))</text>"
            var x = labelWidth
            for (number, serie) in series.enumerated() {
                let value = index < serie.values.count ? serie.values[index] : 0
                guard value > 0 else { continue }
                let w = max(1, plotWidth * Double(value) / maximum)
                let markClass = (index < serie.classes.count ? serie.classes[index] : nil) ?? "s\(number % 8)"
                let label = series.count > 1 ? "\(row) · \(serie.name)" : row
                svg +=
                    "<rect class=\"\(markClass)\" x=\"\(f(x))\" y=\"\(f(y + 3))\" width=\"\(f(w))\" height=\"\(f(rowHeight - 8))\" data-label=\"\(HTML.text(label, limit: 200))\" data-series=\"\(HTML.text(serie.name, limit: 60))\" data-value=\"\(value)\"><title>\(HTML.text(label, limit: 200)): \(HTML.number(value))</title></rect>"
                x += w
            }
            if totals[index] > 0 {
                svg += "<text class=\"value\" x=\"\(f(x + 6))\" y=\"\(f(y + 15))\">\(HTML.number(totals[index]))</text>"
            }
        }
        if series.count > 1 { svg += legend(series.map(\.name), y: height - 20) }
        return svg + "</svg>"
    }

    struct Line {
        var name: String
        var points: [(x: Double, y: Double)]
        var dashed = false
        var className: String
    }

    /// Lines over time (x: epoch seconds), y from 0 to 100, with
    /// horizontal reference lines (a profile's minimum) and a vertical one
    /// (now, the quarter's end).
    static func lines(
        id: String, title: String, description: String, lines: [Line], levels: [(Double, String)],
        marks: [(Double, String)], yLabel: String, emptyText: String
    ) -> String {
        let height = 300.0
        let (left, right, top, bottom) = (56.0, 16.0, 14.0, 44.0)
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        var svg = open(
            id: id, height: height + (lines.count > 1 ? 8 + 18 * Double((lines.count + 2) / 3) : 0), title: title,
            description: description)
        let xs = lines.flatMap { $0.points.map(\.x) } + marks.map(\.0)
        let low = xs.min() ?? 0
        let high = max((xs.max() ?? 1), low + 3600)
        func px(_ x: Double) -> Double { left + plotWidth * (x - low) / (high - low) }
        func py(_ y: Double) -> Double { top + plotHeight - plotHeight * min(100, max(0, y)) / 100 }
        for tick in stride(from: 0.0, through: 100, by: 25) {
            svg +=
                "<line class=\"grid\" x1=\"\(f(left))\" x2=\"\(f(width - right))\" y1=\"\(f(py(tick)))\" y2=\"\(f(py(tick)))\"/>"
            svg +=
                "<text class=\"tick\" x=\"\(f(left - 6))\" y=\"\(f(py(tick) + 4))\" text-anchor=\"end\">\(Int(tick))</text>"
        }
        svg +=
            "<text class=\"axis\" x=\"12\" y=\"\(f(top + plotHeight / 2))\" transform=\"rotate(-90 12 \(f(top + plotHeight / 2)))\" text-anchor=\"middle\">\(HTML.escape(yLabel))</text>"
        if lines.allSatisfy({ $0.points.isEmpty }) {
            svg += empty(emptyText, height: height)
            return svg + "</svg>"
        }
        let span = high - low
        var previous = ""
        for tick in 0...4 {
            let x = low + span * Double(tick) / 4
            let date = Date(timeIntervalSince1970: x)
            let label = span < 3 * 86_400 ? UTC.period(of: date, unit: "hour").0 : UTC.day(date)
            // A short span repeats labels: each is written once.
            if label == previous { continue }
            previous = label
            svg +=
                "<text class=\"tick\" x=\"\(f(px(x)))\" y=\"\(f(height - bottom + 18))\" text-anchor=\"\(tick == 0 ? "start" : tick == 4 ? "end" : "middle")\">\(HTML.escape(label))</text>"
        }
        for (level, label) in levels {
            svg +=
                "<line class=\"level\" x1=\"\(f(left))\" x2=\"\(f(width - right))\" y1=\"\(f(py(level)))\" y2=\"\(f(py(level)))\"/><text class=\"tick\" x=\"\(f(width - right - 4))\" y=\"\(f(py(level) - 4))\" text-anchor=\"end\">\(HTML.escape(label))</text>"
        }
        for (number, (x, label)) in marks.enumerated() {
            // A label near the right edge goes to the left of its line.
            let nearEdge = px(x) > width - right - 90
            svg +=
                "<line class=\"mark\" x1=\"\(f(px(x)))\" x2=\"\(f(px(x)))\" y1=\"\(f(top))\" y2=\"\(f(top + plotHeight))\"/><text class=\"tick\" x=\"\(f(px(x) + (nearEdge ? -3 : 3)))\" y=\"\(f(top + 10 + Double(number) * 12))\" text-anchor=\"\(nearEdge ? "end" : "start")\">\(HTML.escape(label))</text>"
        }
        for line in lines where !line.points.isEmpty {
            let path = line.points.map { "\(f(px($0.x))),\(f(py($0.y)))" }.joined(separator: " ")
            svg +=
                "<polyline class=\"\(line.className)\(line.dashed ? " dashed" : "")\" points=\"\(path)\" data-label=\"\(HTML.text(line.name, limit: 80))\" data-value=\"\(line.points.count)\"><title>\(HTML.text(line.name, limit: 80))</title></polyline>"
            if !line.dashed, line.points.count <= 400 {
                for point in line.points {
                    svg +=
                        "<circle class=\"\(line.className) dot\" cx=\"\(f(px(point.x)))\" cy=\"\(f(py(point.y)))\" r=\"2.5\"/>"
                }
            }
        }
        let named = lines.filter { !$0.dashed }
        if named.count > 1 {
            var y = height + 4
            for (index, line) in named.enumerated() {
                let x = left + Double(index % 3) * 230
                if index > 0, index % 3 == 0 { y += 18 }
                svg +=
                    "<line class=\"\(line.className)\" x1=\"\(f(x))\" x2=\"\(f(x + 16))\" y1=\"\(f(y + 6))\" y2=\"\(f(y + 6))\"/>"
                svg +=
                    "<text class=\"tick\" x=\"\(f(x + 20))\" y=\"\(f(y + 10))\">\(HTML.text(line.name, limit: 30))</text>"
            }
        }
        return svg + "</svg>"
    }

    /// A table of numbers: header cells and rows of cells, each made
    /// visible and escaped here (numeric columns right-aligned).
    static func table(
        id: String, caption: String, header: [String], rows: [[String]], numeric: Set<Int> = [], more: Int = 0
    ) -> String {
        var html =
            "<div class=\"numbers\" tabindex=\"0\" role=\"region\" aria-label=\"\(HTML.escape(caption))\"><table data-table=\"\(id)\"><caption>\(HTML.escape(caption))</caption><thead><tr>"
        for cell in header { html += "<th scope=\"col\">\(HTML.escape(cell))</th>" }
        html += "</tr></thead><tbody>"
        if rows.isEmpty {
            html += "<tr><td colspan=\"\(header.count)\" class=\"empty\">none</td></tr>"
        }
        for row in rows {
            html += "<tr>"
            for (index, cell) in row.enumerated() {
                let text = HTML.text(cell, limit: 300)
                html += numeric.contains(index) ? "<td class=\"num\">\(text)</td>" : "<td>\(text)</td>"
            }
            html += "</tr>"
        }
        html += "</tbody></table>"
        if more > 0 {
            html += "<p class=\"note\">and \(HTML.number(more)) more rows (the device table has them all)</p>"
        }
        return html + "</div>"
    }
}
