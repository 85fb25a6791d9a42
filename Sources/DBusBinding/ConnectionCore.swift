import Glibc

/// Everything about one connection that touches libdbus, isolated to the
/// connection's own thread (`EventLoop` is this actor's executor) — except
/// sending method calls, which the calling tasks do themselves through
/// `PendingCalls`, under its lock and libdbus' own.
///
/// libdbus connects, authenticates and sends; the binding reads the socket
/// itself (`InboundBuffer`: 64 KiB or more per `recvmsg`, messages framed
/// from their fixed header) and hands each message's bytes to libdbus
/// (`dbus_message_demarshal`) before routing it here: replies to the
/// pending calls, signals to subscribers (`SignalRouter`), method calls to
/// exported objects (`ObjectServer`). With `BEACONBENCH_DBUS_READER=libdbus`
/// libdbus reads too, and messages are taken off it with
/// `LibDBus.connectionPopMessage` (docs/dbus-binding.md, "Reading the
/// socket"). libdbus' own dispatch (and with it its pending-call and
/// object-path machinery) is not used. This file is the I/O loop and the calls; the
/// router's and the server's bus-facing halves are extensions of this actor
/// in their own files.
actor ConnectionCore {
    let loop: EventLoop
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    private var connection: OpaquePointer?
    private var closeReason: BusError?
    private let io = IOTable()
    /// The socket and what was read from it, when the binding reads (nil:
    /// libdbus reads, `BusReader.libdbus`).
    private var inbound: InboundBuffer?
    private var socket: Int32 = -1
    /// Why the connection must close once the messages already read are
    /// routed (end of file, lost descriptors, a failed read).
    private var readEnded: BusError?
    /// Messages framed but refused by `dbus_message_demarshal` (dropped;
    /// only a corrupt daemon could send one), and the last reason.
    private(set) var refusedMessages = 0
    /// Signals that went to wire subscribers only, never demarshalled.
    var signalsNotDemarshalled = 0
    /// The wire subscriptions a signal went to (kept between signals).
    var deliveredFast: [Int] = []
    private var pollFDs: [pollfd] = []
    private var polledWatches: [OpaquePointer] = []
    private(set) var lastRefusal: BusError?
    private(set) var uniqueName = ""
    private var nextToken = 0
    /// How long a wake-up for incoming data may wait before reading, in
    /// nanoseconds, while no call of ours is pending (0: never).
    var coalescing: UInt64 = 0

    /// Calls we made, sent by the calling tasks themselves.
    nonisolated let calls: PendingCalls

    /// Signals we receive (SignalRouter.swift).
    var router = SignalRouter()

    /// Objects we serve (ObjectServer.swift), and the calls to them whose
    /// handlers are running.
    var server = ObjectServer()
    private var incomingCalls: [Int: OpaquePointer] = [:]
    private var handlerTasks: [Int: Task<Void, Never>] = [:]

    init(loop: EventLoop) {
        self.loop = loop
        self.calls = PendingCalls(loop: loop)
    }

    deinit {
        loop.requestShutdown()
    }

    // MARK: Opening and closing

    /// How long connecting (authentication, then Hello) may take.
    static let connectTimeout: Duration = .seconds(25)

    /// Connects to `address` and says Hello, with exit-on-disconnect turned
    /// off.
    ///
    /// `.wire` (the default): libdbus authenticates
    /// (`LibDBus.authenticate`), then the binding owns the socket's read
    /// side before any message exists: Hello is sent by libdbus like any
    /// call, its reply read by the binding, and libdbus told the name
    /// (`busSetUniqueName`). `.libdbus`: libdbus says Hello
    /// (`busRegister`) and reads everything, as before.
    func open(address: String, registerOnBus: Bool, reader: BusReader = .current) async throws {
        _ = LibDBus.threadsInitialised
        guard !address.utf8.contains(0) else { throw BusError(.badAddress, "The bus address contains a NUL byte") }
        let opened = try LibDBus.connectionOpenPrivate(address, otherwise: "Cannot connect to \(address)")
        LibDBus.connectionSetExitOnDisconnect(opened, false)
        func abandon(_ error: BusError) -> BusError {
            LibDBus.connectionClose(opened)
            LibDBus.connectionUnref(opened)
            return error
        }
        switch reader {
        case .libdbus:
            if registerOnBus {
                do {
                    try LibDBus.busRegister(opened, otherwise: "The bus at \(address) refused Hello")
                } catch {
                    throw abandon(error)
                }
            }
        case .wire:
            guard LibDBus.authenticate(opened, deadline: monotonicNanoseconds() + Self.connectTimeout.nanoseconds)
            else {
                throw abandon(
                    BusError(
                        LibDBus.connectionGetIsConnected(opened) ? .noReply : .authFailed,
                        "The bus at \(address) did not complete authentication"
                            + (LibDBus.connectionGetIsConnected(opened) ? " within \(Self.connectTimeout)" : "")))
            }
            let fd = LibDBus.connectionGetUnixFD(opened)
            guard fd >= 0 else { throw abandon(BusError(.notSupported, "The bus at \(address) is not a socket")) }
            socket = fd
            inbound = InboundBuffer(
                maximumDescriptors: LibDBus.connectionCanPassDescriptors(opened)
                    ? max(1, LibDBus.connectionGetMaxMessageUnixFDs(opened)) : 0)
        }
        guard io.install(on: opened) else {
            inbound = nil
            throw abandon(BusError(.noMemory, "Out of memory while setting up the connection"))
        }
        if reader == .libdbus, registerOnBus, let name = LibDBus.busGetUniqueName(opened) { uniqueName = name }
        connection = opened
        calls.attach(opened)
        loop.attach(self)
        guard reader == .wire, registerOnBus else { return }
        do {
            let reply = try await call(
                MethodCall(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus", member: "Hello"),
                timeout: Self.connectTimeout)
            guard let name = reply.body.first?.string, LibDBus.busSetUniqueName(opened, name) else {
                throw BusError(.failed, "The bus at \(address) answered Hello with '\(reply.signature)'")
            }
            uniqueName = name
        } catch {
            let reason = error as? BusError ?? BusError(.failed, "\(error)")
            close(reason: reason)
            throw reason
        }
    }

    /// What the binding's reads of the socket did (nil when libdbus reads).
    var readCounter: Syscalls.ReadCounter? { inbound?.counter }

    /// True when libdbus holds no message it read itself
    /// (`dbus_connection_get_dispatch_status` is `COMPLETE`), as it must
    /// once the binding reads.
    var libdbusHoldsNoMessage: Bool { connection.map(LibDBus.connectionDispatchIsComplete) ?? true }

    var isOpen: Bool { connection != nil }

    /// Throws the reason the connection closed, if it has.
    func checkOpen() throws {
        guard connection != nil else { throw closeReason ?? .closed }
    }

    /// Closes the connection: pending calls fail with `Disconnected`,
    /// subscriptions finish, handlers are cancelled.
    func close(reason: BusError = .closed) {
        guard let opened = connection else { return }
        connection = nil
        closeReason = reason
        for call in calls.detach(reason: reason) { call.continuation.resume(throwing: reason) }
        for sink in router.removeAll() { sink.finish() }
        for task in handlerTasks.values { task.cancel() }
        handlerTasks.removeAll()
        for message in incomingCalls.values { LibDBus.messageUnref(message) }
        incomingCalls.removeAll()
        // Descriptors received and not handed out are ours to close; the
        // socket is libdbus', closed by connectionClose.
        inbound?.closeDescriptors()
        socket = -1
        LibDBus.connectionClose(opened)
        LibDBus.connectionUnref(opened)
        loop.requestShutdown()
    }

    /// A token for a subscription or a running handler.
    func makeToken() -> Int {
        nextToken += 1
        return nextToken
    }

    // MARK: The loop's work between jobs

    /// Waits for the socket (or a new job, or the next deadline), then does
    /// the I/O libdbus asks for and routes every complete message.
    func pollOnce(blocking: Bool) {
        if loop.isShutdownRequested, connection != nil {
            close()
            return
        }
        // The two arrays are kept between wake-ups (no allocation per wake-up).
        var fds: [pollfd] = []
        var polled: [OpaquePointer] = []
        swap(&fds, &pollFDs)
        swap(&polled, &polledWatches)
        defer {
            swap(&fds, &pollFDs)
            swap(&polled, &polledWatches)
        }
        fds.removeAll(keepingCapacity: true)
        polled.removeAll(keepingCapacity: true)
        fds.append(pollfd(fd: loop.wakeReadFD, events: Int16(POLLIN), revents: 0))
        // When the binding reads, the socket is polled for input here, and
        // libdbus' watches for output only: libdbus is never handed
        // READABLE (it would read), nor HANGUP or ERROR (it would drop the
        // connection before the bytes already sent are read; the reader
        // reads to the end of file and closes).
        let reading = inbound != nil && connection != nil
        if reading { fds.append(pollfd(fd: socket, events: Int16(POLLIN), revents: 0)) }
        let firstWatch = fds.count
        for watch in io.watches where LibDBus.watchGetEnabled(watch) {
            let flags = LibDBus.watchGetFlags(watch)
            var events: Int16 = 0
            if flags & LibDBus.WatchFlags.readable != 0, !reading { events |= Int16(POLLIN) }
            if flags & LibDBus.WatchFlags.writable != 0 { events |= Int16(POLLOUT) }
            if reading, events == 0 { continue }
            fds.append(pollfd(fd: LibDBus.watchGetUnixFD(watch), events: events, revents: 0))
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
            if reading, fds[1].revents != 0 { readSocket() }
            for (index, watch) in polled.enumerated() where fds[firstWatch + index].revents != 0 {
                guard io.contains(watch) else { continue }
                let revents = fds[firstWatch + index].revents
                var flags: UInt32 = 0
                if revents & Int16(POLLIN) != 0, !reading { flags |= LibDBus.WatchFlags.readable }
                if revents & Int16(POLLOUT) != 0 { flags |= LibDBus.WatchFlags.writable }
                if !reading {
                    if revents & Int16(POLLERR) != 0 { flags |= LibDBus.WatchFlags.error }
                    if revents & Int16(POLLHUP) != 0 { flags |= LibDBus.WatchFlags.hangup }
                }
                if flags != 0 { LibDBus.watchHandle(watch, flags) }
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

    /// Reads what the kernel holds (up to `InboundBuffer.maximumPerFill`).
    private func readSocket() {
        guard let inbound, readEnded == nil else { return }
        switch inbound.fill(from: socket) {
        case .more: break
        case .endOfFile: readEnded = BusError(.disconnected, "The bus closed the connection")
        case .failed(let why): readEnded = BusError(.disconnected, "The connection to the bus failed: \(why)")
        }
    }

    private func routeIncoming() {
        if let inbound {
            routeFramed(inbound)
        } else {
            while let opened = connection, let message = LibDBus.connectionPopMessage(opened) {
                route(message)
                LibDBus.messageUnref(message)
            }
        }
        if connection != nil, let reason = readEnded {
            close(reason: reason)
        } else if let opened = connection, !LibDBus.connectionGetIsConnected(opened) {
            close(reason: BusError(.disconnected, "The bus closed the connection"))
        }
    }

    /// Routes every complete message in the buffer, in order: descriptors
    /// it declares (`UNIX_FDS`) taken from the ones received and closed (the
    /// binding passes none on; the field is set to 0 so that libdbus takes
    /// the bytes, and a body holding an `h` still fails in `MessageCodec`
    /// with `NotSupported`, as before), then `dbus_message_demarshal` and
    /// `route`, exactly as a message popped from libdbus.
    private func routeFramed(_ inbound: InboundBuffer) {
        while connection != nil {
            let frame: UnsafeMutableRawBufferPointer
            do {
                guard let next = try inbound.nextMessage() else { return }
                frame = next
            } catch {
                readEnded = BusError(.disconnected, "The bus sent bytes that are not a D-Bus message: \(error)")
                return
            }
            if inbound.pendingDescriptors > 0 {
                guard let count = Framing.unixFDs(in: frame, clear: true) else {
                    readEnded = BusError(
                        .disconnected, "The bus sent a message whose header fields cannot be read, with descriptors")
                    return
                }
                if count > 0 {
                    guard let fds = inbound.takeDescriptors(Int(count)) else {
                        readEnded = BusError(
                            .disconnected, "The bus sent a message declaring \(count) descriptors it did not pass")
                        return
                    }
                    inbound.close(fds)
                }
            }
            if routeWire(UnsafeRawBufferPointer(frame)) { continue }
            switch LibDBus.messageDemarshal(UnsafeRawBufferPointer(frame)) {
            case .success(let message):
                #if DEBUG
                    // libdbus copied the bytes: nothing may read them any
                    // more, and in a debug build whatever still did would
                    // read 0xDB, so the tests would show it.
                    frame.initializeMemory(as: UInt8.self, repeating: 0xDB)
                #endif
                route(message)
                LibDBus.messageUnref(message)
            case .failure(let reason):
                // The framing is intact, so the next message is still found
                // (libdbus would have dropped the connection).
                refusedMessages += 1
                lastRefusal = reason
            }
        }
    }

    private func route(_ message: OpaquePointer) {
        switch LibDBus.messageGetType(message) {
        case LibDBus.MessageType.methodReturn, LibDBus.MessageType.error:
            guard let call = calls.complete(serial: LibDBus.messageGetReplySerial(message)) else { return }
            call.complete(with: Result { try BusMessage(message) })
        case LibDBus.MessageType.signal:
            routeSignal(message)
        case LibDBus.MessageType.methodCall:
            handleMethodCall(message)
        default:
            break
        }
    }

    private func routeSignal(_ raw: OpaquePointer) {
        if LibDBus.messageIsSignal(raw, InterfaceName.local.rawValue, "Disconnected") {
            close(reason: BusError(.disconnected, "The bus closed the connection"))
            return
        }
        // Nobody listens: no need to decode it.
        guard router.isListening, let message = try? BusMessage(raw) else { return }
        router.follow(message)
        router.deliver(message)
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
        guard let serial = LibDBus.connectionSend(opened, message) else {
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
                defer { LibDBus.messageUnref(message) }
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
        defer { LibDBus.messageUnref(message) }
        _ = try send(message)
    }

    /// Sends a signal from one of our objects.
    func emit(path: ObjectPath, interface: InterfaceName, member: MemberName, body: [BusValue]) throws {
        let message = try OutgoingMessage.signal(path: path, interface: interface, member: member, body: body)
        defer { LibDBus.messageUnref(message) }
        _ = try send(message)
    }

    nonisolated var pendingCallCount: Int { calls.count }
    var activeHandlerCount: Int { handlerTasks.count }

    // MARK: Incoming method calls

    /// Answers a call to one of our objects (`ObjectServer.answer`): the
    /// signals it causes go out first, then the reply, the error, or, once
    /// its handler finishes, the handler's answer.
    private func handleMethodCall(_ raw: OpaquePointer) {
        let message: BusMessage
        do {
            message = try BusMessage(raw)
        } catch {
            replyError(to: raw, error as? BusError ?? BusError(.invalidArgs, "\(error)"))
            return
        }
        let response = server.answer(message)
        do {
            try emit(response.signals)
        } catch {
            replyError(to: raw, error as? BusError ?? BusError(.failed, "\(error)"))
            return
        }
        switch response.answer {
        case .reply(let values): reply(to: raw, values)
        case .error(let error): replyError(to: raw, error)
        case .run(let work): runHandler(for: raw, work)
        case .none: break
        }
    }

    /// Runs a handler as a task of its own, isolated to this actor (so it
    /// starts on the connection's thread, and a quick handler replies with
    /// no thread hop at all), and replies when it finishes.
    private func runHandler(
        for raw: OpaquePointer, _ body: nonisolated(nonsending) @escaping @Sendable () async throws -> [BusValue]
    ) {
        let id = makeToken()
        LibDBus.messageRef(raw)
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
        defer { LibDBus.messageUnref(raw) }
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
        guard connection != nil, !LibDBus.messageGetNoReply(call) else { return }
        do {
            let message = try OutgoingMessage.methodReturn(to: call, body: values)
            defer { LibDBus.messageUnref(message) }
            _ = try send(message)
        } catch {
            replyError(to: call, error as? BusError ?? BusError(.failed, "\(error)"))
        }
    }

    private func replyError(to call: OpaquePointer, _ error: BusError) {
        guard connection != nil, !LibDBus.messageGetNoReply(call),
            let message = OutgoingMessage.error(to: call, error)
        else { return }
        defer { LibDBus.messageUnref(message) }
        _ = try? send(message)
    }
}

/// Who reads a connection's socket.
enum BusReader: Sendable, Equatable {
    /// The binding (`InboundBuffer`); libdbus decodes each message's bytes.
    case wire
    /// libdbus, 2 KiB per read, as before: `BEACONBENCH_DBUS_READER=libdbus`.
    case libdbus

    /// Tests choose a reader for the connections they open in a task.
    @TaskLocal static var chosen: BusReader?

    /// The task's choice, else the environment's, else `.wire`.
    static var current: BusReader {
        if let chosen { return chosen }
        guard let value = getenv("BEACONBENCH_DBUS_READER") else { return .wire }
        return String(cString: value) == "libdbus" ? .libdbus : .wire
    }
}
