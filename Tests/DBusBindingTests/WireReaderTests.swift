import Foundation
import Glibc
import TestSupport
import Testing

@testable import DBusBinding

/// The binding's own reader (docs/dbus-binding.md, "Reading the socket"):
/// framing from the fixed header, the buffer and its reads, descriptors,
/// and the handover from libdbus, over socketpairs and a private bus.
@Suite("The binding reads the bus socket itself", .timeLimit(.minutes(5)))
struct WireReaderTests {
    // MARK: Messages to frame

    /// A signal marshalled by libdbus, with a serial (libdbus refuses 0).
    static func signal(_ index: UInt32, padding: Int = 0) throws -> [UInt8] {
        let message = try OutgoingMessage.signal(
            path: "/org/example/Stream", interface: "org.example.Stream1", member: "Tick",
            body: [.uint32(index), .string(String(repeating: "x", count: padding))])
        defer { LibDBus.messageUnref(message) }
        var bytes = try #require(LibDBus.messageMarshal(message))
        bytes.replaceSubrange(8..<12, with: withUnsafeBytes(of: (index + 1).littleEndian, Array.init))
        return bytes
    }

    /// A hand-built method return whose header holds, besides the required
    /// fields, an unknown field (code 200, an `a(yv)` with a nested `v`)
    /// before `UNIX_FDS`, in the given byte order: the header walk must
    /// skip what it does not know.
    static func returnDeclaringDescriptors(_ count: UInt32, bigEndian: Bool = false) -> [UInt8] {
        var bytes: [UInt8] = []
        func align(_ boundary: Int) { while bytes.count % boundary != 0 { bytes.append(0) } }
        func word(_ value: UInt32) {
            align(4)
            bytes += withUnsafeBytes(of: bigEndian ? value.bigEndian : value.littleEndian, Array.init)
        }
        func signature(_ text: String) {
            bytes.append(UInt8(text.utf8.count))
            bytes += Array(text.utf8) + [0]
        }
        bytes += [bigEndian ? UInt8(ascii: "B") : UInt8(ascii: "l"), 2, 0, 1]
        word(0)  // body length
        word(7)  // serial
        word(0)  // field array length, set below
        // REPLY_SERIAL
        align(8)
        bytes.append(5)
        signature("u")
        word(3)
        // an unknown field: a(yv) holding (1, <s "hi">) and (2, <ay [1 2 3]>)
        align(8)
        bytes.append(200)
        signature("a(yv)")
        word(0)
        let lengthAt = bytes.count - 4
        align(8)
        let arrayStart = bytes.count
        bytes.append(1)
        signature("s")
        word(2)
        bytes += Array("hi".utf8) + [0]
        align(8)
        bytes.append(2)
        signature("ay")
        word(3)
        bytes += [1, 2, 3]
        let arrayLength = UInt32(bytes.count - arrayStart)
        bytes.replaceSubrange(
            lengthAt..<lengthAt + 4,
            with: withUnsafeBytes(of: bigEndian ? arrayLength.bigEndian : arrayLength.littleEndian, Array.init))
        // UNIX_FDS
        align(8)
        bytes.append(9)
        signature("u")
        word(count)
        let fieldsLength = UInt32(bytes.count - 16)
        bytes.replaceSubrange(
            12..<16,
            with: withUnsafeBytes(of: bigEndian ? fieldsLength.bigEndian : fieldsLength.littleEndian, Array.init))
        align(8)
        return bytes
    }

    static func frame(_ bytes: [UInt8]) throws -> FixedHeader {
        try bytes.withUnsafeBytes { try FixedHeader($0) }
    }

    static func bytesNeeded(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { LibDBus.messageDemarshalBytesNeeded($0) }
    }

    // MARK: Framing

    @Test func theFixedHeaderGivesTheLengthLibdbusGives() throws {
        for bytes in [try Self.signal(1), try Self.signal(2, padding: 1000), Self.returnDeclaringDescriptors(2)] {
            let header = try Self.frame(bytes)
            #expect(header.totalLength == bytes.count)
            #expect(Self.bytesNeeded(bytes) == bytes.count)
        }
        let big = Self.returnDeclaringDescriptors(1, bigEndian: true)
        #expect(try Self.frame(big).littleEndian == false)
        #expect(try Self.frame(big).totalLength == big.count)
        #expect(Self.bytesNeeded(big) == big.count)
    }

