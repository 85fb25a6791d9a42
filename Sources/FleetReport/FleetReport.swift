import Foundation
import Inventory
import Profiles
import SBeaconProtocol

/// Which devices a report covers: the offline selectors of `select`
/// (those that need the radio, `new` and `in-range`, are refused by the
/// console before they get here). No filter: every device.
public enum DeviceFilter: Sendable, Equatable {
    case all
    /// No profile assigned.
    case unprovisioned
    case profile(String)
    case batteryBelow(Int)
    case firmwareBelow(FirmwareVersion)
    case minorRange(UInt16, UInt16)
    case address(String)
    case macEnding(String)

    func matches(_ device: ReportDevice) -> Bool {
        switch self {
        case .all: true
        case .unprovisioned: device.profile == nil
        case .profile(let name): device.profile == name
        case .batteryBelow(let limit): device.battery.map { $0 < limit } ?? false
        case .firmwareBelow(let version):
            device.firmware.flatMap { try? FirmwareVersion($0) }.map { $0 < version } ?? false
        case .minorRange(let low, let high): device.minor.map { Int(low) <= $0 && $0 <= Int(high) } ?? false
        case .address(let address): device.address == address.uppercased()
        case .macEnding(let ending): device.macEnding == ending.lowercased()
        }
    }

    /// The devices `filters` choose, as `select` combines its selectors:
    /// addresses and MAC endings name devices (any of them), every other
    /// filter must hold (`profile=van battery<30` is the vans with a low
    /// battery). No filter: every device.
    public static func chosen(_ devices: [ReportDevice], by filters: [DeviceFilter]) -> [ReportDevice] {
        let naming = filters.filter {
            switch $0 {
            case .address, .macEnding: true
            default: false
            }
        }
        let conditions = filters.filter { filter in !naming.contains(filter) }
        return devices.filter { device in
            (naming.isEmpty || naming.contains { $0.matches(device) }) && conditions.allSatisfy { $0.matches(device) }
        }
    }
}

/// One device as the report shows it: the columns of `devices` it uses,
/// exactly as stored (text from a device is made safe when rendered).
public struct ReportDevice: Sendable, Equatable {
    public var address: String
    public var macEnding: String
    public var major: Int?
    public var minor: Int?
    public var model: String?
    public var serial: String?
    public var firmware: String?
    public var battery: Int?
    public var calibrated: Bool?
    public var calibratedAt: Date?
    public var calibrationVector: (x: Int, y: Int, z: Int)?
    public var profile: String?
    public var lastSeen: Date?
    public var benches: String?

    public init(address: String) {
        self.address = address
        macEnding = ""
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.address == b.address && a.macEnding == b.macEnding && a.major == b.major && a.minor == b.minor
            && a.model == b.model && a.serial == b.serial && a.firmware == b.firmware && a.battery == b.battery
            && a.calibrated == b.calibrated && a.calibratedAt == b.calibratedAt && a.profile == b.profile
            && a.lastSeen == b.lastSeen && a.benches == b.benches
            && a.calibrationVector.map { [$0.x, $0.y, $0.z] } == b.calibrationVector.map { [$0.x, $0.y, $0.z] }
    }

    /// The magnitude of the calibration vector in mG, when calibrated.
    public var magnitude: Double? {
        guard calibrated == true, let vector = calibrationVector else { return nil }
        // In Double: a vector built by hand (not read through the checks,
        // which keep each part within Int16) cannot overflow it.
        let (x, y, z) = (Double(vector.x), Double(vector.y), Double(vector.z))
        return (x * x + y * y + z * z).squareRoot()
    }

