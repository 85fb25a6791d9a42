import DBusBinding

/// How hard to try to connect.
public struct ConnectPolicy: Sendable {
    /// Attempts in all, the first included.
    public var attempts = 4
    /// The pause after the first failed attempt; it doubles after each.
    public var backoff: Duration = .milliseconds(250)
    /// Service UUIDs that must be present once services resolve.
    public var requiredServices: [String] = []
    /// Judges each failed connect attempt (the recovery policies): it may
    /// wait (for a free slot, an adapter) and says how to go on. Nil: every
    /// transient failure is an ordinary retry.
    public var judge: (@Sendable (BlueZError) async -> ConnectVerdict)?
    /// Retries not counted as attempts (`ConnectVerdict.retryUncharged`)
    /// allowed per connect, so that nothing retries for ever.
    public var unchargedLimit = 40

    public init(
        attempts: Int = 4, backoff: Duration = .milliseconds(250), requiredServices: [String] = [],
        judge: (@Sendable (BlueZError) async -> ConnectVerdict)? = nil
    ) {
        self.attempts = attempts
        self.backoff = backoff
        self.requiredServices = requiredServices
        self.judge = judge
    }
}

/// What to do after a failed connect attempt, as `ConnectPolicy.judge` says.
public enum ConnectVerdict: Sendable, Equatable {
    /// The ordinary rule: retry a transient failure while attempts remain.
    case ordinary
    /// Not the device's failure (no slot, busy, the adapter): retry at once
    /// (the judge waited what it had to), not counted as an attempt.
    case retryUncharged
    /// The device was repaired (removed and found again): retry with the
    /// attempts counted afresh.
    case retryAfresh
    /// Give up now.
    case giveUp
}

extension BluetoothClient {
    /// Connects to the device with `address`, runs `body` with the
    /// connection, and disconnects whatever happens: success, error or
    /// cancellation.
    ///
    /// Connects are serialised per adapter (one pending LE connect per
    /// controller); an orphaned connection is reused; the transient failures
    /// (`InProgress`, `le-connection-abort-by-local`, timeouts, services that
    /// never resolve) are retried with doubling pauses, disconnecting first
    /// when the link came up half-way.
    public nonisolated func withConnection<Result: Sendable>(
        to address: String, on adapter: Adapter? = nil, policy: ConnectPolicy = ConnectPolicy(),
        _ body: (DeviceSession) async throws -> Result
    ) async throws -> Result {
        let session = try await connect(address, on: adapter, policy: policy)
        // The disconnect runs as a task of its own: in a cancelled task the
        // call itself would be cancelled before it is sent.
        do {
            let result = try await body(session)
            await Task { await session.disconnect() }.value
            return result
        } catch {
            await Task { await session.disconnect() }.value
            throw error
        }
    }

    /// Connects (see `withConnection`); the caller must `disconnect()`.
    public nonisolated func connect(
        _ address: String, on adapter: Adapter? = nil, policy: ConnectPolicy
    )
        async throws -> DeviceSession
    {
        var pause = policy.backoff
        var attempt = 1
        var uncharged = 0
        while true {
            do {
                return try await connectOnce(address, adapter: adapter?.path, policy: policy)
            } catch let error as BlueZError where !Task.isCancelled {
                await disconnectIfConnected(address, adapter: adapter?.path)
                switch await policy.judge?(error) ?? .ordinary {
                case .retryUncharged where uncharged < policy.unchargedLimit:
                    uncharged += 1
                    continue
                case .retryAfresh:
                    attempt = 1
                    pause = policy.backoff
                    continue
                case .giveUp:
                    throw error
                default:
                    break
                }
                guard error.isTransient, attempt < policy.attempts else { throw error }
                try await Task.sleep(for: pause)
                pause = pause * 2
                attempt += 1
            } catch {
                // Given up, or cancelled: leave no half-made connection behind.
                await disconnectIfConnected(address, adapter: adapter?.path)
                throw error
            }
        }
    }