    @Test func aHeaderThatCannotBeFramedIsRefusedWithItsReason() throws {
        var bytes = try Self.signal(1)
        bytes[0] = UInt8(ascii: "x")
        #expect(throws: FixedHeader.Violation.byteOrder(UInt8(ascii: "x"))) { try Self.frame(bytes) }
        #expect(Self.bytesNeeded(bytes) == -1)

        bytes = try Self.signal(1)
        bytes[3] = 2
        #expect(throws: FixedHeader.Violation.version(2)) { try Self.frame(bytes) }

        bytes = try Self.signal(1)
        bytes.replaceSubrange(4..<8, with: withUnsafeBytes(of: UInt32(134_217_729).littleEndian, Array.init))
        #expect(throws: FixedHeader.Violation.bodyLength(134_217_729)) { try Self.frame(bytes) }
        #expect(Self.bytesNeeded(bytes) == -1)

        bytes = try Self.signal(1)
        bytes.replaceSubrange(4..<8, with: withUnsafeBytes(of: UInt32(134_217_700).littleEndian, Array.init))
        #expect(throws: FixedHeader.Violation.self) { try Self.frame(bytes) }
        #expect(Self.bytesNeeded(bytes) == -1)
    }

    @Test func unixFDsIsFoundPastUnknownFieldsAndCleared() throws {
        for bigEndian in [false, true] {
            var bytes = Self.returnDeclaringDescriptors(3, bigEndian: bigEndian)
            let found = bytes.withUnsafeMutableBytes { Framing.unixFDs(in: $0, clear: true) }
            #expect(found == 3)
            #expect(bytes.withUnsafeMutableBytes { Framing.unixFDs(in: $0, clear: false) } == 0)
            // libdbus takes the cleared message (it refuses one that claims
            // descriptors its bytes cannot carry).
            let message = try bytes.withUnsafeBytes { try LibDBus.messageDemarshal($0).get() }
            #expect(LibDBus.messageGetReplySerial(message) == 3)
            LibDBus.messageUnref(message)
        }
        let claiming = Self.returnDeclaringDescriptors(1)
        #expect(throws: BusError.self) { try claiming.withUnsafeBytes { try LibDBus.messageDemarshal($0).get() } }
        // A message with no UNIX_FDS field declares none; a cut header is nil.
        var plain = try Self.signal(4)
        #expect(plain.withUnsafeMutableBytes { Framing.unixFDs(in: $0, clear: false) } == 0)
        var cut = Self.returnDeclaringDescriptors(1)
        cut.replaceSubrange(12..<16, with: withUnsafeBytes(of: UInt32(20).littleEndian, Array.init))
        #expect(cut.withUnsafeMutableBytes { Framing.unixFDs(in: $0, clear: false) } == nil)
    }

    // MARK: The buffer over a socketpair

