/// The objects a connection serves, and the answers to method calls on them:
/// the exported interfaces (with their handlers), and the standard ones the
/// binding serves itself — `org.freedesktop.DBus.Properties`,
/// `ObjectManager`, `Introspectable` and `Peer`.
///
/// A value with no socket: it answers a call with a reply, an error, a
/// handler to run, or nothing, and a change to the tree returns the signals
/// it causes (InterfacesAdded, InterfacesRemoved, PropertiesChanged) instead
/// of sending them. The connection (`ConnectionCore`) sends the signals
/// first, then the answer, so a peer sees an object announced before the
/// reply that caused it.
struct ObjectServer {
    /// A signal one of our objects sends.
    struct Signal: Sendable, Equatable {
        var path: ObjectPath
        var interface: InterfaceName
        var member: MemberName
        var body: [BusValue]
    }

    /// A handler's work, run as a task of its own on the connection's
    /// thread; what it returns (or throws) is the reply.
    typealias Work = nonisolated(nonsending) @Sendable () async throws -> [BusValue]

    /// What a method call gets.
    enum Answer {
        case reply([BusValue])
        case error(BusError)
        /// Run `Work`, then reply with what it returns.
        case run(Work)
        /// No answer (a message with no path or member).
        case none
    }

    /// The answer to a call, and the signals to send before it.
    struct Response {
        var answer: Answer
        var signals: [Signal] = []
    }

    private(set) var tree = ObjectTree()
    /// This machine's id, for `Peer.GetMachineId` (read once, when first asked).
    lazy var machineID: String = LibDBus.tryGetLocalMachineID() ?? ""

    // MARK: The tree

    /// Exports `interface` at `path` with property `values`; the
    /// InterfacesAdded to send when an object manager is above it.
    mutating func export(
        _ interface: BusInterface, at path: ObjectPath, values: [String: BusValue]
    ) throws -> [Signal] {
        try interface.validate()
        for (name, value) in values {
            guard let property = interface.property(named: name) else {
                throw BusError.invalidArgs("\(interface.name) has no property '\(name)'")
            }
            guard value.type == property.type else {
                throw BusError.invalidArgs(
                    "Property \(interface.name).\(name) is '\(property.type)', given '\(value.type)'")
            }
            try value.checkEncodable()
        }
        let isNew = tree.add(interface, values: values, at: path)
        guard let manager = tree.manager(above: path) else { return [] }
        let interfaces = tree.interfacesAndProperties(at: path, only: [interface.name], includeStandard: isNew)
        return [
            Signal(
                path: manager, interface: .objectManager, member: "InterfacesAdded",
                body: [.objectPath(path), interfaces])
        ]
    }

    /// Removes `interfaces` (all, with nil) at `path`; the InterfacesRemoved
    /// to send when an object manager is above it.
    mutating func unexport(_ interfaces: [InterfaceName]?, at path: ObjectPath) -> [Signal] {
        let (removed, gone) = tree.remove(interfaces, at: path)
        guard !removed.isEmpty, let manager = tree.manager(above: path) else { return [] }
        let names = (gone ? ObjectTree.standardInterfaces : []) + removed
        return [
            Signal(
                path: manager, interface: .objectManager, member: "InterfacesRemoved",
                body: [.objectPath(path), .strings(names.map(\.rawValue))])
        ]
    }

    mutating func addObjectManager(at path: ObjectPath) { tree.addManager(path) }
    mutating func removeObjectManager(at path: ObjectPath) { tree.removeManager(path) }

