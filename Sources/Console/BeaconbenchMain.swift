import FoundationEssentials
import InventorySync
import Ledger
import Profiles
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// beaconbench from the command line to its exit status: the executable
/// only calls `run`.
public enum BeaconbenchMain {
    public static let version = "0.2.0"

    /// The answers that need nothing but the command line — `--version`,
    /// `--help`, a command line that does not parse — given synchronously,
    /// before the concurrency runtime starts a thread; nil for the rest.
    public static func immediate(_ arguments: [String]) -> Int32? {
        Secrets.scrubArguments()
        let invocation: Invocation
        do {
            invocation = try Invocation.parse(arguments)
        } catch {
            Terminal.emit(2, Terminal.rendered("\(error)", color: false) + "\n")
            return ExitStatus.badInput.rawValue
        }
        switch invocation.mode {
        case .help:
            Terminal.emit(1, Invocation.usage + "\n")
            return 0
        case .version:
            let lines = VersionReport.lines(version: version, loadLibraries: invocation.verbose)
            Terminal.emit(1, lines.joined(separator: "\n") + "\n")
            return 0
        default:
            return nil
        }
    }

    public static func run(_ arguments: [String]) async -> Int32 {
        if let status = immediate(arguments) { return status }
        let invocation: Invocation
        do {
            invocation = try Invocation.parse(arguments)
        } catch {
            return ExitStatus.badInput.rawValue
        }
        let terminal = Terminal(for: invocation)
        // An unsafe directory (another's, or writable by others) is an
        // error naming it and the fix (ProfileDirectory).
        let source = ProfileSource {
            try ProfileLoader.loadAll(from: Paths.profileDirectories(invocation.profileDirectories))
        }
        let interactive = invocation.mode == .interactive && isatty(0) == 1
        let profiles: [String: Profile]
        if interactive {
            // The REPL reads them at its first line: not before the prompt.
            profiles = [:]
        } else {
            // A batch (or one command) is checked against every profile
            // before anything is done.
            do {
                profiles = try source.load()
            } catch {
                terminal.error("\(error)")
                return ExitStatus.badInput.rawValue
            }
        }
        let interrupts = Interrupts()
        switch invocation.mode {
        case .run(let named, let overrides, let dryRun):
            let file = Paths.batch(named)
            let data: [UInt8]
            do {
                data = try BoundedFile.read(file, limit: BatchParser.Limits.fileBytes)
            } catch .notARegularFile(let kind) {
                terminal.error(
                    "\(file): is \(kind), not a regular file: `run` reads a batch file (a batch from a pipe goes on standard input: beaconbench < FILE)"
                )
                return ExitStatus.badInput.rawValue
            } catch {
                terminal.error("\(file): \(error) (a batch is a regular file of at most 1 MiB)")
                return ExitStatus.badInput.rawValue
            }
            if Paths.isWorldWritable(file) {
                terminal.warning("\(file) is writable by anyone: check it before trusting it")
            }
            guard let text = utf8Text(data, file: file, terminal: terminal) else { return ExitStatus.badInput.rawValue }
            return await runText(
                text, file: file, overrides: overrides, dryRun: dryRun, invocation: invocation, terminal: terminal,
                profiles: profiles, label: "run \(file)", digest: (try? Digest.sha256(data))?.hex,
                interrupts: interrupts)
        case .oneShot(let words):
            let line = words.map(Self.quoted).joined(separator: " ")
            // What the run records (runs.command, and so the ledger) never holds a password.
            let label = ConnectionPasswords.redacted(line)
            return await runText(
                line, file: "<command line>", overrides: [:], dryRun: invocation.dryRun, invocation: invocation,
                terminal: terminal,
                profiles: profiles, label: label, digest: nil, interrupts: interrupts)
        default:
            if interactive {
                let session = Session(
                    invocation: invocation, terminal: terminal, profileSource: source, runLabel: "repl")
                await session.setInteractive()
                let repl = REPL(session: session, terminal: terminal, historyPath: Paths.history())
                await repl.run(interrupts: interrupts)
                await session.finish()
                return await session.status.rawValue
            }
            let data: [UInt8]
            do {
                data = try BoundedFile.read(descriptor: 0, limit: BatchParser.Limits.fileBytes)
            } catch {
                terminal.error("<stdin>: \(error) (a batch is a file of at most 1 MiB)")
                return ExitStatus.badInput.rawValue
            }
            guard let text = utf8Text(data, file: "<stdin>", terminal: terminal) else {
                return ExitStatus.badInput.rawValue
            }
            return await runText(
                text, file: "<stdin>", overrides: [:], dryRun: false, invocation: invocation, terminal: terminal,
                profiles: profiles, label: "stdin", digest: (try? Digest.sha256(data))?.hex, interrupts: interrupts)
        }
    }

