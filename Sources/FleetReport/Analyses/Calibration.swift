import FoundationEssentials
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// Calibration age and the calibration vector's magnitude.
extension FleetReport {
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
}
