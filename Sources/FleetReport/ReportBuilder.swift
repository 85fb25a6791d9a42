import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// The report folded from streams (`ReportReading`): one device at a time,
/// with its readings, outcomes and audit, so that memory does not grow
/// with the fleet. The arithmetic is `FleetReport.init`'s (the same fit,
/// bins, orders and ties: ReportStreamTests compares the two pages byte for
/// byte); what differs is what is kept:
///
/// - the device table's rows go to `rows` as JSON as they are made, never
///   held (the page's data block is written from them, `ReportPage.write`);
/// - of the projections, the crossings this quarter and the devices below
///   their minimum, the page's first `ReportPage.tableRows` and the 8
///   lines (with their readings) are kept, and counts (`Streamed`);
/// - the trend is kept per hour, day and week at once (dropping the units
///   the readings' span already rules out), each bucket's devices counted
///   per device as its readings pass (they arrive by device);
/// - activity per day and per week at once, its devices counted the same
///   way; problems by reason.
///
/// Duplicate identities need the whole fleet: a first pass over the audit
/// subjects keeps one 32-bit key per identity held (4 MB per million
/// devices), the main pass the holders of the identities held twice.
extension FleetReport {
    /// Reads every stream of `reading` once (the subjects twice) and returns
    /// the report and the head of the device table's JSON (its dictionaries,
    /// complete only now); each row's JSON went to `rows` in order.
    public static func streamed(
        source: String, server: Bool, reading: any ReportReading, profiles: [String: Profile],
        filters: [DeviceFilter] = [], selectors: String = "", since: Date? = nil, now: Date = Date(),
        rows: (String) throws -> Void
    ) throws -> (report: FleetReport, tableHead: String) {
        var report = FleetReport(
            source: source, server: server, selectors: selectors, since: since, profiles: profiles, now: now)
        let everyone = filters.isEmpty
        report.quarterEnd = UTC.quarterEnd(after: now)

        // Pass 1: which identities more than one device in service holds.
        var keys: [UInt32] = []
        let first = try reading.subjects()
        while let subject = try first.next() {
            if subject.isInService, let identity = subject.identity { keys.append(Self.key(identity)) }
        }
        keys.sort()
        var duplicated = Set<UInt32>()
        if keys.count > 1 {
            for index in 1..<keys.count where keys[index] == keys[index - 1] { duplicated.insert(keys[index]) }
        }
        keys = []

        var fold = Fold(report: report, profiles: profiles, duplicated: duplicated, now: now)
        var table = DeviceTableSection.TableJSON(server: server, now: now)
        let (columnNames, deviceRows) = try reading.devices()
        let columns = ReportDevice.Columns(columnNames)
        var subjects = Merge(try reading.subjects()) { $0.address }
        var readings = Merge(try reading.readings(since: since)) { $0.device }
        var activity = Merge(try reading.activity(since: since)) { $0.device }
        var problems = Merge(try reading.problems(since: since)) { $0.device }
        var rowCount = 0

        func device(_ device: ReportDevice?) throws {
            let address = device?.address
            let chosen = device.map { everyone || DeviceFilter.chooses(filters, $0) } ?? false
            var subject: AuditSubject?
            try subjects.take(upTo: address) {
                fold.holder($0)
            } own: { found in
                fold.holder(found)
                if subject == nil { subject = found }
            }
            var points: [BatteryReading] = []
            try readings.take(upTo: address) {
                if everyone { fold.trend.add($0) }
            } own: { reading in
                guard chosen else { return }
                fold.trend.add(reading)
                points.append(reading)
            }
            try activity.take(upTo: address) {
                if everyone { fold.activity.add($0) }
            } own: {
                if chosen { fold.activity.add($0) }
            }
            try problems.take(upTo: address) {
                if everyone { fold.add(problem: $0) }
            } own: {
                if chosen { fold.add(problem: $0) }
            }
            guard let device, chosen else { return }
            let row = fold.add(device: device, subject: subject, readings: points)
            let json = table.row(row)
            rowCount += 1
            try rows(json)
        }

        while let row = try deviceRows.next() {
            guard let found = ReportDevice.device(row, columns) else { continue }
            fold.report.fleetSize += 1
            try device(found)
        }
        // What belongs to no device of the table (or comes after the last).
        try device(nil)

        report = fold.finish(rows: rowCount)
        return (report, table.head())
    }

