import Glibc

/// The bytes read from a bus socket and not yet routed, and the
/// descriptors that came with them.
///
/// One contiguous, 8-aligned buffer: messages are framed in place
/// (`nextMessage`) from their fixed header and handed out as slices of it,
/// valid until the next `fill`. Before every `recvmsg` at least
/// `minimumFree` (64 KiB) is free after the data, so one system call takes
/// everything the kernel holds up to that; the buffer grows by doubling (a
/// message up to libdbus' 128 MiB limit fits) and moves its data to the
/// front when the routed prefix is more than half of it.
///
/// Touched only on the connection's thread.
final class InboundBuffer {
    static let minimumFree = 64 * 1024
    static let initialCapacity = 256 * 1024
    /// Most bytes read per `fill`: the loop then routes and polls again, so
    /// one busy peer cannot keep jobs waiting.
    static let maximumPerFill = 1024 * 1024

    private var storage: UnsafeMutableRawBufferPointer
    /// Routed bytes end here; data runs from `start` to `end`.
    private(set) var start = 0
    private(set) var end = 0
    private let control: UnsafeMutableRawBufferPointer
    /// Descriptors received and not yet handed to a message, in order.
    private var descriptors: [Int32] = []
    private var descriptorHead = 0
    private(set) var counter = Syscalls.ReadCounter()

    /// `maximumDescriptors`: how many one message may carry
    /// (`dbus_connection_get_max_message_unix_fds`), 0 when the connection
    /// did not negotiate descriptor passing.
    init(maximumDescriptors: Int) {
        storage = .allocate(byteCount: Self.initialCapacity, alignment: 8)
        control = .allocate(
            byteCount: maximumDescriptors > 0 ? Syscalls.controlSpace(descriptors: maximumDescriptors) : 0,
            alignment: 8)
    }

    deinit {
        closeDescriptors()
        storage.deallocate()
        control.deallocate()
    }

    var capacity: Int { storage.count }
    var buffered: Int { end - start }
    var pendingDescriptors: Int { descriptors.count - descriptorHead }

    enum FillResult: Equatable {
        /// Read what there was (maybe nothing); more may follow.
        case more
        /// The peer closed the socket (after the bytes read before it).
        case endOfFile
        /// Descriptors were lost (`MSG_CTRUNC`), or `recvmsg` failed: the
        /// connection cannot go on.
        case failed(String)
    }

    /// Reads from `fd` until a read returns less than the room it was
    /// offered (the kernel had nothing more), `EAGAIN`, or `maximumPerFill`
    /// bytes were read.
    func fill(from fd: Int32) -> FillResult {
        var total = 0
        while total < Self.maximumPerFill {
            makeRoom()
            let free = UnsafeMutableRawBufferPointer(rebasing: storage[end...])
            switch Syscalls.receive(fd, into: free, control: control, descriptors: &descriptors, counter: &counter) {
            case .data(let count, let truncated):
                end += count
                total += count
                if truncated { return .failed("descriptors sent with a message were lost (MSG_CTRUNC)") }
                // Less than the room offered: the kernel had no more (or
                // stopped at descriptors). No second call to hear EAGAIN;
                // what arrives meanwhile wakes the next poll.
                if count < free.count { return .more }
            case .wouldBlock:
                return .more
            case .endOfFile:
                return .endOfFile
            case .failed(let error):
                if error == ECONNRESET { return .endOfFile }
                return .failed("reading the bus socket failed: errno \(error)")
            }
        }
        return .more
    }

    /// At least `minimumFree` bytes after the data: the data moved to the
    /// front when more than half the buffer is routed, else the buffer
    /// doubled; an empty buffer grown past a few MiB goes back to its
    /// initial size.
    private func makeRoom() {
        if start == end {
            start = 0
            end = 0
            if storage.count > 4 * Self.initialCapacity {
                storage.deallocate()
                storage = .allocate(byteCount: Self.initialCapacity, alignment: 8)
            }
        }
        if storage.count - end >= Self.minimumFree { return }
        if start > storage.count / 2 || (start > 0 && storage.count - (end - start) >= Self.minimumFree) {
            let count = end - start
            storage.baseAddress!.copyMemory(from: storage.baseAddress! + start, byteCount: count)
            start = 0
            end = count
            if storage.count - end >= Self.minimumFree { return }
        }
        var size = storage.count * 2
        while size - (end - start) < Self.minimumFree { size *= 2 }
        let grown = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
        grown.baseAddress!.copyMemory(from: storage.baseAddress! + start, byteCount: end - start)
        storage.deallocate()
        storage = grown
        end -= start
        start = 0
    }

    /// The next complete message, as a slice of the buffer valid until the
    /// next `fill`; nil when the buffer holds less than one message.
    /// - Throws: the fixed header's violation: the stream cannot be framed.
    func nextMessage() throws(FixedHeader.Violation) -> UnsafeMutableRawBufferPointer? {
        guard end - start >= FixedHeader.size else { return nil }
        let available = UnsafeMutableRawBufferPointer(rebasing: storage[start..<end])
        let header = try FixedHeader(UnsafeRawBufferPointer(available))
        let length = header.totalLength
        guard length <= available.count else { return nil }
        start += length
        return UnsafeMutableRawBufferPointer(rebasing: available[0..<length])
    }

    /// The next `count` descriptors received, in order; nil (and none taken)
    /// when fewer arrived.
    func takeDescriptors(_ count: Int) -> [Int32]? {
        guard count <= pendingDescriptors else { return nil }
        let taken = Array(descriptors[descriptorHead..<descriptorHead + count])
        descriptorHead += count
        if descriptorHead == descriptors.count {
            descriptors.removeAll(keepingCapacity: true)
            descriptorHead = 0
        }
        return taken
    }

    /// Closes `fds` (descriptors taken for a message the binding does not
    /// pass on), counting them.
    func close(_ fds: [Int32]) {
        for fd in fds { Syscalls.closeDescriptor(fd, counter: &counter) }
    }

    /// Closes every descriptor received and not yet taken.
    func closeDescriptors() {
        if let rest = takeDescriptors(pendingDescriptors) { close(rest) }
    }
}
