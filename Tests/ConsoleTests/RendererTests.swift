import Foundation
import Inventory
import InventorySync
import Ledger
import Profiles
import SBeaconProtocol
import Synchronization
import Testing

@testable import Console
@testable import Workbench

/// The renderer: each result type written both ways through a terminal
/// whose lines are caught (the REPL's hook, so nothing reaches the test's
/// own output), with the stream each line went to.
@Suite("the renderer: every result both ways", .timeLimit(.minutes(2)))
struct RendererTests {
    struct Line: Equatable, Sendable, CustomStringConvertible {
        var stream: Int32
        var text: String
        var description: String { "\(stream == 1 ? "out" : "err"): \(text)" }
    }

    /// The lines a terminal wrote, caught before they reach a descriptor.
    final class Caught: Sendable {
        private let caught = Mutex<[Line]>([])
        var lines: [Line] { caught.withLock { $0 } }

        /// A terminal without colour whose lines are caught here.
        func terminal(verbose: Bool = false) -> Terminal {
            let terminal = Terminal(
                color: false, json: false, verbose: verbose, environment: ["TERM": "xterm"], outputIsTerminal: false,
                errorIsTerminal: false)
            terminal.setPromptHook { [self] text, stream in
                if stream >= 0 { caught.withLock { $0.append(Line(stream: stream, text: text)) } }
                return true
            }
            return terminal
        }
    }

    /// What a document becomes, JSON or not, on a terminal without colour.
    static func rendered(_ document: some ResultDocument, json: Bool) -> [Line] {
        let caught = Caught()
        Renderer(terminal: caught.terminal(), json: json).render(document)
        return caught.lines
    }

