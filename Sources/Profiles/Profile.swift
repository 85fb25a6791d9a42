import FoundationEssentials
import SBeaconProtocol
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// A named threshold profile: what a car's, a van's or a truck's beacon
/// must hold, and what it must meet. One JSON file per profile in
/// `profiles/`; the name is the file name. docs/profiles.md has the format.
public struct Profile: Sendable, Equatable {
    public var name: String
    public var description: String
    public var config: DrivingBehaviourConfig
    public var requirements: Requirements
    /// The fleet's iBeacon identity, when the profile assigns one.
    public var identity: IdentityRule?

    public init(
        name: String, description: String, config: DrivingBehaviourConfig, requirements: Requirements,
        identity: IdentityRule?
    ) {
        self.name = name
        self.description = description
        self.config = config
        self.requirements = requirements
        self.identity = identity
    }

    public struct Requirements: Sendable, Equatable {
        public var minimumBatteryPercent: UInt8
        public var minimumFirmware: FirmwareVersion
        public var calibrationRequired: Bool
        public var maximumCalibrationAgeDays: Int?

        public init(
            minimumBatteryPercent: UInt8, minimumFirmware: FirmwareVersion, calibrationRequired: Bool,
            maximumCalibrationAgeDays: Int?
        ) {
            self.minimumBatteryPercent = minimumBatteryPercent
            self.minimumFirmware = minimumFirmware
            self.calibrationRequired = calibrationRequired
            self.maximumCalibrationAgeDays = maximumCalibrationAgeDays
        }
    }

    public struct IdentityRule: Sendable, Equatable {
        public enum MinorRule: String, Sendable, CaseIterable {
            /// The next free minor under this major, in provisioning order.
            case sequential
            /// Keep the minor the beacon has.
            case keep
        }
        public var major: UInt16
        public var minor: MinorRule

        public init(major: UInt16, minor: MinorRule) {
            self.major = major
            self.minor = minor
        }
    }
}

/// Why a profile file was refused: the file, the key path and what is wrong
/// (with the allowed range or values).
public struct ProfileError: Error, Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var keyPath: String
    public var message: String
    /// Where in the file, when the error is of the text itself (a
    /// duplicate key): `FILE:LINE:COLUMN: message`.
    public var line: Int? = nil
    public var column: Int? = nil

    public var description: String {
        let place = Visible.text(file, limit: 300) + (line.map { ":\($0):\(column ?? 1)" } ?? "")
        return keyPath.isEmpty ? "\(place): \(message)" : "\(place): \(Visible.text(keyPath, limit: 80)): \(message)"
    }
}

public enum ProfileLoader {
    /// What a profile may not exceed (docs/profiles.md, "Limits"); each is
    /// an error naming the file and key.
    public enum Limits {
        /// The file.
        public static let fileBytes = 1 << 20
        /// The description, in characters.
        public static let descriptionCharacters = 1000
        /// A profile's name (its file name without `.json`): letters,
        /// digits, `-` and `_`.
        public static let nameCharacters = 64
        /// Profile files in one directory.
        public static let filesPerDirectory = 1000
    }

    /// A value from the file as a message quotes it: bounded and visible.
    static func quoted(_ text: some StringProtocol) -> String { "'" + Visible.text(text, limit: 60) + "'" }

