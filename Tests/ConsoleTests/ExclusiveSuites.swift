import Testing

/// What end-to-end suites contend for. Suites that name the same resource
/// take turns (`.exclusive(…)` on their `@Suite`); every other suite runs
/// beside them, in parallel as usual.
///
/// - `postgreSQL`: the suite starts PostgreSQL servers of its own
///   (`initdb`, `pg_ctl`: seconds of CPU each, and a sync's timing beside
///   them). Two such suites at a time: one at a time made them the longest
///   chain of tier 2 (404 s of a 469 s tier under load, 2026-12-03).
/// - `heavyLoad`: the suite loads the whole machine or acts at moments of a
///   long run (Chromium, killed and restarted runs, the production line).
///   One at a time.
enum SharedResource: String, Comparable, Sendable {
    case postgreSQL
    case heavyLoad
    /// A fault matrix case: 100 beacons and a provisioning run under
    /// faults. Two at a time: one at a time made the matrix the longest
    /// chain of tier 2 (265 s of a 282 s tier, idle, 2026-12-03); all ten
    /// at once would load the machine as much as the rest of the tier.
    case faultMatrixCase

    /// Runs `body` once a place at this resource is free (for what is not
    /// a whole suite: a test case of a parameterized test).
    func withTurn<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        await gate.enter()
        do {
            let result = try await body()
            await gate.leave()
            return result
        } catch {
            await gate.leave()
            throw error
        }
    }

    static func < (left: Self, right: Self) -> Bool { left.rawValue < right.rawValue }

    fileprivate var gate: SuiteGate {
        switch self {
        case .postgreSQL: SuiteGate.postgreSQL
        case .heavyLoad: SuiteGate.heavyLoad
        case .faultMatrixCase: SuiteGate.faultMatrixCase
        }
    }
}

/// At most `width` suites at a time, first come first served. Waiting
/// suspends the suite's task: no thread is blocked.
private actor SuiteGate {
    static let postgreSQL = SuiteGate(width: 2)
    static let heavyLoad = SuiteGate(width: 1)
    static let faultMatrixCase = SuiteGate(width: 2)

    let width: Int
    private var inside = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(width: Int) { self.width = width }

    func enter() async {
        guard inside == width else {
            inside += 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    /// Hands the place to the next suite waiting, if any.
    func leave() {
        if waiting.isEmpty {
            inside -= 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}

/// A suite trait: the suite's tests start only once each of `resources`
/// has a place free (see `SharedResource`), and the places are held until
/// the suite's last test ends. Not recursive, so its scope is provided once, around the
/// whole suite; a suite's `.timeLimit` applies to each of its tests and
/// does not count the wait. Resources are taken in one order (sorted), so
/// two suites that each need both cannot hold one each and wait forever.
struct ExclusiveTrait: SuiteTrait, TestScoping {
    let resources: [SharedResource]

    var isRecursive: Bool { false }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        for resource in resources { await resource.gate.enter() }
        do {
            try await function()
        } catch {
            for resource in resources.reversed() { await resource.gate.leave() }
            throw error
        }
        for resource in resources.reversed() { await resource.gate.leave() }
    }
}

extension Trait where Self == ExclusiveTrait {
    /// The suite takes its turn at each of `resources` (see
    /// `SharedResource`).
    static func exclusive(_ resources: SharedResource...) -> Self {
        Self(resources: Array(Set(resources)).sorted())
    }
}
