import CReadline
import DBusBinding
import FleetReport
import FoundationEssentials
import Inventory
import InventorySync
import Ledger
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// `beaconbench --version`: the version, the commit it was built from, and
/// the versions of the libraries in the binary and loaded by it
/// (docs/install.md, "What the binary links and loads").
enum VersionReport {
    /// What `scripts/install` recorded beside an installed binary
    /// (`share/beaconbench/build-info`: `commit=…`, `swift=…` lines), or
    /// nothing for a binary run from the build directory.
    static func buildInfo(_ path: String? = Paths.shipped("build-info")) -> [String: String] {
        guard let path, let bytes = try? BoundedFile.read(path, limit: 4096) else { return [:] }
        let text = String(decoding: bytes, as: UTF8.self)
        var fields: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = String(line[..<equals])
            let value = Visible.text(line[line.index(after: equals)...], limit: 80)
            if ["commit", "swift"].contains(key), !value.isEmpty { fields[key] = value }
        }
        return fields
    }

    /// glibc's version (`confstr(_CS_GNU_LIBC_VERSION)`: "glibc 2.36").
    static func libcVersion() -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        let count = confstr(Int32(_CS_GNU_LIBC_VERSION), &buffer, buffer.count)
        guard count > 0, count <= buffer.count else { return "glibc (version unknown)" }
        return String(decoding: buffer.prefix(count - 1).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The lines: without `loadLibraries` the two libraries loaded at first
    /// use (libcrypto, libpq) are named, not loaded, so that `--version`
    /// stays as quick as a start (docs/benchmarks.md, "Start-up").
    static func lines(version: String, loadLibraries: Bool) -> [String] {
        let info = buildInfo()
        let commit = info["commit"] ?? "unknown (not installed: make install or make deb records it)"
        let swift = info["swift"].map { "Swift \($0)" } ?? "Swift"
        var lines = [
            "beaconbench \(version) (commit \(commit))",
            "linked in: readline \(String(cString: beaconbench_rl_version())), libdbus-1 \(DBusLibrary.version),"
                + " SQLite \(Database.libraryVersion), zlib \(ZlibLibrary.version), libtinfo (ncurses),"
                + " \(swift) runtime and FoundationEssentials",
            "loaded: \(libcVersion()) (libc.so.6, libm.so.6), libstdc++.so.6, libgcc_s.so.1",
        ]
        if loadLibraries {
            let crypto = LibCrypto.version()
            let libpq = Libpq.version()
            lines.append(
                "loaded at first use: libcrypto.so.3 "
                    + (crypto.version.map { "(\($0))" } ?? "MISSING: \(crypto.problem ?? "")")
                    + ", libpq.so.5 " + (libpq.version.map { "(libpq \($0))" } ?? "MISSING: \(libpq.problem ?? "")"))
        } else {
            lines.append(
                "loaded at first use: libcrypto.so.3 (the ledger), libpq.so.5 (the office);"
                    + " beaconbench --version -v loads them and prints their versions")
        }
        lines.append("runs: ssh-keygen (ledger checkpoints); licence GPL-3.0-or-later (LICENSE, copyright)")
        return lines
    }
}
