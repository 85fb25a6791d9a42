import Glibc

/// Which bus to connect to.
public enum BusAddress: Sendable, Hashable, CustomStringConvertible {
    /// `DBUS_SYSTEM_BUS_ADDRESS`, else `unix:path=/run/dbus/system_bus_socket`.
    case system
    /// `DBUS_SESSION_BUS_ADDRESS`.
    case session
    /// An explicit D-Bus address, such as `unix:path=/tmp/bus.sock`.
    case address(String)

    /// `system`, `session`, or anything else as an address.
    public init(parsing text: String) {
        switch text {
        case "system": self = .system
        case "session": self = .session
        default: self = .address(text)
        }
    }

    public var description: String {
        switch self {
        case .system: "system"
        case .session: "session"
        case .address(let address): address
        }
    }

    /// The address libdbus is given.
    /// - Throws: `BusError` named `BadAddress` when a session bus is asked
    ///   for and none is set.
    public func resolved() throws -> String {
        switch self {
        case .system:
            return environment("DBUS_SYSTEM_BUS_ADDRESS") ?? "unix:path=/run/dbus/system_bus_socket"
        case .session:
            guard let address = environment("DBUS_SESSION_BUS_ADDRESS") else {
                throw BusError(.badAddress, "DBUS_SESSION_BUS_ADDRESS is not set: there is no session bus")
            }
            return address
        case .address(let address):
            return address
        }
    }

    private func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }
}

/// A connection to a message bus.
///
/// Each connection has a thread of its own that owns the libdbus connection;
/// every method here may be called from any task, concurrently. Calls have
/// timeouts; a closed connection fails what is pending with `Disconnected`.
/// Dropping the last reference closes the connection.
public final class BusConnection: Sendable {
    let core: ConnectionCore
    /// This connection's unique name on the bus, such as `:1.42`.
    public let uniqueName: String
    /// The address it is connected to.
    public let address: String

    /// The timeout of a call when none is given (libdbus' default).
    public static let defaultTimeout: Duration = .seconds(25)

    private init(core: ConnectionCore, uniqueName: String, address: String) {
        self.core = core
        self.uniqueName = uniqueName
        self.address = address
    }

    deinit {
        core.loop.requestShutdown()
    }

    /// Connects to a bus and registers on it (Hello).
    /// - Throws: `BusError` with libdbus' name and message (`NoServer`,
    ///   `BadAddress`, `FileNotFound`, `AuthFailed`, …).
    public static func connect(_ bus: BusAddress) async throws -> BusConnection {
        let address = try bus.resolved()
        let loop = try EventLoop()
        let core = ConnectionCore(loop: loop)
        do {
            try await core.open(address: address, registerOnBus: true)
        } catch {
            loop.requestShutdown()
            throw error
        }
        return BusConnection(core: core, uniqueName: await core.uniqueName, address: address)
    }

    /// Closes the connection now. Pending calls fail with `Disconnected`,
    /// signal streams finish, running method handlers are cancelled.
    public func close() async {
        await core.close()
    }

    /// False once the connection has closed, by `close()` or because the
    /// bus went away.
    public var isConnected: Bool {
        get async { await core.isOpen }
    }

    // MARK: Calling

    /// Calls a method and waits for the reply.
    /// - Parameter timeout: how long to wait; then the call fails with
    ///   `org.freedesktop.DBus.Error.NoReply` and is forgotten.
    /// - Returns: the method return, body decoded.
    /// - Throws: the peer's error by name and message, `NoReply` on timeout,
    ///   `Disconnected`, `CancellationError` when the task is cancelled.
    @discardableResult
    public func call(_ call: MethodCall, timeout: Duration = defaultTimeout) async throws -> BusMessage {
        try await core.call(call, timeout: timeout)
    }