    /// Disconnects a device, in a task of its own so that it is sent even
    /// when the caller was cancelled. Sent whatever the registry says: the
    /// Connected signal of a connect just made may not have arrived yet, and
    /// Disconnect on a disconnected device does no harm.
    private nonisolated func disconnectIfConnected(_ address: String, adapter: ObjectPath?) async {
        await Task {
            guard let device = await device(address: address, adapter: adapter) else { return }
            _ = try? await self.invoke(
                device.path, "org.bluez.Device1", "Disconnect", timeout: timeouts.call, step: "disconnect",
                device: address)
        }.value
    }

    /// Takes down a link this process did not make (one left by a killed
    /// process: bluetoothd keeps a dead client's links), and waits until
    /// bluetoothd says it is down.
    /// - Returns: whether the device was connected.
    @discardableResult
    public func disconnect(address: String, timeout: Duration = .seconds(5)) async throws -> Bool {
        guard let device = device(address: address), device.connected else { return false }
        _ = try await invoke(
            device.path, "org.bluez.Device1", "Disconnect", timeout: timeouts.call, step: "disconnect", device: address)
        try await waitUntil(
            { !(self.device(address: address)?.connected ?? false) }, timeout: timeout, step: "disconnect",
            device: address)
        return true
    }

    /// Device1.Connect, holding the adapter's connect lock only until the
    /// link is up. bluetoothd answers an LE Connect once the services are
    /// resolved, but the controller can start the next connection as soon
    /// as this one is established (`Connected` true): holding the lock for
    /// the resolution too would add it to every device's share of the
    /// serial part of a fleet run. The lock is released on every path.
    private func connectCall(_ path: ObjectPath, _ address: String, _ adapter: ObjectPath, lock: AsyncLock) async throws
    {
        nextConnectCall += 1
        let token = nextConnectCall
        let call = Task { () -> (any Error)? in
            var failure: (any Error)?
            do {
                _ = try await invoke(
                    path, "org.bluez.Device1", "Connect", timeout: timeouts.connect, step: "connect", device: address)
            } catch {
                failure = error
            }
            await self.connectCallEnded(token)
            return failure
        }
        await withTaskCancellationHandler {
            try? await waitUntil(
                {
                    self.endedConnectCalls.contains(token)
                        || (self.device(address: address, adapter: adapter)?.connected ?? false)
                }, timeout: timeouts.connect, step: "connect", device: address)
        } onCancel: {
            call.cancel()
        }
        await lock.release()
        let failure = await call.value
        endedConnectCalls.remove(token)
        if let failure { throw failure }
        try Task.checkCancellation()
    }

    private func connectCallEnded(_ token: Int) {
        endedConnectCalls.insert(token)
        checkWaiters()
    }

