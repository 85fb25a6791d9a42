import Foundation
import Ledger
import SBeaconProtocol
import Testing

@testable import Inventory

/// The ledger in the inventory (docs/ledger.md): every change appended in
/// its own transaction, and `verifyLedger` finding every edit, deletion,
/// reordering and insertion someone with write access to the file can make
/// with `sqlite3`.
@Suite("The inventory's ledger: appended with every change, tampering found", .timeLimit(.minutes(5)))
struct LedgerInventoryTests {
    static let a = "C0:1E:6D:EA:89:86"
    static let b = "C1:EC:D7:13:92:60"

    /// An inventory that has been through what a bench does: runs, steps
    /// (one still running in an open run), devices read, readings, a pull,
    /// identities, a profile set, a forget.
    static func filled(steps: Int = 3) async throws -> (Inventory, String) {
        let path = try InventoryTests.temporaryPath()
        let inventory = try Inventory(path: path)
        let run = try await inventory.beginRun(.init(command: "run provision.batch", operatorName: "ana"))
        for address in [a, b] {
            var device = DeviceRecord(address: address)
            device.battery = 88
            device.firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)
            try await inventory.recordDevice(device)
            try await inventory.recordReading(address: address, at: Date(), battery: 88, rssi: -50, firmware: "1.0.8")
            for index in 0..<steps {
                let step = try await inventory.beginStep(run: run, device: address, step: "step \(index)")
                try await inventory.noteRetry(step, error: "InProgress")
                try await inventory.finishStep(
                    step, .changed, detail: "did \(index)", before: "{\"braking\":250}", after: "{\"braking\":300}",
                    durationMilliseconds: 12, retries: 1)
            }
            device = DeviceRecord(address: address)
            device.config = DrivingBehaviourConfig(
                cornering: 300, braking: 300, acceleration: 300, duration: 500, enable: .init(rawValue: 7))
            device.calibration = CalibrationState(
                calibrated: true, calibratedAt: 5, vector: .init(x: 1, y: -2, z: 1000))
            try await inventory.recordDevice(device)
            _ = try await inventory.reserveIdentity(
                device: address, plan: IdentityPlan(major: 100, minor: .next, source: .profile("car")),
                holds: BeaconIdentity(major: 0, minor: 0), run: run)
        }
        _ = try await inventory.storeTrips(
            [TripRecord(index: 0, start: 100, end: 200), TripRecord(index: 1, start: 300, end: 400)], device: a,
            timeOffset: 1_700_000_000_000, pulledAt: Date())
        try await inventory.assignProfile("van", to: b)
        try await inventory.endRun(run, .finished)
        _ = try await inventory.forget([b])
        let open = try await inventory.beginRun(.init(command: "scan"))
        _ = try await inventory.beginStep(run: open, device: a, step: "info")
        return (inventory, path)
    }

    /// A checkpoint of `head`, signed with a key made for the test.
    static func signed(_ inventory: Inventory, _ head: LedgerTreeHead) async throws -> String {
        let key = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString)").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ssh-keygen")
        process.arguments = ["-q", "-t", "ed25519", "-N", "", "-f", key]
        try process.run()
        process.waitUntilExit()
        let checkpoint = try Checkpoint(
            origin: Checkpoint.origin(bench: try await inventory.benchID()), size: head.size, root: head.root)
        return try SignedCheckpoint.sign(checkpoint, keyPath: key, signer: "test@bench")
    }

    static func sqlite(_ path: String, _ sql: String) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        process.arguments = [path, sql]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// Tampers with the file by `sql` (as someone with write access), then
    /// verifies it afresh: the first finding must mention `expected`.
    static func tampered(
        _ sql: String, dropping triggers: [String] = [], find expected: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let (inventory, path) = try await Self.filled()
        #expect(try await inventory.verifyLedger().ok, sourceLocation: sourceLocation)
        let drops = triggers.map { "DROP TRIGGER \($0);" }.joined()
        let result = try sqlite(path, drops + sql)
        #expect(result.status == 0, "sqlite3: \(result.output)", sourceLocation: sourceLocation)
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        #expect(!verification.ok, "nothing found after: \(sql)", sourceLocation: sourceLocation)
        let messages = verification.findings.map(\.message)
        if sql.contains("ledger ") || sql.contains("ledger_head") {
            // The entry itself is named first, before what follows from it.
            #expect(
                messages.first.map { $0.hasPrefix("entry") || $0.contains("head") } ?? false, "\(messages)",
                sourceLocation: sourceLocation)
        }
        #expect(
            messages.contains { $0.contains(expected) }, "after \(sql): \(messages)", sourceLocation: sourceLocation)
    }

    @Test func everyChangeIsAnEntryAndTheTreeIsWhatTheEntriesMake() async throws {
        let (inventory, path) = try await Self.filled()
        let verification = try await inventory.verifyLedger()
        #expect(verification.ok, "\(verification.findings)")
        #expect(verification.inFlight == 1)
        // The triggers verify looks for are the file's, read from the migrations.
        let triggers = try await inventory.query("SELECT name FROM sqlite_schema WHERE type = 'trigger'")
            .compactMap { $0.first?.text }
        #expect(Set(triggers) == Set(LedgerVerifier.triggerText.keys) && triggers.count == 19, "\(triggers)")
        #expect(verification.entries["outcomes"] == 6)
        #expect(verification.entries["readings"] == 2)
        #expect(verification.entries["trips"] == 2)
        #expect(verification.entries["identities"] == 3)  // two reserved, one released by the forget
        #expect(verification.entries[""] == 1)
        let head = try await inventory.ledgerTreeHead()
        #expect(head.size == verification.size)
        #expect(head.root.hex == verification.root)
        // The tree is RFC 9162's over the entries in order.
        let entries = try await inventory.ledgerEntries(0..<head.size)
        #expect(try MerkleTree.root(entries.map { try MerkleTree.leafHash($0) }) == head.root)
        // Entry 0 is the note where the ledger began; every entry says its place.
        let first = String(decoding: entries[0], as: UTF8.self)
        #expect(first.hasPrefix("{\"v\":1,\"seq\":0,"))
        #expect(first.contains("\"op\":\"note\"") && first.contains("it held nothing before"))
        for (index, entry) in entries.enumerated() {
            #expect(String(decoding: entry, as: UTF8.self).hasPrefix("{\"v\":1,\"seq\":\(index),"))
        }
        // The forget, the profile and the run's end are entries of their own.
        let texts = entries.map { String(decoding: $0, as: UTF8.self) }
        #expect(texts.contains { $0.contains("\"event\":\"forget\"") && $0.contains(Self.b) })
        #expect(texts.contains { $0.contains("\"op\":\"update\"") && $0.contains("\"profile\":\"van\"") })
        #expect(texts.contains { $0.contains("\"table\":\"runs\",\"op\":\"update\"") && $0.contains("finished") })
        // A sealed row's entry is not stored twice.
        let stored = try await inventory.query("SELECT count(*) FROM ledger").first?.first?.integer
        #expect(Int(stored ?? 0) == head.size - 10)
        _ = path
    }

    @Test func proofsOfADevicesEntriesCheckAgainstTheRoot() async throws {
        let (inventory, _) = try await Self.filled(steps: 40)
        let head = try await inventory.ledgerTreeHead()
        #expect(head.size > 64)
        let proven = try await inventory.ledgerEntries(about: Self.a, size: head.size)
        #expect(proven.count > 40)
        for (index, entry, proof) in proven {
            let text = String(decoding: entry, as: UTF8.self)
            #expect(text.contains(Self.a))
            #expect(
                try MerkleTree.verifyInclusion(
                    leafHash: MerkleTree.leafHash(entry), index: index, size: head.size, proof: proof, root: head.root))
        }
        // An older tree is a prefix of the newer: a consistency proof shows it.
        let old = head.size - 37
        let oldRoot = try await inventory.ledgerRoot(size: old)
        let proof = try await inventory.ledgerConsistencyProof(from: old, to: head.size)
        #expect(
            try MerkleTree.verifyConsistency(
                oldSize: old, newSize: head.size, oldRoot: oldRoot, newRoot: head.root, proof: proof))
    }

    @Test func aChangeThatWouldCommitWithoutItsEntryIsRefused() async throws {
        let (inventory, _) = try await Self.filled()
        // `execute` bypasses the recorder's transaction: the commit hook refuses it.
        await #expect(throws: SQLiteError.self) {
            try await inventory.onDatabase {
                try $0.execute(
                    "INSERT INTO runs(started_at, command, status) VALUES ('2026-01-01T00:00:00.000Z', 'x', 'finished')"
                )
            }
        }
        #expect(try await inventory.verifyLedger().ok)
        // A transaction rolled back leaves no entry behind.
        let before = try await inventory.ledgerTreeHead().size
        try await inventory.onDatabase {
            try $0.execute("BEGIN IMMEDIATE")
            try $0.run(
                "INSERT INTO runs(started_at, command, status) VALUES ('2026-01-01T00:00:00.000Z', 'x', 'finished')")
            try $0.execute("ROLLBACK")
        }
        _ = try await inventory.beginRun(.init(command: "after"))
        #expect(try await inventory.ledgerTreeHead().size == before + 1)
        #expect(try await inventory.verifyLedger().ok)
    }

    @Test func triggersKeepTheLedgerAndSealedRowsAsTheyAre() async throws {
        let (_, path) = try await Self.filled()
        for sql in [
            "UPDATE ledger SET entry = x'00' WHERE seq = 1", "DELETE FROM ledger WHERE seq = 1",
            "INSERT INTO ledger(seq, leaf, entry) VALUES (0, 0, x'01')",
            "UPDATE outcomes SET status = 'ok' WHERE ledger_seq IS NOT NULL",
            "DELETE FROM outcomes WHERE ledger_seq IS NOT NULL", "UPDATE readings SET battery = 1",
            "DELETE FROM trips", "UPDATE ledger_head SET size = 0", "DELETE FROM ledger_head",
            "DELETE FROM ledger_nodes",
        ] {
            let result = try Self.sqlite(path, sql)
            // (ledger_nodes may be empty: nothing to refuse then.)
            if sql != "DELETE FROM ledger_nodes" {
                #expect(result.status != 0 && result.output.contains("ledger"), "\(sql): \(result.output)")
            }
        }
        #expect(try await Inventory(path: path, readOnly: true).verifyLedger().ok)
    }

    /// The compact form gives every entry's JSON back byte for byte,
    /// whatever its values look like (times and addresses that are not the
    /// inventory's own spelling stay text).
    @Test func theCompactFormGivesTheJSONBack() throws {
        let texts: [SQLiteValue] = [
            .text("2026-12-03T11:44:24.598Z"), .text("2026-02-30T00:00:00.000Z"), .text("2026-12-03T11:44:24.598"),
            .text("1969-12-31T23:59:59.999Z"), .text("C0:1E:6D:EA:89:86"), .text("c0:1e:6d:ea:89:86"),
            .text("C0:1E:6D:EA:89:8G"), .text("C0-1E-6D-EA-89-86"), .text(""), .text("é 🚗 \u{0}\n\"\\"),
            .integer(0), .integer(-1), .integer(.max), .integer(.min), .null, .real(1.5), .blob([0, 255]),
        ]
        var entries: [LedgerStorage.Stored] = []
        let at: SQLiteValue = .text("2026-12-03T11:44:24.598Z")
        for (index, value) in texts.enumerated() {
            let table = LedgerTable.all[index % LedgerTable.all.count]
            let row = table.columns.enumerated().map { ($0.element, $0.offset % 3 == index % 3 ? value : .null) }
            let key = table.keyIndices.map { row[$0].1 }
            entries.append(.init(table: table, op: .insert, event: "device", at: at, key: key, row: row))
            entries.append(.init(table: table, op: .delete, event: "forget", at: value, key: key, row: row))
            entries.append(
                .init(table: table, op: .update, event: "sync", at: at, key: key, row: [(table.columns.last!, value)]))
        }
        // A sealed row's entry, written straight, is the generic encoding's.
        for (index, value) in texts.enumerated() {
            for table in LedgerTable.sealedTables {
                let values = table.columns.indices.map { $0 % 2 == index % 2 ? value : .integer(Int64($0)) }
                let generic = LedgerEntry.encode(
                    seq: index, at: table.timeIndex.map { values[$0] } ?? .null,
                    event: table.event(op: .insert, changed: []), table: table.name, op: .insert,
                    key: table.keyIndices.map { values[$0] }, row: Array(zip(table.columns, values)))
                #expect(LedgerEntry.sealed(table, seq: index, values: values) == generic, "\(table.name) \(value)")
            }
        }
        entries.append(LedgerEntry.note(seq: 0, at: "2026-12-03T11:44:24.598Z", bench: "b", text: "t\u{1b}"))
        for (seq, entry) in entries.enumerated() {
            let stored = LedgerStorage.encode(entry)
            #expect(try LedgerStorage.json(seq: seq, stored) == LedgerEntry.encode(seq: seq, entry), "\(entry)")
        }
    }

    // MARK: Tampering, every way sqlite3 allows

    @Test func anEditedDeviceIsFound() async throws {
        try await Self.tampered(
            "UPDATE devices SET config_braking = 999 WHERE address = '\(Self.a)'", find: "config_braking is 999")
    }

    @Test func aDeletedIdentityIsFound() async throws {
        try await Self.tampered("DELETE FROM identities WHERE device = '\(Self.a)'", find: "but not in the table")
    }

    @Test func anInsertedRunIsFound() async throws {
        try await Self.tampered(
            "INSERT INTO runs(started_at, command, status) VALUES ('2026-01-01T00:00:00.000Z', 'backdated', 'finished')",
            find: "is in the table but not in the ledger")
    }

    @Test func anInsertedAssignmentIsFound() async throws {
        try await Self.tampered(
            """
            INSERT INTO assignments(address, profile, minor_policy, assigned_at, assigned_by, source)
            VALUES ('\(Self.a)', 'truck', 'auto', '2026-01-01T00:00:00.000Z', 'x', 'local')
            """, find: "is in the table but not in the ledger")
    }

    @Test func anEditedOutcomeIsFound() async throws {
        try await Self.tampered(
            "UPDATE outcomes SET status = 'ok', error = NULL WHERE id = 2", dropping: ["outcomes_sealed_update"],
            find: "(outcomes 2) is not what was recorded")
    }

    @Test func aDeletedOutcomeIsFound() async throws {
        try await Self.tampered(
            "DELETE FROM outcomes WHERE id = 2", dropping: ["outcomes_sealed_delete"], find: "is missing")
    }

    @Test func anInsertedOutcomeIsFound() async throws {
        try await Self.tampered(
            "INSERT INTO outcomes(run_id, device, step, status, started_at, ended_at) VALUES (1, '\(Self.a)', 'calibrate', 'ok', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
            find: "is not in the ledger")
    }

    @Test func anOutcomeGivenAPlaceInTheLedgerIsFound() async throws {
        try await Self.tampered(
            "INSERT INTO outcomes(run_id, device, step, status, started_at, ended_at, ledger_seq, ledger_leaf) VALUES (1, '\(Self.a)', 'calibrate', 'ok', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 3, 0)",
            find: "is held twice")
    }

    @Test func anEditedReadingIsFound() async throws {
        try await Self.tampered(
            "UPDATE readings SET battery = 12 WHERE id = 1", dropping: ["readings_sealed_update"],
            find: "(readings 1) is not what was recorded")
    }

    @Test func anInsertedTripIsFound() async throws {
        try await Self.tampered(
            "INSERT INTO trips(device, start_ms, end_ms, beacon_index, pulled_at) VALUES ('\(Self.a)', 1, 2, 9, '2026-01-01T00:00:00.000Z')",
            find: "is not in the ledger")
    }

    @Test func anEditedEntryIsFound() async throws {
        try await Self.tampered(
            "UPDATE ledger SET entry = replace(entry, x'636172', x'76616e') WHERE seq = (SELECT max(seq) FROM ledger WHERE instr(entry, x'636172') > 0)",
            dropping: ["ledger_no_update"], find: "was changed outside beaconbench")
    }

    @Test func anEntryEditedWithItsCheckIsFoundByTheTree() async throws {
        // Rewriting the entry and its leaf check: the stored head (and nodes) still disagree.
        try await Self.tampered(
            "UPDATE ledger SET entry = x'01030004', leaf = 0 WHERE seq = 1; UPDATE ledger SET leaf = 1 WHERE seq = 2",
            dropping: ["ledger_no_update"], find: "entry 1")
    }

    @Test func twoEntriesSwappedAreFound() async throws {
        try await Self.tampered(
            "UPDATE ledger SET seq = 1000000 WHERE seq = 1; UPDATE ledger SET seq = 1 WHERE seq = 2; UPDATE ledger SET seq = 2 WHERE seq = 1000000",
            dropping: ["ledger_no_update"], find: "is not what was recorded")
    }

    @Test func aDeletedEntryIsFound() async throws {
        try await Self.tampered(
            "DELETE FROM ledger WHERE seq = (SELECT min(seq) FROM ledger WHERE seq > 2)",
            dropping: ["ledger_no_delete"],
            find: "is missing")
    }

    @Test func anEntryAppendedOutsideTheToolIsFound() async throws {
        try await Self.tampered(
            "INSERT INTO ledger(seq, leaf, entry) SELECT size, 0, x'0100030001020000' FROM ledger_head",
            find: "head says")
    }

    @Test func aRewoundHeadIsFound() async throws {
        try await Self.tampered(
            "UPDATE ledger_head SET size = 3, frontier = substr(frontier, 1, 64)", dropping: ["ledger_head_grows"],
            find: "head")
    }

    @Test func aWeakenedTriggerIsFound() async throws {
        try await Self.tampered(
            "DROP TRIGGER outcomes_sealed_update; CREATE TRIGGER outcomes_sealed_update BEFORE UPDATE ON outcomes WHEN 0 BEGIN SELECT 1; END;",
            find: "trigger outcomes_sealed_update is not the one beaconbench made")
    }

    @Test func aChangedBenchIDIsFound() async throws {
        try await Self.tampered(
            "UPDATE meta SET value = 'another-bench' WHERE key = 'bench_id'",
            find: "is not the one the ledger began with")
    }

    @Test func aVacuumedInventoryStillVerifies() async throws {
        let (_, path) = try await Self.filled()
        let result = try Self.sqlite(path, "VACUUM")
        #expect(result.status == 0, "\(result.output)")
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        #expect(verification.ok, "\(verification.findings)")
    }

    @Test func aCheckpointEditedIsFound() async throws {
        let (inventory, path) = try await Self.filled()
        let head = try await inventory.ledgerTreeHead()
        try await inventory.recordCheckpoint(size: head.size, root: head.root, note: try Self.signed(inventory, head))
        let result = try Self.sqlite(
            path,
            "DROP TRIGGER ledger_checkpoints_no_update; UPDATE ledger_checkpoints SET root = zeroblob(32), size = size")
        #expect(result.status == 0, "\(result.output)")
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        let messages = verification.findings.map(\.message)
        #expect(messages.contains { $0.contains("does not match its own signed note") }, "\(messages)")
        #expect(
            messages.contains { $0.contains("the checkpoint at size \(head.size) does not match the ledger") },
            "\(messages)")
    }

    @Test func aDroppedTriggerIsFound() async throws {
        try await Self.tampered("DROP TRIGGER ledger_no_delete", find: "trigger ledger_no_delete is gone")
    }

    @Test func aCheckpointBeyondTheLedgerIsFound() async throws {
        let (inventory, path) = try await Self.filled()
        let head = try await inventory.ledgerTreeHead()
        try await inventory.recordCheckpoint(size: head.size, root: head.root, note: try Self.signed(inventory, head))
        #expect(try await inventory.verifyLedger().ok)
        // The last kept entry it signs deleted: the checkpoint says it was there.
        let last =
            try await inventory.query("SELECT max(seq) FROM ledger WHERE seq < ?", [.integer(Int64(head.size))]).first?
            .first?.integer ?? 0
        let result = try Self.sqlite(
            path,
            "DROP TRIGGER ledger_no_delete; DROP TRIGGER outcomes_sealed_update; DELETE FROM ledger WHERE seq = \(last);"
        )
        #expect(result.status == 0, "\(result.output)")
        let verification = try await Inventory(path: path, readOnly: true).verifyLedger()
        #expect(!verification.ok)
        #expect(verification.findings.contains { $0.message.contains("checkpoint") }, "\(verification.findings)")
    }

    // MARK: Migration

    /// An inventory made before the ledger gets one whose first entries
    /// record the state it had, after a note saying history before is unproven.
    @Test func anExistingInventoryGetsALedgerOfTheStateItHad() async throws {
        let path = try InventoryTests.temporaryPath()
        do {
            let database = try Database(path: path)
            for (index, migration) in Schema.migrations.prefix(6).enumerated() {
                try database.execute(migration.sql)
                try database.execute("PRAGMA user_version = \(index + 1)")
            }
            try database.run(
                "INSERT INTO runs(id, started_at, command, status) VALUES (1, '2026-01-01T00:00:00.000Z', 'old', 'finished')"
            )
            try database.run(
                "INSERT INTO devices (address, mac_ending, first_seen, last_seen, config_braking) VALUES (?, '6dea8986', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 250)",
                [.text(Self.a)])
            try database.run(
                "INSERT INTO outcomes(run_id, device, step, status, started_at, ended_at) VALUES (1, ?, 'apply car', 'changed', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z')",
                [.text(Self.a)])
        }
        let inventory = try Inventory(path: path)
        let verification = try await inventory.verifyLedger()
        #expect(verification.ok, "\(verification.findings)")
        #expect(verification.size == 4)
        let first = String(decoding: try await inventory.ledgerEntries(0..<1)[0], as: UTF8.self)
        #expect(first.contains("already held 1 runs, 1 devices, 1 outcomes"))
        #expect(first.contains("its history before is unproven"))
        let entries = try await inventory.ledgerEntries(1..<4).map { String(decoding: $0, as: UTF8.self) }
        #expect(entries[1].contains("\"event\":\"genesis\"") && entries[1].contains("\"config_braking\":250"))
        #expect(entries[2].contains("\"table\":\"outcomes\""))
        // Opened again: no second genesis.
        #expect(try await Inventory(path: path).ledgerTreeHead().size == 4)
    }
}

extension Inventory {
    /// The connection, for a test that writes past the inventory's methods.
    func onDatabase(_ body: (Database) throws -> Void) throws { try body(database) }
}