    /// Calls a method and waits for the reply.
    @discardableResult
    public func call(
        _ destination: BusName, _ path: ObjectPath, _ interface: InterfaceName, _ member: MemberName,
        _ body: [BusValue] = [], timeout: Duration = defaultTimeout
    ) async throws -> BusMessage {
        try await core.call(
            MethodCall(destination: destination, path: path, interface: interface, member: member, body: body),
            timeout: timeout)
    }

    /// Sends a method call flagged as wanting no reply.
    public func send(_ call: MethodCall) async throws {
        try await core.callNoReply(call)
    }

    // MARK: Names

    public struct RequestNameFlags: OptionSet, Sendable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let allowReplacement = RequestNameFlags(rawValue: 1)
        public static let replaceExisting = RequestNameFlags(rawValue: 2)
        public static let doNotQueue = RequestNameFlags(rawValue: 4)
    }

    public enum RequestNameReply: UInt32, Sendable {
        case primaryOwner = 1, inQueue = 2, exists = 3, alreadyOwner = 4
    }

    public enum ReleaseNameReply: UInt32, Sendable {
        case released = 1, nonExistent = 2, notOwner = 3
    }

    /// Asks the bus for a well-known name (`RequestName`).
    public func requestName(
        _ name: BusName, flags: RequestNameFlags = [.doNotQueue]
    ) async throws
        -> RequestNameReply
    {
        let reply = try await callBus("RequestName", [.string(name.rawValue), .uint32(flags.rawValue)])
        guard let code = try reply.body(as: "u")[0].uint32, let result = RequestNameReply(rawValue: code) else {
            throw BusError(.failed, "RequestName answered an unknown code")
        }
        return result
    }

    /// Gives a well-known name back (`ReleaseName`).
    @discardableResult
    public func releaseName(_ name: BusName) async throws -> ReleaseNameReply {
        let reply = try await callBus("ReleaseName", [.string(name.rawValue)])
        guard let code = try reply.body(as: "u")[0].uint32, let result = ReleaseNameReply(rawValue: code) else {
            throw BusError(.failed, "ReleaseName answered an unknown code")
        }
        return result
    }

    /// The unique name that owns `name` now, or nil.
    public func nameOwner(of name: BusName) async throws -> String? {
        try await core.getNameOwner(name.rawValue)
    }

    private func callBus(_ member: MemberName, _ body: [BusValue]) async throws -> BusMessage {
        try await call(.bus, "/org/freedesktop/DBus", .bus, member, body)
    }

    // MARK: Signals

    /// Adds a match rule on the bus (counted: a rule added twice needs two
    /// removals).
    public func addMatch(_ rule: MatchRule) async throws {
        try await core.addMatch(rule)
    }

    /// Removes one use of a match rule.
    public func removeMatch(_ rule: MatchRule) async {
        await core.removeMatch(rule)
    }

    /// Subscribes to the signals matching `rule`.
    ///
    /// The rule is on the bus when this returns, so a signal caused after it
    /// is delivered. The subscription ends, and the rule is removed, when
    /// the stream is dropped or its consumer is cancelled.
    public func signals(
        matching rule: MatchRule,
        bufferingPolicy: AsyncStream<BusSignal>.Continuation.BufferingPolicy = .unbounded
    ) async throws -> AsyncStream<BusSignal> {
        try await core.subscribe(rule, bufferingPolicy: bufferingPolicy)
    }

    /// Subscribes `handler` to the signals matching `rule`, for a subscriber
    /// that runs on this connection's own thread (an actor whose
    /// `unownedExecutor` is `executor`): the handler is called there, for
    /// each signal in the order they came, as soon as it is read — no task
    /// hop, no buffering. It must be quick and must not block. The rule is
    /// on the bus when this returns.
    ///
    /// ```swift
    /// actor Registry {
    ///     nonisolated var unownedExecutor: UnownedSerialExecutor { bus.executor }
    ///     …
    ///     subscription = try await bus.subscribe(rule) { [weak self] signal in
    ///         self?.assumeIsolated { $0.apply(signal) }
    ///     }
    /// }
    /// ```
    public func subscribe(
        _ rule: MatchRule, handler: @escaping @Sendable (BusSignal) -> Void
    ) async throws -> SignalSubscription {
        let id = try await core.subscribe(rule, handler: handler)
        return SignalSubscription(core: core, id: id, rule: rule)
    }

    /// Subscribes to the signals matching `rule` as the bytes they came in,
    /// for a subscriber on this connection's own thread that decodes what
    /// it keeps itself (`BlueZDecoder` into a `WirePropertySink`): `handler`
    /// gets each matching signal checked whole (header and body, as libdbus
    /// checks them) and borrowed, valid only during the call. A signal that
    /// cannot take that path (the check refused it and libdbus did not, a
    /// rule with `argN` conditions, or libdbus reading the socket:
    /// `BEACONBENCH_DBUS_READER=libdbus`) goes to `fallback`, decoded as
    /// for `subscribe(_:handler:)`. Each signal reaches one of the two, in
    /// order; docs/dbus-binding.md, "Fast decoding".
    public func subscribeWire(
        _ rule: MatchRule, handler: @escaping @Sendable (WireMessageView) -> Void,
        fallback: @escaping @Sendable (BusSignal) -> Void
    ) async throws -> SignalSubscription {
        let id = try await core.subscribeWire(rule, WireHandler(fast: handler, fallback: fallback))
        return SignalSubscription(core: core, id: id, rule: rule)
    }

    /// Lets a wake-up for incoming data wait up to `window` before reading,
    /// while no call made on this connection is pending: a listener that
    /// takes thousands of signals a second then reads them in batches, one
    /// wake-up each, at the cost of up to `window` of delay for a signal.
    /// Replies are never delayed (a pending call turns it off, and a call
    /// sent meanwhile ends the wait). Off (zero) unless set; not for a
    /// connection that serves method calls promptly.
    public func coalesceIncoming(upTo window: Duration) async {
        await core.setCoalescing(window)
    }

    /// This connection's thread as a task executor: a task that prefers it
    /// (`withTaskExecutorPreference`) runs its nonisolated code and default
    /// actors here, so that replies and signals resume it with no thread
    /// woken in between. For work that mostly waits on this connection;
    /// nothing run there may block for long.
    public nonisolated var taskExecutor: any TaskExecutor { core.loop }

    /// The serial executor of this connection's thread, for an actor that
    /// takes its signals with `subscribe(_:handler:)`.
    public nonisolated var executor: UnownedSerialExecutor { core.loop.asUnownedSerialExecutor() }

    /// Changes of a name's owner: a peer appearing, or vanishing (its
    /// connection closed or it released the name).
    public func nameOwnerChanges(
        of name: BusName
    ) async throws
        -> AsyncCompactMapSequence<AsyncStream<BusSignal>, NameOwnerChanged>
    {
        try await signals(matching: .nameOwnerChanged(name)).compactMap { try? NameOwnerChanged($0) }
    }

    // MARK: Serving objects

    /// Serves `interface` at `path`, with initial property values. Under an
    /// object manager, announces it with InterfacesAdded.
    /// - Throws: `InvalidArgs` for an undeclared property or a value of the
    ///   wrong type.
    public func export(
        _ interface: BusInterface, at path: ObjectPath, properties: [String: BusValue] = [:]
    )
        async throws
    {
        try await core.export(interface, at: path, values: properties)
    }

    /// Stops serving some interfaces of an object (all of them when nil).
    /// Under an object manager, announces it with InterfacesRemoved.
    public func unexport(_ interfaces: [InterfaceName]? = nil, at path: ObjectPath) async throws {
        try await core.unexport(interfaces, at: path)
    }

    /// Serves `org.freedesktop.DBus.ObjectManager` at `path` for every
    /// object below it.
    public func addObjectManager(at path: ObjectPath) async {
        await core.addObjectManager(at: path)
    }

    public func removeObjectManager(at path: ObjectPath) async {
        await core.removeObjectManager(at: path)
    }

    /// Sets served property values (nil removes one) and emits one
    /// PropertiesChanged with those that changed (removed ones as
    /// invalidated), and with those named in `announcing` even when their
    /// value is the same (bluetoothd announces an advert's data on every
    /// advert under DuplicateData).
    public func setProperties(
        _ changes: [String: BusValue?], interface: InterfaceName, at path: ObjectPath,
        announcing: Set<String> = []
    )
        async throws
    {
        try await core.setProperties(changes, interface: interface, at: path, announcing: announcing)
    }

    /// A served property's current value.
    public func servedProperty(_ name: String, interface: InterfaceName, at path: ObjectPath) async -> BusValue? {
        await core.propertyValue(name, interface: interface, at: path)
    }

    /// Emits a signal from `path`.
    public func emitSignal(
        path: ObjectPath, interface: InterfaceName, member: MemberName, body: [BusValue] = []
    )
        async throws
    {
        try await core.emit(path: path, interface: interface, member: member, body: body)
    }

    // MARK: Diagnostics

    /// Calls waiting for a reply (for tests that check nothing leaks).
    public var pendingCallCount: Int { get async { await core.pendingCallCount } }
    /// Live signal subscriptions.
    public var subscriptionCount: Int { get async { await core.subscriptionCount } }
    /// Method handlers still running.
    public var activeHandlerCount: Int { get async { await core.activeHandlerCount } }
}

