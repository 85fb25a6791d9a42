import FoundationEssentials
import SBeaconProtocol
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// Text the result types share: a beacon's status words, times, a
/// bench's short id. What each result looks like is its own
/// (Output/Results); whether it is JSON or text, the `Renderer`'s.
enum Format {
    static func status(_ summary: BenchSummary?) -> String {
        guard let status = summary?.status else { return "-" }
        var words: [String] = []
        if status.contains(.factoryDefault) { words.append("new") }
        words.append(status.contains(.calibrated) ? "calibrated" : "uncalibrated")
        if status.contains(.tripInProgress) { words.append("trip") }
        if status.contains(.unsyncedRecords) { words.append("records") }
        return words.joined(separator: ",")
    }

    /// A beacon as `scan` announces it: `SBeacon ADDRESS (ENDING) rssi …`.
    static func seenLine(_ beacon: SeenBeacon) -> String {
        var parts = ["SBeacon \(beacon.address) (\(beacon.macEnding))"]
        if let rssi = beacon.rssi { parts.append("rssi \(rssi)") }
        if let identity = beacon.identity { parts.append("\(identity.major).\(identity.minor)") }
        if let summary = beacon.summary {
            parts.append("battery \(summary.battery) %, firmware \(summary.firmware), \(status(summary))")
        }
        return parts.joined(separator: " ")
    }

    static func realTimeText(_ event: RealTimeEvent) -> String {
        let axis =
            switch event.axis {
            case .lateral: "X"
            case .longitudinal: "Y"
            case .vertical: "Z"
            case .radial: "radial"
            }
        return "\(event.type) on \(axis)"
            + (event.flags.isEmpty ? "" : " (flags \(String(event.flags.rawValue, radix: 2)))")
    }

    /// The local time, `HH:MM:SS`.
    static func time() -> String {
        var now = time_t(Date().timeIntervalSince1970)
        var parts = tm()
        localtime_r(&now, &parts)
        return CFormat.string("%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }

    /// An instant in UTC, ISO 8601: `2026-12-02T06:06:18Z`.
    static func timestamp(_ date: Date) -> String {
        date.ISO8601Format()
    }

    /// A bench id as tables show it: its first eight characters.
    static func shortBench(_ id: String) -> String { String(id.prefix(8)) }
}
