import Synchronization

/// The profiles of a session, loaded once, when first needed: a batch
/// loads them before it is checked, the REPL at its first line (so that
/// the prompt does not wait for them; docs/benchmarks.md, "Start-up").
public final class ProfileSource: Sendable {
    private let loader: @Sendable () throws -> [String: Profile]
    private let state = Mutex<[String: Profile]?>(nil)

    /// Profiles loaded already.
    public init(_ profiles: [String: Profile]) {
        loader = { profiles }
        state.withLock { $0 = profiles }
    }

    /// Profiles `load` reads when first asked (`ProfileLoader.loadAll`).
    public init(load: @escaping @Sendable () throws -> [String: Profile]) {
        loader = load
    }

    /// The profiles, loaded on the first call; a load that fails throws
    /// its error and is tried again at the next call.
    public func load() throws -> [String: Profile] {
        try state.withLock { state in
            if let state { return state }
            let profiles = try loader()
            state = profiles
            return profiles
        }
    }

    /// What has been loaded: none before the first successful `load`.
    public var loaded: [String: Profile] { state.withLock { $0 } ?? [:] }
}
