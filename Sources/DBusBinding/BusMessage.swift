import CDBus

/// A message received from the bus, decoded into Swift values.
///
/// libdbus' `DBusMessage` is not thread-safe; it never leaves the
/// connection's thread. What crosses is this value.
public struct BusMessage: Sendable {
    public enum Kind: Sendable, Hashable {
        case methodCall, methodReturn, error, signal
    }

    public var kind: Kind
    public var serial: UInt32
    public var replySerial: UInt32?
    /// The sender's unique name (`:1.42`), or `org.freedesktop.DBus`.
    public var sender: String?
    public var destination: String?
    public var path: ObjectPath?
    public var interface: InterfaceName?
    public var member: MemberName?
    public var errorName: BusErrorName?
    public var signature: String
    public var body: [BusValue]
    public var noReplyExpected: Bool

    /// Reads the header and body of a libdbus message.
    /// - Throws: `BusError` when the body cannot be decoded (see `MessageCodec`).
    init(_ message: OpaquePointer) throws {
        let type = dbus_message_get_type(message)
        switch type {
        case LibDBus.MessageType.methodCall: kind = .methodCall
        case LibDBus.MessageType.methodReturn: kind = .methodReturn
        case LibDBus.MessageType.error: kind = .error
        default: kind = .signal
        }
        serial = dbus_message_get_serial(message)
        let reply = dbus_message_get_reply_serial(message)
        replySerial = reply == 0 ? nil : reply
        sender = dbus_message_get_sender(message).map { String(cString: $0) }
        destination = dbus_message_get_destination(message).map { String(cString: $0) }
        // libdbus validated these header fields on receipt.
        path = dbus_message_get_path(message).map { ObjectPath(unchecked: String(cString: $0)) }
        interface = dbus_message_get_interface(message).map { InterfaceName(unchecked: String(cString: $0)) }
        member = dbus_message_get_member(message).map { MemberName(unchecked: String(cString: $0)) }
        errorName = dbus_message_get_error_name(message).map { BusErrorName(String(cString: $0)) }
        signature = dbus_message_get_signature(message).map { String(cString: $0) } ?? ""
        noReplyExpected = dbus_message_get_no_reply(message) != 0
        body = try MessageCodec.decodeBody(of: message)
    }

    /// Checks the body's signature and returns the body.
    ///
    /// ```swift
    /// let objects = try reply.body(as: "a{oa{sa{sv}}}")[0]
    /// ```
    /// - Throws: `BusError` named `InvalidSignature` naming both signatures.
    public func body(as expected: Signature) throws -> [BusValue] {
        guard signature == expected.rawValue else {
            throw BusError.invalidSignature(
                "Expected a reply of type '\(expected.rawValue)', got '\(signature)'"
                    + (member.map { " from \($0)" } ?? ""))
        }
        return body
    }

    /// The error this message carries, when it is an error reply.
    var asError: BusError {
        BusError(errorName ?? .failed, body.first?.string ?? "")
    }
}

/// A signal as a subscriber receives it.
public struct BusSignal: Sendable {
    /// The sender's unique name.
    public var sender: String
    public var path: ObjectPath
    public var interface: InterfaceName
    public var member: MemberName
    public var signature: String
    public var body: [BusValue]

    init?(_ message: BusMessage) {
        guard message.kind == .signal, let path = message.path, let interface = message.interface,
            let member = message.member
        else { return nil }
        self.sender = message.sender ?? ""
        self.path = path
        self.interface = interface
        self.member = member
        self.signature = message.signature
        self.body = message.body
    }

    /// Checks the body's signature and returns the body.
    /// - Throws: `BusError` named `InvalidSignature`.
    public func body(as expected: Signature) throws -> [BusValue] {
        guard signature == expected.rawValue else {
            throw BusError.invalidSignature(
                "Signal \(interface).\(member) has type '\(signature)', expected '\(expected.rawValue)'")
        }
        return body
    }
}

/// An outgoing method call.
public struct MethodCall: Sendable {
    public var destination: BusName?
    public var path: ObjectPath
    public var interface: InterfaceName?
    public var member: MemberName
    public var body: [BusValue]
    /// Asks the bus to start `destination` if needed (D-Bus auto-start).
    public var autoStart: Bool = false

    public init(
        destination: BusName?, path: ObjectPath, interface: InterfaceName?, member: MemberName,
        body: [BusValue] = []
    ) {
        self.destination = destination
        self.path = path
        self.interface = interface
        self.member = member
        self.body = body
    }

    var summary: String {
        "\(interface.map { "\($0)." } ?? "")\(member) on \(path)\(destination.map { " at \($0)" } ?? "")"
    }
}

/// Builds libdbus messages. Every name reaching these functions is already
/// a validated type, so libdbus' argument checks cannot fire.
enum OutgoingMessage {
    static func methodCall(_ call: MethodCall, noReply: Bool = false) throws -> OpaquePointer {
        let message = call.destination.withOptionalCString { destination in
            call.interface.withOptionalCString { interface in
                dbus_message_new_method_call(destination, call.path.rawValue, interface, call.member.rawValue)
            }
        }
        guard let message else { throw BusError(.noMemory, "Out of memory") }
        if noReply { dbus_message_set_no_reply(message, 1) }
        dbus_message_set_auto_start(message, call.autoStart ? 1 : 0)
        return try filled(message, with: call.body)
    }

    static func signal(
        path: ObjectPath, interface: InterfaceName, member: MemberName, body: [BusValue]
    )
        throws -> OpaquePointer
    {
        guard let message = dbus_message_new_signal(path.rawValue, interface.rawValue, member.rawValue) else {
            throw BusError(.noMemory, "Out of memory")
        }
        return try filled(message, with: body)
    }

    static func methodReturn(to call: OpaquePointer, body: [BusValue]) throws -> OpaquePointer {
        guard let message = dbus_message_new_method_return(call) else {
            throw BusError(.noMemory, "Out of memory")
        }
        return try filled(message, with: body)
    }

    /// An error reply. A name that is not a valid error name (a handler's
    /// mistake) is sent as `org.freedesktop.DBus.Error.Failed` instead.
    static func error(to call: OpaquePointer, _ error: BusError) -> OpaquePointer? {
        let name = error.name.isValid ? error.name.rawValue : BusErrorName.failed.rawValue
        let text =
            error.message.utf8.contains(0)
            ? String(error.message.split(separator: "\0").joined()) : error.message
        return dbus_message_new_error(call, name, text)
    }

    private static func filled(_ message: OpaquePointer, with body: [BusValue]) throws -> OpaquePointer {
        do {
            try MessageCodec.append(body, to: message)
            return message
        } catch {
            dbus_message_unref(message)
            throw error
        }
    }
}

extension Optional where Wrapped: CustomStringConvertible {
    func withOptionalCString<R>(_ body: (UnsafePointer<CChar>?) -> R) -> R {
        switch self {
        case .some(let value): value.description.withCString { body($0) }
        case .none: body(nil)
        }
    }
}
