/// Where the signals a connection receives go: its subscriptions, the users
/// of each match rule it added on the bus, and the owners of the well-known
/// names its subscriptions name as senders (followed through
/// NameOwnerChanged, as the bus does).
///
/// A value with no socket: it decides, the connection acts. Routing a signal
/// (`follow`, then `deliver`) touches nothing but this value and the
/// subscribers' sinks; the bookkeeping says when a match rule must be added
/// to or removed from the bus, and the connection (`ConnectionCore`, the
/// extension below) makes those calls.
struct SignalRouter {
    struct Subscription {
        var rule: MatchRule
        var sink: Sink
    }

    /// Where a subscription's signals go: a stream (its consumer resumes
    /// on its own executor), or a handler called right here on the
    /// connection's thread, in order, with no task hop per signal.
    enum Sink {
        case stream(AsyncStream<BusSignal>.Continuation)
        case handler(@Sendable (BusSignal) -> Void)
        /// The message's bytes when the binding reads them (`WireHandler`);
        /// a `BusSignal` through its fallback otherwise.
        case wire(WireHandler)

        func deliver(_ signal: BusSignal) {
            switch self {
            case .stream(let continuation): continuation.yield(signal)
            case .handler(let handler): handler(signal)
            case .wire(let handler): handler.fallback(signal)
            }
        }

        func finish() {
            if case .stream(let continuation) = self { continuation.finish() }
        }
    }

    private(set) var subscriptions: [Int: Subscription] = [:]
    private var matchRuleUsers: [String: Int] = [:]
    private(set) var nameOwners: [String: String] = [:]
    private var ownerWatchers: [String: Int] = [:]

    // MARK: Routing

    /// Whether anything listens: when nothing does, a signal need not even
    /// be decoded.
    var isListening: Bool { !subscriptions.isEmpty || !ownerWatchers.isEmpty }

    /// Follows a NameOwnerChanged from the bus for a watched name. Called
    /// for every signal before `deliver`, so a subscription naming that
    /// name as its sender sees the new owner's signals from the next one.
    mutating func follow(_ message: BusMessage) {
        if message.sender == BusName.bus.rawValue, message.member?.rawValue == "NameOwnerChanged",
            let change = try? NameOwnerChanged(message.body), ownerWatchers[change.name] != nil
        {
            nameOwners[change.name] = change.newOwner
        }
    }

    /// Hands the signal to every subscription whose rule matches it, but
    /// those in `excluding` (they had it through the fast path).
    func deliver(_ message: BusMessage, excluding: [Int] = []) {
        guard !subscriptions.isEmpty, let signal = BusSignal(message) else { return }
        for (id, subscription) in subscriptions
        where !excluding.contains(id) && subscription.rule.matches(message, ownerOf: { self.nameOwners[$0] }) {
            subscription.sink.deliver(signal)
        }
    }

    /// Hands a checked signal's bytes to the wire subscriptions whose rule
    /// matches its header. Says which got it (in `delivered`), and returns
    /// whether the message must also be decoded: another subscription matches (or cannot tell from
    /// the header), or it is a NameOwnerChanged from the bus while owners
    /// are followed.
    /// `delivered` is the caller's buffer, emptied first (kept between
    /// signals: no allocation per signal).
    func deliverFast(_ view: WireMessageView, delivered: inout [Int]) -> Bool {
        delivered.removeAll(keepingCapacity: true)
        var needsMessage = false
        if !ownerWatchers.isEmpty, view.header.field(.sender, is: "org.freedesktop.DBus"),
            view.header.field(.member, is: "NameOwnerChanged")
        {
            needsMessage = true
        }
        for (id, subscription) in subscriptions {
            switch subscription.rule.matches(view.header, ownerOf: { self.nameOwners[$0] }) {
            case false?: continue
            case true?:
                if case .wire(let handler) = subscription.sink {
                    handler.fast(view)
                    delivered.append(id)
                } else {
                    needsMessage = true
                }
            case nil: needsMessage = true
            }
        }
        return needsMessage
    }

    // MARK: Subscriptions

    mutating func add(_ id: Int, _ subscription: Subscription) { subscriptions[id] = subscription }

    /// Removes a subscription; nil when it was gone already.
    @discardableResult
    mutating func remove(_ id: Int) -> Subscription? { subscriptions.removeValue(forKey: id) }

    /// Removes every subscription and returns their sinks, to be finished.
    mutating func removeAll() -> [Sink] {
        let sinks = subscriptions.values.map(\.sink)
        subscriptions.removeAll()
        return sinks
    }

