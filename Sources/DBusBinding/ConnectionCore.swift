import CDBus
import Glibc

/// Everything about one connection that touches libdbus, isolated to the
/// connection's own thread (`EventLoop` is this actor's executor) — except
/// sending method calls, which the calling tasks do themselves through
/// `PendingCalls`, under its lock and libdbus' own.
///
/// Messages are taken off the connection with `dbus_connection_pop_message`
/// and routed here: replies to the pending calls, signals to subscribers,
/// method calls to exported objects. libdbus' own dispatch (and with it its
/// pending-call and object-path machinery) is not used.
actor ConnectionCore {
    let loop: EventLoop
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    private var connection: OpaquePointer?
    private var closeReason: BusError?
    private let io = IOTable()
    private(set) var uniqueName = ""
    private var nextToken = 0
    /// How long a wake-up for incoming data may wait before reading, in
    /// nanoseconds, while no call of ours is pending (0: never).
    var coalescing: UInt64 = 0

    /// Calls we made, sent by the calling tasks themselves.
    nonisolated let calls: PendingCalls

    // Signals we receive.
    private struct Subscription {
        var rule: MatchRule
        var sink: Sink
    }
    /// Where a subscription's signals go: a stream (its consumer resumes
    /// on its own executor), or a handler called right here on the
    /// connection's thread, in order, with no task hop per signal.
    private enum Sink {
        case stream(AsyncStream<BusSignal>.Continuation)
        case handler(@Sendable (BusSignal) -> Void)

        func deliver(_ signal: BusSignal) {
            switch self {
            case .stream(let continuation): continuation.yield(signal)
            case .handler(let handler): handler(signal)
            }
        }

        func finish() {
            if case .stream(let continuation) = self { continuation.finish() }
        }
    }
    private var subscriptions: [Int: Subscription] = [:]
    private var matchRuleUsers: [String: Int] = [:]
    private var nameOwners: [String: String] = [:]
    private var ownerWatchers: [String: Int] = [:]

    // Objects we serve.
    private var tree = ObjectTree()
    private var incomingCalls: [Int: OpaquePointer] = [:]
    private var handlerTasks: [Int: Task<Void, Never>] = [:]
    private lazy var machineID: String = Self.readMachineID()

    init(loop: EventLoop) {
        self.loop = loop
        self.calls = PendingCalls(loop: loop)
    }

    deinit {
        loop.requestShutdown()
    }

    // MARK: Opening and closing

    /// Connects to `address` and says Hello (`dbus_connection_open_private`,
    /// `dbus_bus_register`), with exit-on-disconnect turned off.
    func open(address: String, registerOnBus: Bool) throws {
        _ = LibDBus.threadsInitialised
        guard !address.utf8.contains(0) else { throw BusError(.badAddress, "The bus address contains a NUL byte") }
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let opened = dbus_connection_open_private(address, &error) else {
            throw BusError(libdbus: error, otherwise: "Cannot connect to \(address)")
        }
        dbus_connection_set_exit_on_disconnect(opened, 0)
        if registerOnBus, dbus_bus_register(opened, &error) == 0 {
            dbus_connection_close(opened)
            dbus_connection_unref(opened)
            throw BusError(libdbus: error, otherwise: "The bus at \(address) refused Hello")
        }
        guard io.install(on: opened) else {
            dbus_connection_close(opened)
            dbus_connection_unref(opened)
            throw BusError(.noMemory, "Out of memory while setting up the connection")
        }
        if registerOnBus, let name = dbus_bus_get_unique_name(opened) { uniqueName = String(cString: name) }
        connection = opened
        calls.attach(opened)
        loop.attach(self)
    }

    var isOpen: Bool { connection != nil }

    /// Closes the connection: pending calls fail with `Disconnected`,
    /// subscriptions finish, handlers are cancelled.
    func close(reason: BusError = .closed) {
        guard let opened = connection else { return }
        connection = nil
        closeReason = reason
        for call in calls.detach(reason: reason) { call.continuation.resume(throwing: reason) }
        let sinks = subscriptions.values.map(\.sink)
        subscriptions.removeAll()
        for sink in sinks { sink.finish() }
        for task in handlerTasks.values { task.cancel() }
        handlerTasks.removeAll()
        for message in incomingCalls.values { dbus_message_unref(message) }
        incomingCalls.removeAll()
        dbus_connection_close(opened)
        dbus_connection_unref(opened)
        loop.requestShutdown()
    }

    // MARK: The loop's work between jobs

    /// Waits for the socket (or a new job, or the next deadline), then does
    /// the I/O libdbus asks for and routes every complete message.
    func pollOnce(blocking: Bool) {
        if loop.isShutdownRequested, connection != nil {
            close()
            return
        }
        var fds = [pollfd(fd: loop.wakeReadFD, events: Int16(POLLIN), revents: 0)]
        var polled: [OpaquePointer] = []
        for watch in io.watches where dbus_watch_get_enabled(watch) != 0 {
            let flags = dbus_watch_get_flags(watch)
            var events: Int16 = 0
            if flags & LibDBus.WatchFlags.readable != 0 { events |= Int16(POLLIN) }
            if flags & LibDBus.WatchFlags.writable != 0 { events |= Int16(POLLOUT) }
            fds.append(pollfd(fd: dbus_watch_get_unix_fd(watch), events: events, revents: 0))
            polled.append(watch)
        }
        var timeout: Int32 = blocking ? -1 : 0
        if blocking, let next = calls.prepareToSleep(other: io.nextDeadline) {
            let now = monotonicNanoseconds()
            let milliseconds = next > now ? (next - now + 999_999) / 1_000_000 : 0
            timeout = Int32(min(milliseconds, UInt64(Int32.max)))
        }
        let ready = poll(&fds, nfds_t(fds.count), timeout)
        if blocking, ready > 0, coalescing > 0, fds[0].revents == 0, calls.prepareToLinger() {
            linger()
        }
        if blocking { calls.markAwake() }
        if ready > 0 {
            if fds[0].revents != 0 { loop.drainWakePipe() }
            for (index, watch) in polled.enumerated() where fds[index + 1].revents != 0 {
                guard io.contains(watch) else { continue }
                let revents = fds[index + 1].revents
                var flags: UInt32 = 0
                if revents & Int16(POLLIN) != 0 { flags |= LibDBus.WatchFlags.readable }
                if revents & Int16(POLLOUT) != 0 { flags |= LibDBus.WatchFlags.writable }
                if revents & Int16(POLLERR) != 0 { flags |= LibDBus.WatchFlags.error }
                if revents & Int16(POLLHUP) != 0 { flags |= LibDBus.WatchFlags.hangup }
                dbus_watch_handle(watch, flags)
            }
        }
        let now = monotonicNanoseconds()
        io.fireDueTimeouts(now: now)
        routeIncoming()
        expireCalls(now: now)
    }

    /// Waits up to `coalescing` on the wake pipe alone, so that the data
    /// that woke the loop is read together with what follows it: a stream
    /// of signals (thousands of adverts a second) then costs one wake-up
    /// per batch instead of one per signal. A job or a call ends the wait.
    private func linger() {
        var wake = pollfd(fd: loop.wakeReadFD, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(min(coalescing / 1_000_000, 1000))
        if poll(&wake, 1, milliseconds) > 0 { loop.drainWakePipe() }
    }

    func setCoalescing(_ window: Duration) { coalescing = window.nanoseconds }

    private func routeIncoming() {
        while let opened = connection, let message = dbus_connection_pop_message(opened) {
            route(message)
            dbus_message_unref(message)
        }
        if let opened = connection, dbus_connection_get_is_connected(opened) == 0 {
            close(reason: BusError(.disconnected, "The bus closed the connection"))
        }
    }

    private func route(_ message: OpaquePointer) {
        switch dbus_message_get_type(message) {
        case LibDBus.MessageType.methodReturn, LibDBus.MessageType.error:
            guard let call = calls.complete(serial: dbus_message_get_reply_serial(message)) else { return }
            do {
                let reply = try BusMessage(message)
                if reply.kind == .error {
                    call.continuation.resume(throwing: reply.asError)
                } else {
                    call.continuation.resume(returning: reply)
                }
            } catch {
                call.continuation.resume(throwing: error)
            }
        case LibDBus.MessageType.signal:
            routeSignal(message)
        case LibDBus.MessageType.methodCall:
            handleMethodCall(message)
        default:
            break
        }
    }

    private func routeSignal(_ raw: OpaquePointer) {
        if dbus_message_is_signal(raw, InterfaceName.local.rawValue, "Disconnected") != 0 {
            close(reason: BusError(.disconnected, "The bus closed the connection"))
            return
        }
        // Nobody listens: no need to decode it.
        guard !subscriptions.isEmpty || !ownerWatchers.isEmpty, let message = try? BusMessage(raw) else { return }
        if message.sender == BusName.bus.rawValue, message.member?.rawValue == "NameOwnerChanged",
            let change = try? NameOwnerChanged(message.body), ownerWatchers[change.name] != nil
        {
            nameOwners[change.name] = change.newOwner
        }
        guard !subscriptions.isEmpty, let signal = BusSignal(message) else { return }
        for subscription in subscriptions.values
        where subscription.rule.matches(message, ownerOf: { self.nameOwners[$0] }) {
            subscription.sink.deliver(signal)
        }
    }

    private func expireCalls(now: UInt64) {
        for call in calls.expire(now: now) {
            call.continuation.resume(
                throwing: BusError(.noReply, "No reply within \(call.timeout) to \(call.call.summary)"))
        }
    }

    // MARK: Sending

    private func send(_ message: OpaquePointer) throws -> UInt32 {
        guard let opened = connection else { throw closeReason ?? .closed }
        var serial: UInt32 = 0
        guard dbus_connection_send(opened, message, &serial) != 0 else {
            throw BusError(.noMemory, "Out of memory while sending")
        }
        return serial
    }

    /// Sends a method call and waits for its reply.
    ///
    /// Runs on the calling task's thread: the message is encoded and handed
    /// to libdbus there (see `PendingCalls`), and the reply, routed by the
    /// connection's thread, resumes the task.
    nonisolated func call(_ call: MethodCall, timeout: Duration) async throws -> BusMessage {
        let message = try OutgoingMessage.methodCall(call)
        let token = calls.makeToken()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                defer { dbus_message_unref(message) }
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                do {
                    try calls.send(message, token: token, call: call, timeout: timeout, continuation: continuation)
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            calls.cancel(token: token)?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Sends a method call that wants no reply.
    func callNoReply(_ call: MethodCall) throws {
        let message = try OutgoingMessage.methodCall(call, noReply: true)
        defer { dbus_message_unref(message) }
        _ = try send(message)
    }

    /// Sends a signal from one of our objects.
    func emit(path: ObjectPath, interface: InterfaceName, member: MemberName, body: [BusValue]) throws {
        let message = try OutgoingMessage.signal(path: path, interface: interface, member: member, body: body)
        defer { dbus_message_unref(message) }
        _ = try send(message)
    }

    nonisolated var pendingCallCount: Int { calls.count }
    var subscriptionCount: Int { subscriptions.count }
    var activeHandlerCount: Int { handlerTasks.count }

    // MARK: Match rules and subscriptions

    private func busCall(_ member: MemberName, _ body: [BusValue]) async throws -> BusMessage {
        try await call(
            MethodCall(destination: .bus, path: "/org/freedesktop/DBus", interface: .bus, member: member, body: body),
            timeout: .seconds(25))
    }

    /// Adds a match rule on the bus, once per distinct rule however many
    /// users it has.
    func addMatch(_ rule: MatchRule) async throws {
        let text = rule.description
        matchRuleUsers[text, default: 0] += 1
        guard matchRuleUsers[text] == 1 else { return }
        do {
            _ = try await busCall("AddMatch", [.string(text)])
        } catch {
            releaseMatchCount(text)
            throw error
        }
    }

    /// Drops one user of a match rule; the last one removes it from the bus.
    func removeMatch(_ rule: MatchRule) {
        let text = rule.description
        guard matchRuleUsers[text] != nil else { return }
        if releaseMatchCount(text), connection != nil {
            try? callNoReply(
                MethodCall(
                    destination: .bus, path: "/org/freedesktop/DBus", interface: .bus,
                    member: "RemoveMatch", body: [.string(text)]))
        }
    }

    /// Returns true when the rule has no user left.
    @discardableResult
    private func releaseMatchCount(_ text: String) -> Bool {
        let left = (matchRuleUsers[text] ?? 1) - 1
        matchRuleUsers[text] = left > 0 ? left : nil
        return left <= 0
    }

    func subscribe(
        _ rule: MatchRule, bufferingPolicy: AsyncStream<BusSignal>.Continuation.BufferingPolicy
    )
        async throws -> AsyncStream<BusSignal>
    {
        guard connection != nil else { throw closeReason ?? .closed }
        let (stream, continuation) = AsyncStream.makeStream(of: BusSignal.self, bufferingPolicy: bufferingPolicy)
        let id = try await addSubscription(rule, .stream(continuation))
        continuation.onTermination = { [weak self] _ in
            Task { await self?.unsubscribe(id, rule: rule) }
        }
        return stream
    }

    /// Subscribes `handler`, called on this connection's thread for each
    /// matching signal, in order; returns the token `unsubscribe` takes.
    func subscribe(_ rule: MatchRule, handler: @escaping @Sendable (BusSignal) -> Void) async throws -> Int {
        guard connection != nil else { throw closeReason ?? .closed }
        return try await addSubscription(rule, .handler(handler))
    }

    private func addSubscription(_ rule: MatchRule, _ sink: Sink) async throws -> Int {
        nextToken += 1
        let id = nextToken
        subscriptions[id] = Subscription(rule: rule, sink: sink)
        do {
            if let sender = rule.sender, !sender.isUnique, sender != .bus {
                try await watchOwner(of: sender.rawValue)
            }
            try await addMatch(rule)
        } catch {
            subscriptions[id] = nil
            sink.finish()
            throw error
        }
        return id
    }

    func unsubscribe(_ id: Int, rule: MatchRule) {
        guard subscriptions.removeValue(forKey: id) != nil else { return }
        removeMatch(rule)
        if let sender = rule.sender, !sender.isUnique, sender != .bus {
            unwatchOwner(of: sender.rawValue)
        }
    }

    private func watchOwner(of name: String) async throws {
        ownerWatchers[name, default: 0] += 1
        guard ownerWatchers[name] == 1 else { return }
        do {
            try await addMatch(.nameOwnerChanged(try BusName(name)))
            nameOwners[name] = try await getNameOwner(name)
        } catch {
            unwatchOwner(of: name)
            throw error
        }
    }

    private func unwatchOwner(of name: String) {
        let left = (ownerWatchers[name] ?? 1) - 1
        ownerWatchers[name] = left > 0 ? left : nil
        if left <= 0 {
            nameOwners[name] = nil
            if let busName = try? BusName(name) { removeMatch(.nameOwnerChanged(busName)) }
        }
    }

    /// The unique name owning `name`, or nil when nobody owns it.
    func getNameOwner(_ name: String) async throws -> String? {
        do {
            return try await busCall("GetNameOwner", [.string(name)]).body(as: "s")[0].string
        } catch let error as BusError where error.name == .nameHasNoOwner {
            return nil
        }
    }

    // MARK: Serving objects

    func export(_ interface: BusInterface, at path: ObjectPath, values: [String: BusValue]) throws {
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
        if let manager = tree.manager(above: path) {
            let interfaces = tree.interfacesAndProperties(at: path, only: [interface.name], includeStandard: isNew)
            try emit(
                path: manager, interface: .objectManager, member: "InterfacesAdded",
                body: [.objectPath(path), interfaces])
        }
    }

    func unexport(_ interfaces: [InterfaceName]?, at path: ObjectPath) throws {
        let (removed, gone) = tree.remove(interfaces, at: path)
        guard !removed.isEmpty, let manager = tree.manager(above: path) else { return }
        let names = (gone ? ObjectTree.standardInterfaces : []) + removed
        try emit(
            path: manager, interface: .objectManager, member: "InterfacesRemoved",
            body: [.objectPath(path), .strings(names.map(\.rawValue))])
    }

    func addObjectManager(at path: ObjectPath) { tree.addManager(path) }
    func removeObjectManager(at path: ObjectPath) { tree.removeManager(path) }

    /// Sets (or, with nil, removes) property values and emits one
    /// PropertiesChanged for those that changed.
    func setProperties(
        _ changes: [String: BusValue?], interface: InterfaceName, at path: ObjectPath, announcing: Set<String> = []
    ) throws {
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
        guard !changed.isEmpty || !invalidated.isEmpty else { return }
        try emit(
            path: path, interface: .properties, member: "PropertiesChanged",
            body: [.string(interface.rawValue), .propertyMap(changed), .strings(invalidated.sorted())])
    }

    func propertyValue(_ name: String, interface: InterfaceName, at path: ObjectPath) -> BusValue? {
        tree.entry(path, interface)?.values[name]
    }

    var exportedPaths: [ObjectPath] { Array(tree.objects.keys) }

    // MARK: Incoming method calls

    private func handleMethodCall(_ raw: OpaquePointer) {
        let message: BusMessage
        do {
            message = try BusMessage(raw)
        } catch {
            replyError(to: raw, error as? BusError ?? BusError(.invalidArgs, "\(error)"))
            return
        }
        guard let path = message.path, let member = message.member else { return }
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
            reply(to: raw, [])
        case (InterfaceName.peer?, "GetMachineId"):
            reply(to: raw, [.string(machineID)])
        case (InterfaceName.introspectable?, "Introspect") where path == .root || tree.hasNode(at: path):
            reply(to: raw, [.string(Introspection.xml(for: path, in: tree))])
        case (InterfaceName.properties?, _) where object != nil:
            handleProperties(raw, message, path: path)
        case (InterfaceName.objectManager?, "GetManagedObjects") where tree.managers.contains(path):
            reply(to: raw, [tree.managedObjects(under: path)])
        default:
            guard let object else {
                replyError(to: raw, BusError(.unknownObject, "No such object path '\(path)'"))
                return
            }
            guard let interface, let entry = object.interfaces[interface] else {
                replyError(
                    to: raw,
                    BusError(
                        .unknownInterface,
                        "No such interface '\(message.interface?.rawValue ?? "")' at object path '\(path)'"))
                return
            }
            guard let method = entry.definition.method(named: member) else {
                replyError(
                    to: raw,
                    BusError(
                        .unknownMethod,
                        "No such method '\(member)' in interface '\(interface)' at object path '\(path)' (signature '\(message.signature)')"
                    ))
                return
            }
            guard message.signature == method.inputSignature else {
                replyError(
                    to: raw,
                    BusError(
                        .invalidArgs,
                        "Invalid arguments for \(interface).\(member): expected '\(method.inputSignature)', got '\(message.signature)'"
                    ))
                return
            }
            let invocation = BusInterface.Invocation(
                sender: message.sender ?? "", path: path, interface: interface, member: member, body: message.body)
            let handler = method.handler
            let outputSignature = method.outputSignature
            runHandler(for: raw) {
                let values = try await handler(invocation)
                let signature = values.map(\.type.signature).joined()
                guard signature == outputSignature else {
                    throw BusError(
                        .failed,
                        "\(interface).\(member) answered '\(signature)' but is declared to answer '\(outputSignature)'")
                }
                return values
            }
        }
    }

    private func handleProperties(_ raw: OpaquePointer, _ message: BusMessage, path: ObjectPath) {
        let member = message.member?.rawValue ?? ""
        let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"][member]
        guard let expected else {
            replyError(
                to: raw,
                BusError(.unknownMethod, "No such method '\(member)' in interface '\(InterfaceName.properties)'"))
            return
        }
        guard message.signature == expected, let interfaceText = message.body[0].string else {
            replyError(
                to: raw,
                BusError(
                    .invalidArgs,
                    "Invalid arguments for Properties.\(member): expected '\(expected)', got '\(message.signature)'"))
            return
        }
        guard let interface = try? InterfaceName(interfaceText), let entry = tree.entry(path, interface) else {
            replyError(to: raw, BusError(.invalidArgs, "No such interface '\(interfaceText)'"))
            return
        }
        if member == "GetAll" {
            reply(to: raw, [entry.readableValues])
            return
        }
        let name = message.body[1].string ?? ""
        guard let property = entry.definition.property(named: name) else {
            replyError(to: raw, BusError(.invalidArgs, "No such property '\(name)'"))
            return
        }
        if member == "Get" {
            guard property.access != .write, let value = entry.values[name] else {
                replyError(to: raw, BusError(.invalidArgs, "No such property '\(name)'"))
                return
            }
            reply(to: raw, [.variant(value)])
            return
        }
        guard property.access != .read else {
            replyError(to: raw, BusError(.propertyReadOnly, "Property '\(name)' is not writable"))
            return
        }
        let value = message.body[2].unwrapped
        guard value.type == property.type else {
            replyError(
                to: raw,
                BusError(
                    .invalidArgs,
                    "Property '\(name)' is '\(property.type)', given '\(value.type)'"))
            return
        }
        guard let setter = property.setter else {
            do {
                try setProperties([name: value], interface: interface, at: path)
                reply(to: raw, [])
            } catch {
                replyError(to: raw, error as? BusError ?? BusError(.failed, "\(error)"))
            }
            return
        }
        let invocation = BusInterface.Invocation(
            sender: message.sender ?? "", path: path, interface: .properties, member: "Set", body: message.body)
        runHandler(for: raw) {
            try await setter(value, invocation)
            return []
        }
    }

    /// Runs a handler as a task of its own, isolated to this actor (so it
    /// starts on the connection's thread, and a quick handler replies with
    /// no thread hop at all), and replies when it finishes.
    private func runHandler(
        for raw: OpaquePointer, _ body: nonisolated(nonsending) @escaping @Sendable () async throws -> [BusValue]
    ) {
        nextToken += 1
        let id = nextToken
        dbus_message_ref(raw)
        incomingCalls[id] = raw
        handlerTasks[id] = Task {
            let result: Result<[BusValue], any Error>
            do {
                result = .success(try await body())
            } catch {
                result = .failure(error)
            }
            self.finishHandler(id, result)
        }
    }

    private func finishHandler(_ id: Int, _ result: Result<[BusValue], any Error>) {
        handlerTasks[id] = nil
        guard let raw = incomingCalls.removeValue(forKey: id) else { return }
        defer { dbus_message_unref(raw) }
        switch result {
        case .success(let values):
            reply(to: raw, values)
        case .failure(let error as BusError):
            replyError(to: raw, error)
        case .failure(let error):
            replyError(to: raw, BusError(.failed, "\(error)"))
        }
    }

    private func reply(to call: OpaquePointer, _ values: [BusValue]) {
        guard connection != nil, dbus_message_get_no_reply(call) == 0 else { return }
        do {
            let message = try OutgoingMessage.methodReturn(to: call, body: values)
            defer { dbus_message_unref(message) }
            _ = try send(message)
        } catch {
            replyError(to: call, error as? BusError ?? BusError(.failed, "\(error)"))
        }
    }

    private func replyError(to call: OpaquePointer, _ error: BusError) {
        guard connection != nil, dbus_message_get_no_reply(call) == 0,
            let message = OutgoingMessage.error(to: call, error)
        else { return }
        defer { dbus_message_unref(message) }
        _ = try? send(message)
    }

    private static func readMachineID() -> String {
        var error = DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        guard let id = dbus_try_get_local_machine_id(&error) else { return "" }
        defer { dbus_free(id) }
        return String(cString: id)
    }
}

extension BusError {
    /// The error libdbus filled in, or `otherwise` when it filled in none.
    init(libdbus error: DBusError, otherwise: String) {
        if dbus_error_is_set_shim(error), let name = error.name {
            self.init(BusErrorName(String(cString: name)), error.message.map { String(cString: $0) } ?? otherwise)
        } else {
            self.init(.failed, otherwise)
        }
    }
}

private func dbus_error_is_set_shim(_ error: DBusError) -> Bool {
    error.name != nil
}

extension Duration {
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }
}
