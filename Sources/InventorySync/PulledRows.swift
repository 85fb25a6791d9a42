import FoundationEssentials
import Inventory
import Profiles
import SBeaconProtocol
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// A row the shared server holds that failed the checks local input gets:
/// not applied here, left on the server as it is, and named in `sync`'s
/// output (text and JSON).
public struct RefusedRow: Error, Sendable, Equatable, CustomStringConvertible {
    /// The server's table.
    public var table: String
    /// The row's key, shown safely (`Visible`, bounded).
    public var key: String
    /// The column that failed.
    public var field: String
    /// What is wrong, with the rule (the range, the values allowed).
    public var reason: String
    /// The value, shown safely (`Visible`, bounded); nil for NULL.
    public var value: String?

    public init(table: String, key: String, field: String, reason: String, value: String?) {
        self.table = table
        self.key = key
        self.field = field
        self.reason = reason
        self.value = value
    }

    public var description: String {
        "\(table) row \(key): \(field) \(value.map { "'\($0)'" } ?? "NULL") \(reason)"
    }
}

/// The checks a row pulled from the shared server goes through before
/// anything of it is used: the rules local input follows, each defined
/// once elsewhere and called from here — addresses as a command line
/// names a device (`MACEnding.address`), profile names as the profile
/// loader takes them and among the profiles this bench loaded, identities
/// in 0–65535 (the wire contract's `UInt16`), minor policies as `assign`
/// records them (`Assignment.MinorPolicy`), threshold overrides as a
/// profile's thresholds (`ProfileLoader.parseOverrides`), times as the
/// inventory writes them. Integers arrive as PostgreSQL's text and are
/// range-checked, never clamped.
public enum PulledRows {
    /// How much of a refused value or key is shown.
    public static let shownCharacters = 60
    /// The longest `assigned_by` (`user@host`) or bench id taken.
    public static let nameCharacters = 256

    /// Why one field failed.
    public struct Problem: Error, Sendable, Equatable {
        public var field: String
        public var reason: String
        /// The value as the server holds it (nil: NULL).
        public var value: String?
        public init(_ field: String, _ reason: String, _ value: String?) {
            self.field = field
            self.reason = reason
            self.value = value
        }
    }

    /// A value from the server as a message shows it: visible, bounded.
    public static func shown(_ text: String) -> String { Visible.text(text, limit: shownCharacters) }

    /// A refusal of `table`'s row `key` for `problem`.
    public static func refusal(_ table: String, key: String?, _ problem: Problem) -> RefusedRow {
        RefusedRow(
            table: table, key: key.map(shown) ?? "NULL", field: problem.field, reason: problem.reason,
            value: problem.value.map(shown))
    }

    /// An integer as PostgreSQL writes one (`-12`, `65535`): decimal digits
    /// with an optional minus, within `range`; nil for NULL.
    public static func integer(
        _ text: String?, _ field: String, in range: ClosedRange<Int64>
    ) throws(Problem) -> Int64? {
        guard let text else { return nil }
        let bytes = text.utf8
        let digits = bytes.first == UInt8(ascii: "-") ? bytes.dropFirst() : bytes[...]
        guard !digits.isEmpty, digits.count <= 19, digits.allSatisfy({ (0x30...0x39).contains($0) }),
            let value = Int64(text)
        else {
            throw Problem(field, "is not a whole number (\(range.lowerBound)–\(range.upperBound))", text)
        }
        guard range.contains(value) else {
            throw Problem(field, "is outside \(range.lowerBound)–\(range.upperBound)", text)
        }
        return value
    }

    /// A major or minor: 0–65535, or NULL.
    public static func identityPart(_ text: String?, _ field: String) throws(Problem) -> UInt16? {
        try integer(text, field, in: 0...Int64(UInt16.max)).map { UInt16($0) }
    }

    /// A time as the inventory writes it (`2026-12-02T13:55:01.120Z`, UTC,
    /// milliseconds), a real date (no 30 February).
    public static func isTimestamp(_ text: String) -> Bool {
        let bytes = Array(text.utf8.prefix(25))
        guard bytes.count == 24, bytes[19] == UInt8(ascii: "."), bytes[23] == UInt8(ascii: "Z"),
            bytes[20...22].allSatisfy({ (0x30...0x39).contains($0) })
        else { return false }
        // To the second through Foundation and back: a date that does not
        // exist comes back as another.
        let seconds = String(decoding: bytes[0..<19], as: UTF8.self) + "Z"
        let style = Date.ISO8601FormatStyle()
        guard let date = try? style.parse(seconds) else { return false }
        return style.format(date) == seconds
    }

