import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Where beaconbench keeps its files (XDG base directories).
enum Paths {
    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    static var home: String { environment["HOME"] ?? passwdHome() }

    /// The user's home directory from the password database (what
    /// Foundation's `NSHomeDirectory()` answered when HOME is unset).
    static func passwdHome() -> String {
        guard let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir else { return "/" }
        return String(cString: directory)
    }

    /// The directory `path` is in, as NSString's
    /// `deletingLastPathComponent` gave it: `/a/b/` → `/a`, `/a` → `/`,
    /// `name` → ``.
    static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.last == "/" { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        var parent = trimmed[..<slash]
        while parent.count > 1, parent.last == "/" { parent.removeLast() }
        return String(parent)
    }

    static func xdg(_ variable: String, _ fallback: String) -> String {
        if let value = environment[variable], value.hasPrefix("/") { return value + "/beaconbench" }
        return home + "/" + fallback + "/beaconbench"
    }

    /// `$XDG_DATA_HOME/beaconbench/inventory.sqlite`.
    static func defaultInventory() -> String { xdg("XDG_DATA_HOME", ".local/share") + "/inventory.sqlite" }

    /// `$XDG_DATA_HOME/beaconbench/simulated.sqlite`: where `--sim` runs
    /// record what they do unless `--inventory` says otherwise, so that
    /// simulated beacons never mix with real ones.
    static func simulatedInventory() -> String {
        xdg("XDG_DATA_HOME", ".local/share") + "/simulated.sqlite"
    }

    /// `$XDG_STATE_HOME/beaconbench/history`.
    static func history() -> String { xdg("XDG_STATE_HOME", ".local/state") + "/history" }

    /// `$XDG_CONFIG_HOME/beaconbench/profiles`.
    static func configProfiles() -> String { xdg("XDG_CONFIG_HOME", ".config") + "/profiles" }

    /// Creates the directories above `path` when missing, each mode 0700
    /// whatever the umask (`mkdir`, then `chmod` of the ones made here;
    /// directories that were there are left as they are).
    static func makeParent(of path: String) throws {
        let parent = URL(fileURLWithPath: path).deletingLastPathComponent().path
        var missing: [String] = []
        var directory = parent
        var info = stat()
        // Upwards to the first that exists (following links, as the user's
        // own directories may be links)…
        while !directory.isEmpty, directory != "/", stat(directory, &info) != 0 {
            guard errno == ENOENT else { throw PathError(directory, errno) }
            missing.append(directory)
            directory = URL(fileURLWithPath: directory).deletingLastPathComponent().path
        }
        if missing.isEmpty, stat(parent, &info) == 0, info.st_mode & S_IFMT != S_IFDIR {
            throw PathError(parent, ENOTDIR)
        }
        // …then down, making each; the mode set through a descriptor of the
        // directory just made, never through a link put in its place.
        for directory in missing.reversed() {
            guard mkdir(directory, 0o700) == 0 else {
                if errno == EEXIST, stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { continue }
                throw PathError(directory, errno)
            }
            let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard descriptor >= 0 else { throw PathError(directory, errno) }
            defer { close(descriptor) }
            guard fchmod(descriptor, 0o700) == 0 else { throw PathError(directory, errno) }
        }
    }

    /// A directory that could not be made or used.
    struct PathError: Error, CustomStringConvertible {
        var path: String
        var code: Int32
        init(_ path: String, _ code: Int32) {
            self.path = path
            self.code = code
        }
        var description: String { "\(path): \(String(cString: strerror(code)))" }
    }

    /// The profiles shipped with beaconbench: `share/beaconbench/profiles`
    /// beside an installed binary, or the source tree's `profiles` above a
    /// built one.
    static func shippedProfiles() -> String? { shipped("profiles") }

    /// The batches shipped with beaconbench, found the same way.
    static func shippedBatches() -> String? { shipped("batches") }

    /// `share/beaconbench/NAME` above the running binary (`make install`
    /// puts the binary in PREFIX/bin), else `NAME` in the source tree the
    /// binary was built in (`.build/…/beaconbench`).
    static func shipped(_ name: String) -> String? {
        guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
            return nil
        }
        var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
        for _ in 0..<5 {
            let installed = directory.appendingPathComponent("share/beaconbench/" + name).path
            if FileManager.default.fileExists(atPath: installed) { return installed }
            let source = directory.appendingPathComponent(name).path
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path),
                FileManager.default.fileExists(atPath: source)
            {
                return source
            }
            directory.deleteLastPathComponent()
        }
        return nil
    }

    /// The batch `run NAME` means: the file when it exists, else a shipped
    /// batch of that name (`provision-new` or `provision-new.batch`).
    static func batch(_ name: String) -> String {
        guard !FileManager.default.fileExists(atPath: name), !name.contains("/"), let shipped = shippedBatches()
        else { return name }
        for candidate in [name, name + ".batch"] where FileManager.default.fileExists(atPath: shipped + "/" + candidate)
        {
            return shipped + "/" + candidate
        }
        return name
    }

    /// The profile directories, lowest priority first: shipped, then
    /// `./profiles` when present (else the XDG config one), then `--profiles`.
    /// Each is used only if it is safe (`ProfileLoader.loadAll`: owned by
    /// the user or root, not writable by group or others): an unsafe one,
    /// `./profiles` included, is an error naming it and the fix, not skipped.
    static func profileDirectories(_ given: [String]) -> [String] {
        var directories: [String] = []
        if let shipped = shippedProfiles() { directories.append(shipped) }
        // `./profiles` counts when it is a directory (or a link to one);
        // `ProfileDirectory` then checks whose it is and who may write it.
        var info = stat()
        if stat("profiles", &info) == 0, info.st_mode & S_IFMT == S_IFDIR {
            directories.append(FileManager.default.currentDirectoryPath + "/profiles")
        } else {
            directories.append(configProfiles())
        }
        directories += given
        var unique: [String] = []
        for directory in directories {
            let resolved = URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath().path
            unique.removeAll { $0 == resolved }
            unique.append(resolved)
        }
        return unique
    }

    /// `name` on PATH.
    static func inPath(_ name: String) -> String? {
        for directory in (environment["PATH"] ?? "").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    /// Whether others may write `path` (a file or directory given to us).
    static func isWorldWritable(_ path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return false }
        return info.st_mode & S_IWOTH != 0 && info.st_mode & S_ISVTX == 0
    }
}