    /// Whether `name` can name a profile: what `apply NAME` can write.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= Limits.nameCharacters
            && name.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_")
            }
    }

    /// Loads one profile file, checking every key.
    /// - Throws: `ProfileError` naming the file, the key path and the rule.
    public static func load(_ path: String) throws -> Profile {
        let url = URL(fileURLWithPath: path)
        let name = url.deletingPathExtension().lastPathComponent
        guard url.pathExtension == "json" else {
            throw ProfileError(file: path, keyPath: "", message: "a profile is a .json file")
        }
        guard isValidName(name) else {
            throw ProfileError(
                file: path, keyPath: "",
                message: "a profile's name (its file name) is 1–\(Limits.nameCharacters) letters, digits, - or _")
        }
        return try parse(Data(try read(path, in: AT_FDCWD, name: path)), name: name, file: path)
    }

    /// A profile file's bytes: a regular file (not a link, FIFO, device or
    /// directory: opened with O_NOFOLLOW and O_NONBLOCK, so that nothing
    /// can make the tool wait), at most 1 MiB. `name` is opened relative
    /// to `directory` (a descriptor, or AT_FDCWD).
    static func read(
        _ path: String, in directory: Int32, name: String, strict: Bool = false
    ) throws(ProfileError)
        -> [UInt8]
    {
        let file: BoundedFile.RegularFile
        do {
            file = try BoundedFile.readRegular(name, relativeTo: directory, limit: Limits.fileBytes)
        } catch .tooLarge {
            throw ProfileError(file: path, keyPath: "", message: "larger than 1 MiB (a profile is at most 1 MiB)")
        } catch .notARegularFile(let kind) {
            throw ProfileError(
                file: path, keyPath: "",
                message: "is \(kind), not a regular file: only regular files are read as profiles (remove it)")
        } catch {
            throw ProfileError(file: path, keyPath: "", message: "\(error) (a profile is at most 1 MiB)")
        }
        if strict { try ProfileDirectory.checkTrusted(path, owner: file.owner, mode: file.mode, what: "profile") }
        return file.bytes
    }

    /// Checks a profile's text as if read from `file` (the name is the
    /// file's without `.json`).
    public static func parse(_ data: Data, name: String, file path: String) throws -> Profile {
        guard data.count <= Limits.fileBytes else {
            throw ProfileError(file: path, keyPath: "", message: "larger than 1 MiB (a profile is at most 1 MiB)")
        }
        // The text first: a duplicate key or an exponent is refused at its
        // line and column (Foundation would take the later key silently).
        if let failure = JSONSyntax.firstError(in: Array(data)) {
            guard failure.isStrictRule else {
                throw ProfileError(
                    file: path, keyPath: "",
                    message: "is not valid JSON (line \(failure.line), column \(failure.column): \(failure.reason))")
            }
            throw ProfileError(
                file: path, keyPath: "", message: failure.reason, line: failure.line, column: failure.column)
        }
        let object: JSONValue
        do {
            object = try JSONValue.parse(Array(data))
        } catch {
            throw ProfileError(file: path, keyPath: "", message: "is not valid JSON (\(error.reason))")
        }
        var reader = Reader(file: path)
        return try reader.profile(named: name, from: object)
    }

    /// Loads every `*.json` in the directories; a later directory's profile
    /// replaces an earlier one of the same name (project profiles over the
    /// shipped ones). Every file is checked before any is returned.
    ///
    /// A directory that does not exist is passed over. One that does is
    /// used only if it is safe, as ssh's StrictModes has it: owned by the
    /// user or root and not writable by group or others, and so is every
    /// directory above it (a sticky one such as /tmp may be writable), and
    /// so is every profile in it; each profile is a regular file
    /// (`ProfileDirectory`). Otherwise: an error naming the directory or
    /// file and the fix.
    public static func loadAll(from directories: [String]) throws -> [String: Profile] {
        var profiles: [String: Profile] = [:]
        for directory in directories {
            guard let opened = try ProfileDirectory.open(directory) else { continue }
            defer { close(opened.descriptor) }
            let files = opened.names.filter { $0.hasSuffix(".json") }
            guard files.count <= Limits.filesPerDirectory else {
                throw ProfileError(
                    file: directory, keyPath: "",
                    message: "holds \(files.count) profiles; at most \(Limits.filesPerDirectory) are read")
            }
            for file in files.sorted() {
                let path = directory + "/" + file
                let url = URL(fileURLWithPath: path)
                let name = url.deletingPathExtension().lastPathComponent
                guard isValidName(name) else {
                    throw ProfileError(
                        file: path, keyPath: "",
                        message:
                            "a profile's name (its file name) is 1–\(Limits.nameCharacters) letters, digits, - or _")
                }
                let bytes = try read(path, in: opened.descriptor, name: file, strict: true)
                let profile = try parse(Data(bytes), name: name, file: path)
                profiles[profile.name] = profile
            }
        }
        return profiles
    }

    /// Walks the JSON with the key path at hand, for messages.
    struct Reader {
        let file: String

        func fail(_ path: String, _ message: String) -> ProfileError {
            ProfileError(file: file, keyPath: path, message: message)
        }

        func object(_ value: JSONValue, _ path: String, allowed: [String]) throws -> [String: JSONValue] {
            guard case .object(let object) = value else { throw fail(path, "must be an object") }
            for key in object.keys.sorted() where !allowed.containsSameBytes(key) {
                // The key is from the file: `ProfileError` shows it bounded.
                throw fail(
                    path.isEmpty ? key : "\(path).\(key)",
                    "unknown key (allowed here: \(allowed.joined(separator: ", ")))")
            }
            return object
        }

        func number(
            _ object: [String: JSONValue], _ key: String, _ path: String, in range: ClosedRange<Int>, unit: String
        )
            throws -> Int?
        {
            guard let value = object[key] else { return nil }
            let keyPath = path.isEmpty ? key : "\(path).\(key)"
            guard case .number(let literal) = value else {
                throw fail(keyPath, "must be a whole number in \(range.lowerBound)–\(range.upperBound)\(unit)")
            }
            let number = JSONValue.describe(number: literal)
            let whole = JSONValue.double(literal)
            guard whole.rounded() == whole else {
                throw fail(keyPath, "\(number) is not a whole number (\(range.lowerBound)–\(range.upperBound)\(unit))")
            }
            guard whole >= Double(range.lowerBound), whole <= Double(range.upperBound) else {
                throw fail(keyPath, "\(number) is outside \(range.lowerBound)–\(range.upperBound)\(unit)")
            }
            return Int(whole)
        }

        func required<T>(_ value: T?, _ path: String, _ what: String) throws -> T {
            guard let value else { throw fail(path, "is missing (\(what))") }
            return value
        }

        func string(_ object: [String: JSONValue], _ key: String, _ path: String) throws -> String? {
            guard let value = object[key] else { return nil }
            guard case .string(let text) = value else {
                throw fail(path.isEmpty ? key : "\(path).\(key)", "must be a string")
            }
            return text
        }

        func bool(_ object: [String: JSONValue], _ key: String, _ path: String) throws -> Bool? {
            guard let value = object[key] else { return nil }
            guard case .bool(let truth) = value else {
                throw fail(path.isEmpty ? key : "\(path).\(key)", "must be true or false")
            }
            return truth
        }

        mutating func profile(named name: String, from value: JSONValue) throws -> Profile {
            let top = try object(
                value, "", allowed: ["description", "driving_behaviour", "requirements", "identity"])
            let description = try required(
                try string(top, "description", ""), "description", "a sentence saying what the profile is for")
            guard description.count <= Limits.descriptionCharacters else {
                throw fail(
                    "description",
                    "\(description.count) characters; at most \(Limits.descriptionCharacters) (a sentence or two)")
            }

            let drivingValue = try required(top["driving_behaviour"], "driving_behaviour", "the thresholds")
            let driving = try object(
                drivingValue, "driving_behaviour",
                allowed: ["cornering_mg", "braking_mg", "acceleration_mg", "duration_ms", "enabled"])
            func threshold(_ key: String) throws -> UInt16 {
                UInt16(
                    try required(
                        try number(driving, key, "driving_behaviour", in: 50...5000, unit: " mG"),
                        "driving_behaviour.\(key)", "50–5000 mG"))
            }
            let cornering = try threshold("cornering_mg")
            let braking = try threshold("braking_mg")
            let acceleration = try threshold("acceleration_mg")
            let duration = UInt16(
                try required(
                    try number(driving, "duration_ms", "driving_behaviour", in: 1...10000, unit: " ms"),
                    "driving_behaviour.duration_ms", "1–10000 ms"))
            let enabledValue = try required(driving["enabled"], "driving_behaviour.enabled", "a list of DB, HP, LP")
            guard case .array(let enabledList) = enabledValue else {
                throw fail("driving_behaviour.enabled", "must be a list of DB, HP, LP")
            }
            var enable: DrivingBehaviourConfig.EnableFlags = []
            for (index, item) in enabledList.enumerated() {
                let flag: DrivingBehaviourConfig.EnableFlags? =
                    switch item {
                    case .string("DB"): .detection
                    case .string("HP"): .highPassFilter
                    case .string("LP"): .lowPassFilter
                    default: nil
                    }
                guard let flag else {
                    throw fail(
                        "driving_behaviour.enabled[\(index)]", "\(quoted(item.messageText)) is not one of DB, HP, LP")
                }
                guard !enable.contains(flag) else {
                    throw fail("driving_behaviour.enabled[\(index)]", "\(quoted(item.messageText)) is listed twice")
                }
                enable.insert(flag)
            }

            let requirementsValue = try required(top["requirements"], "requirements", "battery, firmware, calibration")
            let requirementsObject = try object(
                requirementsValue, "requirements",
                allowed: [
                    "minimum_battery_percent", "minimum_firmware", "calibration_required",
                    "maximum_calibration_age_days",
                ])
            let battery = try required(
                try number(requirementsObject, "minimum_battery_percent", "requirements", in: 0...100, unit: " %"),
                "requirements.minimum_battery_percent", "0–100 %")
            let firmwareText = try required(
                try string(requirementsObject, "minimum_firmware", "requirements"), "requirements.minimum_firmware",
                "a version like 1.0.8")
            guard let firmware = try? FirmwareVersion(firmwareText) else {
                throw fail("requirements.minimum_firmware", "\(quoted(firmwareText)) is not MAJOR.MINOR.PATCH")
            }
            let calibrationRequired = try required(
                try bool(requirementsObject, "calibration_required", "requirements"),
                "requirements.calibration_required",
                "true or false")
            let age = try number(
                requirementsObject, "maximum_calibration_age_days", "requirements", in: 1...3650, unit: " days")

            var identity: Profile.IdentityRule?
            if let identityValue = top["identity"] {
                let identityObject = try object(identityValue, "identity", allowed: ["major", "minor"])
                let major = try required(
                    try number(identityObject, "major", "identity", in: 0...65535, unit: ""), "identity.major",
                    "0–65535")
                let minorText = try string(identityObject, "minor", "identity") ?? "sequential"
                guard let minor = Profile.IdentityRule.MinorRule(rawValue: minorText) else {
                    throw fail("identity.minor", "\(quoted(minorText)) is not one of sequential, keep")
                }
                identity = Profile.IdentityRule(major: UInt16(major), minor: minor)
            }

            return Profile(
                name: name, description: description,
                config: DrivingBehaviourConfig(
                    cornering: cornering, braking: braking, acceleration: acceleration, duration: duration,
                    enable: enable),
                requirements: Profile.Requirements(
                    minimumBatteryPercent: UInt8(battery), minimumFirmware: firmware,
                    calibrationRequired: calibrationRequired, maximumCalibrationAgeDays: age),
                identity: identity)
        }
    }
}
