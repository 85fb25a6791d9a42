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

    /// `bus`, `bluetoothd`, `bluetoothd version`, `D-Bus policy`, `adapter`,
    /// `rfkill`, `controller` (the console adds `inventory`, `inventory
    /// directory`, `libraries`, `ssh-keygen`, `station service`, `profiles`).
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

    /// The oldest BlueZ the tool is held to (README.md, "Requirements"):
    /// older ones lack what it relies on (the `PowerState` property, the
    /// discovery filter's `DuplicateData`, reliable GATT cache handling).
    public static let minimumBlueZ = (major: 5, minor: 55)

    /// Where the host's facts are read: the machine's own by default, a
    /// made-up tree in the tests (each check fails on purpose there).
    public struct Host: Sendable {
        /// `/sys`: `class/rfkill/*/{type,soft,hard}`, `class/bluetooth/hciN/device`.
        public var sysfs: String = "/sys"
        /// `/proc/device-tree/model` ("Raspberry Pi 4 Model B Rev 1.4").
        public var deviceTreeModel: String = "/proc/device-tree/model"
        /// The rfkill device `rfkill unblock` writes.
        public var rfkillDevice: String = "/dev/rfkill"
        /// Where bluetoothd may be installed (then `PATH`).
        public var bluetoothdCandidates: [String] = Doctor.bluetoothdCandidates
        /// The search path for bluetoothd.
        public var path: String = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin"
        /// The system bus's policy directories, for naming the files that
        /// speak of org.bluez when a call is refused.
        public var policyDirectories: [String] = ["/usr/share/dbus-1/system.d", "/etc/dbus-1/system.d"]

        public init() {}
    }

    /// Runs the checks, in order; a check that cannot run because an
    /// earlier one failed is left out (its cause is reported).
    public static func check(
        bus address: BusAddress, adapter name: String?, timeout: Duration = .seconds(5), host: Host = Host()
    ) async -> [DoctorCheck] {
        let (checks, adapter) = await checkBus(address, adapter: name, timeout: timeout, host: host)
        return checks + [rfkillCheck(host: host), controllerCheck(adapter: adapter ?? name, host: host)]
    }

    /// The checks on the bus; the adapter bluetoothd would use, when known.
    private static func checkBus(
        _ address: BusAddress, adapter name: String?, timeout: Duration, host: Host
    ) async -> ([DoctorCheck], String?) {
        var checks: [DoctorCheck] = []
        // Runs a program and waits for it: on a thread of its own, never on
        // Swift's cooperative pool (as many threads as cores).
        let version = await withCheckedContinuation { continuation in
            detachThread {
                continuation.resume(
                    returning: bluetoothdVersion(candidates: host.bluetoothdCandidates, path: host.path))
            }
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
            return (checks, nil)
        }
        let (found, adapter) = await checkBluetoothd(
            on: bus, adapter: name, version: version, timeout: timeout, host: host)
        await bus.close()
        return (checks + found, adapter)
    }

    /// The checks after the bus: bluetoothd, its version, the policy, the adapter.
    private static func checkBluetoothd(
        on bus: BusConnection, adapter name: String?, version: (version: String, path: String)?, timeout: Duration,
        host: Host
    ) async -> ([DoctorCheck], String?) {
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
            return (checks, nil)
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
            return (checks, nil)
        }
        checks.append(
            DoctorCheck(
                name: "bluetoothd", status: .ok,
                detail: "org.bluez is owned by \(owner)" + (version.map { ", bluetoothd \($0.version)" } ?? "")))
        checks.append(versionFinding)

        // The policy: may this user make the calls the tool makes? A read
        // first (it also finds the adapter), then one harmless call of each
        // other kind.
        let objects: [ObjectPath: [String: [String: BusValue]]]
        do {
            objects = try await bus.managedObjects(of: BluetoothClient.bluez, timeout: timeout)
        } catch let error as BusError where error.name == .accessDenied {
            checks.append(policyDenied(["ObjectManager.GetManagedObjects"], error, host: host))
            return (checks, nil)
        } catch {
            checks.append(
                DoctorCheck(
                    name: "D-Bus policy", status: .failed,
                    detail: "bluetoothd did not answer GetManagedObjects: \(error)",
                    fix: "sudo systemctl restart bluetooth (journalctl -u bluetooth says more)"))
            return (checks, nil)
        }
        let adapter = chooseAdapter(objects, name: name)
        checks.append(await policyCheck(bus, adapter: adapter?.name ?? name ?? "hci0", timeout: timeout, host: host))

        // The adapter.
        checks.append(adapterCheck(objects, name: name, host: host))
        return (checks, adapter?.name)
    }

    /// One harmless call of each kind the tool makes besides reads, each
    /// on an object or property that does not exist: bluetoothd answers
    /// it with an error of its own (UnknownObject, InvalidArgs,
    /// DoesNotExist) only after the bus's policy let it through, while a
    /// policy that refuses it answers AccessDenied from the bus itself.
    /// Nothing is changed either way.
    public static func probes(adapter: String) -> [(kind: String, call: MethodCall)] {
        let adapterPath = (try? ObjectPath("/org/bluez/" + adapter)) ?? "/org/bluez/hci0"
        // 00:00:5E:00:53:00 is the address block set aside for
        // documentation (RFC 7042): no beacon has it.
        let device = (try? adapterPath.appending("dev_00_00_5E_00_53_00")) ?? "/org/bluez/hci0/dev_00_00_5E_00_53_00"
        let characteristic = (try? device.appending("service0000").appending("char0000")) ?? device
        return [
            (
                "Properties.Set (Adapter1 Powered, Discoverable…)",
                MethodCall(
                    destination: BluetoothClient.bluez, path: adapterPath, interface: "org.freedesktop.DBus.Properties",
                    member: "Set",
                    body: [.string("org.bluez.Adapter1"), .string("BeaconbenchDoctorProbe"), .variant(.boolean(false))])
            ),
            (
                "Adapter1.RemoveDevice (discovery, filters, forgetting)",
                MethodCall(
                    destination: BluetoothClient.bluez, path: adapterPath, interface: "org.bluez.Adapter1",
                    member: "RemoveDevice", body: [.objectPath(device)])
            ),
            (
                "Device1.Connect",
                MethodCall(
                    destination: BluetoothClient.bluez, path: device, interface: "org.bluez.Device1", member: "Connect")
            ),
            (
                "GattCharacteristic1.WriteValue (and ReadValue, StartNotify)",
                MethodCall(
                    destination: BluetoothClient.bluez, path: characteristic,
                    interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
                    body: [.bytes([0]), .dictionary(key: .string, value: .variant, [])])
            ),
        ]
    }

    static func policyCheck(_ bus: BusConnection, adapter: String, timeout: Duration, host: Host) async -> DoctorCheck {
        var refused: [String] = []
        var firstDenial: BusError?
        var unanswered: [String] = []
        for probe in probes(adapter: adapter) {
            do {
                _ = try await bus.call(probe.call, timeout: timeout)
            } catch let error as BusError where error.name == .accessDenied {
                refused.append(probe.kind)
                firstDenial = firstDenial ?? error
            } catch let error as BusError where error.name == .noReply || error.name == .timeout {
                unanswered.append(probe.kind)
            } catch {
                // bluetoothd's own error: the policy let the call through.
            }
        }
        if let firstDenial { return policyDenied(refused, firstDenial, host: host) }
        if !unanswered.isEmpty {
            return DoctorCheck(
                name: "D-Bus policy", status: .failed,
                detail: "bluetoothd did not answer \(unanswered.joined(separator: ", ")) in time",
                fix: "sudo systemctl restart bluetooth (journalctl -u bluetooth says more)")
        }
        return DoctorCheck(
            name: "D-Bus policy", status: .ok,
            detail:
                "\(userName()) (uid \(getuid())) may read, set properties, call Adapter1, Device1 and GattCharacteristic1 (each tried harmlessly)"
        )
    }
    static func versionCheck(_ version: (version: String, path: String)?) -> DoctorCheck {
        if let version {
            let parts = version.version.split(separator: ".").map { Int($0) ?? 0 }
            let (major, minor) = (parts.first ?? 0, parts.count > 1 ? parts[1] : 0)
            let minimum = "\(minimumBlueZ.major).\(minimumBlueZ.minor)"
            guard (major, minor) >= minimumBlueZ else {
                return DoctorCheck(
                    name: "bluetoothd version", status: .failed,
                    detail:
                        "\(version.version) (\(version.path)) is older than BlueZ \(minimum), the oldest beaconbench supports",
                    fix: "upgrade BlueZ to \(minimum) or later (Debian 12 ships 5.66: sudo apt-get install bluez)")
            }
            return DoctorCheck(
                name: "bluetoothd version", status: .ok,
                detail: "\(version.version) (\(version.path)), \(minimum) or later")
        }
        return DoctorCheck(
            name: "bluetoothd version", status: .warning,
            detail: "unknown: no bluetoothd binary in \(bluetoothdCandidates.joined(separator: ", ")) or PATH",
            fix: "install BlueZ (sudo apt-get install bluez, or your distribution's bluez package)")
    }

    /// AccessDenied from the bus for calls to org.bluez. Debian 12's
    /// bluetooth.conf as shipped lets every local user in (its default
    /// context allows send_destination="org.bluez"): a refusal comes from a
    /// site's own policy file, such as the opt-in one beaconbench ships,
    /// which lets in the bluetooth group.
    static func policyDenied(_ kinds: [String], _ error: BusError, host: Host = Host()) -> DoctorCheck {
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
        let files = policyFiles(host.policyDirectories)
        return DoctorCheck(
            name: "D-Bus policy", status: .failed,
            detail: "the bus refused this user's \(kinds.joined(separator: ", ")) to bluetoothd (\(error.name)): \(why)"
                + (files.isEmpty ? "" : "; policy files naming org.bluez: \(files.joined(separator: ", "))"),
            fix: member == true
                ? "log out and in again (or run newgrp bluetooth)"
                : "sudo usermod -aG bluetooth $USER, then log out and in again (if a site policy there lets that group in; docs/install.md, \"Who may call bluetoothd\")"
        )
    }

    /// The system bus's policy files that mention org.bluez.
    static func policyFiles(_ directories: [String]) -> [String] {
        directories.flatMap { directory -> [String] in
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            return names.sorted().filter { $0.hasSuffix(".conf") }.compactMap { name in
                let path = directory + "/" + name
                guard let bytes = try? BoundedFile.read(path, limit: 1 << 20) else { return nil }
                return String(decoding: bytes, as: UTF8.self).contains("org.bluez") ? path : nil
            }
        }
    }

    /// The adapter `name`, or the first powered one, or the first.
    static func chooseAdapter(
        _ objects: [ObjectPath: [String: [String: BusValue]]], name: String?
    ) -> (name: String, properties: [String: BusValue])? {
        let adapters = objects.compactMap { path, interfaces -> (name: String, properties: [String: BusValue])? in
            interfaces["org.bluez.Adapter1"].map { (String(path.components.last ?? ""), $0) }
        }.sorted { $0.name < $1.name }
        if let name { return adapters.first { $0.name == name } }
        return adapters.first { $0.properties["Powered"]?.bool == true } ?? adapters.first
    }

    /// The adapter asked for (or any), present and powered.
    static func adapterCheck(
        _ objects: [ObjectPath: [String: [String: BusValue]]], name: String?, host: Host = Host()
    ) -> DoctorCheck {
        let adapters = objects.compactMap { path, interfaces -> (name: String, properties: [String: BusValue])? in
            interfaces["org.bluez.Adapter1"].map { (String(path.components.last ?? ""), $0) }
        }.sorted { $0.name < $1.name }
        guard !adapters.isEmpty else {
            return DoctorCheck(
                name: "adapter", status: .failed, detail: "bluetoothd has no adapter",
                fix:
                    "plug in a Bluetooth adapter; rfkill list shows whether one is blocked (\(unblockCommand(host: host))), and sudo systemctl restart bluetooth makes bluetoothd look again"
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
                    ? "\(unblockCommand(host: host)), then bluetoothctl power on"
                    : "bluetoothctl power on (or \(unblockCommand(host: host)) if rfkill list shows it blocked)")
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
        guard let (status, text) = output(of: binary, ["--version"]), status == 0 else { return nil }
        let line = text.split(whereSeparator: \.isNewline).first.map(String.init)?.trimmingBlanks()
        guard let line, !line.isEmpty, line.allSatisfy({ $0.isNumber || $0 == "." }) else { return nil }
        return line
    }

    /// Runs `binary` with `arguments` (standard input and error
    /// /dev/null), `timeout` at most, and gives its exit status and the
    /// first `limit` bytes of its standard output; nil when it could not be
    /// started, was killed by a signal or overran (then it is killed).
    public static func output(
        of binary: String, _ arguments: [String], limit: Int = 16384, timeout: Duration = .seconds(2)
    ) -> (status: Int32, text: String)? {
        // posix_spawn: standard output into a pipe, the rest /dev/null.
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let descriptor = ends[0]
        defer { close(descriptor) }
        // Read while it runs, so that a full pipe cannot stall it.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, ends[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([binary] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, binary, &actions, nil, argv, environ)
        close(ends[1])
        guard spawned == 0 else { return nil }
        var collected: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        func drain() {
            while collected.count < limit {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                guard count > 0 else { return }
                collected += buffer.prefix(min(count, limit - collected.count))
            }
        }
        var status: Int32 = 0
        let deadline = ContinuousClock.now + timeout
        var ended = waitpid(pid, &status, WNOHANG) == pid
        while !ended, ContinuousClock.now < deadline {
            drain()
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
        drain()
        guard status & 0x7F == 0 else { return nil }
        return ((status >> 8) & 0xFF, String(decoding: collected, as: UTF8.self))
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

// MARK: The host: rfkill and the controller.
extension Doctor {
    /// `rfkill unblock bluetooth`, with sudo when this user cannot write
    /// the rfkill device (it is root's, with an ACL for the user of the
    /// active seat only: not over SSH, not in a service).
    public static func unblockCommand(host: Host = Host()) -> String {
        access(host.rfkillDevice, W_OK) == 0 ? "rfkill unblock bluetooth" : "sudo rfkill unblock bluetooth"
    }

    /// One line of a small sysfs file, or nil.
    static func sysfsLine(_ path: String) -> String? {
        guard let bytes = try? BoundedFile.read(path, limit: 4096) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        return Visible.text(
            (text.split(whereSeparator: { $0 == "\n" || $0 == "\0" }).first.map(String.init) ?? "").trimmingBlanks(),
            limit: 120)
    }

    /// The Bluetooth rfkill switches (`/sys/class/rfkill/*`): soft-blocked
    /// ones fail with the unblock command this user can run, hard-blocked
    /// ones with what rfkill cannot do.
    static func rfkillCheck(host: Host) -> DoctorCheck {
        let directory = host.sysfs + "/class/rfkill"
        let entries = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
        var soft: [String] = []
        var hard: [String] = []
        var count = 0
        for entry in entries {
            let base = directory + "/" + entry
            guard sysfsLine(base + "/type") == "bluetooth" else { continue }
            count += 1
            let name = sysfsLine(base + "/name") ?? entry
            if sysfsLine(base + "/hard") == "1" { hard.append(name) }
            if sysfsLine(base + "/soft") == "1" { soft.append(name) }
        }
        if !hard.isEmpty {
            return DoctorCheck(
                name: "rfkill", status: .failed,
                detail: "\(hard.joined(separator: ", ")) hard-blocked (a switch, a key or the firmware)",
                fix: "turn the radio on with the machine's switch or key, or in its firmware set-up; rfkill cannot")
        }
        if !soft.isEmpty {
            return DoctorCheck(
                name: "rfkill", status: .failed, detail: "\(soft.joined(separator: ", ")) soft-blocked",
                fix: unblockCommand(host: host))
        }
        return DoctorCheck(
            name: "rfkill", status: .ok,
            detail: count == 0
                ? "no Bluetooth rfkill switch on this machine"
                : "\(count) Bluetooth switch\(count == 1 ? "" : "es"), none blocked")
    }

    /// Which controller `adapter` is: a USB dongle (its vendor, product and
    /// name), a Raspberry Pi's onboard one (a warning: it shares its radio
    /// with Wi-Fi), another built-in one, or none of this machine's.
    static func controllerCheck(adapter: String?, host: Host) -> DoctorCheck {
        let directory = host.sysfs + "/class/bluetooth"
        let controllers = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasPrefix("hci") && !$0.contains(":") }.sorted()
        guard let name = adapter ?? controllers.first else {
            return DoctorCheck(
                name: "controller", status: .failed, detail: "no Bluetooth controller on this machine",
                fix: "plug in a USB Bluetooth dongle (BLE, Bluetooth 4.0 or later)")
        }
        guard controllers.contains(name),
            let device = realpath(directory + "/" + name + "/device", nil).map({ pointer in
                defer { free(pointer) }
                return String(cString: pointer)
            })
        else {
            return DoctorCheck(
                name: "controller", status: .ok,
                detail: "\(name) is not a controller of this machine (simulated, or bluetoothd sees another's)")
        }
        if device.contains("/usb") {
            // Up from the interface to the USB device, which has idVendor.
            var usb = device
            while usb.count > 1, sysfsLine(usb + "/idVendor") == nil { usb = Paths.parent(usb) }
            let vendor = sysfsLine(usb + "/idVendor") ?? "?"
            let product = sysfsLine(usb + "/idProduct") ?? "?"
            let label = [sysfsLine(usb + "/manufacturer"), sysfsLine(usb + "/product")].compactMap { $0 }
                .joined(separator: " ")
            return DoctorCheck(
                name: "controller", status: .ok,
                detail: "\(name) is a USB dongle \(vendor):\(product)" + (label.isEmpty ? "" : " (\(label))"))
        }
        let model = sysfsLine(host.deviceTreeModel)
        if let model, model.contains("Raspberry Pi") {
            return DoctorCheck(
                name: "controller", status: .warning,
                detail:
                    "\(name) is the onboard controller of a \(model): it shares its radio and antenna with Wi-Fi, and BLE connections fail or drop while Wi-Fi is busy",
                fix:
                    "use a USB dongle: add dtoverlay=disable-bt to /boot/firmware/config.txt, sudo systemctl disable hciuart, reboot, plug the dongle in (or, on Ethernet, turn Wi-Fi off with dtoverlay=disable-wifi)"
            )
        }
        return DoctorCheck(
            name: "controller", status: .ok,
            detail: "\(name) is built in (\(Visible.text(device, limit: 120)))")
    }
}

/// `/a/b` → `/a` (for walking up sysfs).
private enum Paths {
    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }
}