// MARK: - Remote properties

extension BusConnection {
    /// `org.freedesktop.DBus.Properties.Get`, the variant unwrapped.
    public func getProperty(
        _ name: String, interface: InterfaceName, at path: ObjectPath, of destination: BusName,
        timeout: Duration = defaultTimeout
    ) async throws -> BusValue {
        let reply = try await call(
            destination, path, .properties, "Get", [.string(interface.rawValue), .string(name)], timeout: timeout)
        return try reply.body(as: "v")[0].unwrapped
    }

    /// `org.freedesktop.DBus.Properties.GetAll`, variants unwrapped.
    public func getAllProperties(
        interface: InterfaceName, at path: ObjectPath, of destination: BusName, timeout: Duration = defaultTimeout
    ) async throws -> [String: BusValue] {
        let reply = try await call(
            destination, path, .properties, "GetAll", [.string(interface.rawValue)], timeout: timeout)
        return try reply.body(as: "a{sv}")[0].stringKeyedDictionary ?? [:]
    }

    /// `org.freedesktop.DBus.Properties.Set`.
    public func setProperty(
        _ name: String, to value: BusValue, interface: InterfaceName, at path: ObjectPath, of destination: BusName,
        timeout: Duration = defaultTimeout
    ) async throws {
        try await call(
            destination, path, .properties, "Set", [.string(interface.rawValue), .string(name), .variant(value)],
            timeout: timeout)
    }

    /// `org.freedesktop.DBus.ObjectManager.GetManagedObjects`.
    public func managedObjects(
        at path: ObjectPath = .root, of destination: BusName, timeout: Duration = defaultTimeout
    ) async throws -> [ObjectPath: [String: [String: BusValue]]] {
        try decodeManagedObjects(
            try await call(destination, path, .objectManager, "GetManagedObjects", timeout: timeout))
    }

    /// `org.freedesktop.DBus.Introspectable.Introspect`.
    public func introspect(
        _ path: ObjectPath, of destination: BusName, timeout: Duration = defaultTimeout
    )
        async throws -> String
    {
        try await call(destination, path, .introspectable, "Introspect", timeout: timeout)
            .body(as: "s")[0].string ?? ""
    }
}

/// A subscription made with `BusConnection.subscribe(_:handler:)`; `cancel()`
/// ends it and drops its match rule.
public struct SignalSubscription: Sendable {
    let core: ConnectionCore
    let id: Int
    let rule: MatchRule

    public func cancel() async {
        await core.unsubscribe(id, rule: rule)
    }
}