    /// The devices of an `inventory export` table (a bench's or the
    /// server's: columns are found by name). Each value is checked as the
    /// inventory's readers check it (`RowCheck`, the `devices` rules): one
    /// that fails is unknown here, a row whose address fails is left out
    /// (the reader that made the table reported them).
    public static func rows(of table: DeviceTable) -> [ReportDevice] {
        var index: [String: Int] = [:]
        for (position, name) in table.columns.enumerated() { index[name] = position }
        func value(_ row: [SQLiteValue], _ name: String) -> SQLiteValue {
            guard let position = index[name], position < row.count else { return .null }
            return row[position]
        }
        return table.rows.compactMap { row in
            var check = RowCheck("devices", key: [value(row, "address")])
            func text(_ name: String) -> String? { check.text(value(row, name), name) }
            func integer(_ name: String) -> Int? { check.integer(value(row, name), name, as: Int.self) }
            func date(_ name: String) -> Date? { check.date(value(row, name), name) }
            guard let address = check.text(value(row, "address"), "address", required: true) else { return nil }
            var device = ReportDevice(address: address)
            device.macEnding = text("mac_ending") ?? ""
            device.major = integer("major")
            device.minor = integer("minor")
            device.model = text("model")
            device.serial = text("serial")
            device.firmware = text("firmware")
            device.battery = integer("battery")
            device.calibrated = integer("calibrated").map { $0 != 0 }
            device.calibratedAt = date("calibrated_at")
            let x = integer("calibration_x")
            let y = integer("calibration_y")
            let z = integer("calibration_z")
            if let x, let y, let z { device.calibrationVector = (x, y, z) }
            device.profile = text("profile")
            device.lastSeen = date("last_seen")
            // The benches that know it (a server): their ids' first 8 characters, as elsewhere.
            device.benches = text("benches").map { text in
                text.split { $0 == "{" || $0 == "}" || $0 == "," || $0 == " " }.map { String($0.prefix(8)) }
                    .joined(separator: " ")
            }
            return device
        }
    }
}

/// When a beacon's battery is expected to fall below its profile's
/// minimum: a least-squares line through its readings.
public struct BatteryProjection: Sendable, Equatable {
    public var device: String
    public var profile: String
    public var minimum: Int
    /// Percent per day (negative: draining).
    public var slopePerDay: Double
    /// The line's value at `now`.
    public var batteryNow: Double
    /// When the line reaches `minimum`: nil when it never does (not
    /// draining), `now` or earlier when it is already below.
    public var crossing: Date?
    public var readings: Int
    public var first: Date
    public var last: Date

    /// Fits a line through `readings` (at least two, at least a day
    /// apart; else nil).
    public static func fit(
        device: String, profile: String, minimum: Int, readings: [BatteryReading], now: Date
    ) -> BatteryProjection? {
        guard readings.count >= 2, let first = readings.map(\.at).min(), let last = readings.map(\.at).max(),
            last.timeIntervalSince(first) >= 86_400
        else { return nil }
        let xs = readings.map { $0.at.timeIntervalSince(first) / 86_400 }
        let ys = readings.map { Double($0.battery) }
        let count = Double(readings.count)
        let meanX = xs.reduce(0, +) / count
        let meanY = ys.reduce(0, +) / count
        var sxy = 0.0
        var sxx = 0.0
        for (x, y) in zip(xs, ys) {
            sxy += (x - meanX) * (y - meanY)
            sxx += (x - meanX) * (x - meanX)
        }
        guard sxx > 0 else { return nil }
        let slope = sxy / sxx
        let intercept = meanY - slope * meanX
        let nowX = now.timeIntervalSince(first) / 86_400
        let batteryNow = intercept + slope * nowX
        var crossing: Date?
        guard slope.isFinite, intercept.isFinite, batteryNow.isFinite else { return nil }
        if batteryNow < Double(minimum) {
            // Already below on the line: when it crossed, if it drains, else
            // now; a line already below at the first reading crossed then.
            let x = slope < 0 ? (Double(minimum) - intercept) / slope : nowX
            crossing = first.addingTimeInterval(max(0, min(x.isFinite ? x : nowX, nowX)) * 86_400)
        } else if slope < 0 {
            let x = (Double(minimum) - intercept) / slope
            // Beyond 20 years is no forecast.
            if x.isFinite, x - nowX < 20 * 365 { crossing = first.addingTimeInterval(x * 86_400) }
        }
        return BatteryProjection(
            device: device, profile: profile, minimum: minimum, slopePerDay: slope, batteryNow: batteryNow,
            crossing: crossing, readings: readings.count, first: first, last: last)
    }
}

/// A fleet report's numbers, computed from an inventory: what the HTML
/// page draws (`ReportPage`). Everything is an aggregate, except the
/// device table and a bounded selection of battery lines.
public struct FleetReport: Sendable {
    public struct Count: Sendable, Equatable {
        public var label: String
        public var value: Int
        public init(_ label: String, _ value: Int) {
            self.label = label
            self.value = value
        }
    }

