import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// Whether a profile directory may be trusted, as ssh's StrictModes
/// decides for `~/.ssh`: profiles decide what is written to beacons, so a
/// directory (`./profiles`, `--profiles DIR`, the XDG one, the shipped one)
/// is used only if nobody but the user and root could have put or changed
/// what is in it. docs/profiles.md, "Where profiles are read from".
public enum ProfileDirectory {
    /// An open, checked directory: its descriptor (profiles are opened
    /// relative to it, so that what was checked is what is read) and the
    /// names in it.
    struct Opened {
        var descriptor: Int32
        var names: [String]
    }

    /// Entries read from one directory before it is refused as too large.
    static let entryLimit = 100_000

    /// Opens `directory` and checks it (see `checkTrusted`) and every
    /// directory above it; nil when it does not exist.
    /// - Throws: `ProfileError` naming the directory and the fix.
    static func open(_ directory: String) throws(ProfileError) -> Opened? {
        let descriptor = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            throw ProfileError(
                file: directory, keyPath: "",
                message: code == ENOTDIR
                    ? "is not a directory (a profile directory holds NAME.json files)"
                    : "cannot be read as a profile directory (\(String(cString: strerror(code))))")
        }
        do throws(ProfileError) {
            var info = stat()
            guard fstat(descriptor, &info) == 0 else {
                throw ProfileError(
                    file: directory, keyPath: "", message: "cannot be read (\(String(cString: strerror(errno))))")
            }
            try checkTrusted(
                directory, owner: UInt32(info.st_uid), mode: UInt32(info.st_mode), what: "profile directory")
            try checkAncestors(of: directory)
            return Opened(descriptor: descriptor, names: try names(in: descriptor, directory))
        } catch {
            close(descriptor)
            throw error
        }
    }

    /// `0777`.
    static func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// The user running the tool (effective).
    static var user: UInt32 { UInt32(geteuid()) }

    /// The user's name (for a `chown` to suggest), else the number.
    static var userName: String {
        guard let entry = getpwuid(user), let name = entry.pointee.pw_name else { return "\(user)" }
        return Visible.text(String(cString: name), limit: 32)
    }

    /// Whose `owner` is (for messages): `uid 65534 (nobody)`.
    static func ownerText(_ owner: UInt32) -> String {
        guard let entry = getpwuid(owner), let name = entry.pointee.pw_name else { return "uid \(owner)" }
        return "uid \(owner) (\(Visible.text(String(cString: name), limit: 32)))"
    }

    /// `path` (a directory or a profile, `what`) is owned by the user or
    /// root and not writable by group or others.
    /// - Throws: `ProfileError` naming it, why, and the command that fixes it.
    static func checkTrusted(_ path: String, owner: UInt32, mode: UInt32, what: String) throws(ProfileError) {
        let shown = Visible.text(path, limit: 300)
        guard owner == user || owner == 0 else {
            let whose = user == 0 ? "root's" : "yours (\(ownerText(user))) or root's"
            throw ProfileError(
                file: path, keyPath: "",
                message:
                    "a \(what) owned by \(ownerText(owner)) is not used: only \(whose) are, as anyone else could change its profiles (fix: chown \(userName) \(shown), or remove it)"
            )
        }
        guard mode & 0o022 == 0 else {
            throw ProfileError(
                file: path, keyPath: "",
                message:
                    "a \(what) writable by \(mode & 0o002 != 0 ? "anyone" : "its group") (mode \(octal(mode))) is not used: others could change its profiles (fix: chmod go-w \(shown))"
            )
        }
    }

    /// Every directory above `directory` (its real path) is owned by the
    /// user or root and not writable by group or others, or sticky (as
    /// /tmp: nobody else may rename what is in it): else another user could
    /// put a directory of their own in its place.
    static func checkAncestors(of directory: String) throws(ProfileError) {
        guard let resolved = realpath(directory, nil) else { return }
        defer { free(resolved) }
        var path = String(cString: resolved)
        while path != "/", !path.isEmpty {
            // Its parent ("/a/b" → "/a", "/a" → "/").
            path = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? ""
            if path.isEmpty { break }
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            let owner = UInt32(info.st_uid)
            let mode = UInt32(info.st_mode)
            let shown = Visible.text(path, limit: 300)
            guard owner == user || owner == 0 else {
                throw ProfileError(
                    file: directory, keyPath: "",
                    message:
                        "is not used as a profile directory: \(shown) above it is owned by \(ownerText(owner)), who could put other profiles in its place (fix: keep profiles in a directory of your own)"
                )
            }
            guard mode & 0o022 == 0 || mode & UInt32(S_ISVTX) != 0 else {
                throw ProfileError(
                    file: directory, keyPath: "",
                    message:
                        "is not used as a profile directory: \(shown) above it is writable by others (mode \(octal(mode))), who could put other profiles in its place (fix: chmod go-w \(shown))"
                )
            }
        }
    }

    /// The names in the directory open as `descriptor` (not `.` and `..`).
    static func names(in descriptor: Int32, _ directory: String) throws(ProfileError) -> [String] {
        let copy = dup(descriptor)
        guard copy >= 0, let stream = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            throw ProfileError(
                file: directory, keyPath: "", message: "cannot be listed (\(String(cString: strerror(errno))))")
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name == "." || name == ".." { continue }
            names.append(name)
            guard names.count <= entryLimit else {
                throw ProfileError(
                    file: directory, keyPath: "",
                    message: "holds more than \(entryLimit) entries; a profile directory holds NAME.json files")
            }
        }
        return names
    }
}
