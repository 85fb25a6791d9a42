import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Workbench

/// How things are shown: tables for people, one JSON object per line for
/// programs.
enum Format {
    // MARK: Beacons seen

    static let seenHeader = [
        "", "address", "rssi", "ending", "major.minor", "battery", "firmware", "status", "profile",
    ]

    static func status(_ summary: BenchSummary?) -> String {
        guard let status = summary?.status else { return "-" }
        var words: [String] = []
        if status.contains(.factoryDefault) { words.append("new") }
        words.append(status.contains(.calibrated) ? "calibrated" : "uncalibrated")
        if status.contains(.tripInProgress) { words.append("trip") }
        if status.contains(.unsyncedRecords) { words.append("records") }
        return words.joined(separator: ",")
    }

    static func seenRow(_ beacon: SeenBeacon, profile: String?, selected: Bool) -> [String] {
        [
            selected ? "*" : "", beacon.address, beacon.rssi.map(String.init) ?? "-", beacon.macEnding,
            beacon.identity.map { "\($0.major).\($0.minor)" } ?? "-",
            beacon.summary.map { "\($0.battery) %" } ?? "-", beacon.summary.map { "\($0.firmware)" } ?? "-",
            status(beacon.summary), profile ?? "-",
        ]
    }

    static func seenLine(_ beacon: SeenBeacon) -> String {
        var parts = ["SBeacon \(beacon.address) (\(beacon.macEnding))"]
        if let rssi = beacon.rssi { parts.append("rssi \(rssi)") }
        if let identity = beacon.identity { parts.append("\(identity.major).\(identity.minor)") }
        if let summary = beacon.summary {
            parts.append("battery \(summary.battery) %, firmware \(summary.firmware), \(status(summary))")
        }
        return parts.joined(separator: " ")
    }

    // MARK: Device steps and recaps

    /// The recap: one row per device with its result (what the summary
    /// counts), then how many of its steps came to what, its reconnects,
    /// and why it failed or was skipped.
    static func recap(
        _ recaps: [DeviceRecap], recoveries: [RecoveryRecord] = [], terminal: Terminal, json: Bool, dryRun: Bool
    ) {
        var results: [DeviceRecap.Result: Int] = [:]
        for recap in recaps { results[recap.result, default: 0] += 1 }
        let count = { (result: DeviceRecap.Result) in results[result] ?? 0 }
        if json {
            for recap in recaps { terminal.emit(.recap, Shapes.recap(recap, dryRun: dryRun)) }
            for record in recoveries { terminal.emit(.recovery, Shapes.recovery(record)) }
            terminal.emit(.summary, Shapes.summary(recaps, dryRun: dryRun))
            return
        }
        let changedWord = dryRun ? "would change" : "changed"
        let rows = recaps.map { recap -> [String] in
            // The table names the device already.
            var reason = recap.reason ?? ""
            if reason.hasPrefix(recap.address + ": ") { reason.removeFirst(recap.address.count + 2) }
            let result = recap.result == .changed ? changedWord : recap.result.rawValue
            return [
                recap.address,
                recap.result == .failed
                    ? terminal.styled(result, .red)
                    : recap.result == .skipped ? terminal.styled(result, .yellow) : result,
                String(recap.ok), String(dryRun ? recap.wouldChange : recap.changed), String(recap.unchanged),
                String(recap.skipped), String(recap.retries),
                recap.failed > 0 ? terminal.styled(reason, .red) : reason,
            ]
        }
        terminal.result("")
        terminal.result(terminal.styled(dryRun ? "RECAP (dry run: nothing written)" : "RECAP", .bold))
        let header = [
            "device", "result", "steps ok", "steps \(changedWord)", "steps unchanged", "steps skipped", "reconnects",
            "reason",
        ]
        for line in table(header, rows, numeric: [2, 3, 4, 5, 6]) { terminal.result(line) }
        var summary = "\(recaps.count) device\(recaps.count == 1 ? "" : "s"): "
        summary += "\(count(.changed)) \(changedWord), \(count(.ok)) ok, \(count(.skipped)) skipped, "
        summary += count(.failed) > 0 ? terminal.styled("\(count(.failed)) failed", .red) : "0 failed"
        if count(.interrupted) > 0 { summary += ", \(count(.interrupted)) interrupted" }
        if count(.notStarted) > 0 { summary += ", \(count(.notStarted)) not started" }
        terminal.result(summary)
        if !recoveries.isEmpty {
            terminal.result("recovered without an operator (\(recoveries.count)):")
            for record in recoveries {
                let line =
                    "  recover \(record.ok ? "ok" : "failed"): \(record.detail)"
                    + (record.device.map { " (\($0))" } ?? "") + (record.error.map { ": \($0)" } ?? "")
                terminal.result(record.ok ? line : terminal.styled(line, .red))
            }
        }
    }

