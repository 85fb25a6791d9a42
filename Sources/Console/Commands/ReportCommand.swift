import FleetReport
import FoundationEssentials
import Inventory
import InventorySync
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `report [SELECTOR…] [--out FILE] [--since TIME]`: the fleet as one
/// self-contained HTML page of charts and tables (FleetReport).
public struct ReportCommand: ConsoleCommand {
    public var selectors: [DeviceSelector]
    public var output: String
    public var since: Date?

    public init(selectors: [DeviceSelector] = [], output: String = "report.html", since: Date? = nil) {
        self.selectors = selectors
        self.output = output
        self.since = since
    }

    public static let spec = CommandSpec(
        name: "report",
        summary: "write the fleet report: one HTML page of charts and a device table, opens offline",
        example: "report profile=van --since 90d --out vans.html",
        operands: [.some("SELECTOR", .selector, atLeastOne: false)],
        options: [
            .value(
                "--out", "FILE", .text,
                "the page to write (default report.html): a new file, or a regular file (through a link: the file it leads to) replaced atomically; made mode 0600; never a device, FIFO, socket, directory or the inventory"
            ),
            .value("--since", "TIME", .time, "only readings and step outcomes since TIME (2026-11-30, or 90d)"),
        ], onlyReadsTheInventory: true,
        detail:
            "Selectors are those of select that need no radio: all, unprovisioned, profile=NAME, battery<N, firmware<X, minor=A-B, addresses and MAC endings, combined as select combines them (addresses and MAC endings: any of them; every other selector must hold); none: every device (or the selection). Reads a bench's inventory or, with --inventory postgresql://…, the whole fleet. docs/report.md describes each chart.",
        emits: [.report]
    ).shapeChecked(by: "report --out ${dir}/report.html")

    public init(_ arguments: inout ParsedArguments) throws(BatchError) {
        let parser = arguments.parser
        let failure = arguments
        selectors = try arguments.each { token throws(BatchError) in
            let selector = try parser.selector(token)
            switch selector {
            case .new, .inRange:
                throw failure.fail(
                    token, "report reads the inventory: '\(token.text)' needs the radio (select it first)")
            default: return selector
            }
        }
        output = arguments.text("--out") ?? "report.html"
        since = arguments.time("--since")
        if output.isEmpty { throw arguments.fail(at: 0, "--out wants a file name") }
        // What is at the path now, before a batch starts (the inventory's
        // files are checked again when the page is written).
        do {
            _ = try OutputFile.check(output)
        } catch {
            throw arguments.fail(arguments.options["--out"]?.token ?? arguments.token(0), "report: \(error)")
        }
    }

    public func run(in session: Session, _ located: LocatedCommand) async throws(ConsoleFailure) {
        try await session.report(self)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(Session.selectorsText(selectors))
        hasher.combine(output)
        hasher.combine(since)
    }

    public static func == (a: Self, b: Self) -> Bool {
        Session.selectorsText(a.selectors) == Session.selectorsText(b.selectors) && a.output == b.output
            && a.since == b.since
    }

    /// The selector as the report filters devices (those needing the radio
    /// are refused when the command is built).
    static func filter(_ selector: DeviceSelector) -> DeviceFilter {
        switch selector {
        case .all, .new, .inRange: .all
        case .unprovisioned: .unprovisioned
        case .profile(let name): .profile(name)
        case .batteryBelow(let limit): .batteryBelow(Int(limit))
        case .firmwareBelow(let version): .firmwareBelow(version)
        case .minorRange(let low, let high): .minorRange(low, high)
        case .address(let address): .address(address)
        case .macEnding(let ending): .macEnding(ending)
        }
    }
}

extension Session {
    // MARK: The fleet report

    func report(_ command: ReportCommand) async throws(ConsoleFailure) {
        let started = ContinuousClock.now
        let reader = try reader()
        do {
            // Before the work: a path that cannot be written is said at once.
            _ = try OutputFile.check(command.output, protecting: protectedFiles())
        } catch {
            throw ConsoleFailure(.badInput, "report: \(error)")
        }
        var filters = command.selectors.map(ReportCommand.filter)
        var selectors = Session.selectorsText(command.selectors)
        if filters.isEmpty, let selection {
            filters = selection.map { .address($0) }
            selectors = selectionText.isEmpty ? "the selection" : selectionText
        }
        // The report is folded from streams (FleetReport.streamed): the
        // device table's rows wait in a file with no name beside the page,
        // and the page is written from it and moved into place only when
        // every stream was read whole. A server's connection lost midway
        // starts the read again once (ServerInventory.withReportStreams:
        // the rows so far are forgotten); a second loss is exit 3 and no
        // page, never half a page.
        let directory = OutputFile.split(command.output).directory
        let rows: ReportRowsFile
        do {
            rows = try ReportRowsFile(directory: directory, page: command.output)
        } catch {
            throw ConsoleFailure(.badInput, "report: \(error)")
        }
        let report: FleetReport
        let tableHead: String
        do {
            let source = reader.location
            let server = reader is ServerInventory
            let profiles = profiles
            let since = command.since
            (report, tableHead) = try await reader.withReportStreams(since: since) { [filters, selectors] reading in
                try rows.reset()
                let built = try FleetReport.streamed(
                    source: source, server: server, reading: reading, profiles: profiles, filters: filters,
                    selectors: selectors, since: since
                ) { row throws(OutputFile.Refusal) in try rows.append(row) }
                return Built(report: built.report, tableHead: built.tableHead)
            }.pair
        } catch let error as ConsoleFailure {
            throw error
        } catch let error as OutputFile.Refusal {
            throw ConsoleFailure(.badInput, "report: \(error)")
        } catch {
            throw ConsoleFailure(.infrastructure, "report: the inventory: \(error)")
        }
        var written = 0
        do {
            try OutputFile.write(to: command.output, protecting: protectedFiles()) {
                writer throws(OutputFile.Refusal) in
                try ReportPage.write(report, tableHead: tableHead, rows: rows, to: &writer)
                written = writer.count
            }
        } catch {
            throw ConsoleFailure(.badInput, "report: \(error)")
        }
        let elapsed = started.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        output.render(
            ReportWritten(
                path: command.output, devices: report.rowCount, fleet: report.fleetSize, bytes: written,
                crossingThisQuarter: report.crossingCount, withFindings: report.devicesWithFindings,
                seconds: seconds))
    }
}

/// A streamed report and its table's head, out of the inventory's reader.
private struct Built: Sendable {
    var report: FleetReport
    var tableHead: String
    var pair: (FleetReport, String) { (report, tableHead) }
}
