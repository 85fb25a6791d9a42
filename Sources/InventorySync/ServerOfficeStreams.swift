import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The office's whole-fleet reads — `inventory list`, `drift`, `audit` —
/// as streams (issue 31): server-side cursors of one read-only snapshot
/// (`PostgresSnapshot`), each fetched a batch at a time, so that memory is
/// a batch per cursor and not the fleet. A stream can be opened again in
/// the same snapshot (a second pass sees exactly the same rows): a table
/// for people is measured in one pass and written in the next.
///
/// Every row goes through the same checks as the array reads of
/// `ServerInventory` and `ServerAssignments.drift`, their findings logged
/// as those are.
public final class OfficeStreams: @unchecked Sendable {
    let snapshot: PostgresSnapshot
    let log: ServerReportReading.Log
    /// Set once the command has written any of its output: a connection
    /// lost after that ends the command (its output would repeat), not read
    /// again from the beginning.
    public var started = false

    init(snapshot: PostgresSnapshot, log: ServerReportReading.Log) {
        self.snapshot = snapshot
        self.log = log
    }

    /// The merged fleet's devices in address order, as `devices()` reads them.
    public func devices() throws -> RowStream<DeviceRecord> {
        let cursor = try snapshot.cursor(
            OfficeReads.deviceStream, batch: 2_000)
        return stream(cursor, logging: true, ServerInventory.record)
    }

    /// Every device as the audit sees it, in address order, as
    /// `auditSubjects()` reads them.
    public func auditSubjects() throws -> RowStream<AuditSubject> {
        let cursor = try snapshot.cursor(OfficeReads.auditSubjects(light: false), batch: 2_000)
        return stream(cursor, logging: true, DeviceRows.auditSubject)
    }

    /// The same subjects with only what tells a duplicate identity (the
    /// address, profile, identity held and meant, benches; the rest NULL):
    /// a cheaper pass for the audit's whole-fleet question, its findings not
    /// logged (the full pass logs them).
    public func identityHolders() throws -> RowStream<AuditSubject> {
        let cursor = try snapshot.cursor(OfficeReads.auditSubjects(light: true), batch: 5_000)
        return stream(cursor, logging: false, DeviceRows.auditSubject)
    }

    /// Each assignment's drift against the merged fleet, in address order
    /// (`OfficeDriftStream`). `logging`: the observed values that fail
    /// their checks are logged (`drift`), or dropped (`audit` drops them,
    /// as it always did).
    public func drift(profiles: [String: Profile], logging: Bool) throws -> OfficeDriftStream {
        let irregular = try snapshot.connection.query(OfficeReads.driftIrregular).rows
        let cursor = try snapshot.cursor(OfficeReads.driftStream, batch: 2_000)
        return OfficeDriftStream(irregular: irregular, cursor: cursor, profiles: profiles, log: logging ? log : nil)
    }

    private func stream<T>(
        _ cursor: PostgresCursor, logging: Bool, _ build: @escaping ([SQLiteValue], inout [StoredFinding]) -> T?
    ) -> RowStream<T> {
        let log = logging ? log : nil
        return RowStream {
            while let row = try cursor.next() {
                var findings: [StoredFinding] = []
                let built = build(row, &findings)
                if !findings.isEmpty { log?.kept.add(findings) }
                if let built { return built }
            }
            return nil
        }
    }
}

/// One device's drift, as the stream gives it: an assignment that passed
/// its checks and its findings (none when it has converged), or a refused
/// assignment row and its one finding (`unusable server row: …`).
public struct OfficeDriftGroup: Sendable {
    /// The assignment's address; a refused row's key (as shown).
    public var device: String
    public var findings: [DriftFinding]
    /// A refused row (its finding is listed after every assignment's).
    public var refused: Bool
}

