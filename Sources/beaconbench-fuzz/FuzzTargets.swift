import Console
import DBusBinding
import Foundation
import Inventory
import InventorySync
import Profiles
import SBeaconProtocol
import SafeText

/// What the fuzzer feeds bytes to: every decoder of input from outside
/// (files, adverts, notifications, bus messages). Each must answer with a
/// value or a typed error — never trap, never hang.
enum FuzzTarget: String, CaseIterable {
    case batch, profile, records, adverts
    case dbusValue = "dbus-value"
    /// One message through the wire decoder and through libdbus +
    /// `MessageCodec.decodeBody`: the same result or the same refusal
    /// (`WireDifferential.check`).
    case dbusWire = "dbus-wire"
    /// The display function (`Visible`): what reaches a terminal.
    case display
    /// The CSV writer and the JSON escaping of exports.
    case csv
    /// Batch variables: `set` lines defined through each other, expanded.
    case expansion
    /// Device Information strings as a device sends them.
    case gattText = "gatt-text"
    /// The value grammar (numbers, durations, times) and the selectors,
    /// alone and on the lines of the commands that take them.
    case grammar
    /// Rows pulled from the shared server (`PulledRows`).
    case rows
    /// Rows read back from the inventory or the server: the row builders
    /// and their checks (StoredValues.swift), and the timestamp parser.
    case storedRow = "stored-row"

    /// The command lines the `grammar` target writes its text after (the
    /// first byte picks).
    static let grammarLines = [
        "select ", "report ", "scan ", "watch ", "records --since ", "records --until ", "assign van ",
        "identity car ", "scan 10s --rssi ", "require ",
    ]

