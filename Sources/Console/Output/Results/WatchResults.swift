import FoundationEssentials
import SBeaconProtocol
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

// `watch`: events as they come, then the count.

/// One thing a watched beacon did: a `watch_event` line, or a line on
/// standard error (above the prompt) with the local time.
struct WatchEventLine: SingleResult {
    var event: WatchEvent
    /// When it arrived.
    var at = Date()

    var kind: ResultKind { .watchEvent }

    var fields: [(String, JSONValue)] {
        let (device, type): (String, String)
        var (what, axis, flags, tripStatus, text): (JSONValue, JSONValue, JSONValue, JSONValue, JSONValue) =
            (.null, .null, .null, .null, .null)
        switch event {
        case .connected(let address): (device, type) = (address, "connected")
        case .realTime(let address, let event):
            (device, type) = (address, "real_time")
            what = .string("\(event.type)")
            axis = .string(Format.realTimeText(event))
            flags = .int(event.flags.rawValue)
        case .tripStatus(let address, let status):
            (device, type) = (address, "trip_status")
            tripStatus = .string("\(status)")
        case .malformed(let address, let malformed):
            (device, type) = (address, "malformed")
            text = .string(malformed)
        }
        return [
            ("at", .string(Format.timestamp(at))), ("device", .string(device)), ("type", .string(type)),
            ("event", what), ("axis", axis), ("flags", flags), ("trip_status", tripStatus), ("text", text),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        let clock = Format.time()
        let line =
            switch event {
            case .connected(let address): "\(clock) \(address) watching"
            case .realTime(let address, let event):
                "\(clock) \(address) " + terminal.styled(Format.realTimeText(event), .yellow)
            case .tripStatus(let address, let status): "\(clock) \(address) trip \(status)"
            case .malformed(let address, let text): "\(clock) \(address) " + terminal.styled(text, .red)
            }
        return [.event(line)]
    }
}

/// The end of a watch: a `watch_summary` line, or a message.
struct WatchSummary: SingleResult {
    var devices: Int
    var events: Int
    var tripChanges: Int
    var failed: Int

    var kind: ResultKind { .watchSummary }

    var fields: [(String, JSONValue)] {
        [
            ("devices", .int(devices)), ("events", .int(events)), ("trip_changes", .int(tripChanges)),
            ("failed", .int(failed)),
        ]
    }

    func people(_ terminal: Terminal) -> [PeopleLine] {
        [.message("watch: \(events) real-time event(s), \(tripChanges) trip status change(s)")]
    }
}
