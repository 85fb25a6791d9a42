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

    public static let none = Latency(
        connect: .zero, serviceResolution: .zero, attRequest: .zero, calibration: .zero,
        advertInterval: .milliseconds(200))
    public static let realistic = Latency(
        connect: .milliseconds(1000), serviceResolution: .milliseconds(300), attRequest: .milliseconds(60),
        calibration: .milliseconds(1500), advertInterval: .milliseconds(1000))
}

/// Everything `beaconbench-sim` is told on its command line.
public struct SimulatorOptions: Sendable {
    public var adapters = 1
    public var connectionsPerAdapter = 5
    public var latency = Latency.none
    /// BlueZ' TemporaryTimeout: undiscovered devices go this long after
    /// discovery stops, unless connected.
    public var temporaryTimeout: Duration = .seconds(30)
    public var seed: UInt64 = 1

    public init() {}
}
