/// beaconbench's exit status (documented in README and `--help`).
public enum ExitStatus: Int32, Sendable, Comparable {
    /// Everything went well.
    case ok = 0
    /// Bad usage or input: nothing was touched.
    case badInput = 1
    /// Some devices failed (or an audit found problems, or stored values
    /// failed their checks).
    case devicesFailed = 2
    /// The bus, BlueZ, the adapter or the inventory is unusable.
    case infrastructure = 3
    /// Stopped by the user (Ctrl-C), as shells report SIGINT.
    case interrupted = 130
    /// Stopped by SIGTERM after saying what was done (`sync`), as shells
    /// report it.
    case terminated = 143

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A command that could not be carried out, and what that means for the
/// exit status.
public struct ConsoleFailure: Error, Sendable, CustomStringConvertible {
    public var status: ExitStatus
    public var message: String
    public init(_ status: ExitStatus, _ message: String) {
        self.status = status
        self.message = message
    }
    public var description: String { message }
}
