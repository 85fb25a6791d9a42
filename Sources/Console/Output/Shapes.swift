import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Workbench

/// Each kind's JSON fields (docs/json.md): every field is always present,
/// null when unknown, so that a kind has one shape wherever it appears.
enum Shapes {
    static func beacon(_ beacon: SeenBeacon, profile: String?, selected: Bool) -> [String: JSONValue] {
        [
            "address": .string(beacon.address), "mac_ending": .string(beacon.macEnding),
            "rssi": .optional(beacon.rssi), "major": .optional(beacon.identity?.major),
            "minor": .optional(beacon.identity?.minor), "battery": .optional(beacon.summary?.battery),
            "firmware": .optional(beacon.summary?.firmware.description),
            "status": beacon.summary == nil ? .null : .string(Format.status(beacon.summary)),
            "config_crc": .optional(beacon.summary.map { String(format: "%04x", $0.configCRC) }),
            "profile": .optional(profile), "selected": .bool(selected),
        ]
    }

    static func recap(_ recap: DeviceRecap, dryRun: Bool) -> [String: JSONValue] {
        [
            "device": .string(recap.address), "result": .string(result(recap.result, dryRun: dryRun)),
            "ok": .int(recap.ok), "changed": .int(recap.changed), "would_change": .int(recap.wouldChange),
            "unchanged": .int(recap.unchanged), "skipped": .int(recap.skipped), "failed": .int(recap.failed),
            "retries": .int(recap.retries), "reason": .optional(recap.reason), "dry_run": .bool(dryRun),
        ]
    }

    /// A device's result as JSON names it: in a dry run nothing changed,
    /// it would have (`would-change`).
    static func result(_ result: DeviceRecap.Result, dryRun: Bool) -> String {
        dryRun && result == .changed ? "would-change" : result.rawValue
    }

    /// One recovery of a run (docs/json.md, `recovery`).
    static func recovery(_ record: RecoveryRecord) -> [String: JSONValue] {
        [
            "action": .string(record.action), "status": .string(record.ok ? "ok" : "failed"),
            "device": .optional(record.device), "adapter": .optional(record.adapter), "detail": .string(record.detail),
            "error": .optional(record.error),
        ]
    }

    static func summary(_ recaps: [DeviceRecap], dryRun: Bool) -> [String: JSONValue] {
        var counts: [DeviceRecap.Result: Int] = [:]
        for recap in recaps { counts[recap.result, default: 0] += 1 }
        let changed = counts[.changed] ?? 0
        return [
            "devices": .int(recaps.count), "ok": .int(counts[.ok] ?? 0), "changed": .int(dryRun ? 0 : changed),
            "would_change": .int(dryRun ? changed : 0), "skipped": .int(counts[.skipped] ?? 0),
            "failed": .int(counts[.failed] ?? 0), "not_started": .int(counts[.notStarted] ?? 0),
            "interrupted": .int(counts[.interrupted] ?? 0),
            "dry_run": .bool(dryRun),
        ]
    }

    static func watchEvent(_ event: WatchEvent, at date: Date = Date()) -> [String: JSONValue] {
        var fields: [String: JSONValue] = [
            "at": .string(Format.timestamp(date)), "event": .null, "axis": .null, "flags": .null,
            "trip_status": .null, "text": .null,
        ]
        switch event {
        case .connected(let address):
            fields["device"] = .string(address)
            fields["type"] = "connected"
        case .realTime(let address, let event):
            fields["device"] = .string(address)
            fields["type"] = "real_time"
            fields["event"] = .string("\(event.type)")
            fields["axis"] = .string(Format.realTimeText(event))
            fields["flags"] = .int(event.flags.rawValue)
        case .tripStatus(let address, let status):
            fields["device"] = .string(address)
            fields["type"] = "trip_status"
            fields["trip_status"] = .string("\(status)")
        case .malformed(let address, let text):
            fields["device"] = .string(address)
            fields["type"] = "malformed"
            fields["text"] = .string(text)
        }
        return fields
    }