    static func timestamp(_ text: String?, _ field: String, optional: Bool) throws(Problem) -> String? {
        guard let text else {
            if optional { return nil }
            throw Problem(field, "is missing (a time, 2026-12-02T13:55:01.120Z)", nil)
        }
        guard isTimestamp(text) else {
            throw Problem(field, "is not a time as beaconbench writes one (2026-12-02T13:55:01.120Z)", text)
        }
        return text
    }

    /// A name to show (`user@host`, a bench id): 1–256 characters, none a
    /// terminal acts on or hides.
    static func name(_ text: String?, _ field: String, optional: Bool) throws(Problem) -> String? {
        guard let text else {
            if optional { return nil }
            throw Problem(field, "is missing", nil)
        }
        guard !text.isEmpty, text.unicodeScalars.count <= nameCharacters else {
            throw Problem(field, "must be 1–\(nameCharacters) characters", text)
        }
        guard text.unicodeScalars.allSatisfy(Visible.isShownAsIs) else {
            throw Problem(field, "holds control or invisible characters", text)
        }
        return text
    }

    /// The profiles a message lists (bounded).
    static func listed(_ profiles: Set<String>) -> String {
        let names = profiles.sorted()
        return names.prefix(8).joined(separator: ", ") + (names.count > 8 ? ", …" : "")
    }

    /// One row of `fleet_assignments`, as `ServerAssignments.columns`
    /// selects it (address, profile, major, minor_policy, minor, overrides,
    /// assigned_at, assigned_by, converged_at, converged_bench), checked
    /// field by field: the assignment and the bench that converged it, or
    /// the first field that fails.
    public static func assignment(
        _ cells: [String?], profiles: Set<String>
    ) -> Result<(assignment: Assignment, bench: String?), RefusedRow> {
        let table = "fleet_assignments"
        guard cells.count == 10 else {
            return .failure(
                refusal(table, key: cells.first ?? nil, Problem("row", "has \(cells.count) columns, not 10", nil)))
        }
        let rawAddress = cells[0]
        do throws(Problem) {
            guard let text = rawAddress, let address = MACEnding.address(text) else {
                throw Problem("address", "is not a device address (six hex octets: A1:B2:A3:B5:C7:D9)", rawAddress)
            }
            guard let profile = cells[1] else { throw Problem("profile", "is missing", nil) }
            guard ProfileLoader.isValidName(profile) else {
                throw Problem(
                    "profile",
                    "is not a profile name (1–\(ProfileLoader.Limits.nameCharacters) letters, digits, - or _)",
                    profile)
            }
            guard profiles.contains(profile) else {
                throw Problem("profile", "names no profile this bench has (\(listed(profiles)))", profile)
            }
            let major = try identityPart(cells[2], "major")
            guard let policyText = cells[3], let policy = Assignment.MinorPolicy(rawValue: policyText) else {
                let known = Assignment.MinorPolicy.allCases.map(\.rawValue).joined(separator: ", ")
                throw Problem("minor_policy", "is not a minor policy (\(known))", cells[3])
            }
            let minor = try identityPart(cells[4], "minor")
            if policy == .fixed, minor == nil {
                throw Problem("minor", "is missing: minor_policy fixed needs a minor (0–65535)", nil)
            }
            if policy != .fixed, minor != nil {
                throw Problem("minor", "is set with minor_policy \(policy.rawValue) (only fixed takes one)", cells[4])
            }
            guard let overridesText = cells[5] else {
                throw Problem("overrides", "is missing (a JSON object, {} for none)", nil)
            }
            let overrides: ConfigOverrides
            do throws(ProfileError) {
                overrides = try ConfigOverrides(checkedJSON: overridesText, source: "overrides")
            } catch {
                // The message may quote a number from the text: bounded too.
                let reason = error.keyPath.isEmpty ? error.message : "\(shown(error.keyPath)): \(error.message)"
                throw Problem("overrides", Visible.text(reason, limit: 200), overridesText)
            }
            guard let assignedAt = try timestamp(cells[6], "assigned_at", optional: false),
                let assignedBy = try name(cells[7], "assigned_by", optional: false)
            else { throw Problem("assigned_at", "is missing", nil) }
            let convergedAt = try timestamp(cells[8], "converged_at", optional: true)
            let bench = try name(cells[9], "converged_bench", optional: true)
            var assignment = Assignment(
                address: address, profile: profile, major: major, minorPolicy: policy, minor: minor,
                overrides: overrides, assignedAt: assignedAt, assignedBy: assignedBy, source: .server)
            assignment.convergedAt = convergedAt
            return .success((assignment, bench))
        } catch {
            return .failure(refusal(table, key: rawAddress, error))
        }
    }
}
