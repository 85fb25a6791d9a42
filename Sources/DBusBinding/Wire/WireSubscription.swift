/// Signals handed to a subscriber as the bytes they came in: the fast path
/// of `BusConnection.subscribeWire(_:handler:fallback:)`.
///
/// When the binding reads the socket (`InboundBuffer`), a signal is
/// checked whole (`WireMessageView`: header and body, as libdbus' loader
/// checks them) and matched against the subscriptions on its header alone.
/// A wire subscription whose rule matches gets the view, valid only during
/// the call; `dbus_message_demarshal` runs only if some other subscription
/// (a stream, a `BusSignal` handler, the owner tracking) wants the
/// message too. A message the check refuses, a rule that needs the body to
/// decide (`argN`), and every signal when libdbus reads
/// (`BEACONBENCH_DBUS_READER=libdbus`) take the slow path: libdbus decodes
/// and the wire subscriber's `fallback` gets a `BusSignal`, so a subscriber
/// sees every signal once whichever path it took.
struct WireHandler: Sendable {
    let fast: @Sendable (WireMessageView) -> Void
    let fallback: @Sendable (BusSignal) -> Void
}

extension MatchRule {
    /// Whether the rule matches a signal judged from its header alone: nil
    /// when it cannot tell without the body (an `argN` condition).
    func matches(_ header: HeaderView, ownerOf: (String) -> String?) -> Bool? {
        if let kind, kind != .signal { return false }
        guard header.type == 4 else { return false }
        if let sender {
            let expected = sender.isUnique || sender == .bus ? sender.rawValue : ownerOf(sender.rawValue)
            guard let expected, Self.equal(header.field(.sender), expected) else { return false }
        }
        if let interface, !Self.equal(header.field(.interface), interface.rawValue) { return false }
        if let member, !Self.equal(header.field(.member), member.rawValue) { return false }
        if let path, !Self.equal(header.field(.path), path.rawValue) { return false }
        if let pathNamespace {
            guard let bytes = header.field(.path), Self.inNamespace(bytes, pathNamespace.rawValue) else { return false }
        }
        if let destination, !Self.equal(header.field(.destination), destination.rawValue) { return false }
        if !arguments.isEmpty || !argumentPaths.isEmpty || arg0Namespace != nil { return nil }
        return true
    }

    private static func equal(_ bytes: UnsafeRawBufferPointer?, _ text: String) -> Bool {
        guard let bytes else { return false }
        var text = text
        return text.withUTF8 { $0.count == bytes.count && UnsafeRawBufferPointer($0).elementsEqual(bytes) }
    }

    /// `path` is `namespace` or below it (`/a` holds `/a` and `/a/b`, not
    /// `/ab`; `/` holds every path).
    private static func inNamespace(_ path: UnsafeRawBufferPointer, _ namespace: String) -> Bool {
        var namespace = namespace
        return namespace.withUTF8 { prefix in
            if prefix.count == 1 { return true }
            guard path.count >= prefix.count,
                UnsafeRawBufferPointer(rebasing: path[0..<prefix.count]).elementsEqual(
                    UnsafeRawBufferPointer(prefix))
            else { return false }
            return path.count == prefix.count || path[prefix.count] == UInt8(ascii: "/")
        }
    }
}

extension WireName {
    /// The name as an object path: for a name the decoder read as an `o`
    /// (or a header's path field), which the message's check validated.
    public var objectPath: ObjectPath { ObjectPath(unchecked: string) }
}

extension BusMessage {
    /// The message a checked view holds, decoded without libdbus: the same
    /// value `init(_: OpaquePointer)` gives for the same bytes
    /// (`WireDifferential` holds the decoders to each other).
    /// - Throws: `BusError` as `MessageCodec.decodeBody` throws it.
    init(wire view: WireMessageView) throws {
        let header = view.header
        switch header.type {
        case 1: kind = .methodCall
        case 2: kind = .methodReturn
        case 3: kind = .error
        default: kind = .signal
        }
        serial = header.serial
        replySerial = header.replySerial
        sender = header.string(.sender)
        destination = header.string(.destination)
        // The check validated these header fields.
        path = header.string(.path).map { ObjectPath(unchecked: $0) }
        interface = header.string(.interface).map { InterfaceName(unchecked: $0) }
        member = header.string(.member).map { MemberName(unchecked: $0) }
        errorName = header.string(.errorName).map { BusErrorName($0) }
        signature = header.string(.signature) ?? ""
        noReplyExpected = header.fixed.flags & 0x1 != 0
        body = try view.busValues()
    }
}

extension ConnectionCore {
    /// Routes one framed message without libdbus when it can: a signal
    /// (wire subscribers get its bytes; the others a message decoded from
    /// them) or a reply to a call. False when the caller must route it as
    /// before (demarshal, then `route`): a method call (its reply is made
    /// from libdbus' message), or any message the check refuses, which
    /// libdbus then judges.
    func routeWire(_ frame: UnsafeRawBufferPointer) -> Bool {
        guard frame.count > 1 else { return false }
        switch frame[1] {
        case 4:
            // Nobody listens: nothing to decode (as before).
            guard router.isListening else { return true }
            guard let view = try? WireMessageView(validating: frame) else { return false }
            var delivered: [Int] = []
            swap(&delivered, &deliveredFast)
            defer { swap(&delivered, &deliveredFast) }
            guard router.deliverFast(view, delivered: &delivered) else {
                signalsNotDemarshalled += 1
                return true
            }
            // Decoded here or, if the decoders disagree on it (a bug in one
            // of them), by libdbus; the wire subscribers had theirs.
            if let message = try? BusMessage(wire: view) {
                router.follow(message)
                router.deliver(message, excluding: delivered)
                return true
            }
            return !delivered.isEmpty
        case 2, 3:
            guard let view = try? WireMessageView(validating: frame) else { return false }
            guard let serial = view.header.replySerial, let call = calls.complete(serial: serial) else {
                // A reply to no pending call (it timed out or was
                // cancelled) is dropped, as before.
                return true
            }
            call.complete(with: Result { try BusMessage(wire: view) })
            return true
        default:
            return false
        }
    }
}
