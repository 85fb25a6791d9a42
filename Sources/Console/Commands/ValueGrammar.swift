import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// The one grammar of the numbers, durations and times a person writes —
/// on the command line, in a batch, at the REPL (docs/batch-language.md,
/// "Values"). Decimal digits only: no `+`, no hexadecimal (`0x10`), no
/// exponent (`1e3`), no `inf` or `nan`, no blanks; `-` only where a value
/// may be negative. Dates are checked field by field (no rollover: there
/// is no 30 February). Every parser of a written value goes through here.
public enum ValueGrammar {
    /// Why a value was refused, naming the part that is wrong.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var reason: String
        public var description: String { reason }
    }

    /// More digits than this is no number the tool takes (and could not
    /// overflow an `Int`).
    public static let maximumDigits = 18

    static func isDigits(_ text: some StringProtocol) -> Bool {
        !text.isEmpty && text.utf8.count <= maximumDigits && text.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }

    /// `DIGITS`, or `-DIGITS` when `signed`: a whole number.
    public static func whole(_ text: some StringProtocol, signed: Bool = true) -> Int? {
        var digits = Substring(text)
        let negative = signed && digits.first == "-"
        if negative { digits = digits.dropFirst() }
        guard isDigits(digits), let value = Int(digits) else { return nil }
        return negative ? -value : value
    }

    /// A whole number that fits `T` (`UInt16`: 0–65535).
    public static func whole<T: FixedWidthInteger>(_ text: some StringProtocol, as type: T.Type) -> T? {
        whole(text, signed: T.isSigned).flatMap { T(exactly: $0) }
    }

    /// `DIGITS` or `DIGITS.DIGITS`: a decimal number, not negative.
    public static func decimal(_ text: some StringProtocol) -> Double? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.allSatisfy({ isDigits($0) }) else { return nil }
        return Double(String(text))
    }

    /// The units a duration may carry, in seconds; none is seconds.
    public static let durationUnits: [(suffix: String, seconds: Double)] = [
        ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600),
    ]

    /// `500ms`, `10s`, `1.5m`, `2h`, or a decimal number of seconds.
    public static func duration(_ text: some StringProtocol) -> Double? {
        let text = String(text)
        for unit in durationUnits where text.hasSuffix(unit.suffix) {
            // `ms` is tried before `s` and `m`.
            guard let number = decimal(text.dropLast(unit.suffix.count)) else { return nil }
            return number * unit.seconds
        }
        return decimal(text)
    }

    /// The units of an age (`7d`): before now by that much.
    public static let ageUnits: [Character: Double] = ["d": 86_400, "h": 3600, "m": 60, "s": 1]

    /// The oldest age the tool takes: 100 years.
    public static let maximumAgeDays = 36_500

    /// The years a date may name.
    public static let years = 1970...9999

    /// A time as written: a date (`2026-11-30`, midnight UTC), an instant
    /// (`2026-11-30T14:00:00Z`, `2026-11-30T14:00:00.5+01:00`) or an age
    /// before `now` (`7d`, `12h`, `30m`, `45s`; decimals allowed).
    public static func time(_ text: some StringProtocol, now: Date = Date()) throws(Failure) -> Date {
        let text = String(text)
        if let unit = text.last, let scale = ageUnits[unit], !text.hasPrefix(String(unit)) {
            guard let number = decimal(text.dropLast()) else {
                throw Failure(reason: "an age is a decimal number and a unit d, h, m or s (7d, 1.5h)")
            }
            guard number * scale <= Double(maximumAgeDays) * 86_400 else {
                throw Failure(reason: "an age of at most \(maximumAgeDays) days (100 years)")
            }
            return now.addingTimeInterval(-number * scale)
        }
        let utf8 = Array(text.utf8)
        guard utf8.count >= 10, utf8.count <= 40, utf8[4] == UInt8(ascii: "-"), utf8[7] == UInt8(ascii: "-") else {
            throw Failure(
                reason: "a date (2026-11-30), a time (2026-11-30T14:00:00Z) or an age (7d, 12h, 30m) expected")
        }
        func field(_ range: Range<Int>, _ name: String) throws(Failure) -> Int {
            guard let value = whole(text.utf8Slice(range), signed: false) else {
                throw Failure(reason: "the \(name) must be \(range.count) digits")
            }
            return value
        }
        let year = try field(0..<4, "year")
        let month = try field(5..<7, "month")
        let day = try field(8..<10, "day")
        guard years.contains(year) else {
            throw Failure(reason: "year \(year) is outside \(years.lowerBound)–\(years.upperBound)")
        }
        guard (1...12).contains(month) else { throw Failure(reason: "month \(month) is not 01–12") }
        let length = daysIn(month: month, year: year)
        guard (1...length).contains(day) else {
            throw Failure(
                reason: day == 0
                    ? "day 00 is not a day"
                    : "day \(day) is past the end of \(monthNames[month - 1]) \(year) (it has \(length) days)")
        }
        var seconds = Double(daysSinceEpoch(year: year, month: month, day: day)) * 86_400
        if utf8.count == 10 { return Date(timeIntervalSince1970: seconds) }
        guard utf8[10] == UInt8(ascii: "T"), utf8.count >= 19, utf8[13] == UInt8(ascii: ":"),
            utf8[16] == UInt8(ascii: ":")
        else {
            throw Failure(reason: "a time is written 2026-11-30T14:00:00Z (or with +HH:MM)")
        }
        let hour = try field(11..<13, "hour")
        let minute = try field(14..<16, "minute")
        let second = try field(17..<19, "second")
        guard hour <= 23 else { throw Failure(reason: "hour \(hour) is not 00–23") }
        guard minute <= 59 else { throw Failure(reason: "minute \(minute) is not 00–59") }
        guard second <= 59 else { throw Failure(reason: "second \(second) is not 00–59") }
        seconds += Double(hour * 3600 + minute * 60 + second)
        var index = 19
        if index < utf8.count, utf8[index] == UInt8(ascii: ".") {
            var end = index + 1
            while end < utf8.count, (0x30...0x39).contains(utf8[end]) { end += 1 }
            guard end > index + 1, end - index - 1 <= 9, let fraction = Double("0" + text.utf8Slice(index..<end))
            else {
                throw Failure(reason: "a fraction of a second is 1–9 digits after '.'")
            }
            seconds += fraction
            index = end
        }
        let zone = text.utf8Slice(index..<utf8.count)
        if zone == "Z" { return Date(timeIntervalSince1970: seconds) }
        let zoneBytes = Array(zone.utf8)
        guard zoneBytes.count == 6, zoneBytes[0] == UInt8(ascii: "+") || zoneBytes[0] == UInt8(ascii: "-"),
            zoneBytes[3] == UInt8(ascii: ":")
        else {
            throw Failure(reason: "a time ends with its zone: Z or +HH:MM (got \(zone.isEmpty ? "none" : "'\(zone)'"))")
        }
        let zoneHour = try field(index + 1..<index + 3, "zone's hour")
        let zoneMinute = try field(index + 4..<index + 6, "zone's minute")
        guard zoneHour <= 14, zoneMinute <= 59 else {
            throw Failure(reason: "zone \(zone) is not within −14:00–+14:00")
        }
        let offset = Double(zoneHour * 3600 + zoneMinute * 60)
        return Date(timeIntervalSince1970: zoneBytes[0] == UInt8(ascii: "+") ? seconds - offset : seconds + offset)
    }

    static let monthNames = [
        "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
        "November", "December",
    ]

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a (valid) proleptic Gregorian date.
    static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

extension String {
    /// The characters of these UTF-8 offsets (the caller checked they are
    /// ASCII where it splits), or "" when out of bounds or not whole.
    fileprivate func utf8Slice(_ range: Range<Int>) -> String {
        let bytes = Array(utf8)
        guard range.lowerBound >= 0, range.upperBound <= bytes.count, range.lowerBound <= range.upperBound else {
            return ""
        }
        return String(decoding: bytes[range], as: UTF8.self)
    }
}