    public struct TrendPoint: Sendable, Equatable {
        public var period: String
        public var start: Date
        public var mean: Double
        public var minimum: Int
        public var maximum: Int
        public var readings: Int
        public var devices: Int
    }

    public struct DeviceLine: Sendable {
        public var device: String
        public var points: [BatteryReading]
        public var projection: BatteryProjection
    }

    public struct Drift: Sendable, Equatable {
        public var field: String
        public var holds: String
        public var profile: String
        public var wants: String
        public var devices: Int
    }

    public struct Duplicate: Sendable, Equatable {
        public var identity: String
        public var holders: [String]
    }

    public struct BenchDay: Sendable, Equatable {
        public var day: String
        public var bench: String
        public var devices: Int
        public var steps: Int
        public var failed: Int
    }

    public struct BenchSummary: Sendable, Equatable {
        public var bench: String
        public var days: Int
        public var devices: Int
        public var steps: Int
        public var failed: Int
        public var milliseconds: Int
        public var meanStepMilliseconds: Double { steps == 0 ? 0 : Double(milliseconds) / Double(steps) }
        public var devicesPerDay: Double { days == 0 ? 0 : Double(devices) / Double(days) }
    }

    public struct Problem: Sendable, Equatable {
        public var step: String
        public var status: String
        public var reason: String
        public var count: Int
    }

    /// One row of the device table.
    public struct Row: Sendable {
        public var device: ReportDevice
        public var findings: [String]
        /// Days from now to the projected crossing (negative: already below).
        public var crossingDays: Int?
        public var calibrationAgeDays: Int?
        public var magnitude: Int?
    }

    public var source: String
    public var generatedAt: Date
    public var since: Date?
    public var selectors: String
    public var fleetSize: Int
    public var server: Bool
    public var rows: [Row] = []

    public var battery: [Count] = []
    public var batteryUnknown = 0
    public var trendUnit = "day"
    public var trend: [TrendPoint] = []
    public var readingCount = 0
    public var projections: [BatteryProjection] = []
    /// Devices with readings but too few, or too close together, to fit.
    public var unprojected = 0
    public var quarterEnd = Date()
    public var crossingThisQuarter: [BatteryProjection] = []
    public var lines: [DeviceLine] = []
    /// Profile → firmware version → devices.
    public var firmware: [(profile: String, versions: [Count])] = []
    public var firmwareVersions: [String] = []
    public var calibrationAge: [Count] = []
    public var magnitude: [Count] = []
    public var plausible = 0
    public var implausible = 0
    public var driftFields: [Count] = []
    public var drift: [Drift] = []
    public var driftDevices = 0
    public var findings: [Count] = []
    public var devicesWithFindings = 0
    public var duplicates: [Duplicate] = []
    public var activityUnit = "day"
    public var activity: [BenchDay] = []
    public var benches: [BenchSummary] = []
    public var problems: [Problem] = []

    /// Computes the report.
    /// - Parameters:
    ///   - devices: every device of the inventory (`ReportDevice.rows`).
    ///   - subjects: every device as an audit sees it (`auditSubjects()`).
    ///   - history: readings and outcomes since `since`.
    ///   - filters: which devices (none: all); history is cut to them.
    public init(
        source: String, server: Bool, devices allDevices: [ReportDevice], subjects: [AuditSubject],
        history: FleetHistory, profiles: [String: Profile], filters: [DeviceFilter] = [], selectors: String = "",
        since: Date? = nil, now: Date = Date()
    ) {
        self.source = source
        self.server = server
        generatedAt = now
        self.since = since
        self.selectors = selectors
        fleetSize = allDevices.count
        let devices =
            filters.isEmpty ? allDevices : DeviceFilter.chosen(allDevices, by: filters)
        let chosen = Set(devices.map(\.address))
        let everyone = filters.isEmpty

        // The audit sees the whole fleet (a duplicate may be outside the selection).
        let reports = Auditor.auditFleet(subjects, profiles: profiles, now: now)
        var findingsOf: [String: [AuditFinding]] = [:]
        for report in reports where chosen.contains(report.address) { findingsOf[report.address] = report.findings }

        computeBattery(devices)
        let readings = everyone ? history.readings : history.readings.filter { chosen.contains($0.device) }
        computeTrend(readings, devices: devices, profiles: profiles, now: now)
        addBelowNow(devices, profiles: profiles, now: now)
        computeFirmware(devices)
        computeCalibration(devices, now: now)
        computeFindings(findingsOf, profiles: profiles, devices: devices)
        let activity = everyone ? history.activity : history.activity.filter { $0.device.map(chosen.contains) ?? false }
        computeActivity(activity)
        let problems = everyone ? history.problems : history.problems.filter { $0.device.map(chosen.contains) ?? false }
        computeProblems(problems)

        var crossing: [String: Int] = [:]
        for projection in projections + crossingThisQuarter.filter({ $0.readings == 0 }) {
            if let at = projection.crossing,
                let days = Int(exactly: (at.timeIntervalSince(now) / 86_400).rounded(.down))
            {
                // Already below (at or before now) is negative, never 0.
                crossing[projection.device] = at <= now ? min(-1, days) : days
            }
        }
        rows = devices.map { device in
            Row(
                device: device, findings: (findingsOf[device.address] ?? []).map(\.code),
                crossingDays: crossing[device.address],
                calibrationAgeDays: device.calibrated == true
                    ? device.calibratedAt.flatMap { Auditor.wholeDays(now.timeIntervalSince($0)).map { max(0, $0) } }
                    : nil,
                magnitude: device.magnitude.flatMap { Int(exactly: $0.rounded()) })
        }
    }

