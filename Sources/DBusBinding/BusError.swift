/// The name of a D-Bus error, such as `org.bluez.Error.InProgress`.
///
/// An open set: any name a peer sends is kept as it is, and the names this
/// project meets are static members so that `catch` can match them:
///
/// ```swift
/// catch let error as BusError where error.name == .bluez.inProgress { … }
/// ```
public struct BusErrorName: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral,
    CustomStringConvertible
{
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }

    // MARK: org.freedesktop.DBus.Error.*
    public static let failed: Self = "org.freedesktop.DBus.Error.Failed"
    public static let noMemory: Self = "org.freedesktop.DBus.Error.NoMemory"
    public static let serviceUnknown: Self = "org.freedesktop.DBus.Error.ServiceUnknown"
    public static let nameHasNoOwner: Self = "org.freedesktop.DBus.Error.NameHasNoOwner"
    public static let noReply: Self = "org.freedesktop.DBus.Error.NoReply"
    public static let ioError: Self = "org.freedesktop.DBus.Error.IOError"
    public static let badAddress: Self = "org.freedesktop.DBus.Error.BadAddress"
    public static let notSupported: Self = "org.freedesktop.DBus.Error.NotSupported"
    public static let limitsExceeded: Self = "org.freedesktop.DBus.Error.LimitsExceeded"
    public static let accessDenied: Self = "org.freedesktop.DBus.Error.AccessDenied"
    public static let authFailed: Self = "org.freedesktop.DBus.Error.AuthFailed"
    public static let noServer: Self = "org.freedesktop.DBus.Error.NoServer"
    public static let timeout: Self = "org.freedesktop.DBus.Error.Timeout"
    public static let noNetwork: Self = "org.freedesktop.DBus.Error.NoNetwork"
    public static let disconnected: Self = "org.freedesktop.DBus.Error.Disconnected"
    public static let invalidArgs: Self = "org.freedesktop.DBus.Error.InvalidArgs"
    public static let unknownMethod: Self = "org.freedesktop.DBus.Error.UnknownMethod"
    public static let unknownObject: Self = "org.freedesktop.DBus.Error.UnknownObject"
    public static let unknownInterface: Self = "org.freedesktop.DBus.Error.UnknownInterface"
    public static let unknownProperty: Self = "org.freedesktop.DBus.Error.UnknownProperty"
    public static let propertyReadOnly: Self = "org.freedesktop.DBus.Error.PropertyReadOnly"
    public static let timedOut: Self = "org.freedesktop.DBus.Error.TimedOut"
    public static let matchRuleNotFound: Self = "org.freedesktop.DBus.Error.MatchRuleNotFound"
    public static let matchRuleInvalid: Self = "org.freedesktop.DBus.Error.MatchRuleInvalid"
    public static let invalidSignature: Self = "org.freedesktop.DBus.Error.InvalidSignature"
    public static let inconsistentMessage: Self = "org.freedesktop.DBus.Error.InconsistentMessage"
    public static let interactiveAuthorizationRequired: Self =
        "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"

    // MARK: org.bluez.Error.*
    /// BlueZ' error names (`doc/org.bluez.*.rst`, `src/error.h`), as
    /// `.bluez.inProgress` and so on.
    public static let bluez = BlueZ()

    public struct BlueZ: Sendable {
        public var failed: BusErrorName { "org.bluez.Error.Failed" }
        public var inProgress: BusErrorName { "org.bluez.Error.InProgress" }
        public var notReady: BusErrorName { "org.bluez.Error.NotReady" }
        public var notSupported: BusErrorName { "org.bluez.Error.NotSupported" }
        public var notConnected: BusErrorName { "org.bluez.Error.NotConnected" }
        public var alreadyConnected: BusErrorName { "org.bluez.Error.AlreadyConnected" }
        public var alreadyExists: BusErrorName { "org.bluez.Error.AlreadyExists" }
        public var doesNotExist: BusErrorName { "org.bluez.Error.DoesNotExist" }
        public var invalidArguments: BusErrorName { "org.bluez.Error.InvalidArguments" }
        public var invalidOffset: BusErrorName { "org.bluez.Error.InvalidOffset" }
        public var invalidValueLength: BusErrorName { "org.bluez.Error.InvalidValueLength" }
        public var notPermitted: BusErrorName { "org.bluez.Error.NotPermitted" }
        public var notAuthorized: BusErrorName { "org.bluez.Error.NotAuthorized" }
        public var notAvailable: BusErrorName { "org.bluez.Error.NotAvailable" }
        public var notFound: BusErrorName { "org.bluez.Error.NotFound" }
        public var authenticationFailed: BusErrorName { "org.bluez.Error.AuthenticationFailed" }
        public var authenticationCanceled: BusErrorName { "org.bluez.Error.AuthenticationCanceled" }
        public var authenticationRejected: BusErrorName { "org.bluez.Error.AuthenticationRejected" }
        public var authenticationTimeout: BusErrorName { "org.bluez.Error.AuthenticationTimeout" }
        public var connectionAttemptFailed: BusErrorName {
            "org.bluez.Error.ConnectionAttemptFailed"
        }
    }
}

/// An error as D-Bus carries it: a name and a human-readable message.
///
/// Errors from peers keep the name and message they were sent with; errors
/// raised by this binding use the standard `org.freedesktop.DBus.Error.*`
/// names (a timeout is `NoReply`, a closed connection `Disconnected`, a
/// value of the wrong type `InvalidArgs`/`InvalidSignature`). A method
/// handler that throws a `BusError` sends it to the caller by name.
public struct BusError: Error, Sendable, Hashable, CustomStringConvertible {
    public var name: BusErrorName
    public var message: String

    public init(_ name: BusErrorName, _ message: String) {
        self.name = name
        self.message = message
    }

    public var description: String {
        message.isEmpty ? name.rawValue : "\(name.rawValue): \(message)"
    }

    static func invalidArgs(_ message: String) -> BusError { BusError(.invalidArgs, message) }
    static func invalidSignature(_ message: String) -> BusError {
        BusError(.invalidSignature, message)
    }
    static let closed = BusError(.disconnected, "The connection is closed")
}
