#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writing a file the tool produces (the fleet report, the simulator's
/// state, anything a command is told to write with `--out`): the one way
/// beaconbench puts a file where it is asked to.
///
/// - What is at the path must be nothing or a regular file; a symbolic link
///   only when it leads to an existing regular file, which is then replaced
///   (in its own directory: the link stays). A directory, a character or
///   block device, a FIFO, a socket, a link to any of those, a link that
///   leads nowhere: refused.
/// - The files it is told to protect (the open inventory, its `-wal`,
///   `-shm`, `-journal` and reserve) are refused whatever the name they
///   are reached by: the same resolved path, or the same file (device and
///   inode: a hard link, a link).
/// - Written atomically: a temporary file made in the same directory
///   (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 whatever the umask), written,
///   `fsync`ed, renamed over the name, then the directory `fsync`ed. On any
///   failure the temporary file is removed and the name is as it was.
///
/// A refusal changes nothing; its message names the path and why.
public enum OutputFile {
    /// Why nothing was written: "PATH is a character device, not a regular
    /// file: nothing written".
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "\(path) \(reason): nothing written" }
        public init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }
    }

    /// A file never to be written over, and what it is ("the inventory").
    public struct Protected: Sendable {
        public var path: String
        public var what: String
        public init(_ path: String, _ what: String) {
            self.path = path
            self.what = what
        }
    }

    /// The files of an SQLite inventory at `path`: itself, its `-wal`,
    /// `-shm`, `-journal` and `-reserve`.
    public static func inventoryFiles(_ path: String) -> [Protected] {
        [
            Protected(path, "the inventory"), Protected(path + "-wal", "the inventory's write-ahead log"),
            Protected(path + "-shm", "the inventory's shared-memory index"),
            Protected(path + "-journal", "the inventory's rollback journal"),
            Protected(path + "-reserve", "the inventory's reserve"),
        ]
    }

    /// Where the bytes will go: a directory and a name in it, and the file
    /// there now (device, inode) when there is one.
    public struct Target: Sendable, Equatable {
        public var directory: String
        public var name: String
        var existing: Identity?
        /// Whether a file is there now (it is then replaced).
        public var exists: Bool { existing != nil }
    }

    struct Identity: Sendable, Equatable {
        var device: UInt64
        var inode: UInt64
        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
        }
    }

    /// Writes `bytes` to `path` (see the type's description).
    public static func write(_ bytes: [UInt8], to path: String, protecting: [Protected] = []) throws(Refusal) {
        try write(to: path, protecting: protecting) { writer throws(Refusal) in try writer.write(bytes) }
    }

    /// Where `produce` puts the bytes of a file being written: buffered,
    /// so that a page of any size is written without being held.
    public struct Writer {
        let descriptor: Int32
        let path: String
        var buffer: [UInt8] = []
        /// Bytes handed to it so far.
        public private(set) var count = 0
        static let flushAt = 256 * 1024

        public mutating func write(_ bytes: some Collection<UInt8>) throws(Refusal) {
            buffer.append(contentsOf: bytes)
            count += bytes.count
            if buffer.count >= Self.flushAt { try flush() }
        }

        public mutating func write(_ text: String) throws(Refusal) { try write(text.utf8) }

        mutating func flush() throws(Refusal) {
            var offset = 0
            while offset < buffer.count {
                let written = buffer[offset...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
                if written < 0 {
                    if errno == EINTR { continue }
                    throw Refusal(path: path, reason: "cannot be written: \(OutputFile.reason(errno))")
                }
                offset += written
            }
            buffer.removeAll(keepingCapacity: true)
        }
    }

    /// Writes what `produce` writes to `path`, as `write(_:to:)` writes
    /// bytes (atomically; on any failure, `produce`'s included, the name is
    /// as it was).
    public static func write(
        to path: String, protecting: [Protected] = [], _ produce: (inout Writer) throws(Refusal) -> Void
    ) throws(Refusal) {
        let target = try check(path, protecting: protecting)
        let directory = open(target.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else {
            throw Refusal(path: path, reason: "cannot be written: its directory \(target.directory): \(reason(errno))")
        }
        defer { close(directory) }
        var temporary = ""
        var descriptor: Int32 = -1
        for _ in 0..<16 {
            temporary = ".beaconbench-" + String(UInt64.random(in: 0...UInt64.max), radix: 16) + ".tmp"
            descriptor = openat(directory, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if descriptor >= 0 || errno != EEXIST { break }
        }
        guard descriptor >= 0 else {
            throw Refusal(path: path, reason: "cannot be written: in \(target.directory): \(reason(errno))")
        }
        var failure: String?
        // The umask may have taken bits away; this is the file just made.
        if fchmod(descriptor, 0o600) != 0 { failure = reason(errno) }
        if failure == nil {
            var writer = Writer(descriptor: descriptor, path: path)
            do {
                try produce(&writer)
                try writer.flush()
            } catch {
                failure =
                    error.reason.hasPrefix("cannot be written: ") ? String(error.reason.dropFirst(19)) : error.reason
            }
        }
        if failure == nil, fsync(descriptor) != 0 { failure = reason(errno) }
        if close(descriptor) != 0, failure == nil { failure = reason(errno) }
        if failure == nil {
            // What is at the name now must still be what was examined (or
            // nothing): a FIFO or a directory put there meanwhile is not
            // replaced.
            var info = stat()
            if fstatat(directory, target.name, &info, AT_SYMLINK_NOFOLLOW) == 0 {
                if info.st_mode & S_IFMT != S_IFREG {
                    failure = "changed while being written: it is now \(kind(info.st_mode))"
                } else if let existing = target.existing, Identity(info) != existing {
                    failure = "changed while being written: it is now another file"
                }
            } else if errno != ENOENT {
                failure = reason(errno)
            }
        }
        if failure == nil, renameat(directory, temporary, directory, target.name) != 0 { failure = reason(errno) }
        if let failure {
            unlinkat(directory, temporary, 0)
            throw Refusal(path: path, reason: "cannot be written: \(failure)")
        }
        // The rename itself on disk (a failure here leaves the new file in
        // place: nothing to undo).
        _ = fsync(directory)
    }

    /// Where `path` would be written, or why it may not be: the checks of
    /// `write`, without writing (a command may check its `--out` before
    /// doing its work).
    public static func check(_ path: String, protecting: [Protected] = []) throws(Refusal) -> Target {
        func refuse(_ reason: String) -> Refusal { Refusal(path: path, reason: reason) }
        guard !path.isEmpty else { throw refuse("is no file name") }
        guard !path.utf8.contains(0) else { throw refuse("holds a NUL byte") }
        guard !path.hasSuffix("/") else { throw refuse("ends in '/': give a file's name") }
        var info = stat()
        var file = path
        if lstat(path, &info) != 0 {
            guard errno == ENOENT else { throw refuse("cannot be examined: \(reason(errno))") }
        } else if info.st_mode & S_IFMT == S_IFLNK {
            let target = linkTarget(path)
            if let magic = throughProc(path) {
                // /dev/stdout, /dev/fd/N: an open descriptor's file, whose
                // name is not the one given.
                throw refuse(
                    (magic == path ? "is a symbolic link to \(target)" : "leads through \(magic)")
                        + ", an open descriptor's link, not a file's name: give the file's own path")
            }
            if let resolved = realPath(path), stat(resolved, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFREG else {
                    throw refuse(
                        "is a symbolic link to \(target), which is \(kind(info.st_mode)): beaconbench writes through"
                            + " a link only to an existing regular file")
                }
                file = resolved
            } else if stat(path, &info) == 0 {
                // A link that leads somewhere realpath cannot name (a pipe
                // behind /dev/stdout).
                throw refuse(
                    "is a symbolic link to \(target), which is \(kind(info.st_mode)): beaconbench writes through"
                        + " a link only to an existing regular file")
            } else {
                let why = errno == ENOENT ? "which does not exist" : "which cannot be followed (\(reason(errno)))"
                throw refuse(
                    "is a symbolic link to \(target), \(why): beaconbench writes through a link only to an existing"
                        + " regular file")
            }
        } else if info.st_mode & S_IFMT != S_IFREG {
            throw refuse("is \(kind(info.st_mode)), not a regular file")
        }
        let exists = lstat(file, &info) == 0
        if exists, info.st_mode & S_IFMT != S_IFREG {
            throw refuse("is \(kind(info.st_mode)), not a regular file")
        }
        let existing = exists ? Identity(info) : nil
        let (directory, name) = split(file)
        guard name != ".", name != ".." else { throw refuse("is a directory, not a regular file") }
        let canonical = canonicalPath(file)
        for system in ["/proc", "/sys"] where canonical == system || canonical.hasPrefix(system + "/") {
            throw refuse("is in \(system) (\(canonical)), the kernel's, not a place for files")
        }
        for protected in protecting {
            var other = stat()
            let same =
                canonicalPath(protected.path) == canonical
                || (existing != nil && stat(protected.path, &other) == 0 && Identity(other) == existing)
            if same {
                let shown = canonicalPath(protected.path)
                throw refuse(
                    (shown == canonical || protected.path == path
                        ? "is \(protected.what)" : "is another name of \(protected.what)") + " (\(shown))")
            }
        }
        return Target(directory: directory, name: name, existing: existing)
    }

    /// `path`'s directory and its last component (`.` for a bare name).
    public static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let directory = String(path[..<slash])
        return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
    }

    /// `path` with its directory's links resolved, whether it exists or not
    /// (a file that exists: its own links too).
    static func canonicalPath(_ path: String) -> String {
        if let resolved = realPath(path) { return resolved }
        let (directory, name) = split(path)
        return (realPath(directory).map { $0 == "/" ? "" : $0 } ?? directory) + "/" + name
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The first link on the way from `path` (itself a link) that is or
    /// leads into /proc, or nil.
    static func throughProc(_ path: String) -> String? {
        var current = path
        for _ in 0..<40 {
            var info = stat()
            guard lstat(current, &info) == 0, info.st_mode & S_IFMT == S_IFLNK else { return nil }
            if let directory = realPath(split(current).directory), directory.hasPrefix("/proc/") { return current }
            var next = linkTarget(current)
            if !next.hasPrefix("/") { next = split(current).directory + "/" + next }
            let canonical = canonicalPath(next)
            if canonical == "/proc" || canonical.hasPrefix("/proc/") || next.hasPrefix("/proc/") { return current }
            current = next
        }
        return nil
    }

    static func linkTarget(_ path: String) -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return "?" }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// What a file of this mode is, for a message.
    public static func kind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFREG: "a regular file"
        case S_IFDIR: "a directory"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFIFO: "a FIFO (named pipe)"
        case S_IFSOCK: "a socket"
        case S_IFLNK: "a symbolic link"
        default: "not a regular file"
        }
    }

    static func reason(_ code: Int32) -> String { String(cString: strerror(code)) }
}
