import DBusBinding

/// A failed BlueZ operation: which device, which step, which
/// characteristic, and BlueZ' own error name and message when it gave one.
///
/// `description` reads like `C1:67:5E:0B:B9:80: write 53420201-… : org.bluez.Error.Failed:
/// Operation failed with ATT error: 0x13`.
public struct BlueZError: Error, Sendable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// BlueZ (or the bus) answered with this error.
        case bus(BusError)
        /// No answer within the time allowed.
        case timeout(Duration)
        /// The device is not known to bluetoothd (not discovered, or gone).
        case deviceNotFound
        /// No adapter, or not the one asked for.
        case adapterNotFound(String)
        /// Connected, but the services never resolved.
        case servicesNotResolved
        /// A service or characteristic the operation needs is missing.
        case missingAttribute(String)
        /// bluetoothd left the bus (restart or crash) during the operation.
        case bluetoothdGone
        /// The device disconnected during the operation.
        case disconnected
    }

    public var reason: Reason
    /// The device's address, when the error concerns one.
    public var device: String?
    /// What was being done: `connect`, `read`, `write`, `start notifications`…
    public var step: String
    /// The characteristic, when the error concerns one.
    public var characteristic: String?

    public init(_ reason: Reason, device: String? = nil, step: String, characteristic: String? = nil) {
        self.reason = reason
        self.device = device
        self.step = step
        self.characteristic = characteristic
    }

    /// BlueZ' error name, when it gave one.
    public var busErrorName: BusErrorName? {
        if case .bus(let error) = reason { error.name } else { nil }
    }

    /// Whether trying again may succeed: the radio's ordinary misfortunes.
    public var isTransient: Bool {
        switch reason {
        case .timeout, .servicesNotResolved, .disconnected, .bluetoothdGone: return true
        case .bus(let error):
            switch error.name {
            // UnknownObject: the attribute went with a link that dropped.
            // NameHasNoOwner, ServiceUnknown: bluetoothd is restarting.
            case .bluez.inProgress, .bluez.notConnected, .noReply, .bluez.notReady, .unknownObject, .nameHasNoOwner,
                .serviceUnknown:
                return true
            case .bluez.failed:
                let message = error.message.lowercased()
                return message.contains("le-connection-abort-by-local") || message.contains("not connected")
                    || message.contains("connection abort") || message.contains("page timeout")
                    || message.contains("timeout") || message.contains("in progress")
            default: return false
            }
        default: return false
        }
    }

    /// A refusal that a repeat of the same request on the same connection
    /// may not meet: InProgress, or the ATT "unlikely error" (0x0e) a
    /// peripheral answers when it is busy.
    public var isPassingRefusal: Bool {
        guard case .bus(let error) = reason else { return false }
        return error.name == .bluez.inProgress
            || (error.name == .bluez.failed && error.message.contains("ATT error: 0x0e"))
    }

    public var description: String {
        var text = device.map { "\($0): " } ?? ""
        text += step
        if let characteristic { text += " \(characteristic)" }
        switch reason {
        case .bus(let error): text += ": \(error)"
        case .timeout(let limit): text += ": no answer within \(limit)"
        case .deviceNotFound: text += ": the device is not known to bluetoothd (not in range, or not discovered)"
        case .adapterNotFound(let name): text += ": no adapter \(name)"
        case .servicesNotResolved: text += ": connected, but the services did not resolve"
        case .missingAttribute(let what): text += ": \(what) is missing"
        case .bluetoothdGone: text += ": bluetoothd left the bus"
        case .disconnected: text += ": the device disconnected"
        }
        return text
    }
}
