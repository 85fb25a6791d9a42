/// How long the simulated radio takes (`--latency none|realistic`).
public struct Latency: Sendable, Hashable {
    /// From Connect to Connected.
    public var connect: Duration
    /// From Connected to ServicesResolved.
    public var serviceResolution: Duration
    /// One ATT request and its response (a read, a write with response).
    public var attRequest: Duration
    /// From the calibration command to its result.
    public var calibration: Duration
    /// Between a device's adverts while discovering (RSSI updates).
    public var advertInterval: Duration
    /// From Connect to its failure when the beacon is not there (the
    /// kernel's LE connect timeout, 20 s on a real radio; nil: the connect
    /// latency, as before `--connect-timeout-ms` existed).
    public var connectTimeout: Duration?
    /// `connectTimeout`, or the connect latency.
    public var absentConnect: Duration { connectTimeout ?? connect }

    public static let none = Latency(
        connect: .zero, serviceResolution: .zero, attRequest: .zero, calibration: .zero,
        advertInterval: .milliseconds(200), connectTimeout: nil)
    public static let realistic = Latency(
        connect: .milliseconds(1000), serviceResolution: .milliseconds(300), attRequest: .milliseconds(60),
        calibration: .milliseconds(1500), advertInterval: .milliseconds(1000), connectTimeout: nil)
}

/// Everything `beaconbench-sim` is told on its command line.
public struct SimulatorOptions: Sendable {
    public var adapters = 1
    /// LE links each adapter holds (`--slots`; a plan's `adapters[].slots`
    /// wins for its adapter).
    public var connectionsPerAdapter = 5
    public var latency = Latency.none
    /// BlueZ' TemporaryTimeout: undiscovered devices go this long after
    /// discovery stops, unless connected.
    public var temporaryTimeout: Duration = .seconds(30)
    /// With DuplicateData on, ManufacturerData alternates between the
    /// advert's iBeacon data and the scan response's bench summary, as
    /// real bluetoothd shows a real beacon (`--split-adverts`;
    /// docs/realstack.md). Off: every report carries both.
    public var splitAdverts = false
    public var seed: UInt64 = 1
    /// Faults and how often each fires (`--faults kind=p,…`).
    public var faults: [Fault: Double] = [:]
    /// How long a stalled reply stalls (`--stall-seconds`).
    public var stall: Duration = .seconds(30)
    /// How long a vanished beacon stays out of range, and an adapter off.
    public var outage: Duration = .seconds(5)
    /// Where the fleet's state is kept across runs (`--state`).
    public var statePath: String?
    /// The fault plan read from `--fault-plan FILE`.
    public var faultPlan: FaultPlan?

    public init() {}

    /// The plan the daemon starts with: `--fault-plan`'s rules, then one
    /// probability rule per `--faults` kind (their seed: the plan's, else
    /// `--seed`).
    public var effectivePlan: FaultPlan {
        var plan = faultPlan ?? FaultPlan(seed: seed)
        for fault in Fault.allCases {
            guard let probability = faults[fault] else { continue }
            for rule in fault.rules(probability: probability, options: self)
            where !plan.rules.contains(where: { $0.id == rule.id }) {
                plan.rules.append(rule)
            }
        }
        return plan
    }
}

/// The radio's misfortunes the simulator can inject, each with a probability
/// per occasion, drawn from the seeded generator.
public enum Fault: String, CaseIterable, Sendable, Hashable {
    /// Connect fails at once with `org.bluez.Error.InProgress`.
    case connectInProgress = "connect-in-progress"
    /// Connect fails after the connect latency with `le-connection-abort-by-local`.
    case connectAbort = "connect-abort"
    /// Connected turns true but the GATT tree never comes and
    /// ServicesResolved stays false (Connect still returns).
    case servicesNeverResolved = "services-never-resolved"
    /// A read or write finds the link dropped: the device disconnects and
    /// the call fails with "Not connected".
    case disconnectMidOperation = "disconnect-mid-operation"
    /// A read or write fails with ATT error 0x0E (`Failed`, "Operation failed
    /// with ATT error: 0x0e").
    case attError = "att-error"
    /// A read or write answers only after the stall time.
    case stalledReply = "stalled-reply"
    /// A notification is lost.
    case droppedNotification = "dropped-notification"
    /// At a connect, the beacon leaves radio range for the outage time:
    /// the connect fails, a connection drops.
    case vanish
    /// At a connect, the adapter powers off for the outage time.
    case adapterOff = "adapter-off"

    /// Parses `kind=probability,…`.
    public static func parse(_ text: String) throws -> [Fault: Double] {
        var faults: [Fault: Double] = [:]
        for item in text.split(separator: ",") {
            let parts = item.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else {
                throw FaultSpecificationError("'\(item)' is not kind=probability")
            }
            let name = String(parts[0])
            let kinds: [Fault] = name == "all" ? Fault.allCases : [Fault(rawValue: name)].compactMap { $0 }
            guard !kinds.isEmpty else {
                throw FaultSpecificationError(
                    "unknown fault '\(name)' (known: all, \(Fault.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            guard let probability = Double(parts[1]), (0...1).contains(probability) else {
                throw FaultSpecificationError("the probability of \(name) must be between 0 and 1, not '\(parts[1])'")
            }
            for kind in kinds { faults[kind] = probability }
        }
        return faults
    }
}

public struct FaultSpecificationError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
