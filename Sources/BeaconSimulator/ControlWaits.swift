import DBusBinding
import Foundation

/// The control interface's `WaitFor`: a call that returns when a state is
/// reached (a beacon connected or disconnected, in or out of range, N links up, a rule fired N times, a step
/// held, an adapter back), so tests act at a moment instead of after a
/// sleep. Checked whenever such a state may have changed; never polled.
extension SimulatedBluetoothd {
    enum Condition: Sendable, Equatable {
        case connected(String)
        case disconnected(String)
        case inRange(String, Bool)
        case linksUp(Int, adapter: Int)
        case ruleFired(String, count: Int)
        case held(String)
        case adapterPresent(String, path: String?)

        /// Parses `{"connected": "C1:…"}`, `{"linksUp": 2, "adapter": 0}`,
        /// `{"ruleFired": "m1", "count": 2}`, `{"held": "name"}`,
        /// `{"adapterPresent": "00:1A:…", "path": "/org/bluez/hci1"}`,
        /// `{"disconnected": "C1:…"}`, `{"inRange": "C1:…", "is": false}`.
        init(json text: String) throws {
            guard case .object(let object) = try? JSONValue.parse(text) else {
                throw BusError(.invalidArgs, "WaitFor: the condition must be a JSON object")
            }
            func string(_ key: String) -> String? {
                if case .string(let value) = object[key] { return value }
                return nil
            }
            func int(_ key: String) -> Int? {
                if case .integer(let value) = object[key] { return value }
                return nil
            }
            func only(_ keys: Set<String>) throws {
                if let unknown = object.keys.sorted().first(where: { !keys.contains($0) }) {
                    throw BusError(.invalidArgs, "WaitFor: unknown field '\(unknown)' in \(text.prefix(200))")
                }
            }
            if let address = string("connected") {
                try only(["connected"])
                self = .connected(address.uppercased())
            } else if let address = string("disconnected") {
                try only(["disconnected"])
                self = .disconnected(address.uppercased())
            } else if let address = string("inRange") {
                try only(["inRange", "is"])
                var wanted = true
                if let value = object["is"] {
                    guard case .bool(let bool) = value else {
                        throw BusError(.invalidArgs, "WaitFor: \"is\" must be true or false")
                    }
                    wanted = bool
                }
                self = .inRange(address.uppercased(), wanted)
            } else if let count = int("linksUp") {
                try only(["linksUp", "adapter"])
                self = .linksUp(count, adapter: int("adapter") ?? 0)
            } else if let rule = string("ruleFired") {
                try only(["ruleFired", "count"])
                self = .ruleFired(rule, count: int("count") ?? 1)
            } else if let hold = string("held") {
                try only(["held"])
                self = .held(hold)
            } else if let address = string("adapterPresent") {
                try only(["adapterPresent", "path"])
                self = .adapterPresent(address.uppercased(), path: string("path"))
            } else {
                throw BusError(
                    .invalidArgs,
                    "WaitFor: the condition is one of connected, disconnected, inRange (+is), linksUp (+adapter), ruleFired (+count), held, "
                        + "adapterPresent (+path), not \(text.prefix(200))")
            }
        }
    }

    struct Waiter {
        var condition: Condition
        var continuation: CheckedContinuation<String, any Error>
        var timeout: Task<Void, Never>?
    }

    /// What is true now of `condition`, as the JSON `WaitFor` answers, or
    /// nil when it does not hold yet.
    func state(of condition: Condition) -> String? {
        switch condition {
        case .connected(let address):
            guard let index = adapters.indices.first(where: { adapters[$0].devices[address]?.connected == true }) else {
                return nil
            }
            return JSONValue.object([
                "connected": .string(address), "path": .string(adapters[index].devices[address]!.path.rawValue),
            ]).text
        case .disconnected(let address):
            guard beacons[address] != nil, !adapters.contains(where: { $0.devices[address]?.connected == true }) else {
                return nil
            }
            return JSONValue.object(["disconnected": .string(address)]).text
        case .inRange(let address, let wanted):
            guard let state = beacons[address]?.state, state.inRange == wanted else { return nil }
            return JSONValue.object(["inRange": .string(address), "is": .bool(wanted)]).text
        case .linksUp(let count, let adapter):
            guard adapters.indices.contains(adapter), adapters[adapter].present, linksUp(adapter) >= count else {
                return nil
            }
            return JSONValue.object(["linksUp": .integer(linksUp(adapter)), "adapter": .integer(adapter)]).text
        case .ruleFired(let rule, let count):
            let fired = plan.fired[rule, default: 0]
            guard fired >= count else { return nil }
            return JSONValue.object(["ruleFired": .string(rule), "count": .integer(fired)]).text
        case .held(let hold):
            let held = holds[hold]?.count ?? 0
            guard held > 0 else { return nil }
            return JSONValue.object(["held": .string(hold), "count": .integer(held)]).text
        case .adapterPresent(let address, let path):
            guard
                let adapter = adapters.first(where: {
                    $0.present && $0.address.uppercased() == address && (path == nil || $0.path.rawValue == path)
                })
            else { return nil }
            return JSONValue.object(["adapterPresent": .string(address), "path": .string(adapter.path.rawValue)]).text
        }
    }

    /// Returns (JSON: the state reached) once `condition` holds, at once if
    /// it does now.
    /// - Throws: `org.bluez.Error.Failed` naming the condition when
    ///   `timeoutMs` pass first.
    public func waitFor(_ conditionJSON: String, timeoutMs: Int) async throws -> String {
        let condition = try Condition(json: conditionJSON)
        if let reached = state(of: condition) { return reached }
        let id = nextWaiter
        nextWaiter += 1
        return try await withCheckedThrowingContinuation { continuation in
            let timeout = Task { [self] in
                try? await Task.sleep(for: .milliseconds(timeoutMs))
                guard !Task.isCancelled else { return }
                await timedOut(id, conditionJSON, timeoutMs)
            }
            waiters[id] = Waiter(condition: condition, continuation: continuation, timeout: timeout)
        }
    }

    func timedOut(_ id: Int, _ conditionJSON: String, _ timeoutMs: Int) {
        guard let waiter = waiters.removeValue(forKey: id) else { return }
        waiter.continuation.resume(
            throwing: BusError(
                .bluez.failed, "WaitFor: \(conditionJSON.prefix(200)) not reached within \(timeoutMs) ms"))
    }

    /// Answers every waiter whose condition now holds.
    func checkWaiters() {
        guard !waiters.isEmpty else { return }
        for (id, waiter) in waiters {
            guard let reached = state(of: waiter.condition) else { continue }
            waiters[id] = nil
            waiter.timeout?.cancel()
            waiter.continuation.resume(returning: reached)
        }
    }
}
