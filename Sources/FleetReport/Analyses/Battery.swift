import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Battery distribution: devices by their last battery level.
extension FleetReport {
    /// Devices per 10 % bin of their last battery level.
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
}
