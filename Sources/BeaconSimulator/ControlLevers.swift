import DBusBinding
import Foundation
import SBeaconProtocol

/// Levers on the beacons' ground truth that the control interface pulls:
/// Update, Drive, Shake.
extension SimulatedBluetoothd {
    /// Changes a beacon's ground truth (battery, moving, range…).
    public func update(_ address: String, _ change: (inout BeaconState) -> Void) async throws {
        guard var firmware = beacons[address] else {
            throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)")
        }
        change(&firmware.state)
        beacons[address] = firmware
        markChanged()
        checkWaiters()
        await advertChanged(address)
    }

    /// Simulates a trip with harsh events.
    public func drive(_ address: String, minutes: UInt32, harshEvents: Int) async throws {
        guard var firmware = beacons[address] else {
            throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)")
        }
        firmware.drive(minutes: minutes, harshEvents: harshEvents, now: Self.now(), random: &driveRandom)
        beacons[address] = firmware
        markChanged()
        // Subscribers see the trip pass through the state machine.
        for status in firmware.lastTripStates {
            for index in adapters.indices {
                await notify(index, address, SBeaconUUID.tripStatus, [status.rawValue])
            }
        }
        await advertChanged(address)
    }

    /// A real-time event now, on every connection that subscribed.
    public func shake(_ address: String, type: DrivingEventType) async throws {
        guard beacons[address] != nil else { throw BusError(.bluez.doesNotExist, "No simulated beacon \(address)") }
        let axis: RealTimeEvent.Axis = type == .cornering ? .lateral : type == .accident ? .radial : .longitudinal
        let flags: RealTimeEvent.StateFlags =
            switch type {
            case .acceleration: .harshAcceleration
            case .braking: .harshBraking
            case .cornering: .normalCornering
            case .accident: [.accidentX, .accidentY]
            }
        let event = RealTimeEvent(type: type, axis: axis, flags: flags)
        for index in adapters.indices {
            await notify(index, address, SBeaconUUID.realTimeEvent, event.bytes)
        }
    }
}