    private func connectOnce(
        _ address: String, adapter: ObjectPath?, policy: ConnectPolicy
    ) async throws
        -> DeviceSession
    {
        guard let device = device(address: address, adapter: adapter), let adapterPath = device.adapter else {
            throw BlueZError(.deviceNotFound, device: address, step: "connect")
        }
        let wasUp = device.connected && device.servicesResolved
        if !wasUp {
            let lock = connectLock(for: adapterPath)
            await lock.acquire()
            noteConnectSent(address, adapter: adapterPath)
            // Connected may be true already: an orphaned connection.
            if !(self.device(address: address, adapter: adapterPath)?.connected ?? false) {
                do {
                    try await connectCall(device.path, address, adapterPath, lock: lock)
                } catch let error as BlueZError where error.busErrorName == .bluez.alreadyConnected {
                    // Fine: someone else connected it.
                }
            } else {
                await lock.release()
            }
            do {
                try await waitUntil(
                    {
                        guard let current = self.device(address: address, adapter: adapterPath) else { return true }
                        return current.servicesResolved || !current.connected
                    }, timeout: timeouts.servicesResolved, step: "wait for services", device: address)
            } catch let error as BlueZError where error.reason == .timeout(timeouts.servicesResolved) {
                throw BlueZError(.servicesNotResolved, device: address, step: "connect")
            }
            guard let current = self.device(address: address, adapter: adapterPath) else {
                throw BlueZError(.deviceNotFound, device: address, step: "connect")
            }
            guard current.connected else { throw BlueZError(.disconnected, device: address, step: "connect") }
        }
        func missing() -> String? {
            let services = Set(gattObjects(under: device.path, interface: "org.bluez.GattService1").map(\.uuid))
            return policy.requiredServices.first { !services.contains($0) }
        }
        if missing() != nil {
            // A service gone from a link that was resolved (found up from
            // before, or resolved a moment ago) is most often the link
            // going down: bluetoothd removes the GATT objects around
            // ServicesResolved false and before Connected false, and an
            // adapter powered off takes every link with it. Wait a moment
            // for either; a link that went is a disconnection (retried),
            // never a beacon without the service.
            try? await waitUntil(
                {
                    guard let current = self.device(address: address, adapter: device.adapter) else { return true }
                    return !current.connected || !current.servicesResolved || missing() == nil
                }, timeout: .seconds(2), step: "wait for services", device: address)
        }
        guard let current = self.device(address: address, adapter: device.adapter), current.connected,
            current.servicesResolved
        else {
            throw BlueZError(.disconnected, device: address, step: "connect")
        }
        if let uuid = missing() {
            throw BlueZError(.missingAttribute("service \(uuid)"), device: address, step: "connect")
        }
        return DeviceSession(client: self, address: address, path: device.path, epoch: linkEpoch(of: device.path))
    }

}

/// A connected device: GATT reads, writes and notifications by UUID. Every
/// call has a timeout; errors name the device, the step and the
/// characteristic.
public struct DeviceSession: Sendable {
    public let client: BluetoothClient
    public let address: String
    public let path: ObjectPath
    /// The device's link epoch when this connection's services resolved:
    /// GATT paths are looked up only while it is still current (never
    /// across connections; docs/reliability.md, "GATT paths").
    let epoch: Int

    init(client: BluetoothClient, address: String, path: ObjectPath, epoch: Int) {
        self.client = client
        self.address = address
        self.path = path
        self.epoch = epoch
    }

    private static let characteristicInterface: InterfaceName = "org.bluez.GattCharacteristic1"

    /// The object path of the characteristic with `uuid`.
    public func characteristic(_ uuid: String) async throws -> ObjectPath {
        // This connection's map only: after ServicesResolved false,
        // Connected false or a GATT object removed, the old paths (which
        // bluetoothd may still export, Cache=always) are not this link's.
        guard await client.linkIsCurrent(path, epoch: epoch) else {
            throw BlueZError(.disconnected, device: address, step: "find", characteristic: uuid)
        }
        guard
            let found = await client.gattObject(
                under: path, interface: "org.bluez.GattCharacteristic1", uuid: uuid.lowercased())
        else {
            // Gone with the link (or with bluetoothd) is not missing.
            let linkUp = await client.object(path)?["org.bluez.Device1"]?["ServicesResolved"]?.bool ?? false
            throw BlueZError(
                linkUp ? .missingAttribute("characteristic") : .disconnected, device: address, step: "find",
                characteristic: uuid)
        }
        return found
    }

    /// Checks that the device shows a service.
    /// - Throws: `BlueZError` `missingAttribute` when it does not.
    /// A service gone with the link (an adapter powered off, the beacon
    /// out of range) is a disconnection, retried like any other.
    public func requireService(_ uuid: String) async throws {
        guard await client.linkIsCurrent(path, epoch: epoch) else {
            throw BlueZError(.disconnected, device: address, step: "check the services")
        }
        let services = await client.gattObjects(under: path, interface: "org.bluez.GattService1")
        guard services.contains(where: { $0.uuid == uuid.lowercased() }) else {
            let linkUp = await client.linkIsCurrent(path, epoch: epoch)
            throw BlueZError(
                linkUp ? .missingAttribute("service \(uuid)") : .disconnected, device: address,
                step: "check the services")
        }
    }

