import SBeaconProtocol

/// How a simulated fleet is made: deterministic from a seed.
public enum FleetGenerator {
    /// `count` beacons, a realistic mix from `seed`: about 15 % factory
    /// default, 10 % more uncalibrated, 10 % with a low battery, 15 % on old
    /// firmware (1.0.6/1.0.7), 5 % moving (calibration fails), the rest
    /// provisioned on 1.0.8.
    public static func make(count: Int, seed: UInt64, now: Int64, fresh: Bool = false) -> [BeaconState] {
        var random = SplitMix64(seed: seed)
        return (0..<count).map { number in
            // Random static addresses: top two bits set.
            let octets = (0..<6).map { index -> UInt8 in
                let byte = UInt8(truncatingIfNeeded: random.next())
                return index == 0 ? byte | 0xC0 : byte
            }
            let address = octets.map { ($0 < 16 ? "0" : "") + String($0, radix: 16).uppercased() }
                .joined(separator: ":")
            let serial = "SB1-\(String(seed % 10_000))-\(String(number + 1))"
            let roll = Double(random.next() >> 11) / Double(1 << 53)
            let firmware: FirmwareVersion =
                random.chance(0.15)
                ? FirmwareVersion(major: 1, minor: 0, patch: random.chance(0.5) ? 6 : 7)
                : FirmwareVersion(major: 1, minor: 0, patch: 8)
            let battery = random.chance(0.10) ? Double(5 + random.next() % 15) : Double(60 + random.next() % 41)
            let poweredOnAt = now - Int64(random.next() % (30 * 24 * 3600)) * 1000
            var state = BeaconState(
                address: address, identity: BeaconIdentity(major: 1, minor: BeaconState.minor(fromSerial: serial)),
                serial: serial, firmware: firmware, battery: battery, config: .factoryDefault,
                calibration: .uncalibrated, timeOffset: 0, poweredOnAt: poweredOnAt, factoryDefault: true)
            if roll >= 0.15, !fresh {
                // Provisioned once, in a car profile; some never calibrated.
                state.factoryDefault = false
                state.identity = BeaconIdentity(major: 100, minor: UInt16(number + 1))
                state.config = DrivingBehaviourConfig(
                    cornering: 350, braking: 400, acceleration: 300, duration: 400,
                    enable: [.detection, .lowPassFilter])
                state.timeOffset = poweredOnAt
                if roll >= 0.25 {
                    var firmwareModel = BeaconFirmware(state: state)
                    _ = firmwareModel.finishCalibration(now: poweredOnAt + 60_000)
                    state = firmwareModel.state
                }
            }
            state.moving = random.chance(0.05)
            state.rssi = Int16(-45 - Int(random.next() % 40))
            state.txPower = 0
            return state
        }
    }
}
