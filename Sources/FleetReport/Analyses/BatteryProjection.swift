import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

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