    // MARK: Battery

    static let batteryBins = ["0–9", "10–19", "20–29", "30–39", "40–49", "50–59", "60–69", "70–79", "80–89", "90–100"]

    mutating func computeBattery(_ devices: [ReportDevice]) {
        var counts = Array(repeating: 0, count: 10)
        for device in devices {
            guard let battery = device.battery else {
                batteryUnknown += 1
                continue
            }
            counts[min(9, max(0, battery / 10))] += 1
        }
        battery = zip(Self.batteryBins, counts).map { Count($0, $1) }
    }

    mutating func computeTrend(
        _ readings: [BatteryReading], devices: [ReportDevice], profiles: [String: Profile], now: Date
    ) {
        readingCount = readings.count
        quarterEnd = UTC.quarterEnd(after: now)
        guard let first = readings.lazy.map(\.at).min(), let last = readings.lazy.map(\.at).max() else { return }
        let span = last.timeIntervalSince(first)
        trendUnit = span <= 2 * 86_400 ? "hour" : span <= 180 * 86_400 ? "day" : "week"
        struct Bucket {
            var start: Date
            // In Double: no sum of readings can overflow it (each is 0–100
            // as read, StoredValues.swift; built by hand, any Int).
            var sum = 0.0
            var count = 0
            var minimum = Int.max
            var maximum = Int.min
            var devices: Set<String> = []

            mutating func add(_ reading: BatteryReading) {
                sum += Double(reading.battery)
                count += 1
                minimum = min(minimum, reading.battery)
                maximum = max(maximum, reading.battery)
                devices.insert(reading.device)
            }
        }
        var buckets: [String: Bucket] = [:]
        // Mutated in place (a copy of a bucket would copy its set of devices).
        for reading in readings {
            let (key, start) = UTC.period(of: reading.at, unit: trendUnit)
            buckets[key, default: Bucket(start: start)].add(reading)
        }
        trend = buckets.map { key, bucket in
            TrendPoint(
                period: key, start: bucket.start, mean: bucket.sum / Double(bucket.count),
                minimum: bucket.minimum, maximum: bucket.maximum, readings: bucket.count, devices: bucket.devices.count)
        }.sorted { $0.start < $1.start }

        // Per device: readings arrive sorted by device, then time.
        let profileOf = Dictionary(devices.map { ($0.address, $0.profile) }, uniquingKeysWith: { a, _ in a })
        var byDevice: [String: [BatteryReading]] = [:]
        for reading in readings { byDevice[reading.device, default: []].append(reading) }
        for (device, points) in byDevice {
            guard let name = profileOf[device] ?? nil, let profile = profiles[name] else { continue }
            let minimum = Int(profile.requirements.minimumBatteryPercent)
            if let projection = BatteryProjection.fit(
                device: device, profile: name, minimum: minimum, readings: points, now: now)
            {
                projections.append(projection)
            } else {
                unprojected += 1
            }
        }
        projections.sort { ($0.crossing ?? .distantFuture, $0.device) < ($1.crossing ?? .distantFuture, $1.device) }
        crossingThisQuarter = projections.filter { $0.crossing.map { $0 <= quarterEnd } ?? false }
        lines = projections.prefix(8).filter { $0.crossing != nil }.map { projection in
            DeviceLine(device: projection.device, points: byDevice[projection.device] ?? [], projection: projection)
        }
    }

