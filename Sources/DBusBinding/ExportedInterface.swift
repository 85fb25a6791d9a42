/// An interface that a connection serves on one or more object paths: its
/// methods (with handlers), properties and signals.
///
/// ```swift
/// let echo = BusInterface(name: "org.example.Echo", methods: [
///     .init(name: "Echo", inputs: [.init("value", .variant)], outputs: [.init("value", .variant)]) { call in
///         call.body
///     },
/// ])
/// try await connection.export(echo, at: "/org/example/echo")
/// ```
public struct BusInterface: Sendable {
    public var name: InterfaceName
    public var methods: [Method]
    public var properties: [Property]
    public var signals: [SignalDescription]

    public init(
        name: InterfaceName, methods: [Method] = [], properties: [Property] = [],
        signals: [SignalDescription] = []
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }

    /// A named, typed argument, for signatures and introspection.
    public struct Argument: Sendable {
        public var name: String?
        public var type: BusType
        public init(_ name: String? = nil, _ type: BusType) {
            self.name = name
            self.type = type
        }
    }

    /// What a method handler is given.
    public struct Invocation: Sendable {
        /// The caller's unique name.
        public var sender: String
        public var path: ObjectPath
        public var interface: InterfaceName
        public var member: MemberName
        /// The arguments, already checked against the method's input types.
        public var body: [BusValue]
    }

    /// Handles a call and returns the reply's values, or throws a `BusError`
    /// to answer with that error. It runs as its own task and may take as
    /// long as it likes (the reply goes out when it returns). It starts on
    /// the connection's thread, saving two thread hops per call: a handler
    /// with heavy synchronous work should move it elsewhere
    /// (`@concurrent` or a task of its own).
    public typealias Handler = nonisolated(nonsending) @Sendable (Invocation) async throws -> [BusValue]

    public struct Method: Sendable {
        public var name: MemberName
        public var inputs: [Argument]
        public var outputs: [Argument]
        public var handler: Handler

        public init(
            name: MemberName, inputs: [Argument] = [], outputs: [Argument] = [],
            handler: @escaping Handler
        ) {
            self.name = name
            self.inputs = inputs
            self.outputs = outputs
            self.handler = handler
        }

        var inputSignature: String { inputs.map(\.type.signature).joined() }
        var outputSignature: String { outputs.map(\.type.signature).joined() }
    }

    public struct Property: Sendable {
        public enum Access: String, Sendable {
            case read, write, readwrite
        }

        /// What `PropertiesChanged` says when the value changes
        /// (`org.freedesktop.DBus.Property.EmitsChangedSignal`).
        public enum ChangeSignal: String, Sendable {
            case emits = "true"
            case invalidates
            case none = "false"
        }

        /// Called by `Properties.Set` with a value of the right type. With a
        /// setter, the interface's owner decides what is stored (by calling
        /// `setProperties`); without one, a writable property stores what it
        /// is given.
        public typealias Setter = nonisolated(nonsending) @Sendable (BusValue, Invocation) async throws -> Void

        public var name: String
        public var type: BusType
        public var access: Access
        public var changeSignal: ChangeSignal
        public var setter: Setter?

        public init(
            _ name: String, _ type: BusType, access: Access = .read, changeSignal: ChangeSignal = .emits,
            setter: Setter? = nil
        ) {
            self.name = name
            self.type = type
            self.access = access
            self.changeSignal = changeSignal
            self.setter = setter
        }
    }

    public struct SignalDescription: Sendable {
        public var name: MemberName
        public var arguments: [Argument]
        public init(name: MemberName, arguments: [Argument] = []) {
            self.name = name
            self.arguments = arguments
        }
    }

    func method(named name: MemberName) -> Method? { methods.first { $0.name == name } }
    func property(named name: String) -> Property? { properties.first { $0.name == name } }

    /// Checks the definition once, at export: property names must be
    /// member names, argument names must be XML-safe.
    func validate() throws {
        for property in properties { _ = try MemberName(property.name) }
        var seen = Set<String>()
        for method in methods {
            guard seen.insert(method.name.rawValue).inserted else {
                throw BusError.invalidArgs("\(name) declares method \(method.name) twice")
            }
        }
    }
}

/// The objects a connection serves, and the object managers among them.
/// A plain value, confined to the connection's thread.
struct ObjectTree {
    struct Entry {
        var definition: BusInterface
        var values: [String: BusValue]
    }

