import BlueZClient
import DBusBinding
import Inventory

/// Where bluetoothd is, as the console names it: the layers above the
/// workbench never see D-Bus or BlueZ types.
public enum BenchBus: Sendable, Equatable {
    case system, session
    case address(String)

    var busAddress: BusAddress {
        switch self {
        case .system: .system
        case .session: .session
        case .address(let text): .address(text)
        }
    }
}

extension Bench {
    /// `open(bus:adapter:inventory:)` on a bus named the console's way.
    public static func open(bus: BenchBus, adapter: String?, inventory: Inventory) async throws -> Bench {
        try await open(bus: bus.busAddress, adapter: adapter, inventory: inventory)
    }

    /// Whether the error comes from BlueZ (it names itself well enough).
    public static func isBusError(_ error: any Error) -> Bool { error is BlueZError }

    /// Whether opening failed because nobody owns `org.bluez` on the bus
    /// (bluetoothd not running there).
    public static func isBluetoothdMissing(_ error: any Error) -> Bool {
        guard let error = error as? BlueZError, case .bus(let busError) = error.reason else { return false }
        return busError.name == .nameHasNoOwner || busError.name == .serviceUnknown
    }
}

extension Doctor {
    /// `check(bus:adapter:)` on a bus named the console's way.
    public static func check(bus: BenchBus, adapter: String?) async -> [DoctorCheck] {
        await check(bus: bus.busAddress, adapter: adapter)
    }
}
