import FoundationEssentials
import InventorySync

#if canImport(Glibc)
    import Glibc
#endif

/// Passwords are never visible to other processes after start-up. The way
/// to give one is libpq's own (PGPASSWORD, `~/.pgpass`, a PGSERVICE entry);
/// a URL or connection string given with a password
/// (`--inventory postgresql://u:PASSWORD@…`, `--server`, `sync --to`) is
/// accepted with a warning, and the password is overwritten in the
/// process's own argument memory at once, so that `ps` and
/// `/proc/PID/cmdline` show `u:********@…`; the REPL's history keeps such a
/// line with `***` for the password. (The environment, BEACONBENCH_SERVER
/// included, is readable by the same user only.)
enum Secrets {
    static let warning =
        "a password in a URL is visible to other users until beaconbench starts; use PGPASSWORD or ~/.pgpass"

    /// Overwrites every password in the command line's strings (the ones
    /// the kernel shows as `/proc/PID/cmdline`) with `*`, byte for byte,
    /// and warns once when there was one. `CommandLine.arguments` was
    /// copied before, so the arguments parsed still hold the password.
    /// Done once per process, however often it is called.
    static func scrubArguments() { _ = scrubbedOnce }

    private static let scrubbedOnce: Void = scrubNow()

    private static func scrubNow() {
        var scrubbed = false
        for index in 1..<max(1, Int(CommandLine.argc)) {
            guard let argument = CommandLine.unsafeArgv[index] else { continue }
            let bytes = UnsafeMutableRawPointer(argument).assumingMemoryBound(to: UInt8.self)
            let text = UnsafeMutableBufferPointer(start: bytes, count: strlen(argument))
            for range in ConnectionPasswords.ranges(in: Array(text)) {
                for position in range { text[position] = UInt8(ascii: "*") }
                scrubbed = true
            }
        }
        if scrubbed { Terminal.emit(2, "warning: \(warning)\n") }
    }

    /// A line as the REPL's history keeps it: every password (URL or
    /// `password=…`) replaced by `***`.
    static func historyLine(_ line: String) -> String { ConnectionPasswords.redacted(line) }
}
