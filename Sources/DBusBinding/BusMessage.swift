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

// Outside the type's body, so that the memberwise initialiser stays: tests
// build messages with it, without libdbus.
extension BusMessage {
    /// Reads the header and body of a libdbus message.
    /// - Throws: `BusError` when the body cannot be decoded (see `MessageCodec`).
    init(_ message: OpaquePointer) throws {
        let type = LibDBus.messageGetType(message)
        switch type {
        case LibDBus.MessageType.methodCall: kind = .methodCall
        case LibDBus.MessageType.methodReturn: kind = .methodReturn
        case LibDBus.MessageType.error: kind = .error
        default: kind = .signal
        }
        serial = LibDBus.messageGetSerial(message)
        let reply = LibDBus.messageGetReplySerial(message)
        replySerial = reply == 0 ? nil : reply
        sender = LibDBus.messageGetSender(message).map { String(cString: $0) }
        destination = LibDBus.messageGetDestination(message).map { String(cString: $0) }
        // libdbus validated these header fields on receipt.
        path = LibDBus.messageGetPath(message).map { ObjectPath(unchecked: String(cString: $0)) }
        interface = LibDBus.messageGetInterface(message).map { InterfaceName(unchecked: String(cString: $0)) }
        member = LibDBus.messageGetMember(message).map { MemberName(unchecked: String(cString: $0)) }
        errorName = LibDBus.messageGetErrorName(message).map { BusErrorName(String(cString: $0)) }
        signature = LibDBus.messageGetSignature(message).map { String(cString: $0) } ?? ""
        noReplyExpected = LibDBus.messageGetNoReply(message)
        body = try MessageCodec.decodeBody(of: message)
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
                LibDBus.messageNewMethodCall(destination, call.path.rawValue, interface, call.member.rawValue)
            }
        }
        guard let message else { throw BusError(.noMemory, "Out of memory") }
        if noReply { LibDBus.messageSetNoReply(message, true) }
        LibDBus.messageSetAutoStart(message, call.autoStart)
        return try filled(message, with: call.body)
    }

    static func signal(
        path: ObjectPath, interface: InterfaceName, member: MemberName, body: [BusValue]
    )
        throws -> OpaquePointer
    {
        guard let message = LibDBus.messageNewSignal(path.rawValue, interface.rawValue, member.rawValue) else {
            throw BusError(.noMemory, "Out of memory")
        }
        return try filled(message, with: body)
    }

    static func methodReturn(to call: OpaquePointer, body: [BusValue]) throws -> OpaquePointer {
        guard let message = LibDBus.messageNewMethodReturn(call) else {
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
        return LibDBus.messageNewError(call, name, text)
    }

    private static func filled(_ message: OpaquePointer, with body: [BusValue]) throws -> OpaquePointer {
        do {
            try MessageCodec.append(body, to: message)
            return message
        } catch {
            LibDBus.messageUnref(message)
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
