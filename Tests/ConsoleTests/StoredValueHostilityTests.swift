import BeaconSimulator
import Foundation
import Inventory
import LocalBus
import Profiles
import SBeaconProtocol
import TestSupport
import Testing

/// Values read back from storage are input (docs/inventory.md, "Values
/// read back"): a real inventory, every column of every table set to
/// values SQLite accepts and the tool never writes, then every read
/// command of the built binary. None may die of a signal, print a raw
/// control character or exit other than 0, 2 or 3 (with a message).
@Suite("stored values are input", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct StoredValueHostilityTests {
    static let addresses = ["C0:FE:00:00:00:01", "C0:FE:00:00:00:02", "C0:FE:00:00:00:03"]

    /// What SQLite accepts in any column (CHECK constraints bypassed).
    static let catalogue: [(name: String, value: SQLiteValue)] = [
        ("max", .integer(Int64.max)), ("min", .integer(Int64.min)), ("-1", .integer(-1)), ("65536", .integer(65536)),
        ("1e308", .real(1e308)), ("-0.0", .real(-0.0)), ("infinity", .real(-.infinity)), ("NaN", .text("NaN")),
        ("inf", .text("inf")),
        ("empty", .text("")), ("blob", .blob([0x00, 0xFF])), ("control", .text("\u{1B}[31mred\u{07}\r\u{9B}2J\0x")),
        ("not-a-date", .text("not-a-date")), ("2026-02-30", .text("2026-02-30T00:00:00.000Z")),
        ("10kB", .text(String(repeating: "9", count: 10_240))),
    ]

    static let tables = [
        "devices", "runs", "outcomes", "readings", "trips", "events", "incidents", "identities", "claims",
        "assignments", "meta",
    ]

    /// A small real inventory: three devices with everything known, a run
    /// with outcomes (one failed), readings days apart, trips, events,
    /// incidents, identities, claims and two assignments.
    static func makeInventory(at path: String) async throws {
        let inventory = try Inventory(path: path)
        let now = Date()
        let run = try await inventory.beginRun(.init(command: "stored value test"))
        for (n, address) in addresses.enumerated() {
            var record = DeviceRecord(address: address, seenAt: now)
            record.identity = BeaconIdentity(major: 100, minor: UInt16(n + 1))
            record.model = "SB-1"
            record.serial = "S\(n)"
            record.hardwareRevision = "A"
            record.firmware = try FirmwareVersion("1.2.3")
            record.battery = 80
            record.calibration = CalibrationState(
                calibrated: true, calibratedAt: 0, vector: Vector(x: 0, y: 10, z: 1000))
            record.calibratedAt = now.addingTimeInterval(-86_400)
            record.timeOffset = 1_700_000_000_000
            record.profile = "car"
            record.config = DrivingBehaviourConfig(
                cornering: 350, braking: 350, acceleration: 450, duration: 300, enable: .all)
            try await inventory.recordDevice(record)
            for day in 0..<3 {
                try await inventory.recordReading(
                    address: address, at: now.addingTimeInterval(Double(-day) * 2 * 86_400),
                    battery: UInt8(60 + day * 10), rssi: -60, firmware: "1.2.3")
            }
            let step = try await inventory.beginStep(run: run, device: address, step: "apply car")
            try await inventory.finishStep(
                step, n == 0 ? .failed : .changed, detail: "thresholds", error: n == 0 ? "the link dropped" : nil,
                durationMilliseconds: 1_200)
            _ = try await inventory.storeTrips(
                [TripRecord(index: 1, start: 100, end: 200)], device: address, timeOffset: 1_700_000_000_000,
                pulledAt: now)
            _ = try await inventory.storeEvents(
                [
                    DrivingEvent(
                        index: 1, type: .braking, timestamp: 150, duration: 300, averageMagnitude: 400,
                        maximumMagnitude: 500, average: Vector(x: 1, y: 2, z: 3))
                ], device: address, timeOffset: 1_700_000_000_000, pulledAt: now)
            _ = try await inventory.storeIncidents(
                [
                    Incident(
                        id: 7, timestamp: 160, maximumResultant: 3000, averageResultant: 1500,
                        average: Vector(x: 10, y: 20, z: 30), samples: [Vector(x: 1, y: 2, z: 3)])
                ], device: address, timeOffset: 1_700_000_000_000, pulledAt: now)
            _ = try await inventory.reserveIdentity(
                device: address, plan: IdentityPlan(major: 100, minor: .next, source: .profile("car")),
                holds: BeaconIdentity(major: 100, minor: UInt16(n + 1)), run: run)
            _ = try await inventory.claimDevice(address, run: run)
        }
        try await inventory.assign([
            Assignment(address: addresses[0], profile: "car", assignedAt: Inventory.now(), assignedBy: "test"),
            Assignment(
                address: addresses[1], profile: "van", major: 200, minorPolicy: .fixed, minor: 7,
                overrides: ConfigOverrides(cornering: 300), assignedAt: Inventory.now(), assignedBy: "test"),
        ])
        try await inventory.endRun(run, .finished)
        _ = try await inventory.query("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// A copy of `base` with `mutations` (table, column or nil for every
    /// column, value) applied to each table's first row; constraints
    /// bypassed, a change SQLite refuses (an INTEGER PRIMARY KEY given text)
    /// left out.
    static func mutatedCopy(
        of base: String, to path: String, _ mutations: [(table: String, column: String?, value: SQLiteValue)]
    ) throws {
        try FileManager.default.copyItem(atPath: base, toPath: path)
        do {
            let database = try Database(path: path)
            try database.execute("PRAGMA foreign_keys = OFF")
            try database.execute("PRAGMA ignore_check_constraints = 1")
            // As someone editing the file would: the ledger's triggers keep
            // sealed rows as they are (`ledger verify` then names every change).
            for table in ["outcomes", "readings", "trips", "events", "incidents"] {
                try database.execute(
                    "DROP TRIGGER IF EXISTS \(table)_sealed_update; DROP TRIGGER IF EXISTS \(table)_sealed_delete;")
            }
            for mutation in mutations {
                let all = try database.rows("SELECT name FROM pragma_table_info(?)", [.text(mutation.table)])
                    .compactMap { $0.first?.text }
                let columns = mutation.column.map { [$0] } ?? all
                for column in columns {
                    // Names come from the schema, never from outside.
                    _ = try? database.run(
                        "UPDATE \(mutation.table) SET \(column) = ? WHERE rowid = (SELECT min(rowid) FROM \(mutation.table))",
                        [mutation.value])
                }
            }
            _ = try database.rows("PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    /// The read commands, one per line (a batch on standard input).
    static func readCommands(report: String) -> String {
        [
            "inventory list", "inventory show \(addresses[2])", "inventory export --csv", "inventory export", "log",
            "records", "audit", "drift", "report --out \(report)",
        ].joined(separator: "\n") + "\n"
    }

    /// Why an outcome breaks the rules, or nil. `allowed`: the exit
    /// statuses expected (a read of a usable inventory: 0 or 2).
    static func problems(_ output: ToolOutput, _ what: String, allowed: Set<Int32> = [0, 2, 3]) -> [String] {
        var found: [String] = []
        if output.status >= 128 || output.status < 0 { found.append("\(what): died of a signal (\(output.status))") }
        if !allowed.contains(output.status) {
            found.append("\(what): exit \(output.status): \(output.stderr.prefix(300))")
        }
        // (An audit's exit 2 is its findings, on standard output.)
        if output.status != 0, output.stderr.isEmpty, !(output.status == 2 && what.hasSuffix("audit")) {
            found.append("\(what): exit \(output.status) with no message")
        }
        for (name, text) in [("stdout", output.stdout), ("stderr", output.stderr)] {
            if let bad = text.unicodeScalars.first(where: {
                ($0.value < 0x20 && $0 != "\n" && $0 != "\r" && $0 != "\t") || (0x7F...0x9F).contains($0.value)
            }) {
                found.append("\(what): a raw control character U+\(String(bad.value, radix: 16)) on \(name)")
            }
        }
        return found
    }

    /// Every (table, value): the table's first row with every column set to
    /// it (two tables per copy); and a deterministic sample of single
    /// columns. Each copy is read
    /// by every read command (alternately with --json).
    @Test func everyTableEveryValueEveryReadCommand() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        let base = fixture.directory + "/base.sqlite"
        try await Self.makeInventory(at: base)
        var cases: [(String, [(table: String, column: String?, value: SQLiteValue)])] = []
        // Tables two at a time (pairs whose failures do not hide each
        // other's rows): 6 × 15 copies rather than 11 × 15.
        let groups = [
            ["devices", "meta"], ["runs", "trips"], ["outcomes", "events"], ["readings", "incidents"],
            ["identities", "claims"], ["assignments"],
        ]
        #expect(Set(groups.joined()) == Set(Self.tables))
        for group in groups {
            for entry in Self.catalogue {
                cases.append(
                    ("\(group.joined(separator: "+"))=\(entry.name)", group.map { ($0, nil, entry.value) }))
            }
        }
        // Single columns, chosen by a fixed seed: one failing column among
        // good ones (the rest of the row is still used).
        var generator = SplitMix64(seed: 25)
        let columns: [(String, String)] = try {
            let database = try Database(path: base, readOnly: true)
            return try Self.tables.flatMap { table in
                try database.rows("SELECT name FROM pragma_table_info(?)", [.text(table)]).compactMap {
                    $0.first?.text.map { (table, $0) }
                }
            }
        }()
        for _ in 0..<24 {
            let (table, column) = columns[Int(generator.next() % UInt64(columns.count))]
            let entry = Self.catalogue[Int(generator.next() % UInt64(Self.catalogue.count))]
            cases.append(("\(table).\(column)=\(entry.name)", [(table, column, entry.value)]))
        }
        var problems: [String] = []
        var withFindings = 0
        for (index, (name, mutations)) in cases.enumerated() {
            let path = fixture.directory + "/case-\(index).sqlite"
            try Self.mutatedCopy(of: base, to: path, mutations)
            let json = index % 2 == 1
            let output = try await runTool(
                builtProduct("beaconbench"),
                (json ? ["--json"] : []) + ["--bus", fixture.busAddress, "--inventory", path],
                environment: fixture.environment,
                stdin: Self.readCommands(report: fixture.directory + "/report-\(index).html"), timeout: 300)
            problems += Self.problems(output, name, allowed: [0, 2])
            if output.stderr.contains("stored value: ") { withFindings += 1 }
            for suffix in ["", "-wal", "-shm", "-reserve"] {
                try? FileManager.default.removeItem(atPath: path + suffix)
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(20).joined(separator: "\n"))")
        // Most mutations are values no column may hold: they are reported.
        #expect(withFindings > cases.count / 2, "\(withFindings) of \(cases.count) cases reported a stored value")
    }

    /// The issue's crashes: a large calibration component, readings with a
    /// huge battery. `report` (and the others) finish, exit 2 and name the
    /// table, row and field; the page is written.
    @Test func theReportedCrashesAreFindings() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        let base = fixture.directory + "/base.sqlite"
        try await Self.makeInventory(at: base)
        try Self.mutatedCopy(
            of: base, to: fixture.inventoryPath,
            [("devices", "calibration_x", .integer(Int64.max)), ("readings", "battery", .integer(Int64.max))])
        do {
            let database = try Database(path: fixture.inventoryPath)
            _ = try database.run("UPDATE readings SET battery = ?", [.integer(Int64.max / 2)])
        }
        let page = fixture.directory + "/fleet.html"
        let report = try await fixture.beaconbench(["report", "--out", page])
        #expect(report.status == 2, "\(report.stderr)")
        #expect(
            report.stderr.contains("stored value: devices row \(Self.addresses[0]), calibration_x: 9223372036854775807")
        )
        #expect(report.stderr.contains("stored value: readings row 1, battery: 4611686018427387903 is outside 0–100"))
        #expect(FileManager.default.fileExists(atPath: page))
        let list = try await fixture.beaconbench(["--json", "inventory", "list"])
        #expect(list.status == 2, "\(list.stderr)")
        let lines = ConsoleFixture.jsonLines(list.stdout, kind: "stored_value")
        #expect(lines.first?["table"] as? String == "devices")
        #expect(lines.first?["row"] as? String == Self.addresses[0])
        #expect(lines.first?["field"] as? String == "calibration_x")
        #expect(ConsoleFixture.jsonLines(list.stdout, kind: "device").count == 3, "the rest is still listed")
        let audit = try await fixture.beaconbench(["audit"])
        #expect(audit.status == 2)
        #expect(audit.stdout.contains("calibration_x") || audit.stderr.contains("calibration_x"), "\(audit.stdout)")
    }

    /// A drift that cannot be read fails the audit, naming it (exit 3):
    /// the audit never reads it as "no drift" and reports the devices
    /// clean (it did: the error was dropped).
    @Test func anAuditWhoseDriftCannotBeReadFails() async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        try await Self.makeInventory(at: fixture.inventoryPath)
        do {
            let database = try Database(path: fixture.inventoryPath)
            _ = try database.run("ALTER TABLE assignments RENAME TO assignments_elsewhere", [])
        }
        let audit = try await fixture.beaconbench(["audit"])
        #expect(audit.status == 3, "\(audit.stdout)\(audit.stderr)")
        #expect(audit.stderr.contains("audit: the desired state's drift:"), "\(audit.stderr)")
    }

    /// A hostile local inventory pushed to a real PostgreSQL, then hostile
    /// values in the server's own tables read by the office.
    @Test func syncAndTheServerSide() async throws {
        try await withPostgres(port: 54_351) { server in try await Self.syncAndTheServerSide(server) }
    }

    static func syncAndTheServerSide(_ server: LocalPostgres) async throws {
        let fixture = try await ConsoleFixture.start(nil)
        defer { fixture.stop() }
        let base = fixture.directory + "/base.sqlite"
        try await Self.makeInventory(at: base)
        // A clean bench first: the server then holds rows to spoil.
        let clean = try await runTool(
            builtProduct("beaconbench"), ["--inventory", base, "sync", "--to", server.url],
            environment: fixture.environment, timeout: 300)
        #expect(clean.status == 0, "\(clean.stderr)")
        var problems: [String] = []
        for (index, entry) in Self.catalogue.enumerated() where index % 3 == 0 || entry.name == "control" {
            let path = fixture.directory + "/hostile-\(index).sqlite"
            try Self.mutatedCopy(
                of: base, to: path,
                ["devices", "outcomes", "readings", "trips", "events", "incidents", "assignments"].map {
                    ($0, nil, entry.value)
                })
            do {
                // Its own bench id: the rows are another bench's.
                let database = try Database(path: path)
                _ = try database.run("UPDATE meta SET value = ? WHERE key = 'bench_id'", [.text(UUID().uuidString)])
            }
            let sync = try await runTool(
                builtProduct("beaconbench"), ["--inventory", path, "sync", "--to", server.url],
                environment: fixture.environment, timeout: 300)
            problems += Self.problems(sync, "sync of \(entry.name)")
            // Edited outside the tool, its ledger no longer holds: nothing of it is pushed.
            #expect(
                sync.status == 2 || sync.status == 3, "sync of \(entry.name): \(sync.status) \(sync.stderr.suffix(300))"
            )
            #expect(sync.stderr.contains("ledger"), "sync of \(entry.name): \(sync.stderr.suffix(400))")
        }
        // The server's tables, each column of its first row spoiled.
        let columns = try await server.rows(
            """
            SELECT table_name, column_name, data_type FROM information_schema.columns
            WHERE table_schema = 'public' AND table_name IN
                ('devices', 'outcomes', 'readings', 'trips', 'events', 'incidents', 'identity_claims', 'assignments')
            ORDER BY table_name, ordinal_position
            """)
        let integers = ["9223372036854775807", "-9223372036854775808", "-1", "65536"]
        let texts = [
            "''", "'NaN'", "E'\\x1b[31mred\\x07'", "'not-a-date'", "'2026-02-30T00:00:00.000Z'", "repeat('9', 10240)",
        ]
        for round in 0..<max(integers.count, texts.count) {
            for column in columns where column.count == 3 {
                let value =
                    column[2] == "bigint" || column[2] == "integer" || column[2] == "smallint"
                    ? integers[round % integers.count] : column[2] == "text" ? texts[round % texts.count] : nil
                guard let value else { continue }
                _ = try? await server.psql(
                    "UPDATE \(column[0]) SET \(column[1]) = \(value) WHERE ctid = (SELECT min(ctid) FROM \(column[0]))")
            }
            let page = fixture.directory + "/server-\(round).html"
            for arguments in [
                ["inventory", "list"], ["--json", "inventory", "list"], ["inventory", "show", Self.addresses[2]],
                ["log"], ["records"], ["audit"], ["drift"], ["report", "--out", page],
            ] {
                let output = try await runTool(
                    builtProduct("beaconbench"), ["--inventory", server.url] + arguments,
                    environment: fixture.environment, timeout: 300)
                // A device whose address was spoiled is no longer found by it: exit 1, said.
                let shown = arguments.first == "inventory" && arguments.dropFirst().first == "show"
                problems += Self.problems(
                    output, "server round \(round): \(arguments.joined(separator: " "))",
                    allowed: shown && output.stderr.contains("has no device") ? [0, 1, 2] : [0, 2])
                if arguments == ["inventory", "list"], round == 0 {
                    #expect(output.stderr.contains("stored value: devices row "), "\(output.stderr)")
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(20).joined(separator: "\n"))")
    }
}