    /// Sets (or, with nil, removes) property values; the one
    /// PropertiesChanged to send for those that changed.
    mutating func setProperties(
        _ changes: [String: BusValue?], interface: InterfaceName, at path: ObjectPath, announcing: Set<String> = []
    ) throws -> [Signal] {
        guard let entry = tree.entry(path, interface) else {
            throw BusError(.unknownInterface, "No interface \(interface) at \(path)")
        }
        var changed: [String: BusValue] = [:]
        var invalidated: [String] = []
        for (name, value) in changes {
            guard let property = entry.definition.property(named: name) else {
                throw BusError.invalidArgs("\(interface) has no property '\(name)'")
            }
            if let value {
                guard value.type == property.type else {
                    throw BusError.invalidArgs(
                        "Property \(interface).\(name) is '\(property.type)', given '\(value.type)'")
                }
                try value.checkEncodable()
            }
            guard entry.values[name] != value || announcing.contains(name) else { continue }
            switch (property.changeSignal, value) {
            case (.none, _): break
            case (.emits, .some(let value)): changed[name] = value
            case (.emits, .none), (.invalidates, _): invalidated.append(name)
            }
        }
        for (name, value) in changes { tree.setValue(value, name, interface, at: path) }
        guard !changed.isEmpty || !invalidated.isEmpty else { return [] }
        return [
            Signal(
                path: path, interface: .properties, member: "PropertiesChanged",
                body: [.string(interface.rawValue), .propertyMap(changed), .strings(invalidated.sorted())])
        ]
    }

    func propertyValue(_ name: String, interface: InterfaceName, at path: ObjectPath) -> BusValue? {
        tree.entry(path, interface)?.values[name]
    }

    var exportedPaths: [ObjectPath] { Array(tree.objects.keys) }

    // MARK: Answering method calls

    /// The answer to a method call (a message already decoded).
    mutating func answer(_ message: BusMessage) -> Response {
        guard let path = message.path, let member = message.member else { return Response(answer: .none) }
        let object = tree[path]
        // Look the member up in the object's own interfaces first, then in
        // the standard ones the binding serves.
        let interface =
            message.interface
            ?? object?.order.first { object?.interfaces[$0]?.definition.method(named: member) != nil }
            ?? Introspection.standardInterfaces(isObject: true, isManager: true)
            .first { $0.method(named: member) != nil }?.name

        switch (interface, member.rawValue) {
        case (InterfaceName.peer?, "Ping"):
            return Response(answer: .reply([]))
        case (InterfaceName.peer?, "GetMachineId"):
            return Response(answer: .reply([.string(machineID)]))
        case (InterfaceName.introspectable?, "Introspect") where path == .root || tree.hasNode(at: path):
            return Response(answer: .reply([.string(Introspection.xml(for: path, in: tree))]))
        case (InterfaceName.properties?, _) where object != nil:
            return answerProperties(message, path: path)
        case (InterfaceName.objectManager?, "GetManagedObjects") where tree.managers.contains(path):
            return Response(answer: .reply([tree.managedObjects(under: path)]))
        default:
            guard let object else {
                return Response(answer: .error(BusError(.unknownObject, "No such object path '\(path)'")))
            }
            guard let interface, let entry = object.interfaces[interface] else {
                return Response(
                    answer: .error(
                        BusError(
                            .unknownInterface,
                            "No such interface '\(message.interface?.rawValue ?? "")' at object path '\(path)'")))
            }
            guard let method = entry.definition.method(named: member) else {
                return Response(
                    answer: .error(
                        BusError(
                            .unknownMethod,
                            "No such method '\(member)' in interface '\(interface)' at object path '\(path)' (signature '\(message.signature)')"
                        )))
            }
            guard message.signature == method.inputSignature else {
                return Response(
                    answer: .error(
                        BusError(
                            .invalidArgs,
                            "Invalid arguments for \(interface).\(member): expected '\(method.inputSignature)', got '\(message.signature)'"
                        )))
            }
            let invocation = BusInterface.Invocation(
                sender: message.sender ?? "", path: path, interface: interface, member: member, body: message.body)
            let handler = method.handler
            let outputSignature = method.outputSignature
            return Response(
                answer: .run {
                    let values = try await handler(invocation)
                    let signature = values.map(\.type.signature).joined()
                    guard signature == outputSignature else {
                        throw BusError(
                            .failed,
                            "\(interface).\(member) answered '\(signature)' but is declared to answer '\(outputSignature)'"
                        )
                    }
                    return values
                })
        }
    }