    func exercise(_ bytes: [UInt8]) {
        switch self {
        case .batch:
            let parser = BatchParser(file: "fuzz.batch", overrides: ["profile": "car"], profiles: ["car", "van"])
            _ = try? parser.parse(String(decoding: bytes, as: UTF8.self))
        case .profile:
            // The loader's whole check of a file's text: JSON syntax, a
            // duplicate key at any depth or an exponent (at its line and
            // column), then every key and range.
            _ = try? ProfileLoader.parse(Data(bytes), name: "fuzz", file: "fuzz.json")
        case .records:
            // The first byte picks the characteristic, the rest is its value.
            let value = Array(bytes.dropFirst())
            switch bytes.first.map({ $0 % 11 }) {
            case 0: _ = try? RecordNotification(bytes: value)
            case 1: _ = try? RecordResponse(bytes: value)
            case 2: _ = try? RealTimeEvent(bytes: value)
            case 3: _ = try? TripInformation(bytes: value)
            case 4: _ = try? CalibrationState(bytes: value)
            case 5: _ = try? CalibrationResult(bytes: value)
            case 6: _ = try? DrivingBehaviourConfig(bytes: value).firstInvalidField
            case 7: _ = try? BeaconIdentity(bytes: value)
            case 8: _ = try? DeviceCommand(bytes: value)
            case 9: _ = try? BeaconTime.offset(bytes: value)
            default: _ = try? FirmwareVersion(String(decoding: value, as: UTF8.self))
            }
        case .adverts:
            let value = Array(bytes.dropFirst())
            switch bytes.first.map({ $0 % 3 }) {
            case 0: _ = try? IBeaconAdvert(bytes: value)
            case 1: _ = try? BenchSummary(bytes: value)
            default: _ = try? MACEnding(address: String(decoding: value, as: UTF8.self))
            }
        case .dbusValue:
            _ = try? WireMessage.decodeBody(marshalled: bytes)
        case .dbusWire:
            if case .failure(let mismatch) = WireDifferential.check(bytes) { fatalError(mismatch.description) }
        case .display:
            // The first byte bounds the length; the rest is the text.
            let limit = Int(bytes.first ?? 0) + 1
            let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
            Self.checkVisible(Visible.text(text, limit: limit), limit: limit)
            Self.checkVisible(Visible.bytes(bytes.dropFirst(), limit: limit), limit: limit)
            Self.checkVisible(Visible.window(text, column: limit, radius: 10), limit: 30)
            let once = Visible.text(text, limit: nil)
            Self.require(Visible.text(once, limit: nil) == once, "Visible.text is not idempotent")
        case .csv:
            let text = String(decoding: bytes, as: UTF8.self)
            let field = CSV.field(text)
            let unquoted = field.hasPrefix("\"") ? field.dropFirst() : field[...]
            if let first = unquoted.unicodeScalars.first {
                Self.require(!"=+-@\t\r".unicodeScalars.contains(first), "a CSV cell starts with \(first)")
            }
            Self.require(field.unicodeScalars.allSatisfy(Visible.isShownAsIs), "a CSV cell holds a control character")
            let json = JSONText.string(text)
            Self.require(json.unicodeScalars.allSatisfy(Visible.isShownAsIs), "JSON holds a control character")
            let decoded = try? JSONSerialization.jsonObject(with: Data("[\(json)]".utf8)) as? [String]
            Self.require(decoded == [text], "JSON does not give the text back")
        case .expansion:
            // Each byte defines a variable through earlier ones: bits pick
            // which and how often; the batch ends using the last.
            var lines = ["set v0 0123456789"]
            for (index, byte) in bytes.prefix(40).enumerated() {
                let uses = (0...index).filter { byte & (1 << ($0 % 8)) != 0 }.map { "${v\($0)}" }
                let repeats = Int(byte >> 5) + 1
                lines.append("set v\(index + 1) " + String(repeating: uses.joined(), count: repeats))
            }
            lines.append("require firmware>=${v\(min(bytes.count, 40))}")
            // The same code with smaller bounds, so that each run is quick.
            var parser = BatchParser(file: "fuzz.batch", overrides: [:], profiles: ["car"])
            parser.limits.expandedLineCharacters = 2048
            parser.limits.expansionCharacters = 16 * 1024
            _ = try? parser.parse(lines.joined(separator: "\n"))
        case .grammar:
            let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
            Self.checkGrammar(text)
            for word in text.split(separator: " ").prefix(8) { Self.checkGrammar(String(word)) }
            let prefix = Self.grammarLines[Int(bytes.first ?? 0) % Self.grammarLines.count]
            let parser = BatchParser(file: "fuzz.batch", overrides: [:], profiles: ["car", "van"])
            _ = try? parser.parse(prefix + text)
        case .storedRow:
            Self.exerciseStoredRow(bytes)
        case .gattText:
            let text = DeviceInformationText.decode(bytes)
            Self.require(text.utf8.count <= DeviceInformationText.maximumLength * 3, "unbounded text")
            Self.checkVisible(Visible.text(text), limit: Visible.defaultLimit)
            _ = try? FirmwareVersion(text)
        case .rows: Self.pulledRow(bytes)
        }
    }

