import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

/// Failed and skipped steps, grouped by reason.
extension FleetReport {
    public struct Problem: Sendable, Equatable {
        public var step: String
        public var status: String
        public var reason: String
        public var count: Int
    }

    mutating func computeProblems(_ problems: [StepProblem]) {
        var counts: [String: Problem] = [:]
        for problem in problems {
            let reason = Self.reason(problem.reason)
            let key = [problem.step, problem.status, reason].joined(separator: "\u{1F}")
            counts[key, default: Problem(step: problem.step, status: problem.status, reason: reason, count: 0)].count +=
                1
        }
        self.problems = counts.values.sorted {
            ($1.count, $0.step, $0.status, $0.reason) < ($0.count, $1.step, $1.status, $1.reason)
        }
    }

    /// A reason as grouped: the first line, without the addresses and
    /// numbers that make each device's message unique; firmware versions
    /// (`1.0.6`) are kept, they are the reason.
    static func reason(_ text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        var cut = String(line.prefix(200))
        while let range = cut.firstRange(of: /([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}/) {
            cut.replaceSubrange(range, with: "ADDRESS")
        }
        var output = ""
        var rest = cut[...]
        while let digit = rest.firstIndex(where: { $0.isASCII && $0.isNumber }) {
            output += rest[..<digit]
            rest = rest[digit...]
            if let version = rest.prefixMatch(of: /\d+\.\d+\.\d+/) {
                output += version.output
                rest = rest[version.range.upperBound...]
            } else {
                output += "N"
                rest = rest.drop { $0.isASCII && $0.isNumber }
            }
        }
        output += rest
        return output.isEmpty ? "(no reason given)" : output
    }
}