    /// Whether the device is still connected, as the registry says.
    public var isConnected: Bool {
        get async { await client.device(address: address)?.connected ?? false }
    }

    /// ReadValue.
    public func read(_ uuid: String, timeout: Duration? = nil) async throws -> [UInt8] {
        let path = try await characteristic(uuid)
        // A read changes nothing, so one that met a passing refusal (an ATT
        // "unlikely error", a request still in progress) is simply repeated.
        var pause = Duration.milliseconds(50)
        var attempt = 1
        let reply: BusMessage
        while true {
            do {
                reply = try await client.invoke(
                    path, Self.characteristicInterface, "ReadValue", [.propertyMap([:])],
                    timeout: timeout ?? client.timeouts.gatt, step: "read", device: address, characteristic: uuid)
                break
            } catch let error as BlueZError where error.isPassingRefusal && attempt < 3 {
                attempt += 1
                try await Task.sleep(for: pause)
                pause = pause * 2
            }
        }
        guard let bytes = reply.body.first?.bytes, reply.signature == "ay" else {
            throw BlueZError(
                .bus(BusError(.invalidSignature, "ReadValue answered '\(reply.signature)', not 'ay'")),
                device: address, step: "read", characteristic: uuid)
        }
        return bytes
    }

    /// WriteValue, with response unless `withResponse` is false.
    public func write(
        _ uuid: String, _ value: [UInt8], withResponse: Bool = true, timeout: Duration? = nil
    )
        async throws
    {
        let path = try await characteristic(uuid)
        _ = try await client.invoke(
            path, Self.characteristicInterface, "WriteValue",
            [.bytes(value), .propertyMap(["type": .string(withResponse ? "request" : "command")])],
            timeout: timeout ?? client.timeouts.gatt, step: "write", device: address, characteristic: uuid)
    }

    /// Subscribes to a characteristic's notifications: the signal
    /// subscription is in place before StartNotify, so nothing sent after
    /// this returns is missed.
    public func notifications(_ uuid: String) async throws -> Notifications {
        let path = try await characteristic(uuid)
        let signals: AsyncStream<BusSignal>
        do {
            signals = try await client.bus.signals(
                matching: MatchRule(
                    sender: BluetoothClient.bluez, interface: .properties, member: "PropertiesChanged", path: path,
                    arguments: [0: Self.characteristicInterface.rawValue]))
        } catch let error as BusError {
            throw BlueZError(.bus(error), device: address, step: "subscribe", characteristic: uuid)
        }
        let inbox = NotificationInbox(signals: signals)
        await inbox.start()
        // The link dropping ends the subscription at once: a wait for a
        // notification (a calibration's result) fails `disconnected` then,
        // not at its timeout.
        if let link = try? await client.bus.signals(
            matching: MatchRule(
                sender: BluetoothClient.bluez, interface: .properties, member: "PropertiesChanged", path: self.path,
                arguments: [0: "org.bluez.Device1"]))
        {
            await inbox.endWhenLinkDrops(link)
        }
        guard await client.linkIsCurrent(self.path, epoch: epoch) else {
            await inbox.close()
            throw BlueZError(.disconnected, device: address, step: "subscribe", characteristic: uuid)
        }
        do {
            _ = try await client.invoke(
                path, Self.characteristicInterface, "StartNotify", timeout: client.timeouts.gatt,
                step: "start notifications", device: address, characteristic: uuid)
        } catch {
            await inbox.close()
            throw error
        }
        return Notifications(session: self, uuid: uuid, path: path, inbox: inbox)
    }

    /// Disconnects; errors are ignored (the device may be gone already).
    public func disconnect() async {
        _ = try? await client.invoke(
            path, "org.bluez.Device1", "Disconnect", timeout: client.timeouts.call, step: "disconnect",
            device: address)
    }