    static func key(_ identity: BeaconIdentity) -> UInt32 { UInt32(identity.major) << 16 | UInt32(identity.minor) }

    /// A stream read in step with the devices: what comes before a device
    /// (or has none) is another's, what has its address is its own.
    struct Merge<Element> {
        let stream: RowStream<Element>
        let device: (Element) -> String?
        var peeked: Element?
        var ended = false

        init(_ stream: RowStream<Element>, device: @escaping (Element) -> String?) {
            self.stream = stream
            self.device = device
        }

        mutating func peek() throws -> Element? {
            if peeked == nil, !ended {
                peeked = try stream.next()
                if peeked == nil { ended = true }
            }
            return peeked
        }

        /// Elements up to `address` (nil: all that are left): those of no
        /// device or of one before it to `other`, its own to `own`.
        mutating func take(
            upTo address: String?, other: (Element) throws -> Void, own: (Element) throws -> Void
        ) throws {
            while let element = try peek() {
                let of = device(element)
                if let address, let of, of == address {
                    try own(element)
                } else if let address, let of, of > address {
                    return
                } else {
                    try other(element)
                }
                peeked = nil
            }
        }
    }

    /// The `n` least of what is added, by `less`; memory for 2 n.
    struct Least<Element> {
        let n: Int
        let less: (Element, Element) -> Bool
        var items: [Element] = []
        var count = 0

        init(n: Int, less: @escaping (Element, Element) -> Bool) {
            self.n = n
            self.less = less
        }

        mutating func add(_ element: Element) {
            count += 1
            items.append(element)
            if items.count >= 2 * max(1, n) { trim() }
        }

        mutating func trim() {
            items.sort(by: less)
            if items.count > n { items.removeLast(items.count - n) }
        }

        func sorted() -> [Element] {
            var copy = self
            copy.trim()
            return copy.items
        }
    }

    /// The trend per hour, day and week at once; the unit is chosen at the
    /// end from the span of the readings, as `computeTrend` chooses it.
    struct TrendFold {
        struct Bucket {
            var sum = 0.0
            var count = 0
            var minimum = Int.max
            var maximum = Int.min
            var devices = 0
        }
        var count = 0
        var first: Date?
        var last: Date?
        var hours: [Int: Bucket]? = [:]
        var days: [Int: Bucket]? = [:]
        var weeks: [Int: Bucket] = [:]
        var device: String?
        var seen: [Set<Int>] = [[], [], []]

        mutating func add(_ reading: BatteryReading) {
            if reading.device != device {
                device = reading.device
                for index in seen.indices { seen[index].removeAll(keepingCapacity: true) }
            }
            count += 1
            first = min(first ?? reading.at, reading.at)
            last = max(last ?? reading.at, reading.at)
            let span = last!.timeIntervalSince(first!)
            if span > 2 * 86_400 { hours = nil }
            if span > 180 * 86_400 { days = nil }
            let seconds = reading.at.timeIntervalSince1970
            if hours != nil {
                let key = Int((seconds / 3600).rounded(.down))
                let new = seen[0].insert(key).inserted
                Self.add(&hours!, key, reading.battery, new: new)
            }
            let day = Int((seconds / 86_400).rounded(.down))
            if days != nil {
                let new = seen[1].insert(day).inserted
                Self.add(&days!, day, reading.battery, new: new)
            }
            let week = day - ((day + 3) % 7 + 7) % 7
            let new = seen[2].insert(week).inserted
            Self.add(&weeks, week, reading.battery, new: new)
        }

        static func add(_ buckets: inout [Int: Bucket], _ key: Int, _ battery: Int, new: Bool) {
            var bucket = buckets[key] ?? Bucket()
            bucket.sum += Double(battery)
            bucket.count += 1
            bucket.minimum = min(bucket.minimum, battery)
            bucket.maximum = max(bucket.maximum, battery)
            if new { bucket.devices += 1 }
            buckets[key] = bucket
        }

        func finish(into report: inout FleetReport) {
            report.readingCount = count
            guard let first, let last else { return }
            let span = last.timeIntervalSince(first)
            let unit = span <= 2 * 86_400 ? "hour" : span <= 180 * 86_400 ? "day" : "week"
            report.trendUnit = unit
            let (buckets, seconds) =
                unit == "hour" ? (hours ?? [:], 3600.0) : unit == "day" ? (days ?? [:], 86_400.0) : (weeks, 86_400.0)
            report.trend = buckets.map { key, bucket in
                let (label, start) = UTC.period(of: Date(timeIntervalSince1970: Double(key) * seconds), unit: unit)
                return TrendPoint(
                    period: label, start: start, mean: bucket.sum / Double(bucket.count), minimum: bucket.minimum,
                    maximum: bucket.maximum, readings: bucket.count, devices: bucket.devices)
            }.sorted { $0.start < $1.start }
        }
    }

