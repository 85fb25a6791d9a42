// `beaconbench-bench office check --to URL BENCH.sqlite…`: after syncs,
// the server holds exactly the union of the benches (docs/office.md,
// "Faults"). Every synced table of every bench is read from the bench's
// SQLite file and from the server, both in key order, and merged row by
// row: a row missing on the server, one on the server only, or one whose
// columns differ is named (table, bench, key, column). Per bench and
// table: counts and an order-independent checksum of every row computed
// the same way on both sides; the ledger's head; duplicate identities
// server-wide; benches the server holds that were not given.
import Foundation
import Inventory
import Ledger
import LocalBus
import SafeText

enum UnionCheck {
    /// A synced table: its key (server names: `local_id` is the bench's
    /// `id`) and, for a bench that has simulated runs (which a sync without
    /// `--include-simulated` holds back), what it sends — the same filters
    /// as InventorySync's selects (Sources/InventorySync/ServerSchema.swift
    /// `tables`).
    struct Table {
        var name: String
        var keys: [String]
        var heldBack: String
        var integerKey: Bool { keys == ["local_id"] }
    }

    static let simulatedDevice = "device NOT IN (SELECT address FROM simulated_only_devices)"
    static let tables: [Table] = [
        Table(
            name: "devices", keys: ["address"], heldBack: "address NOT IN (SELECT address FROM simulated_only_devices)"),
        Table(name: "runs", keys: ["local_id"], heldBack: "simulated = 0"),
        Table(
            name: "outcomes", keys: ["local_id"], heldBack: "run_id NOT IN (SELECT id FROM runs WHERE simulated <> 0)"),
        Table(name: "readings", keys: ["local_id"], heldBack: simulatedDevice),
        Table(name: "trips", keys: ["device", "start_ms", "end_ms"], heldBack: simulatedDevice),
        Table(name: "events", keys: ["device", "at_ms", "type", "beacon_index"], heldBack: simulatedDevice),
        Table(name: "incidents", keys: ["device", "incident_id", "at_ms"], heldBack: simulatedDevice),
        Table(
            name: "identities", keys: ["device"],
            heldBack: """
                device NOT IN (SELECT address FROM simulated_only_devices)
                    AND (run_id IS NULL OR run_id NOT IN (SELECT id FROM runs WHERE simulated <> 0))
                """),
    ]

    /// One thing that differs.
    struct Difference: CustomStringConvertible, Sendable {
        var table: String
        var bench: String
        var key: String
        var what: String
        var description: String { "\(table) bench \(bench) key \(key): \(what)" }
    }

    /// Per bench and table: rows and checksums on each side.
    struct Tally: Sendable {
        var bench: String
        var table: String
        var local = 0
        var server = 0
        var localSum: UInt64 = 0
        var serverSum: UInt64 = 0
        var missing = 0
        var extra = 0
        var changed = 0
    }

    struct Report: Sendable {
        var tallies: [Tally] = []
        /// The first `shown` differences (all kinds), and how many in all.
        var differences: [Difference] = []
        var differenceCount = 0
        /// Ledger heads that do not agree, and notes on those that agree.
        var ledgerProblems: [String] = []
        var ledgerNotes: [String] = []
        /// Duplicate identities the sync made (not among the benches' own).
        var duplicates: [String] = []
        /// Duplicates the benches' own rows already hold (reported, not failed).
        var inheritedDuplicates: [String] = []
        var otherBenches: [String] = []
        var seconds = 0.0
        var rows: Int { tallies.reduce(0) { $0 + $1.local } }

        var ok: Bool {
            differenceCount == 0 && ledgerProblems.isEmpty && duplicates.isEmpty && otherBenches.isEmpty
                && tallies.allSatisfy { $0.local == $0.server && $0.localSum == $0.serverSum }
        }
    }

