import Foundation
import TestSupport
import Testing

/// A child this package spawns (dbus-daemon, the simulator) takes nothing
/// of the parent but what it is given. Foundation's `Pipe` opens its ends
/// without close-on-exec; a dbus-daemon that inherited the write end of
/// another thread's pipe kept that pipe's reader waiting for an end of file
/// as long as the daemon lived (a whole test process stalled so: issue 27).
@Suite("children inherit no descriptor", .timeLimit(.minutes(2)))
struct ChildDescriptorTests {
    @Test func aPrivateBusDaemonHoldsNoPipeOfOurs() async throws {
        let pipe = Pipe()  // both ends open here, without close-on-exec
        let ours = try FileManager.default.destinationOfSymbolicLink(
            atPath: "/proc/self/fd/\(pipe.fileHandleForWriting.fileDescriptor)")
        let bus = try await PrivateBus.start()
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(bus.daemon.pid)/fd")
        let targets = descriptors.compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(bus.daemon.pid)/fd/\($0)")
        }
        await bus.stop()
        #expect(!targets.contains(ours), "dbus-daemon holds \(ours): \(targets)")
        #expect(!targets.isEmpty, "no descriptors were read from /proc")
        try pipe.fileHandleForWriting.close()
        try pipe.fileHandleForReading.close()
    }
}
