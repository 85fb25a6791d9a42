#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reading a file given to the tool (a batch, a profile) without letting
/// its size decide how much memory is spent: at most `limit` bytes are
/// read, and a larger file is an error before it is read. Works for
/// regular files, pipes and standard input alike.
public enum BoundedFile {
    public enum Failure: Error, Equatable {
        /// The file could not be opened or read: errno's text.
        case unreadable(String)
        /// It holds more than `limit` bytes.
        case tooLarge(limit: Int)
        /// It is a directory, a device or a socket, not a file to read.
        case notAFile
        /// `readRegular`: it is not a regular file (what it is: "a FIFO",
        /// "a symbolic link", …).
        case notARegularFile(String)
    }

    /// A regular file's bytes with its owner and mode (`readRegular`).
    public struct RegularFile: Sendable {
        public var bytes: [UInt8]
        public var owner: UInt32
        public var mode: UInt32
    }

    /// The bytes of the regular file `name` (relative to the directory
    /// descriptor `directory`, or AT_FDCWD), at most `limit`. It is opened
    /// with O_NOFOLLOW (a symbolic link is refused) and O_NONBLOCK (a FIFO
    /// cannot make the tool wait), and refused unless the descriptor is a
    /// regular file: FIFOs, devices, sockets and directories are never read.
    public static func readRegular(
        _ name: String, relativeTo directory: Int32 = AT_FDCWD, limit: Int
    )
        throws(Failure) -> RegularFile
    {
        let descriptor = openat(directory, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)
        guard descriptor >= 0 else {
            if errno == ELOOP { throw .notARegularFile("a symbolic link") }
            throw .unreadable(String(cString: strerror(errno)))
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .unreadable(String(cString: strerror(errno))) }
        switch info.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFIFO: throw .notARegularFile("a FIFO")
        case S_IFDIR: throw .notARegularFile("a directory")
        case S_IFSOCK: throw .notARegularFile("a socket")
        case S_IFCHR, S_IFBLK: throw .notARegularFile("a device")
        default: throw .notARegularFile("of an unknown kind")
        }
        guard Int(info.st_size) <= limit else { throw .tooLarge(limit: limit) }
        return RegularFile(
            bytes: try read(descriptor: descriptor, limit: limit), owner: UInt32(info.st_uid),
            mode: UInt32(info.st_mode))
    }

    /// The bytes of `path`, at most `limit`.
    public static func read(_ path: String, limit: Int) throws(Failure) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { throw .unreadable(String(cString: strerror(errno))) }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .unreadable(String(cString: strerror(errno))) }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFIFO else { throw .notAFile }
        if type == S_IFREG, Int(info.st_size) > limit { throw .tooLarge(limit: limit) }
        // Back to blocking for a pipe (O_NONBLOCK only kept open() of a FIFO
        // from waiting for a writer).
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return try read(descriptor: descriptor, limit: limit)
    }

    /// Everything `descriptor` gives until end of file, at most `limit` bytes.
    public static func read(descriptor: Int32, limit: Int) throws(Failure) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .unreadable(String(cString: strerror(errno)))
            }
            if count == 0 { return bytes }
            guard bytes.count + count <= limit else { throw .tooLarge(limit: limit) }
            bytes += chunk[..<count]
        }
    }
}

extension BoundedFile.Failure: CustomStringConvertible {
    public var description: String {
        switch self {
        case .unreadable(let reason): "cannot read it (\(reason))"
        case .tooLarge(let limit): "larger than \(limit >= 1 << 20 ? "\(limit >> 20) MiB" : "\(limit >> 10) KiB")"
        case .notAFile: "not a file"
        case .notARegularFile(let kind): "not a regular file (it is \(kind))"
        }
    }
}