    /// Checks `benches` (SQLite files) against the server at `url`.
    static func run(
        url: String, benches: [String], shown: Int = 100, allowOtherBenches: Bool = false
    ) async throws
        -> Report
    {
        let started = ContinuousClock.now
        let server = try OfficePostgres(url)
        var report = Report()
        try await server.snapshotAsync {
            // Duplicate identities on the server first (few or none): the
            // benches' own rows are then kept only for those identities, to
            // tell a duplicate the benches themselves hold from one sync
            // made. Keeping every bench's identities instead grew with the
            // fleet (about 3 MB a 10,000-device bench).
            let identityDuplicates = try server.exec(
                """
                SELECT major, minor, string_agg(DISTINCT device, ' ' ORDER BY device) FROM identities
                GROUP BY major, minor HAVING count(DISTINCT device) > 1 ORDER BY major, minor
                """)
            let deviceDuplicates = try server.exec(
                """
                SELECT major, minor, string_agg(address, ' ' ORDER BY address) FROM fleet_devices
                WHERE major IS NOT NULL AND minor IS NOT NULL GROUP BY major, minor HAVING count(*) > 1
                ORDER BY major, minor
                """)
            func key(_ row: Row) -> String { "\(row[0] ?? ""):\(row[1] ?? "")" }
            let identityKeys = Set(identityDuplicates.map(key))
            let deviceKeys = Set(deviceDuplicates.map(key))
            // What the benches hold of those identities: major:minor → devices
            // (identities) and → addresses (devices).
            // (By their bytes: docs/development.md, "Stored values are
            // compared as bytes".)
            var localIdentities: [String: Set<[UInt8]>] = [:]
            var localDeviceIdentities: [String: Set<[UInt8]>] = [:]
            var benchIDs: [String] = []
            for path in benches {
                let inventory = try Inventory(path: path, readOnly: true)
                let bench = try await inventory.benchID()
                benchIDs.append(bench)
                let simulated =
                    try await inventory.query("SELECT count(*) FROM runs WHERE simulated <> 0").first?.first?.integer
                    ?? 0
                for table in tables {
                    var tally = Tally(bench: bench, table: table.name)
                    let keys = table.name == "identities" ? identityKeys : table.name == "devices" ? deviceKeys : []
                    let holder = table.name == "identities" ? "device" : "address"
                    try await compare(
                        table, bench: bench, inventory: inventory, server: server, holdBack: simulated > 0,
                        tally: &tally, report: &report, shown: shown
                    ) { row, columns in
                        guard !keys.isEmpty, let major = row[columns["major"] ?? -1] ?? nil,
                            let minor = row[columns["minor"] ?? -1] ?? nil,
                            let holding = row[columns[holder] ?? -1] ?? nil
                        else { return }
                        let identity = "\(major):\(minor)"
                        guard keys.contains(identity) else { return }
                        if table.name == "identities" {
                            localIdentities[identity, default: []].insert(Array(holding.utf8))
                        } else {
                            localDeviceIdentities[identity, default: []].insert(Array(holding.utf8))
                        }
                    }
                    report.tallies.append(tally)
                }
                try await checkLedger(inventory, bench: bench, server: server, report: &report)
            }
            // Benches the server holds that were not given.
            let given = Set(benchIDs.map { Array($0.utf8) })
            for row in try server.exec("SELECT bench_id FROM benches ORDER BY bench_id") {
                if let id = row.first ?? nil, !given.contains(Array(id.utf8)) { report.otherBenches.append(id) }
            }
            // Duplicate identities, server-wide.
            for row in try server.exec(
                "SELECT major, minor, count(*) FROM identity_claims GROUP BY major, minor HAVING count(*) > 1")
            {
                report.duplicates.append(
                    "identity_claims: (\(row[0] ?? ""), \(row[1] ?? "")) claimed \(row[2] ?? "") times")
            }
            for row in try server.exec(
                "SELECT address, count(*) FROM identity_claims GROUP BY address HAVING count(*) > 1")
            {
                report.duplicates.append("identity_claims: \(row[0] ?? "") holds \(row[1] ?? "") claims")
            }
            for row in identityDuplicates {
                let devices = Set((row[2] ?? "").split(separator: " ").map { Array($0.utf8) })
                let line = "identities: (\(row[0] ?? ""), \(row[1] ?? "")) reserved for \(row[2] ?? "")"
                if devices.isSubset(of: localIdentities[key(row)] ?? []) {
                    report.inheritedDuplicates.append(line)
                } else {
                    report.duplicates.append(line)
                }
            }
            for row in deviceDuplicates {
                let addresses = Set((row[2] ?? "").split(separator: " ").map { Array($0.utf8) })
                let line = "fleet_devices: (\(row[0] ?? ""), \(row[1] ?? "")) held by \(row[2] ?? "")"
                if addresses.isSubset(of: localDeviceIdentities[key(row)] ?? []) {
                    report.inheritedDuplicates.append(line)
                } else {
                    report.duplicates.append(line)
                }
            }
        }
        _ = allowOtherBenches ? report.otherBenches.removeAll() : ()
        let elapsed = ContinuousClock.now - started
        report.seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return report
    }

