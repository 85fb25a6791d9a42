import BlueZClient
import DBusBinding
import FoundationEssentials
import LocalBus
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// One finding of `Doctor.check`: what was checked, how it stands, what
/// was found, and what to do about it.
public struct DoctorCheck: Sendable, Equatable, Codable {
    public enum Status: String, Sendable, Codable, CaseIterable {
        case ok, warning, failed
    }

    /// `bus`, `bluetoothd`, `bluetoothd version`, `D-Bus policy`, `adapter`.
    public var name: String
    public var status: Status
    /// What was found, in one line.
    public var detail: String
    /// What to do, when the status is not ok (a command where one helps).
    public var fix: String?

    public init(name: String, status: Status, detail: String, fix: String? = nil) {
        self.name = name
        self.status = status
        self.detail = detail
        self.fix = fix
    }
}

/// What a newcomer on real hardware needs checked before anything else:
/// the bus, bluetoothd on it and its version, the D-Bus policy letting this
/// user call it, and the adapter. Each check says how to fix what fails.
/// (The console adds its own: the inventory and the profiles.)
public enum Doctor {
    /// Where bluetoothd is installed by the distributions (Debian and
    /// Ubuntu: libexec; Arch, Fedora, older Debian: lib), then `PATH`.
    public static let bluetoothdCandidates = ["/usr/libexec/bluetooth/bluetoothd", "/usr/lib/bluetooth/bluetoothd"]

    /// Runs the checks, in order; a check that cannot run because an
    /// earlier one failed is left out (its cause is reported).
    public static func check(
        bus address: BusAddress, adapter name: String?, timeout: Duration = .seconds(5)
    ) async -> [DoctorCheck] {
        var checks: [DoctorCheck] = []
        // Runs a program and waits for it: on a thread of its own, never on
        // Swift's cooperative pool (as many threads as cores).
        let version = await withCheckedContinuation { continuation in
            detachThread { continuation.resume(returning: bluetoothdVersion()) }
        }

        // The bus.
        let bus: BusConnection
        do {
            bus = try await BusConnection.connect(address)
            checks.append(DoctorCheck(name: "bus", status: .ok, detail: "\(describe(address)) reachable"))
        } catch {
            checks.append(
                DoctorCheck(
                    name: "bus", status: .failed, detail: "\(describe(address)): \(error)",
                    fix: address == .system
                        ? "start the system bus (sudo systemctl start dbus), or set DBUS_SYSTEM_BUS_ADDRESS"
                        : "check the bus address (--bus), and that its dbus-daemon runs"))
            checks.append(versionCheck(version))
            return checks
        }
        checks += await checkBluetoothd(on: bus, adapter: name, version: version, timeout: timeout)
        await bus.close()
        return checks
    }

    /// The checks after the bus: bluetoothd, its version, the policy, the adapter.
    private static func checkBluetoothd(
        on bus: BusConnection, adapter name: String?, version: (version: String, path: String)?, timeout: Duration
    ) async -> [DoctorCheck] {
        var checks: [DoctorCheck] = []
        let versionFinding = versionCheck(version)

        // bluetoothd on it.
        let owner: String?
        do {
            owner = try await bus.nameOwner(of: BluetoothClient.bluez)
        } catch {
            checks.append(
                DoctorCheck(
                    name: "bluetoothd", status: .failed, detail: "cannot ask the bus who owns org.bluez: \(error)",
                    fix: "check the bus's policy and that its dbus-daemon is healthy"))
            checks.append(versionFinding)
            return checks
        }
        guard let owner else {
            checks.append(
                DoctorCheck(
                    name: "bluetoothd", status: .failed,
                    detail: "nothing owns org.bluez on the bus: bluetoothd is not running"
                        + (version.map { " (bluetoothd \($0.version) is installed)" } ?? " (nor installed)"),
                    fix: version == nil
                        ? "install BlueZ (sudo apt-get install bluez), then sudo systemctl enable --now bluetooth"
                        : "sudo systemctl enable --now bluetooth (journalctl -u bluetooth says why it stopped)"))
            checks.append(versionFinding)
            return checks
        }
        checks.append(
            DoctorCheck(
                name: "bluetoothd", status: .ok,
                detail: "org.bluez is owned by \(owner)" + (version.map { ", bluetoothd \($0.version)" } ?? "")))
        checks.append(versionFinding)

        // The policy: may this user call bluetoothd?
        let objects: [ObjectPath: [String: [String: BusValue]]]
        do {
            objects = try await bus.managedObjects(of: BluetoothClient.bluez, timeout: timeout)
            checks.append(
                DoctorCheck(
                    name: "D-Bus policy", status: .ok,
                    detail: "bluetoothd answers \(userName()) (uid \(getuid()))"))
        } catch let error as BusError where error.name == .accessDenied {
            checks.append(policyDenied(error))
            return checks
        } catch {
            checks.append(
                DoctorCheck(
                    name: "D-Bus policy", status: .failed,
                    detail: "bluetoothd did not answer GetManagedObjects: \(error)",
                    fix: "sudo systemctl restart bluetooth (journalctl -u bluetooth says more)"))
            return checks
        }

        // The adapter.
        checks.append(adapterCheck(objects, name: name))
        return checks
    }