    struct Object {
        /// In the order they were added, for stable introspection.
        var interfaces: [InterfaceName: Entry] = [:]
        var order: [InterfaceName] = []
    }

    private(set) var objects: [ObjectPath: Object] = [:]
    private(set) var managers: Set<ObjectPath> = []

    /// The interfaces every exported object has, listed by GetManagedObjects
    /// and InterfacesAdded as bluetoothd lists them.
    static let standardInterfaces: [InterfaceName] = [.introspectable, .properties]

    subscript(path: ObjectPath) -> Object? { objects[path] }

    func entry(_ path: ObjectPath, _ interface: InterfaceName) -> Entry? {
        objects[path]?.interfaces[interface]
    }

    /// Adds (or replaces) an interface; returns whether the object is new.
    mutating func add(_ definition: BusInterface, values: [String: BusValue], at path: ObjectPath) -> Bool {
        let isNew = objects[path] == nil
        var object = objects[path] ?? Object()
        if object.interfaces[definition.name] == nil { object.order.append(definition.name) }
        object.interfaces[definition.name] = Entry(definition: definition, values: values)
        objects[path] = object
        return isNew
    }

    /// Removes some interfaces (all when `names` is nil); returns those
    /// removed and whether the object is gone.
    mutating func remove(_ names: [InterfaceName]?, at path: ObjectPath) -> (removed: [InterfaceName], objectGone: Bool)
    {
        guard var object = objects[path] else { return ([], false) }
        let removing = names.map { $0.filter { object.interfaces[$0] != nil } } ?? object.order
        for name in removing { object.interfaces[name] = nil }
        object.order.removeAll { removing.contains($0) }
        if object.interfaces.isEmpty {
            objects[path] = nil
            return (removing, true)
        }
        objects[path] = object
        return (removing, false)
    }

    mutating func setValue(_ value: BusValue?, _ name: String, _ interface: InterfaceName, at path: ObjectPath) {
        objects[path]?.interfaces[interface]?.values[name] = value
    }

    mutating func addManager(_ path: ObjectPath) { managers.insert(path) }
    mutating func removeManager(_ path: ObjectPath) { managers.remove(path) }

    /// The closest object manager strictly above `path`.
    func manager(above path: ObjectPath) -> ObjectPath? {
        var current = path.parent
        while let candidate = current {
            if managers.contains(candidate) { return candidate }
            current = candidate.parent
        }
        return nil
    }

    /// The names of the nodes directly below `path` that hold or lead to
    /// objects, for `<node name=…/>`.
    func childNames(of path: ObjectPath) -> [String] {
        var names = Set<String>()
        let depth = path.components.count
        for candidate in objects.keys where path.isAncestor(of: candidate) {
            names.insert(String(candidate.components[depth]))
        }
        return names.sorted()
    }

    /// True when something is exported at or below `path`.
    func hasNode(at path: ObjectPath) -> Bool {
        objects[path] != nil || managers.contains(path) || objects.keys.contains { path.isAncestor(of: $0) }
    }

    /// One object's interfaces as `a{sa{sv}}`, standard interfaces included.
    func interfacesAndProperties(
        at path: ObjectPath, only names: [InterfaceName]? = nil, includeStandard: Bool
    )
        -> BusValue
    {
        var entries: [BusValue.DictEntry] = []
        if includeStandard {
            for name in Self.standardInterfaces {
                entries.append(.init(.string(name.rawValue), .propertyMap([:])))
            }
        }
        if let object = objects[path] {
            for name in names ?? object.order {
                guard let entry = object.interfaces[name] else { continue }
                entries.append(.init(.string(name.rawValue), entry.readableValues))
            }
        }
        return .dictionary(key: .string, value: .propertyMap, entries)
    }

    /// `a{oa{sa{sv}}}` of every object below `manager`.
    func managedObjects(under manager: ObjectPath) -> BusValue {
        let paths = objects.keys.filter { manager.isAncestor(of: $0) }.sorted()
        return .dictionary(
            key: .objectPath, value: .dictionary(key: .string, value: .propertyMap),
            paths.map { .init(.objectPath($0), interfacesAndProperties(at: $0, includeStandard: true)) })
    }
}

extension ObjectTree.Entry {
    /// The readable properties that have a value, as `a{sv}`.
    var readableValues: BusValue {
        var readable: [String: BusValue] = [:]
        for property in definition.properties where property.access != .write {
            if let value = values[property.name] { readable[property.name] = value }
        }
        return .propertyMap(readable)
    }
}