    /// A value as both sides are compared: integers in decimal, text as
    /// sync sends it (NUL left out), NULL as nil. Rows and values are
    /// compared by their bytes (`sameRow`, `sameBytes`), never as `String`s:
    /// text rewritten into a canonically equivalent form is a difference.
    typealias Row = [String?]

    /// The same fields, each NULL on both sides or the same UTF-8 bytes.
    static func sameRow(_ a: Row, _ b: Row) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { $0.sameBytes($1) }
    }

    /// Merges the bench's rows of `table` with the server's, both in key order.
    static func compare(
        _ table: Table, bench: String, inventory: Inventory, server: OfficePostgres, holdBack: Bool,
        tally: inout Tally, report: inout Report, shown: Int, localRow: (Row, [String: Int]) -> Void
    ) async throws {
        // The columns compared: the server's (but bench_id) that the bench has.
        let serverColumns = try server.exec(
            """
            SELECT column_name, data_type FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position
            """, [table.name]
        ).compactMap { row -> (String, Bool)? in
            guard let name = row[0] ?? nil, name != "bench_id" else { return nil }
            return (name, ["bigint", "integer", "smallint"].contains(row[1] ?? ""))
        }
        let localNames = Set(
            try await inventory.query("SELECT name FROM pragma_table_info(?1)", [.text(table.name)]).compactMap {
                $0.first?.text
            })
        // Names go into the statements below (quoted): only plain lower-case
        // identifiers, as every migration writes them, are compared.
        let plain = { (name: String) in
            !name.isEmpty && name.utf8.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 95 }
        }
        let columns = serverColumns.filter { plain($0.0) && localNames.contains($0.0 == "local_id" ? "id" : $0.0) }
        guard !columns.isEmpty else { return }
        let integer = columns.map(\.1)
        let index = Dictionary(uniqueKeysWithValues: columns.enumerated().map { ($1.0, $0) })
        let keyIndex = table.keys.compactMap { index[$0] }
        guard keyIndex.count == table.keys.count else {
            throw OfficePostgresError("\(table.name): key columns \(table.keys) not on both sides")
        }
        let localList = columns.map { $0.0 == "local_id" ? "id" : "\"\($0.0)\"" }.joined(separator: ", ")
        let localOrder = table.keys.map { $0 == "local_id" ? "id" : "\"\($0)\"" }.joined(separator: ", ")
        let serverList = columns.map { "\"\($0.0)\"" }.joined(separator: ", ")
        let serverOrder = table.keys.map { key in
            integer[index[key]!] ? "\"\(key)\"" : "\"\(key)\" COLLATE \"C\""
        }.joined(separator: ", ")
        let filter = holdBack ? "(\(table.heldBack))" : "1"

        // The bench's rows, a page at a time (by id) or whole (small
        // tables), and the server's through a cursor. Each side's next page
        // is read while this one is compared (the SQLite read on the
        // inventory's actor, the server's FETCH on a thread of its own), so
        // the server, the file and the comparison overlap: serially they
        // took about 26 s a judged bench.
        let pageSize = 10_000
        let localSelect =
            table.integerKey
            ? "SELECT \(localList) FROM \(table.name) WHERE id > ?1 AND \(filter) ORDER BY id LIMIT \(pageSize)"
            : "SELECT \(localList) FROM \(table.name) WHERE \(filter) ORDER BY \(localOrder)"
        let paged = table.integerKey
        let firstKey = keyIndex[0]
        func readLocal(after cursor: Int64) -> Task<[Row], Error> {
            Task {
                let raw = try await inventory.query(localSelect, paged ? [.integer(cursor)] : [])
                return raw.map { row in row.enumerated().map { canonical($1, integer: integer[$0]) } }
            }
        }
        var localRows = PagesAhead(first: readLocal(after: 0)) { page in
            paged && page.count == pageSize
                ? readLocal(after: page.last.flatMap { $0[firstKey] }.flatMap { Int64($0) } ?? .max) : nil
        }
        try server.exec(
            "DECLARE office_rows NO SCROLL CURSOR FOR SELECT \(serverList) FROM \(table.name) WHERE bench_id = $1"
                + " ORDER BY \(serverOrder)", [bench])
        let connection = Connection(server)
        func fetch() -> Task<[Row], Error> {
            Task { try await onThreadOfItsOwn { try connection.server.exec("FETCH \(pageSize) FROM office_rows") } }
        }
        var serverRows = PagesAhead(first: fetch()) { page in page.count == pageSize ? fetch() : nil }
        // Whatever ends the merge, the pages in flight are waited for before
        // the cursor is closed (the connection is one at a time).
        func finish() async {
            await localRows.drain()
            await serverRows.drain()
            _ = try? server.exec("CLOSE office_rows")
        }
        func note(_ key: Row, _ what: String) {
            report.differenceCount += 1
            if report.differences.count < shown {
                report.differences.append(
                    Difference(
                        table: table.name, bench: bench,
                        key: keyIndex.map { shownValue(key[$0]) }.joined(separator: "/"),
                        what: what))
            }
        }
        func merge() async throws {
            var local = try await localRows.next()
            var remote = try await serverRows.next()
            while local != nil || remote != nil {
                let order: Int
                if let local, let remote {
                    order = compareKeys(local, remote, keyIndex, integer)
                } else {
                    order = local == nil ? 1 : -1
                }
                if order <= 0, let row = local {
                    tally.local += 1
                    tally.localSum &+= rowHash(row)
                    localRow(row, index)
                }
                if order >= 0, let row = remote {
                    tally.server += 1
                    tally.serverSum &+= rowHash(row)
                }
                if order < 0, let row = local {
                    tally.missing += 1
                    note(row, "missing on the server")
                } else if order > 0, let row = remote {
                    tally.extra += 1
                    note(row, "on the server only (not in this bench)")
                } else if let local, let remote, !sameRow(local, remote) {
                    tally.changed += 1
                    let differing = columns.indices.filter { !local[$0].sameBytes(remote[$0]) }.map { column in
                        var said =
                            "\(columns[column].0) bench \(shownValue(local[column])) server \(shownValue(remote[column]))"
                        if let x = local[column], let y = remote[column], let note = x.otherBytesNote(y) {
                            said += " (\(note))"
                        }
                        return said
                    }
                    note(local, "differs: " + differing.joined(separator: "; "))
                }
                if order <= 0 { local = try await localRows.next() }
                if order >= 0 { remote = try await serverRows.next() }
            }
        }
        do {
            try await merge()
        } catch {
            await finish()
            throw error
        }
        await finish()
    }

    static func canonical(_ value: SQLiteValue, integer: Bool) -> String? {
        switch value {
        case .null: return nil
        case .integer(let v): return String(v)
        case .text(let text):
            if integer, let v = Int64(text) { return String(v) }
            return text.contains("\0") ? text.replacingOccurrences(of: "\0", with: "") : text
        default: return value.textForm
        }
    }

    /// Keys compared as the servers orders them: integers by value, text
    /// by its UTF-8 bytes (`COLLATE "C"`, SQLite's BINARY).
    static func compareKeys(_ a: Row, _ b: Row, _ keys: [Int], _ integer: [Bool]) -> Int {
        for k in keys {
            let (x, y) = (a[k], b[k])
            if x.sameBytes(y) { continue }
            guard let x else { return 1 }  // NULLs last, as both ORDER BYs put them
            guard let y else { return -1 }
            if integer[k], let i = Int64(x), let j = Int64(y) { return i < j ? -1 : 1 }
            return x.utf8.lexicographicallyPrecedes(y.utf8) ? -1 : 1
        }
        return 0
    }

    /// FNV-1a 64 of the row's canonical text (fields separated by 0x1F,
    /// NULL as 0x00): summed mod 2^64 over a table, so the order rows are
    /// read in does not matter.
    static func rowHash(_ row: Row) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for field in row {
            if let field {
                for byte in field.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            } else {
                hash = (hash ^ 0) &* 0x100_0000_01b3
            }
            hash = (hash ^ 0x1F) &* 0x100_0000_01b3
        }
        return hash
    }

    static func shownValue(_ value: String?) -> String {
        guard let value else { return "NULL" }
        let visible = value.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "?" : String($0) }.joined()
        return "'" + (visible.count > 60 ? String(visible.prefix(60)) + "…" : visible) + "'"
    }

    /// The server's head of the bench's ledger against the bench's: the same
    /// size and root, or (the bench wrote entries after the push — the
    /// assignments it pulled) the server's root equal to the bench's at
    /// the server's size.
    static func checkLedger(
        _ inventory: Inventory, bench: String, server: OfficePostgres, report: inout Report
    )
        async throws
    {
        guard try await inventory.hasLedger() else {
            report.ledgerNotes.append("bench \(bench): no ledger")
            return
        }
        let head = try await inventory.ledgerTreeHead()
        guard
            let row = try server.exec(
                "SELECT size, encode(root, 'hex') FROM bench_ledger_heads WHERE bench_id = $1", [bench]
            ).first, let sizeText = row[0] ?? nil, let size = Int(sizeText), let root = row[1] ?? nil
        else {
            report.ledgerProblems.append(
                "bench \(bench): the server holds no ledger of it (the bench has \(head.size) entries)")
            return
        }
        func hex(_ digest: Digest) -> String { digest.bytes.map { String(format: "%02x", $0) }.joined() }
        if size > head.size {
            report.ledgerProblems.append("bench \(bench): the server holds \(size) entries, the bench \(head.size)")
        } else if size == head.size {
            if hex(head.root) != root {
                report.ledgerProblems.append("bench \(bench): ledger roots differ at \(size) entries")
            }
        } else {
            let prefix = try await inventory.ledgerRoot(size: size)
            if hex(prefix) != root {
                report.ledgerProblems.append("bench \(bench): the server's root at \(size) entries is not the bench's")
            } else {
                report.ledgerNotes.append(
                    "bench \(bench): the server holds \(size) of \(head.size) entries (the rest written after the push:"
                        + " sent by the next sync)")
            }
        }
    }

    /// The report as text lines.
    static func lines(_ report: Report) -> [String] {
        var lines: [String] = []
        var byTable: [String: (local: Int, server: Int, localSum: UInt64, serverSum: UInt64)] = [:]
        for tally in report.tallies {
            var entry = byTable[tally.table] ?? (0, 0, 0, 0)
            entry.local += tally.local
            entry.server += tally.server
            entry.localSum &+= tally.localSum
            entry.serverSum &+= tally.serverSum
            byTable[tally.table] = entry
            if tally.local != tally.server || tally.localSum != tally.serverSum {
                lines.append(
                    "count \(tally.table) bench \(tally.bench): bench \(tally.local) server \(tally.server)"
                        + " (missing \(tally.missing), server only \(tally.extra), differing \(tally.changed))")
            }
        }
        for table in tables.map(\.name) {
            guard let entry = byTable[table] else { continue }
            lines.append(
                "table \(table): bench \(entry.local) rows, server \(entry.server); checksum bench "
                    + String(format: "%016llx", entry.localSum) + " server "
                    + String(format: "%016llx", entry.serverSum))
        }
        lines += report.differences.map { "differs: \($0)" }
        if report.differenceCount > report.differences.count {
            lines.append("… and \(report.differenceCount - report.differences.count) more differences")
        }
        lines += report.ledgerProblems.map { "ledger: \($0)" }
        lines += report.ledgerNotes.map { "ledger note: \($0)" }
        lines += report.duplicates.map { "duplicate identity: \($0)" }
        lines += report.inheritedDuplicates.map { "duplicate identity already in the benches' own rows: \($0)" }
        lines += report.otherBenches.map { "the server holds bench \($0), not among those given" }
        lines.append(
            (report.ok ? "union exact" : "union NOT exact")
                + ": \(report.tallies.count / max(tables.count, 1)) benches,"
                + " \(report.rows) rows compared row by row, \(report.differenceCount) differences,"
                + " \(report.duplicates.count) duplicate identities, in " + String(format: "%.1f", report.seconds)
                + " s")
        return lines
    }

    /// The report as one JSON object.
    static func json(_ report: Report) -> [String: Any] {
        [
            "kind": "union_check", "ok": report.ok, "benches": report.tallies.count / max(tables.count, 1),
            "rows": report.rows, "differences": report.differenceCount,
            "shown": report.differences.map {
                ["table": $0.table, "bench": $0.bench, "key": $0.key, "what": $0.what]
            },
            "missing": report.tallies.reduce(0) { $0 + $1.missing },
            "server_only": report.tallies.reduce(0) { $0 + $1.extra },
            "differing": report.tallies.reduce(0) { $0 + $1.changed },
            "ledger_problems": report.ledgerProblems, "duplicates": report.duplicates,
            "inherited_duplicates": report.inheritedDuplicates.count, "other_benches": report.otherBenches,
            "seconds": report.seconds,
        ]
    }
}