    /// A `fleet_assignments` row as the server sends it: cells split at
    /// 0x1F, a cell of one 0x1E is NULL. An accepted row must hold only
    /// what local input may (and pass again as written back); a refusal
    /// must name its field with nothing a terminal acts on, bounded. The
    /// first cell also goes through the integer and override checks alone.
    static func pulledRow(_ bytes: [UInt8]) {
        let cells: [String?] = bytes.split(separator: 0x1F, omittingEmptySubsequences: false).prefix(12).map {
            $0.elementsEqual([0x1E]) ? nil : String(decoding: $0, as: UTF8.self)
        }
        let profiles: Set<String> = ["car", "van"]
        switch PulledRows.assignment(cells, profiles: profiles) {
        case .success(let entry):
            let assignment = entry.assignment
            require(MACEnding.address(assignment.address) == assignment.address, "an address taken as it came")
            require(profiles.contains(assignment.profile), "a profile not loaded taken")
            require((assignment.minorPolicy == .fixed) == (assignment.minor != nil), "a minor against its policy")
            for rule in ProfileLoader.overrideKeys {
                let value: UInt16? =
                    switch rule.name {
                    case "cornering": assignment.overrides.cornering
                    case "braking": assignment.overrides.braking
                    case "acceleration": assignment.overrides.acceleration
                    default: assignment.overrides.duration
                    }
                require(value.map(rule.range.contains) ?? true, "\(rule.name) \(value ?? 0) out of range taken")
            }
            require(PulledRows.isTimestamp(assignment.assignedAt), "a time taken that is not one")
            let again: [String?] = [
                assignment.address, assignment.profile, assignment.major.map { String($0) },
                assignment.minorPolicy.rawValue, assignment.minor.map { String($0) }, assignment.overrides.json,
                assignment.assignedAt, assignment.assignedBy, assignment.convergedAt, entry.bench,
            ]
            guard case .success(let second) = PulledRows.assignment(again, profiles: profiles) else {
                fatalError("an accepted row is refused once written back")
            }
            require(second.assignment == assignment, "an accepted row changes once written back")
        case .failure(let refused):
            require(refused.table == "fleet_assignments", "a refusal names another table")
            require(!refused.field.isEmpty && refused.reason.count > 3, "a refusal says nothing")
            checkVisible(refused.key, limit: PulledRows.shownCharacters)
            checkVisible(refused.value ?? "", limit: PulledRows.shownCharacters)
            checkVisible(refused.description, limit: 400)
        }
        let first = cells.first ?? nil
        if let value = (try? PulledRows.integer(first, "minor", in: 0...65535)) ?? nil {
            require((0...65535).contains(value) && Int64(first ?? "") == value, "an integer read as another")
        }
        if let overrides = try? ProfileLoader.parseOverrides(first ?? "", source: "fuzz") {
            for (key, value) in overrides {
                let rule = ProfileLoader.overrideKeys.first { $0.name == key }
                require(rule?.range.contains(value) == true, "override \(key) \(value) taken")
            }
        }
    }

    /// What `ValueGrammar` takes is decimal, as documented: a number it
    /// accepts is digits (and one `.`, or a leading `-` for a whole
    /// number), a duration adds only its unit, and a date it accepts is the
    /// date it names (no rollover: formatted back, it is the same text).
    static func checkGrammar(_ text: String) {
        let digits = Set("0123456789")
        if let value = ValueGrammar.whole(text) {
            require(
                text.drop(while: { $0 == "-" }).allSatisfy(digits.contains) && text.filter({ $0 == "-" }).count <= 1
                    && Int(text) == value, "whole number \(value) from '\(text)'")
        }
        if let value = ValueGrammar.decimal(text) {
            require(
                value.isFinite && value >= 0 && text.allSatisfy({ digits.contains($0) || $0 == "." })
                    && text.filter({ $0 == "." }).count <= 1, "decimal \(value) from '\(text)'")
        }
        if let value = ValueGrammar.duration(text) {
            require(
                value.isFinite && value >= 0 && text.allSatisfy({ digits.contains($0) || ".mhs".contains($0) }),
                "duration \(value) from '\(text)'")
        }
        let now = Date(timeIntervalSince1970: 1_764_000_000)
        guard let date = try? ValueGrammar.time(text, now: now) else { return }
        require(date.timeIntervalSince1970.isFinite, "time from '\(text)' is not finite")
        if text.utf8.count >= 10, text.dropFirst(4).first == "-" {
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = TimeZone(identifier: "UTC")!
            // The date part names a day that exists: read back, it is the same.
            let day = try? ValueGrammar.time(String(text.prefix(10)), now: now)
            let parts = day.map { calendar.dateComponents([.year, .month, .day], from: $0) }
            let written = parts.map { String(format: "%04d-%02d-%02d", $0.year ?? 0, $0.month ?? 0, $0.day ?? 0) }
            require(written == String(text.prefix(10)), "'\(text)' was read as \(written ?? "nothing")")
        } else {
            require(date <= now && now.timeIntervalSince(date) <= 36_500 * 86_400 + 1, "age '\(text)' out of bounds")
        }
    }