    static func audit(_ report: AuditReport, source: AuditCommand.Source) -> [String: JSONValue] {
        [
            "device": .string(report.address), "profile": .optional(report.profile), "clean": .bool(report.isClean),
            "source": .string(source.rawValue),
            "findings": .array(
                report.findings.map { .object(["code": .string($0.code), "finding": .string($0.description)]) }),
        ]
    }

    static func device(_ record: DeviceRecord) -> [String: JSONValue] {
        let config = record.config
        return [
            "address": .string(record.address), "mac_ending": .string(record.macEnding),
            "last_seen": .string(Format.timestamp(record.seenAt)), "major": .optional(record.identity?.major),
            "minor": .optional(record.identity?.minor), "model": .optional(record.model),
            "serial": .optional(record.serial), "hardware_revision": .optional(record.hardwareRevision),
            "firmware": .optional(record.firmware?.description), "battery": .optional(record.battery),
            "calibrated": record.calibration.map { .bool($0.calibrated) } ?? .null,
            "calibrated_at": .optional(record.calibratedAt.map(Format.timestamp)),
            "profile": .optional(record.profile),
            "config": config.map { config in
                .object([
                    "cornering": .int(config.cornering), "braking": .int(config.braking),
                    "acceleration": .int(config.acceleration), "duration": .int(config.duration),
                    "enable": .int(config.enable.rawValue),
                ])
            } ?? .null,
            "benches": record.benches.map { .array($0.map(JSONValue.string)) } ?? .null,
        ]
    }

    /// A row of `inventory export`: every column, as the schema names it.
    static func deviceRow(columns: [String], row: [SQLiteValue]) -> [String: JSONValue] {
        var fields: [String: JSONValue] = [:]
        for (name, value) in zip(columns, row) {
            fields[name] =
                switch value {
                case .null: .null
                case .integer(let number): .integer(Int(number))
                case .real(let number): .number(number)
                case .text, .blob: .optional(value.textForm)
                }
        }
        return fields
    }

    static func outcome(_ outcome: OutcomeRecord) -> [String: JSONValue] {
        [
            "id": .int(outcome.id), "run": .int(outcome.run), "device": .optional(outcome.device),
            "step": .string(outcome.step), "status": .string(outcome.status), "detail": .optional(outcome.detail),
            "error": .optional(outcome.error), "started_at": .string(outcome.startedAt),
            "duration_ms": .optional(outcome.durationMilliseconds), "bench": .optional(outcome.bench),
        ]
    }

    static func profile(_ profile: Profile) -> [String: JSONValue] {
        let config = profile.config
        let requirements = profile.requirements
        return [
            "name": .string(profile.name), "description": .string(profile.description),
            "cornering": .int(config.cornering), "braking": .int(config.braking),
            "acceleration": .int(config.acceleration), "duration": .int(config.duration),
            "enable": .string(Auditor.flags(config.enable)), "crc": .string(String(format: "%04x", config.crc)),
            "minimum_battery": .int(requirements.minimumBatteryPercent),
            "minimum_firmware": .string(requirements.minimumFirmware.description),
            "identity_major": .optional(profile.identity?.major),
            "identity_minor": .optional(profile.identity?.minor.rawValue),
        ]
    }

    static func command(_ spec: CommandSpec) -> [String: JSONValue] {
        [
            "name": .string(spec.name), "synopsis": .string(spec.synopsis), "summary": .string(spec.summary),
            "example": .string(spec.example), "acts_on_devices": .bool(spec.actsOnDevices),
            "writes_to_beacons": .bool(spec.mayWriteToBeacons),
            "only_reads_inventory": .bool(spec.onlyReadsTheInventory),
            "options": .array(
                spec.allOptions.map { option in
                    .object([
                        "name": .string(option.name),
                        "value": .optional(option.value == nil ? nil : option.placeholder),
                        "summary": .string(option.summary),
                    ])
                }),
        ]
    }
}
