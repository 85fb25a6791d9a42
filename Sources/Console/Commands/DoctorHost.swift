import FoundationEssentials
import InventorySync
import Ledger
import SafeText
import Workbench

#if canImport(Glibc)
    import Glibc
#endif

/// `doctor`'s checks of this machine beyond Bluetooth: the inventory's
/// directory, the libraries loaded at first use, ssh-keygen, the station
/// service. Each reads from `HostChecks`' paths, which the tests point
/// elsewhere to fail each check on purpose.
struct HostChecks {
    /// The search path for ssh-keygen and systemctl.
    var path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin"
    /// Where the package puts the station's unit.
    var unitDirectories = ["/usr/lib/systemd/system", "/lib/systemd/system", "/etc/systemd/system"]
    /// Present when systemd is the running init.
    var systemdRunning = "/run/systemd/system"

    static let unit = "beaconbench-station@.service"

    func find(_ program: String) -> String? {
        path.split(separator: ":").map { "\($0)/\(program)" }.first { access($0, X_OK) == 0 }
    }

    /// The inventory's directory: whose it is and who may write in it. A
    /// directory others may write in (without the sticky bit) lets them
    /// replace the inventory: failed. Group-writable, or another user's
    /// (not root's): a warning.
    static func inventoryDirectory(_ path: String) -> DoctorCheck? {
        let directory = Paths.parent(of: path)
        var info = stat()
        guard !directory.isEmpty, stat(directory, &info) == 0 else { return nil }
        let mode = info.st_mode & 0o7777
        let owner =
            getpwuid(info.st_uid).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(info.st_uid)"
        let group =
            getgrgid(info.st_gid).flatMap { $0.pointee.gr_name.map { String(cString: $0) } } ?? "gid \(info.st_gid)"
        let octal = "0" + String(mode, radix: 8)
        let shown = "\(Visible.text(directory, limit: 200)): owner \(owner), group \(group), mode \(octal)"
        if mode & 0o002 != 0, mode & 0o1000 == 0 {
            return DoctorCheck(
                name: "inventory directory", status: .failed,
                detail: "\(shown): anyone may replace the inventory in it",
                fix: "chmod 0700 \(directory) (or keep the inventory in a directory of your own)")
        }
        if mode & 0o020 != 0 {
            return DoctorCheck(
                name: "inventory directory", status: .warning,
                detail: "\(shown): the group \(group) may replace the inventory in it",
                fix: "chmod g-w \(directory), unless the group is meant to")
        }
        if info.st_uid != getuid(), info.st_uid != 0 {
            return DoctorCheck(
                name: "inventory directory", status: .warning,
                detail: "\(shown): it is \(owner)'s, not this user's",
                fix: "run as \(owner) (sudo -u \(owner) beaconbench …), or give --inventory a file of your own")
        }
        return DoctorCheck(name: "inventory directory", status: .ok, detail: shown)
    }

    /// libcrypto (every inventory write: the ledger) and libpq (the office
    /// only), loaded here to say which is missing.
    static func libraries() -> [DoctorCheck] {
        let crypto = LibCrypto.version()
        let libpq = Libpq.version()
        return [
            crypto.version.map {
                DoctorCheck(name: "libcrypto", status: .ok, detail: "libcrypto.so.3: \($0)")
            }
                ?? DoctorCheck(
                    name: "libcrypto", status: .failed,
                    detail:
                        "libcrypto.so.3 cannot be loaded, and every inventory write needs it (the ledger): \(crypto.problem ?? "")",
                    fix: "sudo apt-get install libssl3"),
            libpq.version.map {
                DoctorCheck(name: "libpq", status: .ok, detail: "libpq.so.5: libpq \($0)")
            }
                ?? DoctorCheck(
                    name: "libpq", status: .warning,
                    detail:
                        "libpq.so.5 cannot be loaded: sync, --server and postgresql:// inventories need it (\(libpq.problem ?? ""))",
                    fix: "sudo apt-get install libpq5"),
        ]
    }

    func sshKeygen() -> DoctorCheck {
        guard let found = find("ssh-keygen") else {
            return DoctorCheck(
                name: "ssh-keygen", status: .warning,
                detail: "no ssh-keygen in PATH: ledger checkpoints cannot be signed or verified",
                fix: "sudo apt-get install openssh-client")
        }
        return DoctorCheck(name: "ssh-keygen", status: .ok, detail: found)
    }

    /// The station's unit, when the package installed it: each instance's
    /// state from systemctl; a failed one fails, with its journal.
    func station() -> DoctorCheck? {
        guard let directory = unitDirectories.first(where: { access($0 + "/" + Self.unit, F_OK) == 0 }) else {
            return nil
        }
        let installed = "\(directory)/\(Self.unit) installed"
        guard access(systemdRunning, F_OK) == 0, let systemctl = find("systemctl") else {
            return DoctorCheck(
                name: "station service", status: .warning,
                detail: "\(installed), but systemd is not running here (a container or chroot): it cannot run",
                fix: "run beaconbench station by hand here, or on a machine booted with systemd")
        }
        guard
            let (status, text) = Doctor.output(
                of: systemctl, ["list-units", "--all", "--plain", "--no-legend", "--no-pager", "beaconbench-station@*"]),
            status == 0
        else {
            return DoctorCheck(
                name: "station service", status: .warning, detail: "\(installed); systemctl list-units failed",
                fix: "systemctl status 'beaconbench-station@*'")
        }
        // UNIT LOAD ACTIVE SUB DESCRIPTION…
        var units: [(unit: String, active: String, sub: String)] = []
        for line in text.split(whereSeparator: \.isNewline) {
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            guard words.count >= 4, words[0].hasPrefix("beaconbench-station@") else { continue }
            units.append((Visible.text(words[0], limit: 80), String(words[2]), String(words[3])))
        }
        guard !units.isEmpty else {
            return DoctorCheck(
                name: "station service", status: .ok, detail: "\(installed); no instance enabled or running",
                fix: nil)
        }
        let shown = units.map { "\($0.unit) \($0.active) (\($0.sub))" }.joined(separator: ", ")
        if let failed = units.first(where: { $0.active == "failed" }) {
            return DoctorCheck(
                name: "station service", status: .failed, detail: shown,
                fix: "journalctl -u \(failed.unit) -e says why; then sudo systemctl restart \(failed.unit)")
        }
        return DoctorCheck(name: "station service", status: .ok, detail: shown)
    }
}
