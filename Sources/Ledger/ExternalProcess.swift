import Foundation

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
        let name = (executable as NSString).lastPathComponent
        let inputPath = try directory.write("stdin", input)
        let outputPath = try directory.write("stdout", [])
        let errorsPath = try directory.write("stderr", [])
        guard let inputHandle = FileHandle(forReadingAtPath: inputPath),
            let outputHandle = FileHandle(forWritingAtPath: outputPath),
            let errorsHandle = FileHandle(forWritingAtPath: errorsPath)
        else { throw LedgerError("cannot open the files for \(name)'s input and output in \(directory.path)") }
        defer {
            try? inputHandle.close()
            try? outputHandle.close()
            try? errorsHandle.close()
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory.path)
        process.standardInput = inputHandle
        process.standardOutput = outputHandle
        process.standardError = errorsHandle
        let ended = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in ended.signal() }
        do {
            try process.run()
        } catch {
            throw LedgerError("cannot run \(executable): \(LedgerError.quoted(String(describing: error)))")
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        if ended.wait(timeout: .now() + seconds) == .timedOut {
            process.terminate()
            if ended.wait(timeout: .now() + 2) == .timedOut {
                kill(process.processIdentifier, SIGKILL)
                _ = ended.wait(timeout: .now() + 5)
            }
            throw LedgerError("\(name) did not end within \(timeout) and was killed")
        }
        return Result(
            status: process.terminationStatus, output: directory.read("stdout", limit: maxOutput),
            errors: directory.read("stderr", limit: maxOutput))
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
        guard let handle = FileHandle(forReadingAtPath: path + "/" + name) else { return [] }
        defer { try? handle.close() }
        return Array((try? handle.read(upToCount: limit)) ?? Data())
    }
}