    /// Activity per day and per week at once (`computeActivity` chooses
    /// from the days' span at the end); devices counted once per cell and
    /// bench as each device's rows pass.
    struct ActivityFold {
        struct Cell {
            var devices = 0
            var steps = 0
            var failed = 0
        }
        struct Bench {
            var days: Set<String> = []
            var devices = 0
            var steps = 0
            var failed = 0
            var milliseconds = 0
        }
        var firstDay: String?
        var lastDay: String?
        var days: [String: [String: Cell]] = [:]
        var weeks: [String: [String: Cell]] = [:]
        var benches: [String: Bench] = [:]
        var weekOf: [String: String] = [:]
        var device: String?
        var seenDay: Set<String> = []
        var seenWeek: Set<String> = []
        var seenBench: Set<String> = []

        mutating func add(_ count: ActivityCount) {
            if count.device != device {
                device = count.device
                seenDay.removeAll(keepingCapacity: true)
                seenWeek.removeAll(keepingCapacity: true)
                seenBench.removeAll(keepingCapacity: true)
            }
            let day = count.day
            firstDay = min(firstDay ?? day, day)
            lastDay = max(lastDay ?? day, day)
            let week: String
            if let known = weekOf[day] {
                week = known
            } else {
                week = UTC.date(ofDay: day).map { UTC.period(of: $0, unit: "week").0 } ?? day
                weekOf[day] = week
            }
            let bench = count.bench
            let hasDevice = count.device != nil
            let cellKey = "\(day)\u{1F}\(bench)"
            let weekKey = "\(week)\u{1F}\(bench)"
            if hasDevice, seenDay.insert(cellKey).inserted {
                days[day, default: [:]][bench, default: Cell()].devices += 1
            }
            if hasDevice, seenWeek.insert(weekKey).inserted {
                weeks[week, default: [:]][bench, default: Cell()].devices += 1
            }
            days[day, default: [:]][bench, default: Cell()].steps += count.steps
            days[day, default: [:]][bench, default: Cell()].failed += count.failed
            weeks[week, default: [:]][bench, default: Cell()].steps += count.steps
            weeks[week, default: [:]][bench, default: Cell()].failed += count.failed
            benches[bench, default: Bench()].days.insert(day)
            if hasDevice, seenBench.insert(bench).inserted { benches[bench, default: Bench()].devices += 1 }
            benches[bench, default: Bench()].steps += count.steps
            benches[bench, default: Bench()].failed += count.failed
            benches[bench, default: Bench()].milliseconds += count.milliseconds
        }

        func finish(into report: inout FleetReport) {
            guard let firstDay, let lastDay else { return }
            if let first = UTC.date(ofDay: firstDay), let last = UTC.date(ofDay: lastDay) {
                report.activityUnit = last.timeIntervalSince(first) > 120 * 86_400 ? "week" : "day"
            }
            let cells = report.activityUnit == "day" ? days : weeks
            report.activity = cells.sorted { $0.key < $1.key }.flatMap { period, benches in
                benches.sorted { $0.key < $1.key }.map { bench, cell in
                    BenchDay(day: period, bench: bench, devices: cell.devices, steps: cell.steps, failed: cell.failed)
                }
            }
            report.benches = benches.sorted { $0.key < $1.key }.map { name, bench in
                BenchSummary(
                    bench: name, days: bench.days.count, devices: bench.devices, steps: bench.steps,
                    failed: bench.failed, milliseconds: bench.milliseconds)
            }
        }
    }