    private mutating func answerProperties(_ message: BusMessage, path: ObjectPath) -> Response {
        let member = message.member?.rawValue ?? ""
        let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"][member]
        guard let expected else {
            return Response(
                answer: .error(
                    BusError(.unknownMethod, "No such method '\(member)' in interface '\(InterfaceName.properties)'")))
        }
        guard message.signature == expected, let interfaceText = message.body[0].string else {
            return Response(
                answer: .error(
                    BusError(
                        .invalidArgs,
                        "Invalid arguments for Properties.\(member): expected '\(expected)', got '\(message.signature)'"
                    )
                ))
        }
        guard let interface = try? InterfaceName(interfaceText), let entry = tree.entry(path, interface) else {
            return Response(answer: .error(BusError(.invalidArgs, "No such interface '\(interfaceText)'")))
        }
        if member == "GetAll" {
            return Response(answer: .reply([entry.readableValues]))
        }
        let name = message.body[1].string ?? ""
        guard let property = entry.definition.property(named: name) else {
            return Response(answer: .error(BusError(.invalidArgs, "No such property '\(name)'")))
        }
        if member == "Get" {
            guard property.access != .write, let value = entry.values[name] else {
                return Response(answer: .error(BusError(.invalidArgs, "No such property '\(name)'")))
            }
            return Response(answer: .reply([.variant(value)]))
        }
        guard property.access != .read else {
            return Response(answer: .error(BusError(.propertyReadOnly, "Property '\(name)' is not writable")))
        }
        let value = message.body[2].unwrapped
        guard value.type == property.type else {
            return Response(
                answer: .error(
                    BusError(
                        .invalidArgs,
                        "Property '\(name)' is '\(property.type)', given '\(value.type)'")))
        }
        guard let setter = property.setter else {
            do {
                let signals = try setProperties([name: value], interface: interface, at: path)
                return Response(answer: .reply([]), signals: signals)
            } catch {
                return Response(answer: .error(error as? BusError ?? BusError(.failed, "\(error)")))
            }
        }
        let invocation = BusInterface.Invocation(
            sender: message.sender ?? "", path: path, interface: .properties, member: "Set", body: message.body)
        return Response(
            answer: .run {
                try await setter(value, invocation)
                return []
            })
    }
}

// MARK: - Serving, on the connection

extension ConnectionCore {
    func export(_ interface: BusInterface, at path: ObjectPath, values: [String: BusValue]) throws {
        try emit(server.export(interface, at: path, values: values))
    }

    func unexport(_ interfaces: [InterfaceName]?, at path: ObjectPath) throws {
        try emit(server.unexport(interfaces, at: path))
    }

    func addObjectManager(at path: ObjectPath) { server.addObjectManager(at: path) }
    func removeObjectManager(at path: ObjectPath) { server.removeObjectManager(at: path) }

    /// Sets (or, with nil, removes) property values and emits one
    /// PropertiesChanged for those that changed.
    func setProperties(
        _ changes: [String: BusValue?], interface: InterfaceName, at path: ObjectPath, announcing: Set<String> = []
    ) throws {
        try emit(server.setProperties(changes, interface: interface, at: path, announcing: announcing))
    }

    func propertyValue(_ name: String, interface: InterfaceName, at path: ObjectPath) -> BusValue? {
        server.propertyValue(name, interface: interface, at: path)
    }

    var exportedPaths: [ObjectPath] { server.exportedPaths }

    /// Sends signals of our objects, in order.
    func emit(_ signals: [ObjectServer.Signal]) throws {
        for signal in signals {
            try emit(path: signal.path, interface: signal.interface, member: signal.member, body: signal.body)
        }
    }
}