    /// A nonblocking socketpair; the pair is closed after `body`.
    static func withSocketPair<T>(_ body: (_ writer: Int32, _ reader: Int32) throws -> T) throws -> T {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        for fd in pair { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        defer { for fd in pair { close(fd) } }
        return try body(pair[0], pair[1])
    }

    /// Writes all of `bytes` the socket takes now; how many it took.
    static func writeSome(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Int {
        bytes.withUnsafeBytes { buffer in
            var written = 0
            while written < buffer.count {
                let count = write(fd, buffer.baseAddress! + written, buffer.count - written)
                if count <= 0 { break }
                written += count
            }
            return written
        }
    }

    @Test func messagesCutAnywhereComeOutWholeAndInOrder() throws {
        var stream: [UInt8] = []
        var lengths: [Int] = []
        for index in 0..<300 {
            let message = try Self.signal(UInt32(index), padding: (index * 37) % 3000)
            lengths.append(message.count)
            stream += message
        }
        try Self.withSocketPair { writer, reader in
            let buffer = InboundBuffer(maximumDescriptors: 0)
            var sent = 0
            var cut = 1
            var received: [[UInt8]] = []
            while sent < stream.count {
                // Pieces of 1, 8, 64, … bytes, so headers and bodies are cut.
                let end = min(stream.count, sent + cut)
                sent += Self.writeSome(writer, stream[sent..<end])
                cut = cut >= 100_000 ? 1 : cut * 8
                #expect(buffer.fill(from: reader) == .more)
                while let message = try buffer.nextMessage() { received.append(Array(message)) }
            }
            #expect(received.map(\.count) == lengths)
            #expect(received.flatMap { $0 } == stream)
            #expect(buffer.buffered == 0)
        }
    }

    @Test func aReadTakesSixtyFourKiBWhenTheKernelHoldsThatMuch() throws {
        var stream: [UInt8] = []
        while stream.count < 200 * 1024 { stream += try Self.signal(UInt32(stream.count), padding: 4000) }
        try Self.withSocketPair { writer, reader in
            let written = Self.writeSome(writer, stream[...])
            #expect(written >= 128 * 1024, "the socket took \(written) bytes")
            let buffer = InboundBuffer(maximumDescriptors: 0)
            #expect(buffer.fill(from: reader) == .more)
            let counter = buffer.counter
            #expect(counter.bytes == written)
            #expect(counter.largest >= InboundBuffer.minimumFree, "largest read \(counter.largest)")
            #expect(counter.reads <= (written + InboundBuffer.minimumFree - 1) / InboundBuffer.minimumFree + 1)
            var framed = 0
            while let message = try buffer.nextMessage() { framed += message.count }
            #expect(framed + buffer.buffered == written)
        }
    }

    @Test func aBigMessageGrowsTheBufferAndAnEmptyOneShrinksBack() throws {
        let big = try Self.signal(1, padding: 3 * 1024 * 1024)
        try Self.withSocketPair { writer, reader in
            let buffer = InboundBuffer(maximumDescriptors: 0)
            var sent = 0
            var got: [UInt8]?
            while got == nil {
                sent += Self.writeSome(writer, big[sent...])
                #expect(buffer.fill(from: reader) == .more)
                if let message = try buffer.nextMessage() { got = Array(message) }
            }
            #expect(got == big)
            #expect(buffer.capacity >= big.count)
            // The next fill starts from an empty buffer of the first size.
            _ = Self.writeSome(writer, try Self.signal(2)[...])
            #expect(buffer.fill(from: reader) == .more)
            #expect(buffer.capacity == InboundBuffer.initialCapacity)
            #expect(try buffer.nextMessage().map(Array.init) == (try Self.signal(2)))
        }
    }

    @Test func theEndOfFileIsReportedAfterTheBytesBeforeIt() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[1]) }
        let message = try Self.signal(9)
        #expect(Self.writeSome(pair[0], message[...]) == message.count)
        close(pair[0])
        let buffer = InboundBuffer(maximumDescriptors: 0)
        var result = buffer.fill(from: pair[1])
        if result == .more { result = buffer.fill(from: pair[1]) }
        #expect(result == .endOfFile)
        #expect(try buffer.nextMessage().map(Array.init) == message)
    }

    /// Sends `bytes` with `fds` attached (`SCM_RIGHTS`).
    static func send(_ fd: Int32, _ bytes: [UInt8], descriptors fds: [Int32]) -> Int {
        let space = Syscalls.controlSpace(descriptors: fds.count)
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space, alignment: 8)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0)
        control.storeBytes(of: Syscalls.controlHeaderSize + 4 * fds.count, toByteOffset: 0, as: Int.self)
        control.storeBytes(of: Syscalls.socketLevel, toByteOffset: 8, as: Int32.self)
        control.storeBytes(of: Syscalls.rightsType, toByteOffset: 12, as: Int32.self)
        for (index, descriptor) in fds.enumerated() {
            control.storeBytes(of: descriptor, toByteOffset: Syscalls.controlHeaderSize + 4 * index, as: Int32.self)
        }
        var bytes = bytes
        return bytes.withUnsafeMutableBytes { buffer in
            var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
            return withUnsafeMutablePointer(to: &vector) { vector in
                var header = msghdr()
                header.msg_iov = vector
                header.msg_iovlen = 1
                header.msg_control = control.baseAddress
                header.msg_controllen = space
                return sendmsg(fd, &header, 0)
            }
        }
    }

    /// Descriptors of this process open on `path`.
    static func descriptors(on path: String) -> Int {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.filter {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == path
        }
        .count
    }

    @Test func descriptorsGoToTheirMessageInOrderAndAreClosed() throws {
        let directory = try ScratchDirectory()
        let marker = directory.path + "/marker"
        #expect(FileManager.default.createFile(atPath: marker, contents: Data()))
        try Self.withSocketPair { writer, reader in
            let buffer = InboundBuffer(maximumDescriptors: 16)
            for round in 0..<50 {
                let count = round % 4
                let fds = (0..<count).map { _ in open(marker, O_RDONLY | O_CLOEXEC) }
                let message = Self.returnDeclaringDescriptors(UInt32(count))
                #expect(Self.send(writer, message, descriptors: fds) == message.count)
                for fd in fds { close(fd) }
                #expect(buffer.fill(from: reader) == .more)
                let frame = try #require(try buffer.nextMessage())
                let declared = try #require(Framing.unixFDs(in: frame, clear: true))
                #expect(declared == UInt32(count))
                let taken = try #require(buffer.takeDescriptors(Int(declared)))
                #expect(taken.allSatisfy { fcntl($0, F_GETFD) & FD_CLOEXEC != 0 }, "received close-on-exec")
                buffer.close(taken)
                #expect(buffer.pendingDescriptors == 0)
            }
            #expect(buffer.counter.descriptorsReceived == (0..<50).map { $0 % 4 }.reduce(0, +))
            #expect(buffer.counter.descriptorsClosed == buffer.counter.descriptorsReceived)
            #expect(Self.descriptors(on: marker) == 0)
        }
    }

    @Test func descriptorsBeyondTheControlBufferCloseTheConnection() throws {
        let directory = try ScratchDirectory()
        let marker = directory.path + "/marker"
        #expect(FileManager.default.createFile(atPath: marker, contents: Data()))
        try Self.withSocketPair { writer, reader in
            let buffer = InboundBuffer(maximumDescriptors: 1)
            let fds = (0..<4).map { _ in open(marker, O_RDONLY | O_CLOEXEC) }
            let message = Self.returnDeclaringDescriptors(4)
            #expect(Self.send(writer, message, descriptors: fds) == message.count)
            for fd in fds { close(fd) }
            guard case .failed(let why) = buffer.fill(from: reader) else {
                Issue.record("a truncated control message was not reported")
                return
            }
            #expect(why.contains("MSG_CTRUNC"))
            buffer.closeDescriptors()
            #expect(Self.descriptors(on: marker) == 0)
        }
    }

    // MARK: Over a private bus

    static let streamPath: ObjectPath = "/org/example/Stream"
    static let streamInterface: InterfaceName = "org.example.Stream1"

    /// 100,000 signals and 10,000 calls interleaved on one connection: every
    /// one arrives, in order, and libdbus holds nothing it read itself.
    @Test(arguments: [BusReader.wire, .libdbus])
    func noByteIsLostAcrossTheHandover(_ reader: BusReader) async throws {
        try await BusReader.$chosen.withValue(reader) {
            try await withEchoFixture { fixture in
                let client = fixture.client
                #expect(client.uniqueName.hasPrefix(":"))
                #expect(await client.core.libdbusHoldsNoMessage)
                let signalCount = 100_000
                let callers = 8
                let callsEach = 1_250
                let ticks = try await client.signals(
                    matching: MatchRule(interface: Self.streamInterface, member: "Tick", path: Self.streamPath))
                async let emitted: Void = {
                    for index in 0..<signalCount {
                        try await fixture.server.emitSignal(
                            path: Self.streamPath, interface: Self.streamInterface, member: "Tick",
                            body: [.uint32(UInt32(index))])
                    }
                }()
                async let answered: Int = withThrowingTaskGroup(of: Int.self) { group in
                    for caller in 0..<callers {
                        group.addTask {
                            var right = 0
                            for call in 0..<callsEach {
                                let value = Int32(caller * callsEach + call)
                                let reply = try await fixture.call("Add", [.int32(value), .int32(1)])
                                if reply.body == [.int32(value + 1)] { right += 1 }
                            }
                            return right
                        }
                    }
                    return try await group.reduce(0, +)
                }
                let received = await collect(ticks, count: signalCount, within: .seconds(240))
                try await emitted
                #expect(try await answered == callers * callsEach)
                #expect(received.count == signalCount, "\(received.count) of \(signalCount) signals came")
                let outOfOrder = received.enumerated().first { $0.element.body != [.uint32(UInt32($0.offset))] }
                #expect(outOfOrder == nil, "signal \(outOfOrder?.offset ?? -1) is \(outOfOrder?.element.body ?? [])")
                for connection in [client, fixture.server] {
                    #expect(await connection.core.libdbusHoldsNoMessage)
                    #expect(await connection.core.refusedMessages == 0)
                    let counter = await connection.core.readCounter
                    #expect((counter != nil) == (reader == .wire))
                }
                #expect(await client.pendingCallCount == 0)
            }
        }
    }

    /// A peer answers with descriptors (one, then three per reply): each
    /// reply is a `NotSupported` error, as before, and every descriptor
    /// received is closed (the binding's reader closes them before the
    /// message is decoded).
    @Test(arguments: [BusReader.wire, .libdbus])
    func descriptorsFromAPeerAreClosed(_ reader: BusReader) async throws {
        let directory = try ScratchDirectory()
        let marker = directory.path + "/marker"
        #expect(FileManager.default.createFile(atPath: marker, contents: Data()))
        let script = directory.path + "/fd_peer.py"
        try Self.fdPeer.write(toFile: script, atomically: true, encoding: .utf8)
        try await BusReader.$chosen.withValue(reader) {
            try await withEchoFixture { fixture in
                let client = fixture.client
                let peer: BusName = "org.example.Fds"
                let owners = try await client.nameOwnerChanges(of: peer)
                try await withResource(
                    { try ChildProcess("/usr/bin/python3", [script, fixture.bus.address, peer.rawValue, marker]) },
                    stop: { await $0.terminate() }
                ) { _ in
                    _ = try await take(1, from: owners.filter { $0.newOwner != nil }, "the fd peer to own its name")
                    #expect(Self.descriptors(on: marker) == 0)
                    for member: MemberName in ["One", "Three"] {
                        for _ in 0..<100 {
                            let error = await #expect(throws: BusError.self) {
                                try await client.call(peer, "/org/example/Fds", "org.example.Fds1", member)
                            }
                            #expect(error?.name == .notSupported)
                        }
                    }
                    // The connection is still good. Its reply is routed by the
                    // connection's thread after it let go of the last message
                    // with descriptors (libdbus' reader closes them when the
                    // message is released, after the caller was resumed).
                    #expect(try await fixture.call("Add", [.int32(2), .int32(2)]).body == [.int32(4)])
                    #expect(Self.descriptors(on: marker) == 0, "descriptors on \(marker) left open")
                    if reader == .wire {
                        let counter = try #require(await client.core.readCounter)
                        #expect(counter.descriptorsReceived == 400)
                        #expect(counter.descriptorsClosed == 400)
                    }
                }
            }
        }
    }

    static let fdPeer = #"""
        import os
        import sys

        import dbus
        import dbus.service
        from dbus.mainloop.glib import DBusGMainLoop
        from gi.repository import GLib


        class Fds(dbus.service.Object):
            def __init__(self, bus, marker):
                super().__init__(bus, "/org/example/Fds")
                self.marker = marker

            def fd(self):
                raw = os.open(self.marker, os.O_RDONLY)
                wrapped = dbus.types.UnixFd(raw)
                os.close(raw)
                return wrapped

            @dbus.service.method("org.example.Fds1", out_signature="h")
            def One(self):
                return self.fd()

            @dbus.service.method("org.example.Fds1", out_signature="hhh")
            def Three(self):
                return (self.fd(), self.fd(), self.fd())


        DBusGMainLoop(set_as_default=True)
        bus = dbus.bus.BusConnection(sys.argv[1])
        Fds(bus, sys.argv[3])
        bus.request_name(sys.argv[2])
        GLib.MainLoop().run()
        """#
}

/// A fresh directory under the temporary directory, removed on release.
final class ScratchDirectory {
    let path: String

    init() throws {
        var template = Array((FileManager.default.temporaryDirectory.path + "/beaconbench-wire-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw TestSupportError("mkdtemp failed: errno \(errno)")
        }
        path = String(cString: made)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
