import Glibc

/// The second seam: the system calls the binding's own reader makes on the
/// bus socket (`recvmsg` with the descriptors it carries, `close` of those
/// descriptors), in one file, as `LibDBus.swift` holds every libdbus call.
/// Only this file and the event loop's `poll` touch the socket directly.
enum Syscalls {
    /// What the reads of one connection have done, kept by its
    /// `InboundBuffer`: tests read it to check the size of reads.
    struct ReadCounter: Sendable, Equatable {
        /// `recvmsg` calls that returned data.
        var reads = 0
        /// Bytes they returned.
        var bytes = 0
        /// The most one of them returned.
        var largest = 0
        /// Descriptors received with the data (`SCM_RIGHTS`), and closed.
        var descriptorsReceived = 0
        var descriptorsClosed = 0
    }

    enum ReceiveResult: Equatable {
        /// `count` bytes read; `truncated` when the kernel had more
        /// descriptors than the control buffer could take (`MSG_CTRUNC`).
        case data(count: Int, truncated: Bool)
        /// The peer closed the socket.
        case endOfFile
        /// Nothing to read now (`EAGAIN`).
        case wouldBlock
        case failed(errno: Int32)
    }

    // Linux's values (bits/socket.h); Glibc imports some of them as enum
    // cases of different integer types, so they are spelled here once.
    static let messageDontWait: Int32 = 0x40
    static let messageControlTruncated: Int32 = 0x08
    static let messageControlCloseOnExec: Int32 = 0x4000_0000
    static let socketLevel: Int32 = 1
    static let rightsType: Int32 = 1

    /// Size of a control message header (`struct cmsghdr`: a `size_t` and
    /// two `int`s), rounded to `size_t` as `CMSG_ALIGN` does.
    static let controlHeaderSize = align(MemoryLayout<Int>.size + 2 * MemoryLayout<Int32>.size)

    static func align(_ length: Int) -> Int {
        let word = MemoryLayout<Int>.size
        return (length + word - 1) & ~(word - 1)
    }

    /// `CMSG_SPACE(4 × descriptors)`: control buffer room for that many.
    static func controlSpace(descriptors: Int) -> Int {
        controlHeaderSize + align(max(1, descriptors) * MemoryLayout<Int32>.size)
    }

    /// One `recvmsg(fd, MSG_DONTWAIT | MSG_CMSG_CLOEXEC)` into `buffer`,
    /// retried on `EINTR`. Descriptors that come with the data are appended
    /// to `descriptors` (close-on-exec) and counted in `counter`.
    static func receive(
        _ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, control: UnsafeMutableRawBufferPointer,
        descriptors: inout [Int32], counter: inout ReadCounter
    ) -> ReceiveResult {
        while true {
            var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
            let (count, flags, controlLength): (Int, Int32, Int) = withUnsafeMutablePointer(to: &vector) { vector in
                var header = msghdr()
                header.msg_iov = vector
                header.msg_iovlen = 1
                header.msg_control = control.count > 0 ? control.baseAddress : nil
                header.msg_controllen = control.count
                let count = recvmsg(fd, &header, messageDontWait | messageControlCloseOnExec)
                return (count, header.msg_flags, Int(header.msg_controllen))
            }
            if count < 0 {
                let error = errno
                if error == EINTR { continue }
                if error == EAGAIN || error == EWOULDBLOCK { return .wouldBlock }
                return .failed(errno: error)
            }
            let before = descriptors.count
            collectDescriptors(control, length: min(controlLength, control.count), into: &descriptors)
            counter.descriptorsReceived += descriptors.count - before
            if count == 0 {
                // No data: a descriptor can only come with data; anything
                // received anyway is not kept.
                return .endOfFile
            }
            counter.reads += 1
            counter.bytes += count
            counter.largest = max(counter.largest, count)
            return .data(count: count, truncated: flags & messageControlTruncated != 0)
        }
    }

    /// Walks the control messages (`CMSG_FIRSTHDR`/`CMSG_NXTHDR`) and takes
    /// the descriptors of every `SCM_RIGHTS` one.
    static func collectDescriptors(
        _ control: UnsafeMutableRawBufferPointer, length: Int, into descriptors: inout [Int32]
    ) {
        guard let base = control.baseAddress else { return }
        var offset = 0
        while offset + controlHeaderSize <= length {
            let messageLength = base.loadUnaligned(fromByteOffset: offset, as: Int.self)
            let level = base.loadUnaligned(fromByteOffset: offset + MemoryLayout<Int>.size, as: Int32.self)
            let type = base.loadUnaligned(
                fromByteOffset: offset + MemoryLayout<Int>.size + MemoryLayout<Int32>.size, as: Int32.self)
            guard messageLength >= controlHeaderSize, offset + messageLength <= length else { return }
            if level == socketLevel, type == rightsType {
                let count = (messageLength - controlHeaderSize) / MemoryLayout<Int32>.size
                for index in 0..<count {
                    descriptors.append(
                        base.loadUnaligned(
                            fromByteOffset: offset + controlHeaderSize + index * MemoryLayout<Int32>.size,
                            as: Int32.self))
                }
            }
            offset += align(messageLength)
        }
    }

    /// Closes a descriptor received from the bus.
    static func closeDescriptor(_ fd: Int32, counter: inout ReadCounter) {
        _ = close(fd)
        counter.descriptorsClosed += 1
    }
}