    /// Devices whose last battery is already below their profile's
    /// minimum but that have no projection (too few readings): below by
    /// the quarter's end too, listed with no slope.
    mutating func addBelowNow(_ devices: [ReportDevice], profiles: [String: Profile], now: Date) {
        let projected = Set(projections.map(\.device))
        var below: [BatteryProjection] = []
        for device in devices where !projected.contains(device.address) {
            guard let battery = device.battery, let name = device.profile, let profile = profiles[name] else {
                continue
            }
            let minimum = Int(profile.requirements.minimumBatteryPercent)
            guard battery < minimum else { continue }
            below.append(
                BatteryProjection(
                    device: device.address, profile: name, minimum: minimum, slopePerDay: .nan,
                    batteryNow: Double(battery), crossing: now, readings: 0, first: now, last: now))
        }
        crossingThisQuarter += below.sorted { $0.device < $1.device }
    }

    // MARK: Firmware and calibration

    mutating func computeFirmware(_ devices: [ReportDevice]) {
        var overall: [String: Int] = [:]
        for device in devices { overall[device.firmware ?? "unknown", default: 0] += 1 }
        let top = overall.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.prefix(8).map(\.key)
        let shown = Set(top)
        firmwareVersions = top.sorted(by: Self.versionOrder) + (overall.count > top.count ? ["other"] : [])
        var perProfile: [String: [String: Int]] = [:]
        for device in devices {
            let version = device.firmware ?? "unknown"
            perProfile[device.profile ?? "(no profile)", default: [:]][
                shown.contains(version) ? version : "other", default: 0] += 1
        }
        firmware = perProfile.sorted { $0.key < $1.key }.map { profile, counts in
            (profile, firmwareVersions.map { Count($0, counts[$0] ?? 0) })
        }
    }

    static func versionOrder(_ a: String, _ b: String) -> Bool {
        switch (try? FirmwareVersion(a), try? FirmwareVersion(b)) {
        case (let x?, let y?): x < y
        case (.some, nil): true
        case (nil, .some): false
        case (nil, nil): a < b
        }
    }

    static let ageBins = ["< 30 d", "30–89 d", "90–179 d", "180–364 d", "≥ 365 d", "date unknown", "not calibrated"]
    /// Magnitude bins: below 700, 50 mG steps to 1300, then 1300 and above.
    static let magnitudeEdges = Array(stride(from: 700, through: 1300, by: 50))

    mutating func computeCalibration(_ devices: [ReportDevice], now: Date) {
        var ages = Array(repeating: 0, count: Self.ageBins.count)
        var magnitudes = Array(repeating: 0, count: Self.magnitudeEdges.count + 1)
        for device in devices {
            switch device.calibrated {
            case true?:
                if let at = device.calibratedAt {
                    let days = now.timeIntervalSince(at) / 86_400
                    ages[days < 30 ? 0 : days < 90 ? 1 : days < 180 ? 2 : days < 365 ? 3 : 4] += 1
                } else {
                    ages[5] += 1
                }
                if let magnitude = device.magnitude {
                    let bin = Self.magnitudeEdges.lastIndex { Double($0) <= magnitude }.map { $0 + 1 } ?? 0
                    magnitudes[bin] += 1
                    if Auditor.plausibleGravity.contains(magnitude) { plausible += 1 } else { implausible += 1 }
                }
            case false?: ages[6] += 1
            case nil: break
            }
        }
        calibrationAge = zip(Self.ageBins, ages).map { Count($0, $1) }
        let edges = Self.magnitudeEdges
        var labels = ["< \(edges[0])"]
        for index in 0..<(edges.count - 1) { labels.append("\(edges[index])–\(edges[index + 1] - 1)") }
        labels.append("≥ \(edges[edges.count - 1])")
        magnitude = zip(labels, magnitudes).map { Count($0, $1) }
    }

