import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

/// Provisioning activity per day (or week) and bench, and each bench's pace.
extension FleetReport {
    public struct BenchDay: Sendable, Equatable {
        public var day: String
        public var bench: String
        public var devices: Int
        public var steps: Int
        public var failed: Int
    }

    public struct BenchSummary: Sendable, Equatable {
        public var bench: String
        public var days: Int
        public var devices: Int
        public var steps: Int
        public var failed: Int
        public var milliseconds: Int
        public var meanStepMilliseconds: Double { steps == 0 ? 0 : Double(milliseconds) / Double(steps) }
        public var devicesPerDay: Double { days == 0 ? 0 : Double(devices) / Double(days) }
    }

    mutating func computeActivity(_ counts: [ActivityCount]) {
        guard !counts.isEmpty else { return }
        let days = Set(counts.map(\.day)).sorted()
        if let first = days.first.flatMap(UTC.date(ofDay:)), let last = days.last.flatMap(UTC.date(ofDay:)) {
            activityUnit = last.timeIntervalSince(first) > 120 * 86_400 ? "week" : "day"
        }
        struct Cell {
            var devices: Set<String> = []
            var steps = 0
            var failed = 0
        }
        var cells: [String: [String: Cell]] = [:]
        struct Bench {
            var days: Set<String> = []
            var devices: Set<String> = []
            var steps = 0
            var failed = 0
            var milliseconds = 0
        }
        var perBench: [String: Bench] = [:]
        for count in counts {
            let period =
                activityUnit == "day"
                ? count.day
                : UTC.date(ofDay: count.day).map { UTC.period(of: $0, unit: "week").0 } ?? count.day
            // Mutated in place (a copy would copy the sets of devices).
            if let device = count.device {
                cells[period, default: [:]][count.bench, default: Cell()].devices.insert(device)
            }
            cells[period, default: [:]][count.bench, default: Cell()].steps += count.steps
            cells[period, default: [:]][count.bench, default: Cell()].failed += count.failed
            perBench[count.bench, default: Bench()].days.insert(count.day)
            if let device = count.device { perBench[count.bench, default: Bench()].devices.insert(device) }
            perBench[count.bench, default: Bench()].steps += count.steps
            perBench[count.bench, default: Bench()].failed += count.failed
            perBench[count.bench, default: Bench()].milliseconds += count.milliseconds
        }
        activity = cells.sorted { $0.key < $1.key }.flatMap { period, benches in
            benches.sorted { $0.key < $1.key }.map { bench, cell in
                BenchDay(day: period, bench: bench, devices: cell.devices.count, steps: cell.steps, failed: cell.failed)
            }
        }
        benches = perBench.sorted { $0.key < $1.key }.map { name, bench in
            BenchSummary(
                bench: name, days: bench.days.count, devices: bench.devices.count, steps: bench.steps,
                failed: bench.failed, milliseconds: bench.milliseconds)
        }
    }
}
