import FoundationEssentials
import Inventory

#if canImport(Glibc)
    import Glibc
#endif

/// UTC days, weeks, hours and quarters, with arithmetic on epoch seconds.
enum UTC {
    static func parts(_ date: Date) -> (year: Int, month: Int, day: Int, hour: Int) {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return (Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour))
    }

    static func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }

    /// `2026-11-30`.
    static func day(_ date: Date) -> String {
        let p = parts(date)
        return "\(p.year)-\(two(p.month))-\(two(p.day))"
    }

    /// `2026-11-30 09:41`.
    static func minute(_ date: Date) -> String {
        let minutes = Int((date.timeIntervalSince1970 / 60).rounded(.down))
        return "\(day(date)) \(two(parts(date).hour)):\(two((minutes % 60 + 60) % 60))"
    }

    static func date(ofDay text: String) -> Date? { Inventory.parseTimestamp(text + "T00:00:00.000Z") }

    static func date(year: Int, month: Int, day: Int) -> Date {
        Inventory.parseTimestamp("\(year)-\(two(month))-\(two(day))T00:00:00.000Z") ?? Date(timeIntervalSince1970: 0)
    }

    /// The period a time falls in, as a label and its start.
    static func period(of date: Date, unit: String) -> (String, Date) {
        let seconds = date.timeIntervalSince1970
        switch unit {
        case "hour":
            let start = Date(timeIntervalSince1970: (seconds / 3600).rounded(.down) * 3600)
            return ("\(day(start)) \(two(parts(start).hour)):00", start)
        case "week":
            let days = Int((seconds / 86_400).rounded(.down))
            // 1970-01-01 was a Thursday: weeks start on Monday.
            let monday = days - ((days + 3) % 7 + 7) % 7
            let start = Date(timeIntervalSince1970: Double(monday) * 86_400)
            return ("week of \(day(start))", start)
        default:
            let start = Date(timeIntervalSince1970: (seconds / 86_400).rounded(.down) * 86_400)
            return (day(start), start)
        }
    }

    /// The first moment after the calendar quarter `date` is in.
    static func quarterEnd(after date: Date) -> Date {
        let p = parts(date)
        let nextQuarterMonth = ((p.month - 1) / 3 + 1) * 3 + 1
        return nextQuarterMonth > 12
            ? Self.date(year: p.year + 1, month: 1, day: 1) : Self.date(year: p.year, month: nextQuarterMonth, day: 1)
    }
}