    /// The first byte picks a row builder; the rest are the row's values,
    /// each a tag byte (NULL, integer, real, text, blob) and its payload
    /// (8 bytes; or a length byte and that many bytes), NULL past the end.
    /// Fails if a finding could reach a terminal raw or is unbounded.
    static func exerciseStoredRow(_ bytes: [UInt8]) {
        var rest = bytes.dropFirst()[...]
        var row: [SQLiteValue] = []
        while let tag = rest.first, row.count < 24 {
            rest = rest.dropFirst()
            switch tag % 5 {
            case 0: row.append(.null)
            case 1, 2:
                var number: UInt64 = 0
                for byte in rest.prefix(8) { number = number << 8 | UInt64(byte) }
                rest = rest.dropFirst(8)
                row.append(tag % 5 == 1 ? .integer(Int64(bitPattern: number)) : .real(Double(bitPattern: number)))
            default:
                let count = Int(rest.first ?? 0)
                let payload = Array(rest.dropFirst().prefix(count))
                rest = rest.dropFirst(count + 1)
                row.append(tag % 5 == 3 ? .text(String(decoding: payload, as: UTF8.self)) : .blob(payload))
            }
        }
        while row.count < 24 { row.append(.null) }
        var findings: [StoredFinding] = []
        switch bytes.first.map({ $0 % 11 }) {
        case 0: _ = DeviceRows.record(Array(row[0..<21]), findings: &findings)
        case 1: _ = DeviceRows.auditSubject(Array(row[0..<22]), findings: &findings)
        case 2: _ = DeviceRows.outcome(Array(row[0..<(row[23] == .null ? 9 : 10)]), findings: &findings)
        case 3: _ = RecordRows.trip(Array(row[0..<6]), findings: &findings)
        case 4: _ = RecordRows.event(Array(row[0..<12]), findings: &findings)
        case 5: _ = RecordRows.incident(Array(row[0..<11]), findings: &findings)
        case 6: _ = Assignment.stored(Array(row[0..<11]), findings: &findings)
        case 7: _ = Inventory.reading(Array(row[0..<4]), findings: &findings)
        case 8: _ = ObservedState(row: Array(row[0..<12]), address: row[12], findings: &findings)
        case 9: _ = Inventory.activity(Array(row[0..<7]), bench: "fuzz", findings: &findings)
        default:
            if case .text(let text) = row[0] { _ = Inventory.parseTimestamp(text) }
            _ = RowCheck.findings(
                table: "devices", columns: ["address", "battery", "last_seen", "profile", "config_enable"],
                row: Array(row[0..<5]), key: "address")
        }
        for finding in findings {
            checkVisible(finding.description, limit: 400)
            require(finding.description.utf8.count < 2_000, "an unbounded finding")
        }
    }

    /// For `dbus-wire`, how an input was judged ("fast", "refused by both",
    /// "generic", "not mine" …), for the replay's tally; nil otherwise.
    func verdict(_ bytes: [UInt8]) -> String? {
        guard self == .dbusWire, case .success(let verdict) = WireDifferential.check(bytes) else { return nil }
        if case .fast = verdict { return "fast" }
        return verdict.description
    }

    /// Stops the fuzzer (a crash it records) when `condition` fails.
    static func require(_ condition: Bool, _ message: @autoclosure () -> String) {
        guard condition else { fatalError(message()) }
    }

    /// Nothing a terminal acts on, and no more than `limit` characters shown
    /// (each at most 10 characters of escape) plus the cut mark.
    static func checkVisible(_ shown: String, limit: Int) {
        require(shown.unicodeScalars.allSatisfy(Visible.isShownAsIs), "a control character reached the screen")
        require(shown.count <= limit * 10 + 40, "\(shown.count) characters shown for a limit of \(limit)")
    }