/// `ServerAssignments.drift` as a stream. The cursor reads every
/// assignment with its device as the merged fleet observed it and the
/// identity claimed for it, in address order (`OfficeReads.driftStream`:
/// the assignments' primary key and the fleet's `devices_by_address`,
/// merged, no sort). Rows naming one device in other letter cases are
/// judged together (`ServerAssignments.grouped`: refused together), so
/// the rows whose address is not in capitals, and the rows of the same
/// devices, are read first (`OfficeReads.driftIrregular`: few — rows no
/// sync or office writes) and each such device judged in its place by
/// address; the assignments come out in the order the array read sorted
/// them. Refused rows are also kept (`unusable`), complete when the
/// stream has ended.
public final class OfficeDriftStream {
    private let cursor: PostgresCursor
    private let profiles: [String: Profile]
    private let names: Set<String>
    private let log: ServerReportReading.Log?
    /// The devices read first, by address in capitals: their rows.
    private var irregular: [(key: String, rows: [[SQLiteValue]])]
    private let irregularKeys: Set<String>
    private var ready: [OfficeDriftGroup] = []
    private var ended = false
    /// Assignments read: those that passed their checks and the rows refused.
    public private(set) var assigned = 0
    /// Every refused row's finding so far, by key and field (as the array
    /// read lists them, after every assignment's findings).
    public private(set) var unusable: [DriftFinding] = []

    init(
        irregular rows: [[SQLiteValue]], cursor: PostgresCursor, profiles: [String: Profile],
        log: ServerReportReading.Log?
    ) {
        self.cursor = cursor
        self.profiles = profiles
        self.names = Set(profiles.keys)
        self.log = log
        var groups: [String: [[SQLiteValue]]] = [:]
        for row in rows { groups[row[23].textForm ?? "", default: []].append(row) }
        irregular = groups.map { (key: $0.key, rows: $0.value) }.sorted { $0.key > $1.key }  // the least last
        irregularKeys = Set(groups.keys)
    }

    /// The next device's drift, in address order; nil after the last.
    public func next() throws -> OfficeDriftGroup? {
        while ready.isEmpty, !ended {
            guard let row = try cursor.next() else {
                while let group = irregular.popLast() { judge(group.rows) }
                ended = true
                unusable.sort { ($0.device, $0.field) < ($1.device, $1.field) }
                break
            }
            let key = row[23].textForm ?? ""
            while let last = irregular.last, last.key < key {
                judge(last.rows)
                irregular.removeLast()
            }
            if irregularKeys.contains(key) { continue }  // judged with its device's other rows
            judge([row])
        }
        return ready.isEmpty ? nil : ready.removeFirst()
    }

    /// The rows of one device (of one address in capitals) judged together.
    private func judge(_ group: [[SQLiteValue]]) {
        let cells = group.map { row in row[0..<10].map(\.textForm) }
        let pulled = ServerAssignments.grouped(cells, profiles: names).pulled
        var observed: [String: ObservedState] = [:]
        var stored: [StoredFinding] = []
        for row in group {
            guard let address = row[0].text, row[22].text != nil else { continue }
            observed[address] = ObservedState(row: Array(row[10...21]), address: row[0], findings: &stored)
        }
        if let log, !stored.isEmpty { log.kept.add(stored) }
        assigned += pulled.valid.count + pulled.refused.count
        for assignment in pulled.valid.values.map(\.0).sorted(by: { $0.address < $1.address }) {
            ready.append(
                OfficeDriftGroup(
                    device: assignment.address,
                    findings: DesiredState.drift(assignment, observed[assignment.address], profiles: profiles),
                    refused: false))
        }
        for refused in pulled.refused {
            let finding = DriftFinding(
                device: refused.key, field: refused.field,
                desired: "unusable server row: \(refused.value ?? "NULL") \(refused.reason)", observed: nil,
                observedAt: nil)
            unusable.append(finding)
            ready.append(OfficeDriftGroup(device: refused.key, findings: [finding], refused: true))
        }
    }
}