/// Rows a page at a time, the next page already being read while this one
/// is used; `following` starts the read after a page (nil: that was the last).
private struct PagesAhead {
    typealias Row = UnionCheck.Row
    var page: [Row] = []
    var at = 0
    var pending: Task<[Row], Error>?
    let following: ([Row]) -> Task<[Row], Error>?

    init(first: Task<[Row], Error>, following: @escaping ([Row]) -> Task<[Row], Error>?) {
        pending = first
        self.following = following
    }

    mutating func next() async throws -> Row? {
        if at == page.count {
            guard let task = pending else { return nil }
            page = try await task.value
            at = 0
            pending = following(page)
            if page.isEmpty { return nil }
        }
        at += 1
        return page[at - 1]
    }

    /// Waits for the page in flight (before the connection is used again).
    func drain() async { _ = try? await pending?.value }
}

/// The office connection handed to the thread that fetches the next page:
/// used by one thread at a time (the merge waits for the fetch before its
/// next statement).
private struct Connection: @unchecked Sendable {
    let server: OfficePostgres
    init(_ server: OfficePostgres) { self.server = server }
}

extension OfficePostgres {
    /// `snapshot` for an async body.
    func snapshotAsync(_ body: () async throws -> Void) async throws {
        try exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        do {
            try await body()
            try exec("COMMIT")
        } catch {
            _ = try? exec("ROLLBACK")
            throw error
        }
    }
}