    /// Everything else, one device at a time.
    struct Fold {
        var report: FleetReport
        let profiles: [String: Profile]
        let duplicated: Set<UInt32>
        let now: Date
        var trend = TrendFold()
        var activity = ActivityFold()
        var problems: [String: Problem] = [:]
        var battery = Array(repeating: 0, count: 10)
        var ages = Array(repeating: 0, count: FleetReport.ageBins.count)
        var magnitudes = Array(repeating: 0, count: FleetReport.magnitudeEdges.count + 1)
        var firmware: [String: [String: Int]] = [:]
        var overall: [String: Int] = [:]
        var codes: [String: Int] = [:]
        var fields: [String: Int] = [:]
        var pairs: [String: Drift] = [:]
        var findingCodes = Set<String>()
        /// Holders of each identity held twice, and those a chosen device's finding names.
        var holders: [UInt32: [String]] = [:]
        var shown = Set<UInt32>()
        var projected = 0
        var lines: Least<(BatteryProjection, [BatteryReading])>
        var crossing: Least<BatteryProjection>
        var below: Least<BatteryProjection>

        init(report: FleetReport, profiles: [String: Profile], duplicated: Set<UInt32>, now: Date) {
            self.report = report
            self.profiles = profiles
            self.duplicated = duplicated
            self.now = now
            let order = { (a: BatteryProjection, b: BatteryProjection) in
                (a.crossing ?? .distantFuture, a.device) < (b.crossing ?? .distantFuture, b.device)
            }
            lines = Least(n: 8, less: { order($0.0, $1.0) })
            crossing = Least(n: ReportPage.tableRows, less: order)
            below = Least(n: ReportPage.tableRows, less: { $0.device < $1.device })
        }

        mutating func holder(_ subject: AuditSubject) {
            guard subject.isInService, let identity = subject.identity else { return }
            let key = FleetReport.key(identity)
            if duplicated.contains(key) { holders[key, default: []].append(subject.address) }
        }

        mutating func add(problem: StepProblem) {
            let reason = FleetReport.reason(problem.reason)
            let key = [problem.step, problem.status, reason].joined(separator: "\u{1F}")
            problems[key, default: Problem(step: problem.step, status: problem.status, reason: reason, count: 0)]
                .count += 1
        }

        /// A chosen device, its audit subject and its readings: its row.
        mutating func add(device: ReportDevice, subject: AuditSubject?, readings: [BatteryReading]) -> Row {
            // Battery distribution.
            if let level = device.battery {
                battery[min(9, max(0, level / 10))] += 1
            } else {
                report.batteryUnknown += 1
            }
            // Projection, or below its minimum already with none.
            var projection: BatteryProjection?
            if !readings.isEmpty, let name = device.profile, let profile = profiles[name] {
                let minimum = Int(profile.requirements.minimumBatteryPercent)
                projection = BatteryProjection.fit(
                    device: device.address, profile: name, minimum: minimum, readings: readings, now: now)
                if let projection {
                    projected += 1
                    lines.add((projection, readings))
                    if let at = projection.crossing, at <= report.quarterEnd { crossing.add(projection) }
                } else {
                    report.unprojected += 1
                }
            }
            if projection == nil, let level = device.battery, let name = device.profile,
                let profile = profiles[name]
            {
                let minimum = Int(profile.requirements.minimumBatteryPercent)
                if level < minimum {
                    let now = now
                    projection = BatteryProjection(
                        device: device.address, profile: name, minimum: minimum, slopePerDay: .nan,
                        batteryNow: Double(level), crossing: now, readings: 0, first: now, last: now)
                    below.add(projection!)
                }
            }
            // Firmware.
            let version = device.firmware ?? "unknown"
            overall[version, default: 0] += 1
            firmware[device.profile ?? "(no profile)", default: [:]][version, default: 0] += 1
            // Calibration.
            switch device.calibrated {
            case true?:
                if let at = device.calibratedAt {
                    let days = now.timeIntervalSince(at) / 86_400
                    ages[days < 30 ? 0 : days < 90 ? 1 : days < 180 ? 2 : days < 365 ? 3 : 4] += 1
                } else {
                    ages[5] += 1
                }
                if let magnitude = device.magnitude {
                    let bin = FleetReport.magnitudeEdges.lastIndex { Double($0) <= magnitude }.map { $0 + 1 } ?? 0
                    magnitudes[bin] += 1
                    if Auditor.plausibleGravity.contains(magnitude) {
                        report.plausible += 1
                    } else {
                        report.implausible += 1
                    }
                }
            case false?: ages[6] += 1
            case nil: break
            }
            // The audit's findings (the whole fleet's duplicates).
            var findings: [AuditFinding] = []
            if let subject {
                findings = Auditor.audit(subject, profiles: profiles, now: now).findings
                if subject.isInService, let identity = subject.identity, duplicated.contains(FleetReport.key(identity))
                {
                    findings.append(.duplicateIdentity(identity: "\(identity.major).\(identity.minor)", others: []))
                    shown.insert(FleetReport.key(identity))
                }
                if !findings.isEmpty { report.devicesWithFindings += 1 }
                var drifted = false
                for code in Set(findings.map(\.code)) { codes[code, default: 0] += 1 }
                for finding in findings {
                    if case .configDiffers(let field, let holds, let wants) = finding {
                        drifted = true
                        fields[field, default: 0] += 1
                        let profile = device.profile ?? ""
                        let key = [field, profile, holds, wants].joined(separator: "\u{1F}")
                        pairs[
                            key, default: Drift(field: field, holds: holds, profile: profile, wants: wants, devices: 0)
                        ].devices += 1
                    }
                }
                if drifted { report.driftDevices += 1 }
            }
            let findingCodes = findings.map(\.code)
            for code in findingCodes { self.findingCodes.insert(code) }
            var crossingDays: Int?
            if let at = projection?.crossing,
                let days = Int(exactly: (at.timeIntervalSince(now) / 86_400).rounded(.down))
            {
                crossingDays = at <= now ? min(-1, days) : days
            }
            return Row(
                device: device, findings: findingCodes, crossingDays: crossingDays,
                calibrationAgeDays: device.calibrated == true
                    ? device.calibratedAt.flatMap { Auditor.wholeDays(now.timeIntervalSince($0)).map { max(0, $0) } }
                    : nil,
                magnitude: device.magnitude.flatMap { Int(exactly: $0.rounded()) })
        }

