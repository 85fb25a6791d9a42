import SafeText

/// An allowed_signers file (ssh-keygen's format, `ALLOWED SIGNERS` in
/// ssh-keygen(1)) read once, checked as every file the tool reads is
/// (`BoundedFile`: a regular file of at most `maxFile` bytes, opened
/// without blocking). ssh-keygen is given a private copy of these bytes
/// (mode 0600, in a 0700 directory of its own), never the file named:
/// what was checked is what ssh-keygen reads, even if the file is replaced
/// by a FIFO or a link to /dev/zero meanwhile.
public struct AllowedSigners: Sendable {
    /// The largest allowed_signers file read: a line per key, and an
    /// RSA-16384 key's line is under 3 KiB.
    public static let maxFile = 1024 * 1024

    /// The file's name as given (for messages).
    public let path: String
    public let bytes: [UInt8]

    public init(path: String, bytes: [UInt8]) {
        self.path = path
        self.bytes = bytes
    }

    /// Reads the file at `path` (a link followed).
    public static func read(_ path: String) throws(BoundedFile.Failure) -> AllowedSigners {
        AllowedSigners(path: path, bytes: try BoundedFile.read(path, limit: maxFile))
    }

    /// Reads the file at `path`; a failure as a `LedgerError` naming it.
    static func load(_ path: String) throws(LedgerError) -> AllowedSigners {
        do { return try read(path) } catch {
            throw LedgerError("could not read \(LedgerError.quoted(path)): \(error)")
        }
    }
}
