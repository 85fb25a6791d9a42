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