/// `office check --to URL [--json] [--shown N] [--allow-other-benches] BENCH.sqlite…`
func officeCheck(_ arguments: [String]) async throws -> Never {
    await officeGuarded { try await officeCheckRun(arguments) }
}

func officeCheckRun(_ arguments: [String]) async throws -> Never {
    var url: String?
    var benches: [String] = []
    var json = false
    var shown = 100
    var allowOthers = false
    var rest = arguments[...]
    while let argument = rest.popFirst() {
        switch argument {
        case "--to": url = rest.popFirst()
        case "--json": json = true
        case "--shown": shown = rest.popFirst().flatMap { Int($0) } ?? shown
        case "--allow-other-benches": allowOthers = true
        default:
            if argument.hasPrefix("--") { officeUsage("office check: unknown option \(argument)") }
            benches.append(argument)
        }
    }
    guard let url, !benches.isEmpty else {
        officeUsage("office check --to URL BENCH.sqlite… [--json] [--shown N] [--allow-other-benches]")
    }
    let report = try await UnionCheck.run(url: url, benches: benches, shown: shown, allowOtherBenches: allowOthers)
    for line in UnionCheck.lines(report) { print(line) }
    if json { printJSON(UnionCheck.json(report)) }
    exit(report.ok ? 0 : 1)
}

/// One JSON object on a line of its own.
func printJSON(_ object: [String: Any]) {
    if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
        print(String(decoding: data, as: UTF8.self))
    }
}