    /// Whether a magnitude bin (by its index) lies outside 1000 ± 150 mG.
    static func isImplausibleBin(_ index: Int) -> Bool {
        let edges = magnitudeEdges
        if index == 0 || index == edges.count { return true }
        let low = Double(edges[index - 1])
        let high = Double(edges[index]) - 1
        return !(Auditor.plausibleGravity.contains(low) && Auditor.plausibleGravity.contains(high))
    }

    // MARK: Findings, drift, duplicates

    static let driftFieldNames = ["cornering", "braking", "acceleration", "duration", "enabled"]

    mutating func computeFindings(
        _ findingsOf: [String: [AuditFinding]], profiles: [String: Profile], devices: [ReportDevice]
    ) {
        var codes: [String: Int] = [:]
        var fields: [String: Int] = [:]
        var pairs: [String: Drift] = [:]
        var shared: [String: Set<String>] = [:]
        let profileOf = Dictionary(devices.map { ($0.address, $0.profile ?? "") }, uniquingKeysWith: { a, _ in a })
        for (address, findings) in findingsOf {
            if !findings.isEmpty { devicesWithFindings += 1 }
            var drifted = false
            for code in Set(findings.map(\.code)) { codes[code, default: 0] += 1 }
            for finding in findings {
                switch finding {
                case .configDiffers(let field, let holds, let wants):
                    drifted = true
                    fields[field, default: 0] += 1
                    let profile = profileOf[address] ?? ""
                    let key = [field, profile, holds, wants].joined(separator: "\u{1F}")
                    pairs[key, default: Drift(field: field, holds: holds, profile: profile, wants: wants, devices: 0)]
                        .devices += 1
                case .duplicateIdentity(let identity, let others):
                    var holders = shared[identity] ?? []
                    holders.insert(address)
                    for other in others { holders.insert(String(other.prefix { $0 != " " })) }
                    shared[identity] = holders
                default: break
                }
            }
            if drifted { driftDevices += 1 }
        }
        findings = codes.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.map { Count($0.key, $0.value) }
        driftFields = Self.driftFieldNames.map { Count($0, fields[$0] ?? 0) }
        drift = pairs.values.sorted {
            ($1.devices, $0.field, $0.profile, $0.holds) < ($0.devices, $1.field, $1.profile, $1.holds)
        }
        // Most holders first, then by major and minor as numbers.
        func order(_ identity: String) -> [Int] { identity.split(separator: ".").map { Int($0) ?? 0 } }
        duplicates = shared.map { Duplicate(identity: $0.key, holders: $0.value.sorted()) }.sorted {
            $0.holders.count != $1.holders.count
                ? $0.holders.count > $1.holders.count : order($0.identity).lexicographicallyPrecedes(order($1.identity))
        }
    }

    // MARK: Activity and problems

    mutating func computeActivity(_ counts: [ActivityCount]) {
        guard !counts.isEmpty else { return }
        let days = Set(counts.map(\.day)).sorted()
        if let first = days.first.flatMap(UTC.date(ofDay:)), let last = days.last.flatMap(UTC.date(ofDay:)) {
            activityUnit = last.timeIntervalSince(first) > 120 * 86_400 ? "week" : "day"
        }
        struct Cell {
            var devices: Set<String> = []
            var steps = 0
            var failed = 0
        }
        var cells: [String: [String: Cell]] = [:]
        struct Bench {
            var days: Set<String> = []
            var devices: Set<String> = []
            var steps = 0
            var failed = 0
            var milliseconds = 0
        }
        var perBench: [String: Bench] = [:]
        for count in counts {
            let period =
                activityUnit == "day"
                ? count.day
                : UTC.date(ofDay: count.day).map { UTC.period(of: $0, unit: "week").0 } ?? count.day
            // Mutated in place (a copy would copy the sets of devices).
            if let device = count.device {
                cells[period, default: [:]][count.bench, default: Cell()].devices.insert(device)
            }
            cells[period, default: [:]][count.bench, default: Cell()].steps += count.steps
            cells[period, default: [:]][count.bench, default: Cell()].failed += count.failed
            perBench[count.bench, default: Bench()].days.insert(count.day)
            if let device = count.device { perBench[count.bench, default: Bench()].devices.insert(device) }
            perBench[count.bench, default: Bench()].steps += count.steps
            perBench[count.bench, default: Bench()].failed += count.failed
            perBench[count.bench, default: Bench()].milliseconds += count.milliseconds
        }
        activity = cells.sorted { $0.key < $1.key }.flatMap { period, benches in
            benches.sorted { $0.key < $1.key }.map { bench, cell in
                BenchDay(day: period, bench: bench, devices: cell.devices.count, steps: cell.steps, failed: cell.failed)
            }
        }
        benches = perBench.sorted { $0.key < $1.key }.map { name, bench in
            BenchSummary(
                bench: name, days: bench.days.count, devices: bench.devices.count, steps: bench.steps,
                failed: bench.failed, milliseconds: bench.milliseconds)
        }
    }

