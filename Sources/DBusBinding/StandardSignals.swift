// The standard signals, decoded. Each initialiser checks the signature and
// throws `InvalidSignature` on anything else: a hostile or buggy peer gets
// an error, never a trap.

/// `org.freedesktop.DBus.Properties.PropertiesChanged` (`sa{sv}as`).
public struct PropertiesChanged: Sendable, Equatable {
    public var path: ObjectPath
    public var interface: String
    /// New values, variants unwrapped.
    public var changed: [String: BusValue]
    /// Properties whose value changed but was not sent.
    public var invalidated: [String]

    public init(_ signal: BusSignal) throws {
        let body = try signal.body(as: "sa{sv}as")
        path = signal.path
        interface = body[0].string ?? ""
        changed = body[1].stringKeyedDictionary ?? [:]
        invalidated = body[2].stringArray ?? []
    }
}

/// `org.freedesktop.DBus.ObjectManager.InterfacesAdded` (`oa{sa{sv}}`).
public struct InterfacesAdded: Sendable, Equatable {
    public var path: ObjectPath
    /// Interface name → property name → value (variants unwrapped).
    public var interfaces: [String: [String: BusValue]]

    public init(_ signal: BusSignal) throws {
        let body = try signal.body(as: "oa{sa{sv}}")
        guard let path = body[0].objectPath else { throw BusError.invalidSignature("InterfacesAdded without a path") }
        self.path = path
        self.interfaces = Self.interfaceMap(body[1])
    }

    /// Reads `a{sa{sv}}`.
    static func interfaceMap(_ value: BusValue) -> [String: [String: BusValue]] {
        var out: [String: [String: BusValue]] = [:]
        for (name, properties) in value.stringKeyedDictionary ?? [:] {
            out[name] = properties.stringKeyedDictionary ?? [:]
        }
        return out
    }
}

/// `org.freedesktop.DBus.ObjectManager.InterfacesRemoved` (`oas`).
public struct InterfacesRemoved: Sendable, Equatable {
    public var path: ObjectPath
    public var interfaces: [String]

    public init(_ signal: BusSignal) throws {
        let body = try signal.body(as: "oas")
        guard let path = body[0].objectPath else { throw BusError.invalidSignature("InterfacesRemoved without a path") }
        self.path = path
        self.interfaces = body[1].stringArray ?? []
    }
}

/// `org.freedesktop.DBus.NameOwnerChanged` (`sss`): a name gained, lost or
/// changed its owner. An empty owner is reported as nil.
public struct NameOwnerChanged: Sendable, Equatable {
    public var name: String
    public var oldOwner: String?
    public var newOwner: String?

    public init(_ signal: BusSignal) throws {
        try self.init(signal.body(as: "sss"))
    }

    init(_ body: [BusValue]) throws {
        guard body.count == 3, let name = body[0].string, let old = body[1].string, let new = body[2].string else {
            throw BusError.invalidSignature("NameOwnerChanged is not 'sss'")
        }
        self.name = name
        self.oldOwner = old.isEmpty ? nil : old
        self.newOwner = new.isEmpty ? nil : new
    }

    /// The name's owner went away (the peer disconnected or released it).
    public var isVanished: Bool { newOwner == nil }
}

/// Reads the reply of `GetManagedObjects` (`a{oa{sa{sv}}}`).
public func decodeManagedObjects(_ reply: BusMessage) throws -> [ObjectPath: [String: [String: BusValue]]] {
    let body = try reply.body(as: "a{oa{sa{sv}}}")
    var out: [ObjectPath: [String: [String: BusValue]]] = [:]
    for (path, interfaces) in body[0].pathKeyedDictionary ?? [:] {
        out[path] = InterfacesAdded.interfaceMap(interfaces)
    }
    return out
}