        mutating func finish(rows: Int) -> FleetReport {
            var report = report
            report.battery = zip(FleetReport.batteryBins, battery).map { Count($0, $1) }
            trend.finish(into: &report)
            let crossingList = crossing.sorted()
            let belowList = below.sorted()
            report.projections = []
            report.lines = lines.sorted().filter { $0.0.crossing != nil }.map { projection, points in
                DeviceLine(device: projection.device, points: points, projection: projection)
            }
            report.crossingThisQuarter = Array((crossingList + belowList).prefix(ReportPage.tableRows))
            // Firmware: the 8 most common versions, the rest as "other".
            let top = overall.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.prefix(8).map(\.key)
            let shownVersions = Set(top)
            report.firmwareVersions =
                top.sorted(by: FleetReport.versionOrder) + (overall.count > top.count ? ["other"] : [])
            report.firmware = firmware.sorted { $0.key < $1.key }.map { profile, versions in
                var counts: [String: Int] = [:]
                for (version, count) in versions {
                    counts[shownVersions.contains(version) ? version : "other", default: 0] += count
                }
                return (profile, report.firmwareVersions.map { Count($0, counts[$0] ?? 0) })
            }
            // Calibration.
            report.calibrationAge = zip(FleetReport.ageBins, ages).map { Count($0, $1) }
            let edges = FleetReport.magnitudeEdges
            var labels = ["< \(edges[0])"]
            for index in 0..<(edges.count - 1) { labels.append("\(edges[index])–\(edges[index + 1] - 1)") }
            labels.append("≥ \(edges[edges.count - 1])")
            report.magnitude = zip(labels, magnitudes).map { Count($0, $1) }
            // Findings.
            report.findings = codes.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.map { Count($0.key, $0.value) }
            report.driftFields = FleetReport.driftFieldNames.map { Count($0, fields[$0] ?? 0) }
            report.drift = pairs.values.sorted {
                ($1.devices, $0.field, $0.profile, $0.holds) < ($0.devices, $1.field, $1.profile, $1.holds)
            }
            func order(_ identity: String) -> [Int] { identity.split(separator: ".").map { Int($0) ?? 0 } }
            report.duplicates = shown.map { key in
                Duplicate(
                    identity: "\(key >> 16).\(key & 0xFFFF)", holders: Array(Set(holders[key] ?? [])).sorted())
            }.sorted {
                $0.holders.count != $1.holders.count
                    ? $0.holders.count > $1.holders.count
                    : order($0.identity).lexicographicallyPrecedes(order($1.identity))
            }
            activity.finish(into: &report)
            report.problems = problems.values.sorted {
                ($1.count, $0.step, $0.status, $0.reason) < ($0.count, $1.step, $1.status, $1.reason)
            }
            report.streamed = Streamed(
                rows: rows, projected: projected, crossing: crossing.count + below.count,
                findingCodes: findingCodes.sorted())
            return report
        }
    }
}