    mutating func computeProblems(_ problems: [StepProblem]) {
        var counts: [String: Problem] = [:]
        for problem in problems {
            let reason = Self.reason(problem.reason)
            let key = [problem.step, problem.status, reason].joined(separator: "\u{1F}")
            counts[key, default: Problem(step: problem.step, status: problem.status, reason: reason, count: 0)].count +=
                1
        }
        self.problems = counts.values.sorted {
            ($1.count, $0.step, $0.status, $0.reason) < ($0.count, $1.step, $1.status, $1.reason)
        }
    }

    /// A reason as grouped: the first line, without the addresses and
    /// numbers that make each device's message unique; firmware versions
    /// (`1.0.6`) are kept, they are the reason.
    static func reason(_ text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        var cut = String(line.prefix(200))
        while let range = cut.range(of: #"([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}"#, options: .regularExpression) {
            cut.replaceSubrange(range, with: "ADDRESS")
        }
        var output = ""
        var rest = cut[...]
        while let digit = rest.firstIndex(where: { $0.isASCII && $0.isNumber }) {
            output += rest[..<digit]
            rest = rest[digit...]
            if let version = rest.prefixMatch(of: /\d+\.\d+\.\d+/) {
                output += version.output
                rest = rest[version.range.upperBound...]
            } else {
                output += "N"
                rest = rest.drop { $0.isASCII && $0.isNumber }
            }
        }
        output += rest
        return output.isEmpty ? "(no reason given)" : output
    }
}

/// UTC days, weeks, hours and quarters, with arithmetic on epoch seconds.
enum UTC {
    static func parts(_ date: Date) -> (year: Int, month: Int, day: Int, hour: Int) {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return (Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour))
    }

    static func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// `2026-11-30`.
    static func day(_ date: Date) -> String {
        let p = parts(date)
        return "\(p.year)-\(two(p.month))-\(two(p.day))"
    }

    /// `2026-11-30 09:41`.
    static func minute(_ date: Date) -> String {
        let minutes = Int((date.timeIntervalSince1970 / 60).rounded(.down))
        return "\(day(date)) \(two(parts(date).hour)):\(two((minutes % 60 + 60) % 60))"
    }

    static func date(ofDay text: String) -> Date? { Inventory.parseTimestamp(text + "T00:00:00.000Z") }

    static func date(year: Int, month: Int, day: Int) -> Date {
        Inventory.parseTimestamp("\(year)-\(two(month))-\(two(day))T00:00:00.000Z") ?? Date(timeIntervalSince1970: 0)
    }

    /// The period a time falls in, as a label and its start.
    static func period(of date: Date, unit: String) -> (String, Date) {
        let seconds = date.timeIntervalSince1970
        switch unit {
        case "hour":
            let start = Date(timeIntervalSince1970: (seconds / 3600).rounded(.down) * 3600)
            return ("\(day(start)) \(two(parts(start).hour)):00", start)
        case "week":
            let days = Int((seconds / 86_400).rounded(.down))
            // 1970-01-01 was a Thursday: weeks start on Monday.
            let monday = days - ((days + 3) % 7 + 7) % 7
            let start = Date(timeIntervalSince1970: Double(monday) * 86_400)
            return ("week of \(day(start))", start)
        default:
            let start = Date(timeIntervalSince1970: (seconds / 86_400).rounded(.down) * 86_400)
            return (day(start), start)
        }
    }

    /// The first moment after the calendar quarter `date` is in.
    static func quarterEnd(after date: Date) -> Date {
        let p = parts(date)
        let nextQuarterMonth = ((p.month - 1) / 3 + 1) * 3 + 1
        return nextQuarterMonth > 12
            ? Self.date(year: p.year + 1, month: 1, day: 1) : Self.date(year: p.year, month: nextQuarterMonth, day: 1)
    }
}
