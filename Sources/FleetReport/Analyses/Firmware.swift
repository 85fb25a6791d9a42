import FoundationEssentials
import SBeaconProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Firmware versions per profile.
extension FleetReport {
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
}
