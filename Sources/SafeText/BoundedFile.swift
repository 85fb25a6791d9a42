#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The one way the tool reads a file it is given (a batch, a profile, a
/// proof, a checkpoint, an allowed_signers file, a fault plan, a fleet or
/// state file): opened with O_NONBLOCK (a FIFO cannot make it wait), the
/// opened descriptor checked to be a regular file (a FIFO, a device such as
/// /dev/zero, a directory or a socket is never read), refused when larger
/// than the limit before anything is read, and never more than the limit
/// and one byte read (a file that grows while it is read is caught).
public enum BoundedFile {
    public enum Failure: Error, Equatable {
        /// There is no such file (or a link leads nowhere).
        case missing
        /// The file could not be opened or read: errno's text.
        case unreadable(String)
        /// It holds more than `limit` bytes.
        case tooLarge(limit: Int)
        /// It is not a regular file (what it is: "a FIFO", "a character
        /// device", "a directory", "a socket", "a symbolic link", …).
        case notARegularFile(String)
    }

    /// Whether a symbolic link is followed (a file named on the command
    /// line, as an inventory's link is) or refused (a profile in a
    /// directory: what was checked is what is read).
    public enum Links: Sendable {
        case follow
        case refuse
    }

    /// A regular file's bytes with its owner and mode (`readRegular`).
    public struct RegularFile: Sendable {
        public var bytes: [UInt8]
        public var owner: UInt32
        public var mode: UInt32
    }

    /// The bytes of the regular file `name` (relative to the directory
    /// descriptor `directory`, or AT_FDCWD), at most `limit`. It is opened
    /// with O_NONBLOCK (a FIFO cannot make the tool wait), and O_NOFOLLOW
    /// unless `links` is `.follow`, and refused unless the descriptor is a
    /// regular file: FIFOs, devices, sockets and directories are never read.
    public static func readRegular(
        _ name: String, relativeTo directory: Int32 = AT_FDCWD, limit: Int, links: Links = .refuse
    )
        throws(Failure) -> RegularFile
    {
        let descriptor = try open(name, relativeTo: directory, links: links)
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .unreadable(errorText(errno)) }
        if let kind = kind(info.st_mode) { throw .notARegularFile(kind) }
        guard Int(info.st_size) <= limit else { throw .tooLarge(limit: limit) }
        return RegularFile(
            bytes: try read(descriptor: descriptor, limit: limit), owner: UInt32(info.st_uid),
            mode: UInt32(info.st_mode))
    }

    /// The bytes of the regular file at `path` (a link followed), at most
    /// `limit`.
    public static func read(_ path: String, limit: Int) throws(Failure) -> [UInt8] {
        try readRegular(path, limit: limit, links: .follow).bytes
    }

    /// Checks that `path` (a link followed) is a regular file of at most
    /// `limit` bytes without reading it: for a file handed on to another
    /// program by its name (an SSH key to ssh-keygen).
    public static func check(_ path: String, limit: Int) throws(Failure) {
        let descriptor = try open(path, relativeTo: AT_FDCWD, links: .follow)
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .unreadable(errorText(errno)) }
        if let kind = kind(info.st_mode) { throw .notARegularFile(kind) }
        guard Int(info.st_size) <= limit else { throw .tooLarge(limit: limit) }
    }

    /// At most the first `limit` bytes of the regular file at `path`, the
    /// rest not read: for output the tool had another program write (an
    /// error text), kept only in part. Empty when it cannot be read.
    public static func prefix(_ path: String, limit: Int) -> [UInt8] {
        guard let descriptor = try? open(path, relativeTo: AT_FDCWD, links: .refuse) else { return [] }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0, kind(info.st_mode) == nil else { return [] }
        var bytes = [UInt8](repeating: 0, count: limit)
        var count = 0
        while count < limit {
            let got = bytes.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress! + count, limit - count) }
            if got < 0, errno == EINTR { continue }
            if got <= 0 { break }
            count += got
        }
        return Array(bytes[..<count])
    }

    /// Everything `descriptor` gives until end of file, at most `limit`
    /// bytes: at most `limit` + 1 are read, the one more telling a file
    /// too large.
    public static func read(descriptor: Int32, limit: Int) throws(Failure) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: min(64 * 1024, limit + 1))
        while true {
            let wanted = min(chunk.count, limit + 1 - bytes.count)
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, wanted) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .unreadable(errorText(errno))
            }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
            guard bytes.count <= limit else { throw .tooLarge(limit: limit) }
        }
    }

    /// `name` opened for reading without blocking; errors say why in the
    /// words of `Failure`.
    private static func open(_ name: String, relativeTo directory: Int32, links: Links) throws(Failure) -> Int32 {
        let flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (links == .refuse ? O_NOFOLLOW : 0)
        let descriptor = openat(directory, name, flags)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { throw .missing }
            if code == ELOOP, links == .refuse { throw .notARegularFile("a symbolic link") }
            // A socket cannot be opened (ENXIO): say what it is.
            var info = stat()
            if code != EACCES, fstatat(directory, name, &info, links == .refuse ? AT_SYMLINK_NOFOLLOW : 0) == 0,
                let kind = kind(info.st_mode)
            {
                throw .notARegularFile(kind)
            }
            throw .unreadable(errorText(code))
        }
        return descriptor
    }

    /// What a file of `mode` is, when not a regular file.
    private static func kind(_ mode: mode_t) -> String? {
        switch mode & S_IFMT {
        case S_IFREG: nil
        case S_IFIFO: "a FIFO"
        case S_IFDIR: "a directory"
        case S_IFSOCK: "a socket"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFLNK: "a symbolic link"
        default: "of an unknown kind"
        }
    }

    /// strerror's text, its first letter lower-case ("permission denied").
    private static func errorText(_ code: Int32) -> String {
        let text = String(cString: strerror(code))
        guard let first = text.first else { return text }
        return first.lowercased() + text.dropFirst()
    }

    /// `limit` bytes as the docs say them: "1 MiB", "64 KiB", "100 bytes".
    public static func size(_ limit: Int) -> String {
        if limit >= 1 << 20, limit % (1 << 20) == 0 { return "\(limit >> 20) MiB" }
        if limit >= 1 << 10, limit % (1 << 10) == 0 { return "\(limit >> 10) KiB" }
        return "\(limit) bytes"
    }
}

extension BoundedFile.Failure: CustomStringConvertible {
    /// Why, as said after the file's name: `FILE: is a FIFO, not a regular
    /// file`, `could not read FILE: is larger than 1 MiB`.
    public var description: String {
        switch self {
        case .missing: "does not exist"
        case .unreadable(let reason): "cannot be read: \(reason)"
        case .tooLarge(let limit): "is larger than \(BoundedFile.size(limit))"
        case .notARegularFile(let kind): "is \(kind), not a regular file"
        }
    }
}