    // MARK: Watch

    static func watchLine(_ event: WatchEvent, terminal: Terminal) -> String {
        let clock = time()
        switch event {
        case .connected(let address): return "\(clock) \(address) watching"
        case .realTime(let address, let event):
            return "\(clock) \(address) " + terminal.styled(realTimeText(event), .yellow)
        case .tripStatus(let address, let status): return "\(clock) \(address) trip \(status)"
        case .malformed(let address, let text): return "\(clock) \(address) " + terminal.styled(text, .red)
        }
    }

    static func realTimeText(_ event: RealTimeEvent) -> String {
        let axis =
            switch event.axis {
            case .lateral: "X"
            case .longitudinal: "Y"
            case .vertical: "Z"
            case .radial: "radial"
            }
        return "\(event.type) on \(axis)"
            + (event.flags.isEmpty ? "" : " (flags \(String(event.flags.rawValue, radix: 2)))")
    }

    static func time() -> String {
        var now = time_t(Date().timeIntervalSince1970)
        var parts = tm()
        localtime_r(&now, &parts)
        return String(format: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }

    // MARK: Audits

    static func audit(_ reports: [AuditReport], source: AuditCommand.Source, terminal: Terminal, json: Bool) {
        if json {
            for report in reports { terminal.emit(.audit, Shapes.audit(report, source: source)) }
            return
        }
        var rows: [[String]] = []
        for report in reports {
            if report.isClean {
                rows.append([report.address, report.profile ?? "-", terminal.styled("ok", .green), ""])
            }
            for finding in report.findings {
                rows.append([report.address, report.profile ?? "-", terminal.styled(finding.code, .red), "\(finding)"])
            }
        }
        terminal.result("")
        terminal.result(terminal.styled("AUDIT (\(source.rawValue))", .bold))
        for line in table(["device", "profile", "code", "finding"], rows) { terminal.result(line) }
        let clean = reports.filter(\.isClean).count
        terminal.result(
            "\(reports.count) device\(reports.count == 1 ? "" : "s"): \(clean) clean, \(reports.count - clean) with findings"
        )
    }

    // MARK: Inventory

    static let recordHeader = [
        "address", "ending", "major.minor", "firmware", "battery", "calibrated", "profile", "last seen",
    ]

    /// The device table; with a column of benches when the records come
    /// from a server inventory.
    static func recordTable(_ records: [DeviceRecord]) -> (header: [String], rows: [[String]]) {
        let benches = records.contains { $0.benches != nil }
        return (
            recordHeader + (benches ? ["benches"] : []),
            records.map { record in
                recordRow(record) + (benches ? [(record.benches ?? []).map(shortBench).joined(separator: " ")] : [])
            }
        )
    }

    static func recordRow(_ record: DeviceRecord) -> [String] {
        [
            record.address, record.macEnding, record.identity.map { "\($0.major).\($0.minor)" } ?? "-",
            record.firmware?.description ?? "-", record.battery.map { "\($0) %" } ?? "-",
            record.calibration.map { $0.calibrated ? "yes" : "no" } ?? "-", record.profile ?? "-",
            timestamp(record.seenAt),
        ]
    }

    /// A bench id as tables show it: its first eight characters.
    static func shortBench(_ id: String) -> String { String(id.prefix(8)) }

    static func recordDetail(_ record: DeviceRecord) -> [String] {
        var lines = [
            "address      \(record.address) (\(record.macEnding))",
            "identity     \(record.identity.map { "major \($0.major), minor \($0.minor)" } ?? "-")",
            "model        \(record.model ?? "-") serial \(record.serial ?? "-") hardware \(record.hardwareRevision ?? "-")",
            "firmware     \(record.firmware?.description ?? "-")",
            "battery      \(record.battery.map { "\($0) %" } ?? "-")",
        ]
        if let calibration = record.calibration {
            let vector = calibration.vector
            lines.append(
                "calibration  \(calibration.calibrated ? "yes" : "no") (\(vector.x), \(vector.y), \(vector.z) mG)"
                    + (record.calibratedAt.map { " at \(timestamp($0))" } ?? ""))
        }
        lines.append("profile      \(record.profile ?? "-")")
        lines.append("config       \(record.config?.description ?? "-")")
        lines.append("last seen    \(timestamp(record.seenAt))")
        if let benches = record.benches {
            lines.append("benches      \(benches.joined(separator: ", ")) (latest first)")
        }
        return lines
    }

    static func timestamp(_ date: Date) -> String {
        ISO8601DateFormatter.string(
            from: date, timeZone: TimeZone(identifier: "UTC")!, formatOptions: [.withInternetDateTime])
    }

    static let outcomeHeader = ["started (UTC)", "run", "device", "step", "status", "ms", "detail"]

    /// The outcome table; with the bench in front when the outcomes come
    /// from a server inventory (several benches' histories).
    static func outcomeTable(_ outcomes: [OutcomeRecord]) -> (header: [String], rows: [[String]]) {
        guard outcomes.contains(where: { $0.bench != nil }) else { return (outcomeHeader, outcomes.map(outcomeRow)) }
        return (
            ["bench"] + outcomeHeader,
            outcomes.map { [shortBench($0.bench ?? "-")] + outcomeRow($0) }
        )
    }

    static func outcomeRow(_ outcome: OutcomeRecord) -> [String] {
        [
            String(outcome.startedAt.prefix(19)).replacingOccurrences(of: "T", with: " "), String(outcome.run),
            outcome.device ?? "-", outcome.step, outcome.status,
            outcome.durationMilliseconds.map(String.init) ?? "", outcome.error ?? outcome.detail ?? "",
        ]
    }

    // MARK: Profiles

    static let profileHeader = ["name", "cornering", "braking", "acceleration", "duration", "enable", "description"]

    static func profileRow(_ profile: Profile) -> [String] {
        let config = profile.config
        return [
            profile.name, "\(config.cornering) mG", "\(config.braking) mG", "\(config.acceleration) mG",
            "\(config.duration) ms", Auditor.flags(config.enable), profile.description,
        ]
    }

    static func profileDetail(_ profile: Profile) -> [String] {
        let config = profile.config
        let requirements = profile.requirements
        var lines = [
            "\(profile.name): \(profile.description)",
            "  cornering     \(config.cornering) mG",
            "  braking       \(config.braking) mG",
            "  acceleration  \(config.acceleration) mG",
            "  duration      \(config.duration) ms",
            "  enable        \(Auditor.flags(config.enable))",
            "  config crc    \(String(format: "%04x", config.crc))",
            "  requires      battery ≥ \(requirements.minimumBatteryPercent) %, firmware ≥ \(requirements.minimumFirmware)"
                + (requirements.calibrationRequired ? ", calibrated" : "")
                + (requirements.maximumCalibrationAgeDays.map { " within \($0) days" } ?? ""),
        ]
        if let identity = profile.identity {
            lines.append("  identity      major \(identity.major), minor \(identity.minor.rawValue)")
        }
        return lines
    }

}