    // MARK: Match rules, counted

    /// Counts one more user of a match rule; true for the first (the rule
    /// must then be added on the bus).
    mutating func addUser(of rule: String) -> Bool {
        matchRuleUsers[rule, default: 0] += 1
        return matchRuleUsers[rule] == 1
    }

    func hasUsers(of rule: String) -> Bool { matchRuleUsers[rule] != nil }

    /// Counts one user fewer; true when the rule has no user left (it must
    /// then be removed from the bus).
    @discardableResult
    mutating func releaseUser(of rule: String) -> Bool {
        let left = (matchRuleUsers[rule] ?? 1) - 1
        matchRuleUsers[rule] = left > 0 ? left : nil
        return left <= 0
    }

    // MARK: Owners of well-known names

    /// Counts one more subscription following `name`'s owner; true for the
    /// first (the owner must then be looked up, and its changes matched).
    mutating func watchOwner(of name: String) -> Bool {
        ownerWatchers[name, default: 0] += 1
        return ownerWatchers[name] == 1
    }

    mutating func setOwner(_ owner: String?, of name: String) { nameOwners[name] = owner }

    /// Counts one subscription fewer following `name`'s owner; true when
    /// none is left (the owner is forgotten, and its match rule must go).
    mutating func unwatchOwner(of name: String) -> Bool {
        let left = (ownerWatchers[name] ?? 1) - 1
        ownerWatchers[name] = left > 0 ? left : nil
        if left <= 0 { nameOwners[name] = nil }
        return left <= 0
    }
}

// MARK: - The bus calls routing needs

extension ConnectionCore {
    private func busCall(_ member: MemberName, _ body: [BusValue]) async throws -> BusMessage {
        try await call(
            MethodCall(destination: .bus, path: "/org/freedesktop/DBus", interface: .bus, member: member, body: body),
            timeout: .seconds(25))
    }

    /// Adds a match rule on the bus, once per distinct rule however many
    /// users it has.
    func addMatch(_ rule: MatchRule) async throws {
        let text = rule.description
        guard router.addUser(of: text) else { return }
        do {
            _ = try await busCall("AddMatch", [.string(text)])
        } catch {
            router.releaseUser(of: text)
            throw error
        }
    }

    /// Drops one user of a match rule; the last one removes it from the bus.
    func removeMatch(_ rule: MatchRule) {
        let text = rule.description
        guard router.hasUsers(of: text) else { return }
        if router.releaseUser(of: text), isOpen {
            try? callNoReply(
                MethodCall(
                    destination: .bus, path: "/org/freedesktop/DBus", interface: .bus,
                    member: "RemoveMatch", body: [.string(text)]))
        }
    }

    func subscribe(
        _ rule: MatchRule, bufferingPolicy: AsyncStream<BusSignal>.Continuation.BufferingPolicy
    )
        async throws -> AsyncStream<BusSignal>
    {
        try checkOpen()
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
        try checkOpen()
        return try await addSubscription(rule, .handler(handler))
    }

    /// Subscribes a wire handler (`BusConnection.subscribeWire`).
    func subscribeWire(_ rule: MatchRule, _ handler: WireHandler) async throws -> Int {
        try checkOpen()
        return try await addSubscription(rule, .wire(handler))
    }

    private func addSubscription(_ rule: MatchRule, _ sink: SignalRouter.Sink) async throws -> Int {
        let id = makeToken()
        router.add(id, SignalRouter.Subscription(rule: rule, sink: sink))
        do {
            if let sender = rule.sender, !sender.isUnique, sender != .bus {
                try await watchOwner(of: sender.rawValue)
            }
            try await addMatch(rule)
        } catch {
            router.remove(id)
            sink.finish()
            throw error
        }
        return id
    }

    func unsubscribe(_ id: Int, rule: MatchRule) {
        guard router.remove(id) != nil else { return }
        removeMatch(rule)
        if let sender = rule.sender, !sender.isUnique, sender != .bus {
            unwatchOwner(of: sender.rawValue)
        }
    }

    private func watchOwner(of name: String) async throws {
        guard router.watchOwner(of: name) else { return }
        do {
            try await addMatch(.nameOwnerChanged(try BusName(name)))
            router.setOwner(try await getNameOwner(name), of: name)
        } catch {
            unwatchOwner(of: name)
            throw error
        }
    }

    private func unwatchOwner(of name: String) {
        if router.unwatchOwner(of: name) {
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

    var subscriptionCount: Int { router.subscriptions.count }
}
