import Foundation
@_exported import LocalBus
import Synchronization

/// A product of this package, built beside the test binary
/// (`.build/debug/NAME`), such as `beaconbench-sim`.
public func builtProduct(_ name: String) -> String {
    let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var directory = testBinary.deletingLastPathComponent()
    // Inside an .xctest bundle on some platforms: climb out of it.
    while directory.pathExtension == "xctest" || directory.lastPathComponent == "MacOS"
        || directory.lastPathComponent == "Contents"
    {
        directory = directory.deletingLastPathComponent()
    }
    return directory.appendingPathComponent(name).path
}

public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// What a finished child process left.
public struct ToolOutput: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs a program to completion and collects its output, on a thread of
/// its own so that waiting never takes one of Swift's cooperative threads
/// (there are only as many as cores, and the bus peers under test need them).
/// - Parameter timeout: the process is killed after this many seconds.
public func runTool(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    stdin: String? = nil, timeout: TimeInterval = 60
) async throws -> ToolOutput {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            continuation.resume(
                with: Result {
                    try runToolBlocking(executable, arguments, environment: environment, stdin: stdin, timeout: timeout)
                })
        }
    }
}

/// `runTool`, blocking the calling thread.
@available(*, noasync, message: "blocks its thread: use `await runTool`")
public func runToolBlocking(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    stdin: String? = nil, timeout: TimeInterval = 60
) throws -> ToolOutput {
    let process = Process()
    if executable.hasPrefix("/") {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
    } else {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [executable] + arguments
    }
    if let environment { process.environment = environment }
    let outPipe = Pipe()
    let errPipe = Pipe()
    process.standardOutput = outPipe
    process.standardError = errPipe
    let inPipe = Pipe()
    process.standardInput = inPipe
    try process.run()
    if let stdin { inPipe.fileHandleForWriting.write(Data(stdin.utf8)) }
    try? inPipe.fileHandleForWriting.close()

    // Read both pipes while the process runs so neither can fill up.
    let collected = OutputCollector()
    let group = DispatchGroup()
    for (pipe, isError) in [(outPipe, false), (errPipe, true)] {
        group.enter()
        // A thread of its own: blocking reads on Dispatch's global pool
        // (as many threads as cores) can starve the timeout below.
        Thread.detachNewThread {
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            collected.store(data, isError: isError)
            group.leave()
        }
    }
    // SIGTERM at the timeout, SIGKILL 2 s later: Foundation's Process
    // spawns with the calling thread's signal mask, and a thread started
    // from a dispatch worker blocks SIGTERM (dbus-monitor would never end).
    let pid = process.processIdentifier
    let terminator = Watchdog(after: timeout) { kill(pid, SIGTERM) }
    let killer = Watchdog(after: timeout + 2) { kill(pid, SIGKILL) }
    process.waitUntilExit()
    terminator.cancel()
    killer.cancel()
    group.wait()
    return ToolOutput(status: process.terminationStatus, stdout: collected.stdout, stderr: collected.stderr)
}

private final class OutputCollector: Sendable {
    private let streams = Mutex<(out: Data, err: Data)>((Data(), Data()))
    func store(_ data: Data, isError: Bool) {
        streams.withLock { if isError { $0.err = data } else { $0.out = data } }
    }
    var stdout: String { String(decoding: streams.withLock { $0.out }, as: UTF8.self) }
    var stderr: String { String(decoding: streams.withLock { $0.err }, as: UTF8.self) }
}

/// Runs `action` once after `seconds` unless cancelled first, on a thread
/// of its own, so that no amount of blocked work elsewhere delays it.
public final class Watchdog: @unchecked Sendable {
    private let condition = NSCondition()
    private var cancelled = false

    public init(after seconds: TimeInterval, _ action: @escaping @Sendable () -> Void) {
        let deadline = Date(timeIntervalSinceNow: seconds)
        Thread.detachNewThread { [self] in
            condition.lock()
            while !cancelled, condition.wait(until: deadline) {}
            let fire = !cancelled
            condition.unlock()
            if fire { action() }
        }
    }

    public func cancel() {
        condition.lock()
        cancelled = true
        condition.signal()
        condition.unlock()
    }
}

/// `umount PATH`, blocking (umount returns at once): for a `defer`, where
/// no `await` is possible.
public func unmount(_ path: String) {
    _ = try? runToolBlocking("/bin/umount", [path], timeout: 30)
}
