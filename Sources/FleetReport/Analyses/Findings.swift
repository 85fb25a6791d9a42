import FoundationEssentials
import Profiles

#if canImport(Glibc)
    import Glibc
#endif

/// The offline audit's findings: counts per code, config drift, duplicate identities.
extension FleetReport {
    public struct Drift: Sendable, Equatable {
        public var field: String
        public var holds: String
        public var profile: String
        public var wants: String
        public var devices: Int
    }

    public struct Duplicate: Sendable, Equatable {
        public var identity: String
        public var holders: [String]
    }

    static let driftFieldNames = ["cornering", "braking", "acceleration", "duration", "enabled"]

    mutating func computeFindings(
        _ findingsOf: [String: [AuditFinding]], profiles: [String: Profile], devices: [ReportDevice]
    ) {
        var codes: [String: Int] = [:]
        var fields: [String: Int] = [:]
        var pairs: [String: Drift] = [:]
        var shared: [String: Set<String>] = [:]
        let profileOf = Dictionary(devices.map { ($0.address, $0.profile ?? "") }, uniquingKeysWith: { a, _ in a })
        for (address, findings) in findingsOf {
            if !findings.isEmpty { devicesWithFindings += 1 }
            var drifted = false
            for code in Set(findings.map(\.code)) { codes[code, default: 0] += 1 }
            for finding in findings {
                switch finding {
                case .configDiffers(let field, let holds, let wants):
                    drifted = true
                    fields[field, default: 0] += 1
                    let profile = profileOf[address] ?? ""
                    let key = [field, profile, holds, wants].joined(separator: "\u{1F}")
                    pairs[key, default: Drift(field: field, holds: holds, profile: profile, wants: wants, devices: 0)]
                        .devices += 1
                case .duplicateIdentity(let identity, let others):
                    var holders = shared[identity] ?? []
                    holders.insert(address)
                    for other in others { holders.insert(String(other.prefix { $0 != " " })) }
                    shared[identity] = holders
                default: break
                }
            }
            if drifted { driftDevices += 1 }
        }
        findings = codes.sorted { ($1.value, $0.key) < ($0.value, $1.key) }.map { Count($0.key, $0.value) }
        driftFields = Self.driftFieldNames.map { Count($0, fields[$0] ?? 0) }
        drift = pairs.values.sorted {
            ($1.devices, $0.field, $0.profile, $0.holds) < ($0.devices, $1.field, $1.profile, $1.holds)
        }
        // Most holders first, then by major and minor as numbers.
        func order(_ identity: String) -> [Int] { identity.split(separator: ".").map { Int($0) ?? 0 } }
        duplicates = shared.map { Duplicate(identity: $0.key, holders: $0.value.sorted()) }.sorted {
            $0.holders.count != $1.holders.count
                ? $0.holders.count > $1.holders.count : order($0.identity).lexicographicallyPrecedes(order($1.identity))
        }
    }
}
