import FoundationEssentials
import Inventory
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// The fleet's battery over time, each device's projection and the
/// devices below their minimum by the quarter's end.
extension FleetReport {
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
}