    static func versionCheck(_ version: (version: String, path: String)?) -> DoctorCheck {
        version.map {
            DoctorCheck(name: "bluetoothd version", status: .ok, detail: "\($0.version) (\($0.path))")
        }
            ?? DoctorCheck(
                name: "bluetoothd version", status: .warning,
                detail: "unknown: no bluetoothd binary in \(bluetoothdCandidates.joined(separator: ", ")) or PATH",
                fix: "install BlueZ (sudo apt-get install bluez, or your distribution's bluez package)")
    }

    /// AccessDenied from org.bluez: the D-Bus policy (bluetooth.conf) lets
    /// root and the `bluetooth` group in, not this user.
    static func policyDenied(_ error: BusError) -> DoctorCheck {
        let member = isInGroup("bluetooth")
        let why: String
        switch member {
        case true?:
            why = "\(userName()) is in the bluetooth group, but this session is not yet (log in again)"
        case false?:
            why = "\(userName()) is not in the bluetooth group"
        case nil:
            why = "there is no bluetooth group on this machine"
        }
        return DoctorCheck(
            name: "D-Bus policy", status: .failed,
            detail: "the bus refused this user's calls to bluetoothd (\(error.name)): \(why)",
            fix: member == true
                ? "log out and in again (or run newgrp bluetooth)"
                : "sudo usermod -aG bluetooth $USER, then log out and in again")
    }

    /// The adapter asked for (or any), present and powered.
    static func adapterCheck(_ objects: [ObjectPath: [String: [String: BusValue]]], name: String?) -> DoctorCheck {
        let adapters = objects.compactMap { path, interfaces -> (name: String, properties: [String: BusValue])? in
            interfaces["org.bluez.Adapter1"].map { (String(path.components.last ?? ""), $0) }
        }.sorted { $0.name < $1.name }
        guard !adapters.isEmpty else {
            return DoctorCheck(
                name: "adapter", status: .failed, detail: "bluetoothd has no adapter",
                fix:
                    "plug in a Bluetooth adapter; rfkill list shows whether one is blocked (rfkill unblock bluetooth), and sudo systemctl restart bluetooth makes bluetoothd look again"
            )
        }
        let chosen: (name: String, properties: [String: BusValue])
        if let name {
            guard let found = adapters.first(where: { $0.name == name }) else {
                return DoctorCheck(
                    name: "adapter", status: .failed,
                    detail: "no adapter \(name) (bluetoothd has \(adapters.map(\.name).joined(separator: ", ")))",
                    fix: "choose one of them with --adapter, or none to use the first powered one")
            }
            chosen = found
        } else {
            chosen =
                adapters.first { $0.properties["Powered"]?.bool == true } ?? adapters[0]
        }
        let address = chosen.properties["Address"]?.string ?? "?"
        let powerState = chosen.properties["PowerState"]?.string
        guard chosen.properties["Powered"]?.bool == true else {
            let blocked = powerState == "off-blocked"
            return DoctorCheck(
                name: "adapter", status: .failed,
                detail: "\(chosen.name) (\(address)) is not powered"
                    + (powerState.map { " (PowerState \($0))" } ?? ""),
                fix: blocked
                    ? "rfkill unblock bluetooth, then bluetoothctl power on"
                    : "bluetoothctl power on (or rfkill unblock bluetooth if rfkill list shows it blocked)")
        }
        let roles = chosen.properties["Roles"]?.stringArray ?? []
        if !roles.isEmpty, !roles.contains("central") {
            return DoctorCheck(
                name: "adapter", status: .warning,
                detail:
                    "\(chosen.name) (\(address)) is powered but has no central role (roles: \(roles.joined(separator: ", ")))",
                fix: "use an adapter that can connect to LE devices (--adapter)")
        }
        return DoctorCheck(name: "adapter", status: .ok, detail: "\(chosen.name) (\(address)) is powered")
    }

