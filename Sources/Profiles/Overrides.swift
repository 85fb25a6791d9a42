import FoundationEssentials
import SBeaconProtocol

/// Threshold overrides: the thresholds an assignment sets over its
/// profile's (`assign van cornering=300`), stored as a JSON object
/// (`{"cornering":300}`) in the inventory and on the shared server. Read
/// back with the checks a profile's own thresholds get.
extension ProfileLoader {
    /// The keys, each with the range the wire contract gives it
    /// (`DrivingBehaviourConfig`) and its unit.
    public static let overrideKeys: [(name: String, range: ClosedRange<UInt16>, unit: String)] = [
        ("cornering", DrivingBehaviourConfig.thresholdRange, "mG"),
        ("braking", DrivingBehaviourConfig.thresholdRange, "mG"),
        ("acceleration", DrivingBehaviourConfig.thresholdRange, "mG"),
        ("duration", DrivingBehaviourConfig.durationRange, "ms"),
    ]

    /// Stored overrides are at most this many bytes (four keys take under 80).
    public static let overridesBytes = 1024

    /// Reads stored overrides strictly: JSON whose syntax a profile would
    /// pass, one object of `overrideKeys` only, each key once, each value
    /// a whole number in its range. `source` names where the text came
    /// from (the error's file).
    /// - Throws: `ProfileError` naming the key and the rule.
    public static func parseOverrides(_ text: String, source: String) throws(ProfileError) -> [String: UInt16] {
        let bytes = Array(text.utf8)
        guard bytes.count <= overridesBytes else {
            throw ProfileError(
                file: source, keyPath: "", message: "\(bytes.count) bytes of overrides; at most \(overridesBytes)")
        }
        // JSONSyntax refuses a key written twice (Foundation's parser
        // would keep the last) and an exponent, as in a profile.
        if let failure = JSONSyntax.firstError(in: bytes) {
            let place = "line \(failure.line), column \(failure.column)"
            throw ProfileError(
                file: source, keyPath: "",
                message: failure.isStrictRule
                    ? "\(failure.reason) (\(place))" : "is not valid JSON (\(place): \(failure.reason))")
        }
        let reader = Reader(file: source)
        do {
            let value = try JSONValue.parse(bytes)
            let object = try reader.object(value, "", allowed: overrideKeys.map(\.name))
            var found: [String: UInt16] = [:]
            for rule in overrideKeys {
                let range = Int(rule.range.lowerBound)...Int(rule.range.upperBound)
                if let number = try reader.number(object, rule.name, "", in: range, unit: " " + rule.unit) {
                    found[rule.name] = UInt16(number)
                }
            }
            return found
        } catch let error as ProfileError {
            throw error
        } catch {
            throw ProfileError(file: source, keyPath: "", message: "is not valid JSON")
        }
    }
}