    /// A characteristic's notifications: the values, in order.
    public struct Notifications: Sendable {
        let session: DeviceSession
        let uuid: String
        let path: ObjectPath
        let inbox: NotificationInbox

        /// The next value, or a `timeout` error naming `step`.
        public func next(timeout: Duration, step: String) async throws -> [UInt8] {
            let value: [UInt8]?
            do {
                value = try await inbox.next(timeout: timeout)
            } catch var error as BlueZError {
                error.device = session.address
                error.step = step
                error.characteristic = uuid
                throw error
            }
            guard let value else {
                throw BlueZError(.disconnected, device: session.address, step: step, characteristic: uuid)
            }
            return value
        }

        /// Values already received, without waiting.
        public func drain() async -> [[UInt8]] { await inbox.drain() }

        /// StopNotify (errors ignored: the link may be down), and the end of
        /// the subscription.
        public func stop() async {
            _ = try? await session.client.invoke(
                path, "org.bluez.GattCharacteristic1", "StopNotify", timeout: session.client.timeouts.gatt,
                step: "stop notifications", device: session.address, characteristic: uuid)
            await inbox.close()
        }
    }
}

/// Buffers a characteristic's notified values, so that waiting for one with
/// a timeout never ends the subscription.
actor NotificationInbox {
    private let signals: AsyncStream<BusSignal>
    private var buffer: [[UInt8]] = []
    private var waiter: (id: Int, continuation: CheckedContinuation<[UInt8]?, any Error>)?
    private var nextID = 0
    private var finished = false
    private var consumer: Task<Void, Never>?

    init(signals: AsyncStream<BusSignal>) {
        self.signals = signals
    }

    func start() {
        let signals = self.signals
        consumer = Task { [weak self] in
            for await signal in signals {
                guard let value = (try? PropertiesChanged(signal))?.changed["Value"]?.bytes else { continue }
                await self?.deliver(value)
            }
            await self?.finish()
        }
    }

    private func deliver(_ value: [UInt8]) {
        if let waiter {
            self.waiter = nil
            waiter.continuation.resume(returning: value)
        } else {
            buffer.append(value)
        }
    }

    private func finish() {
        finished = true
        if let waiter {
            self.waiter = nil
            waiter.continuation.resume(returning: nil)
        }
    }

    private var linkWatch: Task<Void, Never>?

    /// Ends the subscription when the device's link drops (Connected or
    /// ServicesResolved false in `signals`, the device's PropertiesChanged).
    func endWhenLinkDrops(_ signals: AsyncStream<BusSignal>) {
        linkWatch = Task { [weak self] in
            for await signal in signals {
                guard let change = try? PropertiesChanged(signal) else { continue }
                if change.changed["Connected"]?.bool == false || change.changed["ServicesResolved"]?.bool == false {
                    await self?.close()
                    return
                }
            }
        }
    }

    func close() {
        consumer?.cancel()
        consumer = nil
        linkWatch?.cancel()
        linkWatch = nil
        finish()
    }

    func drain() -> [[UInt8]] {
        defer { buffer = [] }
        return buffer
    }

    /// The next value; nil when the subscription ended.
    func next(timeout: Duration) async throws -> [UInt8]? {
        if !buffer.isEmpty { return buffer.removeFirst() }
        if finished { return nil }
        nextID += 1
        let id = nextID
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            await self?.expire(id, timeout)
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else {
                    waiter = (id, continuation)
                }
            }
        } onCancel: {
            Task { await self.fail(id, CancellationError()) }
        }
    }

    private func expire(_ id: Int, _ timeout: Duration) {
        fail(id, BlueZError(.timeout(timeout), step: "wait for a notification"))
    }

    private func fail(_ id: Int, _ error: any Error) {
        guard let waiter, waiter.id == id else { return }
        self.waiter = nil
        waiter.continuation.resume(throwing: error)
    }
}
