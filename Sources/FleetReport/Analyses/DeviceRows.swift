import FoundationEssentials
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// The device table: one row per chosen device, with its finding codes,
/// the days to its projected crossing, its calibration's age and |g|.
extension FleetReport {
    /// One row of the device table.
    public struct Row: Sendable {
        public var device: ReportDevice
        public var findings: [String]
        /// Days from now to the projected crossing (negative: already below).
        public var crossingDays: Int?
        public var calibrationAgeDays: Int?
        public var magnitude: Int?
    }

    /// After the battery analyses (the crossings come from their projections).
    mutating func computeRows(_ devices: [ReportDevice], findingsOf: [String: [AuditFinding]], now: Date) {
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
}