    static func object(_ line: Line) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.text.utf8))) as? [String: Any]
    }

    // MARK: Samples

    static let first = "C0:FE:00:00:00:01"
    static let second = "C0:FE:00:00:00:02"
    static let when = Date(timeIntervalSince1970: 1_764_655_578)  // 2025-12-02T06:06:18Z

    static var car: Profile {
        Profile(
            name: "car", description: "passenger cars",
            config: DrivingBehaviourConfig(
                cornering: 350, braking: 400, acceleration: 300, duration: 100, enable: .all),
            requirements: .init(
                minimumBatteryPercent: 30, minimumFirmware: FirmwareVersion(major: 1, minor: 0, patch: 8),
                calibrationRequired: true, maximumCalibrationAgeDays: 365),
            identity: .init(major: 100, minor: .sequential))
    }

    static var record: DeviceRecord {
        var record = DeviceRecord(address: first, seenAt: when)
        record.macEnding = "00000001"
        record.identity = BeaconIdentity(major: 100, minor: 3)
        record.battery = 88
        record.firmware = FirmwareVersion(major: 1, minor: 0, patch: 8)
        record.profile = "car"
        return record
    }

    static var recaps: [DeviceRecap] {
        var changed = DeviceRecap(address: first)
        changed.changed = 2
        changed.ok = 1
        changed.retries = 1
        var failed = DeviceRecap(address: second)
        failed.failed = 1
        failed.reason = "\(second): write config: timed out"
        return [changed, failed]
    }

    static let recovery = RecoveryRecord(
        action: "remove-device", ok: true, device: second, adapter: nil,
        detail: "remove-device after 3 × le-connection-abort-by-local", error: nil)

    static var station: StationResult {
        StationResult(
            address: first, verdict: .converged, target: "profile car", reason: nil, seconds: 4.25, rssi: -50,
            changedSteps: 2, identity: "100.3")
    }

    static var outcome: OutcomeRecord {
        OutcomeRecord(
            id: 7, run: 2, device: first, step: "apply car", status: "changed", detail: "cornering 300 → 350",
            error: nil, startedAt: "2025-12-02T06:06:18.123Z", durationMilliseconds: 412)
    }

    static let rewrite = LedgerRewrite(
        bench: "0123456789abcdef", atEntry: 57, foundAt: "2026-12-03T11:44:24.598Z", serverSize: 900, benchSize: 950,
        detail: "entry 57 differs from the one the server holds")

    static func ledgerVerification(findings: [LedgerFinding]) -> LedgerVerification {
        var verification = LedgerVerification()
        verification.size = 1778
        verification.root = String(repeating: "ab", count: 32)
        verification.findings = findings
        return verification
    }

    /// A sample of every result type, each as the documents commands hand
    /// the renderer.
    static var samples: [any ResultDocument] {
        let summary = BenchSummary(
            macEnding: try! MACEnding(address: first), battery: 88, status: .init(rawValue: 0),
            firmware: FirmwareVersion(major: 1, minor: 0, patch: 8), configCRC: 0x1a2b)
        let trip = PulledTrip(
            device: first, startMilliseconds: 5000, endMilliseconds: 65000, beaconIndex: 0, pulledAt: when)
        let event = PulledEvent(
            device: first, atMilliseconds: 7000, type: "braking", durationMilliseconds: 300, averageMilliG: 420,
            maximumMilliG: 610, x: 10, y: -600, z: 20, beaconIndex: 1, pulledAt: when)
        let incident = PulledIncident(
            device: first, incidentID: 1, atMilliseconds: 9000, maximumResultant: 2400, averageResultant: 900,
            x: 100, y: 2300, z: 50, samples: "[[1,2,3]]", pulledAt: when)
        var tally = StationTally()
        tally.counts = [.converged: 1]
        return [
            SeenBeaconRow.list([
                SeenBeaconRow(
                    address: first, macEnding: "00000001", rssi: -60, identity: BeaconIdentity(major: 100, minor: 3),
                    summary: summary, profile: "car", selected: true)
            ]),
            ScanSummary(seen: 6, fresh: 2, seconds: 3, lastFoundAfter: 1.5, stoppedEarly: false, until: nil),
            SelectionResult(devices: [first, second], selectors: "new"),
            StepLine(
                device: first, step: "sync-time", status: .changed, detail: "dry run: time offset: unset → 1700",
                dryRun: true, verbose: false),
            RunNote(device: first, text: "reconnecting"),
            RecapDocument(recaps: recaps, recoveries: [recovery], dryRun: false),
            WatchEventLine(
                event: .realTime(address: first, RealTimeEvent(type: .braking, axis: .longitudinal, flags: [])),
                at: when),
            WatchSummary(devices: 1, events: 1, tripChanges: 0, failed: 0),
            AuditDocument(
                reports: [
                    AuditReport(address: first, profile: "car", findings: []),
                    AuditReport(address: second, profile: "car", findings: [.notCalibrated]),
                ], source: .inventory),
            DeviceLine.list([record], in: "/tmp/inventory.sqlite"),
            DeviceDetail(record, outcomes: [outcome]),
            ValuesOnly([DeviceExportRow(columns: ["address", "battery"], row: [.text(first), .integer(88)])]),
            ForgottenDevice(device: second),
            LedgerVerifyResult(verification: ledgerVerification(findings: [])),
            LedgerVerifyResult(
                verification: ledgerVerification(findings: [
                    LedgerFinding(seq: 57, message: "entry 57 (outcomes 12) is not what was recorded")
                ]), since: nil),
            CheckpointResult(
                size: 1778, root: String(repeating: "ab", count: 32), origin: "beaconbench.local/bench/x",
                signer: ["ana@depot"], new: true, out: "checkpoint.txt", note: "beaconbench.local/bench/x\n1778\n…"),
            AuditDocument(
                reports: [AuditReport(address: first, profile: "car", findings: [])], source: .inventory,
                rewrites: [rewrite]),
            ServerLedgerDocument(benches: [
                BenchLedgerVerification(
                    bench: "b1", size: 1778, root: String(repeating: "ab", count: 32), checkpoints: 1),
                BenchLedgerVerification(bench: "b2", size: 900, rewrites: [rewrite], problem: "entry 57 differs"),
            ]),
            ServerLedgerDocument(benches: []),
            MinorBlocksDocument(blocks: [
                LiveMinorBlock(
                    bench: "b1", major: 4242, firstMinor: 64, size: 64, claimed: 5,
                    leasedAt: "2026-12-03T21:40:00.000Z")
            ]),
            BlocksReturnedDocument(
                outcome: ServerMinorBlocks.Return(
                    bench: "b1",
                    blocks: [
                        LiveMinorBlock(bench: "b1", major: 4242, firstMinor: 0, size: 64, claimed: 3, leasedAt: nil)
                    ], returnedAt: "2026-12-03T22:00:00.000Z")),
            ProofWritten(
                device: first, entries: 20, size: 1778, signers: ["ana@depot"], out: "a.proof", bytes: 23610),
            ProofCheckResult(file: "a.proof", report: nil, failure: "entry 29: its inclusion proof does not verify"),
            ProofCheckResult(
                file: "a.proof",
                report: ProofReport(
                    device: first, at: nil,
                    checkpoint: try! Checkpoint(
                        origin: "beaconbench.local/bench/x", size: 1778,
                        root: Digest(bytes: Array(repeating: 1, count: 32))!),
                    signer: "ana@depot",
                    entries: [
                        .init(
                            index: 29, at: "2026-12-03T11:57:31.374Z", event: "device", table: "devices", op: "insert",
                            key: "[\"\(first)\"]", bytes: [])
                    ]), failure: nil),
            PulledRecordRow.table([.trip(trip), .event(event), .incident(incident)]),
            Table(rows: [ProfileRow(profile: car)]),
            ProfileDetail(profile: car),
            ProfileCheck(car),
            AssignmentLine(
                assignment: Assignment(
                    address: first, profile: "car", assignedAt: "2025-12-02T06:06:18Z", assignedBy: "ann@bench"),
                replaced: nil),
            DriftRow.table([
                DriftFinding(device: first, field: "cornering", desired: "350", observed: "300", observedAt: nil)
            ]),
            StationLine(result: station, tally: tally),
            StationRecap(results: [station], recoveries: [recovery], seconds: 12),
            HelpDocument(topic: "select"),
            Table(rows: [DoctorRow(check: DoctorCheck(name: "bus", status: .ok, detail: "the system bus answers"))]),
            ReportWritten(
                path: "report.html", devices: 5, fleet: 6, bytes: 40960, crossingThisQuarter: 1, withFindings: 2,
                seconds: 0.25),
            SyncResult(bench: "b1", sent: ["devices": 6]),
            StoredValueLine(
                finding: StoredFinding(
                    table: "devices", row: first, field: "battery", value: "300", reason: "is outside 0–100")),
        ]
    }

    // MARK: Both ways

    /// With JSON, a document's values become one line each on standard
    /// output, in order: `kind`, `v` and exactly the fields the value
    /// declares. For people, none of its lines is JSON.
    @Test func everySampleRendersBothWays() throws {
        for document in Self.samples {
            let name = String(describing: type(of: document))
            let lines = Self.rendered(document, json: true)
            #expect(lines.allSatisfy { $0.stream == 1 }, "\(name): \(lines)")
            #expect(lines.count == document.values.count, "\(name): \(lines)")
            for (line, value) in zip(lines, document.values) {
                let object = try #require(Self.object(line), "\(name): \(line)")
                #expect(object["kind"] as? String == value.kind.rawValue, "\(name): \(line)")
                #expect(object["v"] as? Int == 1)
                #expect(
                    Set(object.keys) == Set(value.fields.map(\.0) + ["kind", "v"]), "\(name): \(line)")
                #expect(value.fields.count == Set(value.fields.map(\.0)).count, "\(name): a field twice")
            }
            let people = Self.rendered(document, json: false)
            #expect(people.allSatisfy { Self.object($0) == nil }, "\(name): \(people)")
        }
    }

    /// Every result type of Output/Results has a sample here.
    @Test func everyResultTypeHasASample() throws {
        let directory = OutputRuleTests.console.appendingPathComponent("Output/Results")
        var declared: Set<String> = []
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") where line.hasPrefix("struct ") {
                let name = line.dropFirst(7).prefix { $0 != ":" }
                let conformances = line.dropFirst(7 + name.count)
                if ["SingleResult", "ResultValue", "TableRow", "ResultDocument"].contains(where: {
                    conformances.contains($0)
                }) {
                    declared.insert(String(name))
                }
            }
        }
        #expect(declared.count >= 25, "\(declared)")
        var sampled: Set<String> = []
        for document in Self.samples {
            sampled.insert(String(describing: type(of: document)))
            for value in document.values { sampled.insert(String(describing: type(of: value))) }
        }
        #expect(declared.subtracting(sampled).isEmpty, "no sample: \(declared.subtracting(sampled).sorted())")
    }

    // MARK: Orders and streams (docs/json.md; plan §6)

    /// The recap: JSON recap per device, each recovery, then the summary;
    /// for people the table, the summary line, then the recoveries, all on
    /// standard output.
    @Test func theRecapKeepsEachModesOrder() {
        let document = RecapDocument(recaps: Self.recaps, recoveries: [Self.recovery], dryRun: false)
        let json = Self.rendered(document, json: true)
        #expect(json.compactMap { Self.object($0)?["kind"] as? String } == ["recap", "recap", "recovery", "summary"])
        #expect(Self.object(json[1])?["reason"] as? String == "\(Self.second): write config: timed out")
        let table = Console.table(
            [
                "device", "result", "steps ok", "steps changed", "steps unchanged", "steps skipped", "reconnects",
                "reason",
            ],
            [
                [Self.first, "changed", "1", "2", "0", "0", "1", ""],
                [Self.second, "failed", "0", "0", "0", "0", "0", "write config: timed out"],
            ], numeric: [2, 3, 4, 5, 6])
        let expected =
            ["", "RECAP"] + table + [
                "2 devices: 1 changed, 0 ok, 0 skipped, 1 failed", "recovered without an operator (1):",
                "  recover ok: remove-device after 3 × le-connection-abort-by-local (\(Self.second))",
            ]
        #expect(Self.rendered(document, json: false) == expected.map { Line(stream: 1, text: $0) })
        // A dry run: `would-change`, and the table says so.
        let dry = RecapDocument(recaps: [Self.recaps[0]], recoveries: [], dryRun: true)
        #expect(Self.object(Self.rendered(dry, json: true)[0])?["result"] as? String == "would-change")
        let people = Self.rendered(dry, json: false).map(\.text)
        #expect(people[1] == "RECAP (dry run: nothing written)" && people[2].contains("steps would change"))
    }

    /// The station: each beacon on standard output, its recap on standard
    /// error for people; JSON recovery then station_summary.
    @Test func theStationsRecapGoesToStandardError() {
        var tally = StationTally()
        tally.counts = [.converged: 1]
        #expect(
            Self.rendered(StationLine(result: Self.station, tally: tally), json: false) == [
                Line(
                    stream: 1,
                    text:
                        "✔ \(Self.first)  converged   profile car → 100.3  4.2 s  [1 done: 1 converged, 0 unchanged, 0 skipped, 0 failed, 0 taken away]"
                )
            ])
        let recap = StationRecap(results: [Self.station], recoveries: [Self.recovery], seconds: 12)
        #expect(
            Self.rendered(recap, json: false)
                == [
                    "", "STATION RECAP (12 s)", "1 done: 1 converged, 0 unchanged, 0 skipped, 0 failed, 0 taken away",
                    "  recover ok: remove-device after 3 × le-connection-abort-by-local (\(Self.second))",
                ].map { Line(stream: 2, text: $0) })
        let json = Self.rendered(recap, json: true)
        #expect(json.compactMap { Self.object($0)?["kind"] as? String } == ["recovery", "station_summary"])
        #expect(Self.object(json[1])?["taken_away"] as? Int == 0 && Self.object(json[1])?["done"] as? Int == 1)
    }

    /// A step is a JSON line only with a diff or -v; people see the diff,
    /// or the step with -v, or `info`'s.
    @Test func aStepShowsOnlyWithADiffOrVerbose() {
        let quiet = StepLine(
            device: Self.first, step: "apply car", status: .unchanged, detail: nil, dryRun: false, verbose: false)
        #expect(Self.rendered(quiet, json: true).isEmpty && Self.rendered(quiet, json: false).isEmpty)
        var verbose = quiet
        verbose.verbose = true
        #expect(Self.object(Self.rendered(verbose, json: true)[0])?["status"] as? String == "unchanged")
        #expect(Self.rendered(verbose, json: false) == [Line(stream: 2, text: "\(Self.first)  apply car  unchanged")])
        let info = StepLine(
            device: Self.first, step: "info", status: .ok, detail: "battery 88 %", dryRun: false, verbose: false)
        #expect(Self.rendered(info, json: true).isEmpty)
        #expect(Self.rendered(info, json: false) == [Line(stream: 2, text: "\(Self.first)  info  ok  battery 88 %")])
        let diff = StepLine(
            device: Self.first, step: "sync-time", status: .changed, detail: "dry run: time offset: unset → 1700",
            dryRun: true, verbose: false)
        let line = Self.object(Self.rendered(diff, json: true)[0])
        #expect(line?["diff"] as? String == "time offset: unset → 1700" && line?["detail"] is NSNull)
        #expect(Self.rendered(diff, json: false) == [Line(stream: 2, text: "\(Self.first): time offset: unset → 1700")])
    }

    /// An export is JSON lines without --json; a records table with no
    /// record is no table at all, an outcome table is its header; counts
    /// and messages go to standard error.
    @Test func exportsTablesAndCountsKeepTheirForms() {
        let caught = Caught()
        let people = Renderer(terminal: caught.terminal(), json: false)
        people.jsonLines.render(ValuesOnly([DeviceExportRow(columns: ["address"], row: [.text(Self.first)])]))
        #expect(caught.lines == [Line(stream: 1, text: #"{"address":"\#(Self.first)","kind":"device_row","v":1}"#)])
        #expect(
            Self.rendered(PulledRecordRow.table([], after: [.message("0 records")]), json: false) == [
                Line(stream: 2, text: "0 records")
            ])
        #expect(Self.rendered(DriftRow.table([]), json: false).isEmpty)
        #expect(
            Self.rendered(Table(rows: [OutcomeRow]()), json: false) == [
                Line(stream: 1, text: "started (UTC)  run  device  step  status  ms  detail")
            ])
        #expect(
            Self.rendered(SelectionResult(devices: [Self.first], selectors: "new"), json: false) == [
                Line(stream: 2, text: "selected 1 device (new)")
            ])
        #expect(
            Self.rendered(
                ScanSummary(seen: 2, fresh: 0, seconds: 3, lastFoundAfter: 1, stoppedEarly: false, until: 4),
                json: false)
                == [Line(stream: 2, text: "scan: 2 SBeacons seen, 0 new (fewer than the 4 awaited)")])
        // A server's rows: the benches after, the bench before.
        var fromServer = Self.record
        fromServer.benches = ["0123456789abcdef"]
        #expect(Self.rendered(DeviceLine.list([fromServer], in: "server"), json: false)[0].text.hasSuffix("benches"))
        var outcome = Self.outcome
        outcome.bench = "0123456789abcdef"
        let outcomes = Self.rendered(Table(rows: [OutcomeRow(outcome: outcome)]), json: false)
        #expect(outcomes[0].text.hasPrefix("bench     started (UTC)") && outcomes[1].text.hasPrefix("01234567  "))
    }

    /// A sync stopped by a signal gives people nothing here (its error
    /// line follows in both modes); a stored value likewise.
    @Test func whatIsWrittenInBothModesIsNoPeopleForm() {
        let stopped = SyncResult(bench: "b1", sent: ["devices": 2], stoppedBy: "SIGINT")
        #expect(Self.rendered(stopped, json: false).isEmpty)
        #expect(Self.object(Self.rendered(stopped, json: true)[0])?["stopped_by"] as? String == "SIGINT")
        let synced = Self.rendered(SyncResult(bench: "b1", sent: ["devices": 2]), json: false)
        #expect(synced.map(\.stream) == [1, 2, 2] && synced[0].text.hasPrefix("synced bench b1: sent "))
        #expect(synced[1].text.hasPrefix("ledger: sent "))
        let stored = StoredValueLine(
            finding: StoredFinding(table: "devices", row: Self.first, field: "battery", value: "300", reason: "x"))
        #expect(Self.rendered(stored, json: false).isEmpty && Self.rendered(stored, json: true).count == 1)
    }

    /// The mode: the run's `--json`, or any line's of a group; a recap is
    /// JSON when one of its commands was.
    @Test func theModeComesFromTheRunOrTheLines() throws {
        let terminal = Terminal(
            color: false, json: false, verbose: false, environment: [:], outputIsTerminal: false, errorIsTerminal: false
        )
        let lines = try BatchParser(file: "t", profiles: ["car"]).parse("info\napply car --json")
        #expect(Renderer(terminal: terminal).isForPeople)
        #expect(Renderer(terminal: terminal, for: [lines[0]]).isForPeople)
        #expect(!Renderer(terminal: terminal, for: lines).isForPeople)
        #expect(!Renderer(terminal: terminal).joined(Renderer(terminal: terminal, for: lines)).isForPeople)
        #expect(!Renderer(terminal: terminal).jsonLines.isForPeople)
        let run = Terminal(
            color: false, json: true, verbose: false, environment: [:], outputIsTerminal: false, errorIsTerminal: false)
        #expect(!Renderer(terminal: run, for: [lines[0]]).isForPeople)
    }
}
