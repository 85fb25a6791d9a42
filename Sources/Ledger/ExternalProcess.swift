import CCrypto
import Dispatch
import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a program (ssh-keygen) with a time limit: its input from a file,
/// its output and errors into files read back bounded. Files, not pipes:
/// nothing can block on a full pipe, and a descriptor some other child
/// inherited cannot hold an end-of-file back.
enum ExternalProcess {
    struct Result {
        var status: Int32
        var output: [UInt8]
        var errors: [UInt8]
    }

    /// The most of a process's output and errors kept.
    static let maxOutput = 64 * 1024

    /// Runs `executable arguments` in `directory` with `input` on its
    /// standard input; throws when it cannot start or outlives `timeout`
    /// (it is then killed).
    static func run(
        _ executable: String, _ arguments: [String], input: [UInt8], in directory: TemporaryDirectory,
        timeout: Duration
    ) throws(LedgerError) -> Result {
        let name = executable.split(separator: "/").last.map(String.init) ?? executable
        let inputPath = try directory.write("stdin", input)
        let outputPath = try directory.write("stdout", [])
        let errorsPath = try directory.write("stderr", [])
        // posix_spawn, its standard descriptors opened on the three files
        // in the child, in `directory` (no Foundation `Process`).
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, inputPath, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_TRUNC, 0)
        posix_spawn_file_actions_addopen(&actions, 2, errorsPath, O_WRONLY | O_TRUNC, 0)
        posix_spawn_file_actions_addchdir_np(&actions, directory.path)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        let child = pid
        guard spawned == 0 else {
            throw LedgerError(
                "cannot run \(executable): \(LedgerError.quoted(String(cString: strerror(spawned))))")
        }
        // Its exit, waited for on a thread of the global queue; this
        // thread waits on the semaphore with the time limit.
        let ended = DispatchSemaphore(value: 0)
        let exit = ExitBox()
        DispatchQueue.global().async {
            var status: Int32 = 0
            while waitpid(child, &status, 0) == -1 && errno == EINTR {}
            exit.status = status
            ended.signal()
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        if ended.wait(timeout: .now() + seconds) == .timedOut {
            kill(child, SIGTERM)
            if ended.wait(timeout: .now() + 2) == .timedOut {
                kill(child, SIGKILL)
                _ = ended.wait(timeout: .now() + 5)
            }
            throw LedgerError("\(name) did not end within \(timeout) and was killed")
        }
        // As Foundation's Process reported it: the exit code, or the signal.
        let status = exit.status & 0x7F == 0 ? (exit.status >> 8) & 0xFF : exit.status & 0x7F
        return Result(
            status: status, output: directory.read("stdout", limit: maxOutput),
            errors: directory.read("stderr", limit: maxOutput))
    }

    /// The waited-for status, written by the waiting thread before it
    /// signals and read after the signal.
    private final class ExitBox: @unchecked Sendable {
        var status: Int32 = 0
    }
}

/// A private directory (mode 0700) for a signature's files, removed with
/// everything in it when the value goes.
final class TemporaryDirectory {
    let path: String

    init() throws(LedgerError) {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/beaconbench-ledger.XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ buffer in buffer.baseAddress.flatMap(mkdtemp) })
        else {
            throw LedgerError("cannot make a temporary directory in \(base): \(String(cString: strerror(errno)))")
        }
        path = String(cString: made)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Writes `bytes` to `name` in the directory (mode 0600); its path.
    func write(_ name: String, _ bytes: [UInt8]) throws(LedgerError) -> String {
        let file = path + "/" + name
        guard
            FileManager.default.createFile(atPath: file, contents: Data(bytes), attributes: [.posixPermissions: 0o600])
        else { throw LedgerError("cannot write \(file)") }
        return file
    }

    /// At most `limit` bytes of `name`.
    func read(_ name: String, limit: Int) -> [UInt8] {
        BoundedFile.prefix(path + "/" + name, limit: limit)
    }
}
