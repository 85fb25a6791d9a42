import FoundationEssentials
import Profiles
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// The device table: every chosen device, sorted, filtered and paged by the
/// page's script (Assets/report.js) from the data block (`tableJSON`); rows
/// from Analyses/DeviceRows.swift.
struct DeviceTableSection: ReportSection {
    let id = "devices"
    let title = "Devices"

    func body(_ report: FleetReport) -> [String] {
        let codes = report.findingCodes
        let options = codes.map { "<option value=\"\(HTML.escape($0))\">\(HTML.escape($0))</option>" }.joined()
        let header = Self.columns(server: report.server).enumerated().map { index, column in
            "<th scope=\"col\" aria-sort=\"none\"><button type=\"button\" data-column=\"\(index)\">\(HTML.escape(column))</button></th>"
        }.joined()
        return [
            """
            <div class="controls" role="search">
            <label>Filter <input id="filter" type="search" placeholder="address, profile, model, firmware, finding…" autocomplete="off"></label>
            <label>Finding <select id="finding"><option value="">any or none</option><option value="*">with findings</option>\(options)</select></label>
            <span id="table-status" aria-live="polite" data-matching="\(report.rowCount)" data-total="\(report.rowCount)">\(HTML.number(report.rowCount)) devices</span>
            </div>
            <div class="scroll"><table id="device-table" data-rows="\(report.rowCount)"><caption>Every device of the report; a column's button sorts it. Battery crossing: days until the projected fall below the profile's minimum.</caption>
            <thead><tr>\(header)</tr></thead><tbody></tbody></table></div>
            <div class="pager"><button type="button" id="prev">Previous</button> <span id="page"></span> <button type="button" id="next">Next</button></div>
            <noscript><p>The device table needs JavaScript; `beaconbench inventory export --csv` has the same rows.</p></noscript>
            """
        ]
    }

    /// The table's columns; the script (Assets/report.js) maps them to a
    /// row's cells.
    static func columns(server: Bool) -> [String] {
        [
            "address", "profile", "identity", "firmware", "battery %", "crosses minimum in (days)",
            "calibrated (days ago)", "|g| mG", "findings", "model", "serial", "last seen (days ago)",
        ] + (server ? ["benches"] : [])
    }

    // MARK: The device table's data

    /// The device table as compact JSON: repeated texts (profiles,
    /// firmware, finding sets, models, benches) once in dictionaries, each
    /// row an array of numbers and indexes. Values are written by the one
    /// JSON writer (`JSONValue`), every string made visible first
    /// (`Visible.text`) and each array made safe for a script block
    /// (`HTML.scriptSafe`). The envelope's key order and its line breaks
    /// (one row a line) are the page's layout.
    static func tableJSON(_ report: FleetReport) -> String {
        var table = TableJSON(server: report.server, now: report.generatedAt)
        var rows: [String] = []
        rows.reserveCapacity(report.rows.count)
        for row in report.rows { rows.append(table.row(row)) }
        return table.head() + rows.joined(separator: TableJSON.separator) + TableJSON.tail
    }

    /// The device table's JSON made a row at a time (a streamed report
    /// writes each row as it comes): `head()` — the envelope and the
    /// dictionaries, complete once every row was made — then the rows
    /// joined by `separator`, then `tail`.
    struct TableJSON {
        let server: Bool
        let now: Date
        var dictionaries: [[String]] = Array(repeating: [], count: 5)
        var indexes: [[String: Int]] = Array(repeating: [:], count: 5)
        static let separator = ",\n"
        static let tail = "]}"

        init(server: Bool, now: Date) {
            self.server = server
            self.now = now
        }

        mutating func index(_ kind: Int, _ text: String?) -> JSONValue {
            guard let text else { return .null }
            if let found = indexes[kind][text] { return .integer(found) }
            let next = dictionaries[kind].count
            dictionaries[kind].append(text)
            indexes[kind][text] = next
            return .integer(next)
        }
        static func text(_ text: String, limit: Int) -> JSONValue { .string(Visible.text(text, limit: limit)) }
        static func number(_ value: Int?) -> JSONValue { value.map { .integer($0) } ?? .null }

        /// One row's JSON (its texts indexed into the dictionaries).
        mutating func row(_ row: FleetReport.Row) -> String {
            let device = row.device
            var cells: [JSONValue] = [
                Self.text(device.address, limit: 40), index(0, device.profile), Self.number(device.major),
                Self.number(device.minor), index(1, device.firmware), Self.number(device.battery),
                Self.number(row.crossingDays), Self.number(row.calibrationAgeDays), Self.number(row.magnitude),
                index(2, row.findings.isEmpty ? nil : row.findings.joined(separator: " ")), index(3, device.model),
                device.serial.map { Self.text($0, limit: 80) } ?? .null,
                Self.number(
                    device.lastSeen.flatMap { Auditor.wholeDays(now.timeIntervalSince($0)).map { max(0, $0) } }),
            ]
            if server { cells.append(index(4, device.benches)) }
            return HTML.scriptSafe(JSONValue.array(cells).text)
        }

        /// The envelope up to the rows, with the dictionaries.
        func head() -> String {
            let names = ["profiles", "firmware", "findings", "models", "benches"]
            let dictionaryJSON = zip(names, dictionaries).map { name, values in
                "\"\(name)\":" + HTML.scriptSafe(JSONValue.array(values.map { Self.text($0, limit: 120) }).text)
            }.joined(separator: ",")
            let columnJSON = HTML.scriptSafe(
                JSONValue.array(DeviceTableSection.columns(server: server).map { Self.text($0, limit: 200) }).text)
            return "{\"pageSize\":\(ReportPage.pageSize),\"columns\":\(columnJSON),\(dictionaryJSON),\"rows\":[\n"
        }
    }
}
