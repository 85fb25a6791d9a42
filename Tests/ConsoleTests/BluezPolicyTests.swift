import BeaconSimulator
import DBusBinding
import Foundation
import LocalBus
import TestSupport
import Testing

/// Debian 12's real bluetooth.conf (the bluez package's, read from
/// /etc/dbus-1/system.d) on a bus configured as Debian's system bus, and
/// the opt-in policy the package ships (debian/examples) after it:
/// `doctor`, run as an unprivileged user, says whether its calls get
/// through. What docs/install.md, "Who may call bluetoothd", states.
@Suite("bluetoothd's D-Bus policy", .timeLimit(.minutes(5)))
struct BluezPolicyTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    static let bluetoothConf = "/etc/dbus-1/system.d/bluetooth.conf"
    static let installed = FileManager.default.fileExists(atPath: bluetoothConf)

    /// Debian's system.conf rules (from /usr/share/dbus-1/system.conf), with
    /// the policy files of `included`, and root allowed to own any name
    /// (the simulator also owns its control name).
    static func systemLikeConfiguration(socket: String, included: String) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=\(socket)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow user="*"/>
            <deny own="*"/>
            <deny send_type="method_call"/>
            <allow send_type="signal"/>
            <allow send_requested_reply="true" send_type="method_return"/>
            <allow send_requested_reply="true" send_type="error"/>
            <allow receive_type="method_call"/>
            <allow receive_type="method_return"/>
            <allow receive_type="error"/>
            <allow receive_type="signal"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Peer"/>
          </policy>
          <policy user="root">
            <allow own="*"/>
          </policy>
          <includedir>\(included)</includedir>
        </busconfig>
        """
    }

    /// `beaconbench doctor` as uid/gid 65534 (nobody), with `groups` as
    /// its supplementary groups: the D-Bus policy check.
    static func policyAsNobody(
        address: String, groups: [String], home: String
    ) async throws -> (
        status: String, detail: String
    ) {
        let identity =
            ["--reuid=65534", "--regid=65534"]
            + (groups.isEmpty ? ["--clear-groups"] : ["--groups=" + groups.joined(separator: ",")])
        let output = try await runTool(
            "/usr/bin/setpriv",
            identity + [builtProduct("beaconbench"), "--bus", address, "--json", "doctor"],
            environment: ["PATH": "/usr/bin:/bin", "HOME": home, "NO_COLOR": "1"], timeout: 60)
        for line in output.stdout.split(separator: "\n") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                object["name"] as? String == "D-Bus policy"
            else { continue }
            return (object["status"] as? String ?? "", object["detail"] as? String ?? "")
        }
        Issue.record("no D-Bus policy check: \(output.stdout) \(output.stderr)")
        return ("", "")
    }

    @Test(
        .enabled(if: isRoot, "needs root: doctor runs as another user (setpriv)"),
        .enabled(if: installed, "skipped: bluez's /etc/dbus-1/system.d/bluetooth.conf is not installed"))
    func debianLetsEveryUserInAndTheOptInPolicyOnlyTheGroup() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "bluez-policy-\(UUID().uuidString.prefix(8))"
        ).path
        try FileManager.default.createDirectory(atPath: directory + "/system.d", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/home", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        chmod(directory, 0o755)
        chmod(directory + "/home", 0o777)
        try FileManager.default.copyItem(atPath: Self.bluetoothConf, toPath: directory + "/system.d/bluetooth.conf")
        let socket = directory + "/bus"
        try Self.systemLikeConfiguration(socket: socket, included: directory + "/system.d").write(
            toFile: directory + "/bus.conf", atomically: true, encoding: .utf8)
        let daemonPath =
            FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon")
            ? "/usr/bin/dbus-daemon" : "/bin/dbus-daemon"
        try await withResource(
            {
                try ChildProcess(
                    daemonPath, ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile", "--nosyslog"])
            }, stop: { await $0.terminate() }
        ) { daemon in
            let address = "unix:path=\(socket)"
            var connection: BusConnection?
            // Started without --print-address: ready when a connect works, polled.
            try await waitUntil("the bus listens") {
                connection = try? await BusConnection.connect(.address(address))
                return connection != nil
            }
            let bus = try #require(connection)
            let simulator = SimulatedBluetoothd(
                bus: bus, options: SimulatorOptions(),
                fleet: FleetGenerator.make(count: 1, seed: 1, now: Int64(Date().timeIntervalSince1970 * 1000)))
            try await simulator.start()

            // Debian 12 as shipped: nobody, in no group, makes every call.
            let shipped = try await Self.policyAsNobody(address: address, groups: [], home: directory + "/home")
            #expect(shipped.status == "ok", "\(shipped)")

            // The opt-in policy after it (its name sorts after bluetooth.conf),
            // the bus told to reload: nobody is refused, the group is let in.
            #expect("bluez-group-only.conf" > "bluetooth.conf")
            try FileManager.default.copyItem(
                atPath: Self.root + "/debian/examples/bluez-group-only.conf",
                toPath: directory + "/system.d/bluez-group-only.conf")
            kill(daemon.pid, SIGHUP)
            // The reload is not announced: wait until a refused call shows it.
            var refused = (status: "", detail: "")
            try await waitUntil("the bus reloads its policy", cap: .seconds(30), every: .milliseconds(200)) {
                refused = try await Self.policyAsNobody(address: address, groups: [], home: directory + "/home")
                return refused.status == "failed"
            }
            #expect(refused.detail.contains("AccessDenied"), "\(refused)")
            #expect(refused.detail.contains("ObjectManager.GetManagedObjects"), "\(refused)")
            let member = try await Self.policyAsNobody(
                address: address, groups: ["bluetooth"], home: directory + "/home")
            #expect(member.status == "ok", "\(member)")
            await bus.close()
        }
    }
}