    /// bluetoothd's `--version` (`5.66`) and where it is, or nil.
    public static func bluetoothdVersion(
        candidates: [String] = bluetoothdCandidates,
        path: String = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin"
    ) -> (version: String, path: String)? {
        let inPath = path.split(separator: ":").map { "\($0)/bluetoothd" }
        for binary in candidates + inPath where FileManager.default.isExecutableFile(atPath: binary) {
            if let version = runVersion(binary) { return (version, binary) }
        }
        return nil
    }

    /// Runs `binary --version` (2 s at most) and keeps its first line.
    static func runVersion(_ binary: String) -> String? {
        // posix_spawn: standard output into a pipe, the rest /dev/null.
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let descriptor = ends[0]
        defer { close(descriptor) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = [strdup(binary), strdup("--version"), nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, binary, &actions, nil, argv, environ)
        close(ends[1])
        guard spawned == 0 else { return nil }
        var status: Int32 = 0
        let deadline = ContinuousClock.now + .seconds(2)
        var ended = waitpid(pid, &status, WNOHANG) == pid
        while !ended, ContinuousClock.now < deadline {
            usleep(10_000)
            ended = waitpid(pid, &status, WNOHANG) == pid
        }
        if !ended {
            kill(pid, SIGTERM)
            waitpid(pid, &status, 0)
            return nil
        }
        // What it wrote is in the pipe by now. Read what is there without
        // waiting for end of file: another child of this process may hold
        // the pipe's write end (an inherited descriptor), and then the end
        // of file would come only when that child ends.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        var buffer = [UInt8](repeating: 0, count: 200)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        let text = String(decoding: buffer.prefix(max(0, count)), as: UTF8.self)
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init)?
            .trimmingBlanks()
        guard status & 0x7F == 0, (status >> 8) & 0xFF == 0, let line, !line.isEmpty,
            line.allSatisfy({ $0.isNumber || $0 == "." })
        else { return nil }
        return line
    }

    static func describe(_ address: BusAddress) -> String {
        switch address {
        case .system: "the system bus (\((try? address.resolved()) ?? "?"))"
        case .session: "the session bus"
        case .address(let text): "the bus \(text)"
        }
    }

    static func userName() -> String {
        if let entry = getpwuid(getuid()), let name = entry.pointee.pw_name { return String(cString: name) }
        return "uid \(getuid())"
    }

    /// Whether this user is a member of `group` (in the group database,
    /// whatever this session's groups are); nil when there is no such group.
    static func isInGroup(_ group: String) -> Bool? {
        guard let entry = getgrnam(group) else { return nil }
        let gid = entry.pointee.gr_gid
        if getgid() == gid || getegid() == gid { return true }
        if let user = getpwuid(getuid()), user.pointee.pw_gid == gid { return true }
        let name = userName()
        var member = entry.pointee.gr_mem
        while let pointer = member?.pointee {
            if String(cString: pointer) == name { return true }
            member = member?.successor()
        }
        return false
    }
}