    /// Valid inputs to start from, written by `beaconbench-fuzz seed`.
    func seeds() throws -> [[UInt8]] {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        func files(_ directory: String, _ suffix: String) throws -> [[UInt8]] {
            let url = repository.appendingPathComponent(directory)
            return try FileManager.default.contentsOfDirectory(atPath: url.path).filter { $0.hasSuffix(suffix) }
                .sorted().map { Array(try Data(contentsOf: url.appendingPathComponent($0))) }
        }
        let vector = Vector(x: 12, y: -7, z: 998)
        switch self {
        case .batch: return try files("batches", ".batch")
        case .profile:
            // The shipped profiles, and one with a key twice deep inside
            // (written with an escape), for the fuzzer to start from.
            let duplicate = """
                {"description": "x", "driving_behaviour": {"cornering_mg": 300, "braking_mg": 300,
                 "acceleration_mg": 300, "duration_ms": 500, "enabled": ["DB"], "br\\u0061king_mg": 5000},
                 "requirements": {"minimum_battery_percent": 20, "minimum_firmware": "1.0.7", "calibration_required": false}}
                """
            return try files("profiles", ".json") + [Array(duplicate.utf8)]
        case .grammar:
            let seeds: [(Int, String)] = [
                (0, "new battery<30 minor=1-40 profile=car"), (1, "all C0:FE:00:00:00:01 a3b5c7d9 firmware<1.0.8"),
                (2, "10s"), (2, "500ms"), (3, "1.5m"), (3, "2h"), (2, "0x10"), (2, "1e3"), (2, "+5"), (2, "inf"),
                (4, "2026-11-30"), (4, "2026-11-30T14:00:00Z"), (5, "2026-11-30T14:00:00.250+01:00"), (4, "7d"),
                (4, "2026-02-30"), (5, "2028-02-29T23:59:59-14:00"), (6, "major=1 minor=auto cornering=300"),
                (6, "major=1 major=2"), (7, "major=profile minor=keep"), (8, "-70"), (9, "battery>=30 firmware>=1.0.8"),
            ]
            return seeds.map { [UInt8($0.0)] + Array($0.1.utf8) }
        case .records:
            let event = DrivingEvent(
                index: 3, type: .braking, timestamp: 1200, duration: 350, averageMagnitude: 400,
                maximumMagnitude: 800, average: vector)
            let values: [(UInt8, [UInt8])] = [
                (0, RecordNotification.trip(TripRecord(index: 1, start: 100, end: 900)).bytes),
                (0, RecordNotification.event(event).bytes),
                (
                    0,
                    RecordNotification.incidentHeader(
                        id: 7, timestamp: 4000, sampleCount: 3, maximumResultant: 2500, averageResultant: 1200,
                        average: vector
                    ).bytes
                ),
                (0, RecordNotification.incidentChunk(id: 7, sequence: 0, samples: [vector, vector]).bytes),
                (1, RecordResponse(opcode: 1, result: .success, count: 4).bytes),
                (2, RealTimeEvent(type: .cornering, axis: .lateral, flags: [.harshBraking]).bytes),
                (3, TripInformation(trips: 2, incidents: 1, events: 5).bytes),
                (4, CalibrationState(calibrated: true, calibratedAt: 60, vector: vector).bytes),
                (5, CalibrationResult(outcome: .success, vector: vector).bytes),
                (6, DrivingBehaviourConfig.factoryDefault.bytes),
                (7, BeaconIdentity(major: 100, minor: 7).bytes),
                (8, DeviceCommand.factoryReset.bytes),
                (9, BeaconTime.offsetBytes(1_764_000_000_000)),
                (10, Array("1.0.8".utf8)),
            ]
            return values.map { [$0.0] + $0.1 }
        case .adverts:
            return [
                [0] + IBeaconAdvert(identity: BeaconIdentity(major: 100, minor: 3), measuredPower: -59).bytes,
                [1]
                    + BenchSummary(
                        macEnding: try MACEnding(address: "A1:B2:A3:B5:C7:D9"), battery: 80, status: [.calibrated],
                        firmware: FirmwareVersion(major: 1, minor: 0, patch: 8), configCRC: 0x1234
                    ).bytes,
                [2] + Array("A1:B2:A3:B5:C7:D9".utf8),
            ]
        case .display, .csv:
            return [
                Array("\u{40}SUM(1)\u{1B}]0;pwned\u{07}\u{1B}[2J1.0.8".utf8), Array("=cmd|' /C calc'!A0".utf8),
                [0x10, 0xFF, 0xC0, 0x80, 0x1B, 0x00, 0x1B, 0x5B, 0x33, 0x31, 0x6D],
                Array("abc\u{202E}fed\u{9B}2J".utf8),
                Array("plain SBeacon, \"quoted\"\r\nnext".utf8),
            ]
        case .expansion: return [[0x01, 0x03, 0x07], [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], [0x00]]
        case .rows:
            let at = "2026-12-02T10:00:00.000Z"
            let rows: [[String?]] = [
                [
                    "C0:FE:00:00:00:01", "car", "250", "fixed", "42", #"{"cornering":300,"duration":400}"#, at, "o@hq",
                    at, "b1",
                ],
                ["c0:fe:00:00:00:02", "van", nil, "auto", nil, "{}", at, "office@hq", nil, nil],
                ["C0:FE:00:00:00:01", "car", "99999999999", "fixed", "70000", "{}", at, "o@hq", nil, nil],
                ["C0:FE:00:00:00:01", "car", "-1", "keep", "-5", #"{"cornering":9999}"#, at, "o@hq", nil, nil],
                [
                    "C0:FE:00:00:00:0\u{1B}", "../../../etc/passwd", "1", "sometimes", nil, #"{"cornering":"#, at, "o",
                    nil, nil,
                ],
                [
                    "C0:FE:00:00:00:01", "car", "1", "auto", nil, #"{"braking":60,"braking":70}"#,
                    "2026-02-30T10:00:00.000Z", "o", nil, nil,
                ],
                ["999", "", "9223372036854775807", "", "", "", "", "", "", ""],
            ]
            return rows.map { row in
                Array(row.map { $0.map { Array($0.utf8) } ?? [0x1E] }.joined(separator: [0x1F]))
            }
        case .storedRow:
            func integer(_ value: Int64) -> [UInt8] {
                [1] + (0..<8).reversed().map { UInt8(truncatingIfNeeded: UInt64(bitPattern: value) >> (8 * $0)) }
            }
            func text(_ value: String) -> [UInt8] {
                [3, UInt8(min(255, value.utf8.count))] + Array(value.utf8.prefix(255))
            }
            let address = text("C0:FE:00:00:00:01")
            let time = text("2026-11-30T09:41:07.123Z")
            return [
                [0] + address + time + integer(100) + integer(7) + text("SB-1") + text("S1") + text("A") + text("1.0.8")
                    + integer(80) + integer(1) + time + integer(0) + integer(10) + integer(1000)
                    + integer(1_764_000_000_000) + text("car") + integer(350) + integer(350) + integer(450)
                    + integer(300) + integer(7),
                [2] + integer(5) + integer(1) + address + text("apply car") + text("failed") + [0] + text("boom") + time
                    + integer(1200),
                [3] + address + integer(1_764_000_100_000) + integer(1_764_000_900_000) + integer(1) + time,
                [6] + address + text("van") + integer(200) + text("fixed") + integer(7) + text(#"{"cornering":300}"#)
                    + time + text("test") + text("local"),
                [7] + address + time + integer(Int64.max) + integer(1),
                [10] + text("2026-02-30T00:00:00.000Z"),
                [0] + text("\u{1B}[2J") + [4, 2, 0, 0xFF] + [2] + Array(repeating: 0x7F, count: 8),
            ]
        case .gattText:
            return [
                Array("1.0.8".utf8), Array("SB-1\u{0}\u{0}\u{0}".utf8), [0x1B, 0x5D, 0x30, 0x3B, 0x07, 0x00, 0x1B],
                Array(repeating: 0x41, count: 600),
            ]
        case .dbusWire:
            return WireDifferential.seeds()
        case .dbusValue:
            let map: BusValue = .propertyMap(["RSSI": .int16(-60), "Name": .string("SBeacon")])
            return [
                try WireMessage.marshal(method: "A", body: [.string("x"), .uint32(7), .bytes([1, 2, 3])]),
                try WireMessage.marshal(
                    method: "B",
                    body: [
                        .objectPath("/org/bluez/hci0"),
                        .dictionary(
                            key: .string, value: .variant, [.init(.string("org.bluez.Device1"), .variant(map))]),
                    ]),
                try WireMessage.marshal(
                    method: "C",
                    body: [
                        .variant(.array(.int32, [.int32(1), .int32(2)])), .double(1.5), .structure([.boolean(true)]),
                    ]),
            ]
        }
    }
}