    /// A batch's bytes as text; nil (after saying where) when they are not
    /// UTF-8: the first bad byte's line and column.
    static func utf8Text(_ bytes: [UInt8], file: String, terminal: Terminal) -> String? {
        if let text = String(validating: bytes, as: UTF8.self) { return text }
        var line = 1
        var lineStart = 0
        var index = 0
        while index < bytes.count {
            let rest = bytes[index...]
            let length = Self.validPrefixLength(rest)
            if length == 0 { break }
            for offset in index..<index + length where bytes[offset] == 0x0A {
                line += 1
                lineStart = offset + 1
            }
            index += length
        }
        let column = String(decoding: bytes[lineStart..<index], as: UTF8.self).count + 1
        terminal.message(
            "\(file):\(line):\(column): error: not UTF-8 text (byte \(Visible.bytes(bytes[index..<min(index + 1, bytes.count)])))"
        )
        return nil
    }

    /// How many bytes at the start of `bytes` are whole UTF-8 characters
    /// (up to 4096 at a time).
    static func validPrefixLength(_ bytes: ArraySlice<UInt8>) -> Int {
        var iterator = bytes.prefix(4096).makeIterator()
        var parser = Unicode.UTF8.ForwardParser()
        var length = 0
        while case .valid(let encoded) = parser.parseScalar(from: &iterator) { length += encoded.count }
        return length
    }

    /// Parses and checks the whole text, then runs it.
    static func runText(
        _ text: String, file: String, overrides: [String: String], dryRun: Bool, invocation: Invocation,
        terminal: Terminal, profiles: [String: Profile], label: String, digest: String?, interrupts: Interrupts
    ) async -> Int32 {
        let commands: [LocatedCommand]
        do {
            commands = try BatchParser(file: file, overrides: overrides, profiles: profiles).parse(text)
            try BatchChecks.check(commands, file: file, serverInventory: invocation.inventoryIsServer)
        } catch {
            terminal.message("\(error)")
            return ExitStatus.badInput.rawValue
        }
        let session = Session(
            invocation: invocation, terminal: terminal, profiles: profiles, runLabel: label, runDigest: digest)
        // SIGTERM (systemd, `timeout`, `kill`) stops the run as Ctrl-C does:
        // the steps under way end `interrupted`, the recap is printed, and
        // the exit status is 143, as shells report SIGTERM. Installed before
        // the batch starts, so that a command that takes SIGTERM for itself
        // (`sync`) does so within it. A second SIGTERM ends the process at
        // once (`Signals`).
        let terminated = Signals.Received()
        let cancel = Signals.CancelLater()
        let terminate = Signals.onTerminate {
            terminated.note()
            terminal.message("SIGTERM: stopping (a second SIGTERM quits at once)")
            cancel.now()
        }
        let task = Task { await session.runBatch(commands, dryRun: dryRun) }
        cancel.set { task.cancel() }
        interrupts.onInterrupt {
            terminal.message("^C: stopping (press again to quit at once)")
            task.cancel()
            interrupts.onInterrupt(nil)
        }
        await task.value
        terminate.end()
        if task.isCancelled { await session.markInterrupted() }
        await session.finish()
        if terminated.happened { return ExitStatus.terminated.rawValue }
        // Interrupted by the user: 130, as shells report SIGINT.
        if await session.interrupted { return ExitStatus.interrupted.rawValue }
        return await session.status.rawValue
    }

    static func quoted(_ word: String) -> String {
        guard word.contains(where: { $0 == " " || $0 == "\t" || $0 == "#" || $0 == "\"" }) else { return word }
        return "\"" + word.replacingEvery("\"", with: "\\\"") + "\""
    }
}

/// Checks of a whole batch beyond each line's own: device commands need
/// devices.
enum BatchChecks {
    static func check(_ commands: [LocatedCommand], file: String, serverInventory: Bool = false) throws(BatchError) {
        var selected = false
        for located in commands {
            if serverInventory, !located.command.runsAgainstAServer {
                throw BatchError(
                    file: file, line: located.line, column: located.column,
                    message: Session.serverIsReadOnly(located.command))
            }
            if located.spec.setsSelection { selected = true }
            let actsOnDevices = located.command.isDeviceStep || located.spec.needsDevices
            if actsOnDevices, located.devices.isEmpty, !selected {
                throw BatchError(
                    file: file, line: located.line, column: located.column,
                    message:
                        "no devices for '\(located.command.stepName)': 'select …' them first or name one on the line"
                )
            }
        }
    }
}
