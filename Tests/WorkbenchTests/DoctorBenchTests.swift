import BeaconSimulator
import BlueZClient
import DBusBinding
import Foundation
import LocalBus
import TestSupport
import Testing
import Workbench

/// What `doctor` holds a real bench to, each check failed on purpose: an
/// old BlueZ, a policy that refuses one kind of call, rfkill, and which
/// controller it is (a made-up sysfs and device tree, the machine's
/// own are left alone).
@Suite("Doctor on a bench", .timeLimit(.minutes(5)))
struct DoctorBenchTests {
    /// A directory of its own, removed at the end.
    static func scratch() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "doctor-bench-\(UUID().uuidString.prefix(8))"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A `bluetoothd` that answers `--version` with `version`.
    static func fakeBluetoothd(in directory: String, version: String) async throws -> String {
        // Written by a child process: a descriptor this process held open
        // for writing could be inherited by a child another test spawns,
        // and the script's exec would fail with ETXTBSY.
        let path = directory + "/bluetoothd-\(version)"
        let written = try await runTool(
            "/bin/sh",
            ["-c", "printf '#!/bin/sh\\necho %s\\n' \"$2\" > \"$1\" && chmod 755 \"$1\"", "sh", path, version])
        try #require(written.status == 0, "\(written.stderr)")
        return path
    }

    static func write(_ text: String, _ path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// A host whose sysfs is empty: no rfkill switch, no controller.
    static func emptyHost(_ directory: String) throws -> Doctor.Host {
        var host = Doctor.Host()
        host.sysfs = directory + "/sys"
        host.deviceTreeModel = directory + "/model"
        try FileManager.default.createDirectory(atPath: host.sysfs, withIntermediateDirectories: true)
        return host
    }

    @Test func blueZOlderThan5_55FailsAnd5_55Passes() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var host = try Self.emptyHost(directory)
        host.path = "/nonexistent"
        try await withBench(count: 1) { fixture throws in
            host.bluetoothdCandidates = [try await Self.fakeBluetoothd(in: directory, version: "5.50")]
            let old = await Doctor.check(bus: .address(fixture.bus.address), adapter: nil, host: host)
            let version = try #require(old.first { $0.name == "bluetoothd version" }, "\(old)")
            #expect(version.status == .failed)
            #expect(version.detail.contains("5.50") && version.detail.contains("older than BlueZ 5.55"), "\(version)")
            #expect(version.fix?.contains("5.55 or later") == true)

            host.bluetoothdCandidates = [try await Self.fakeBluetoothd(in: directory, version: "5.55")]
            let current = await Doctor.check(bus: .address(fixture.bus.address), adapter: nil, host: host)
            #expect(current.first { $0.name == "bluetoothd version" }?.status == .ok, "\(current)")
        }
    }

    /// The simulator answers every probe with an error of its own (the
    /// policy let it through): ok, and nothing changed on the bench.
    @Test func everyKindOfCallIsTriedAndNothingChanges() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let host = try Self.emptyHost(directory)
        try await withBench(count: 2) { fixture throws in
            let before = try await fixture.clientConnection.managedObjects(of: BluetoothClient.bluez)
            let checks = await Doctor.check(bus: .address(fixture.bus.address), adapter: nil, host: host)
            let policy = try #require(checks.first { $0.name == "D-Bus policy" }, "\(checks)")
            #expect(policy.status == .ok, "\(policy)")
            #expect(policy.detail.contains("GattCharacteristic1"), "\(policy)")
            // Each probe is answered by the simulator, not refused, and none succeeds.
            for probe in Doctor.probes(adapter: "hci0") {
                do {
                    _ = try await fixture.clientConnection.call(probe.call)
                    Issue.record("\(probe.kind) succeeded: a probe must change nothing")
                } catch let error as BusError {
                    #expect(error.name != .accessDenied, "\(probe.kind): \(error)")
                }
            }
            let after = try await fixture.clientConnection.managedObjects(of: BluetoothClient.bluez)
            #expect(Set(after.keys) == Set(before.keys))
            let powered = after.first { $0.key.rawValue == "/org/bluez/hci0" }?.value["org.bluez.Adapter1"]?["Powered"]
            #expect(powered?.bool == true, "the adapter is still powered")
        }
    }

    /// A bus whose policy refuses one interface of org.bluez: the read
    /// passes, the check fails naming that kind of call.
    @Test(arguments: [
        ("org.bluez.GattCharacteristic1", "GattCharacteristic1.WriteValue"),
        ("org.bluez.Device1", "Device1.Connect"),
        ("org.bluez.Adapter1", "Adapter1.RemoveDevice"),
        ("org.freedesktop.DBus.Properties", "Properties.Set"),
    ])
    func aPolicyThatRefusesOneKindOfCall(interface: String, kind: String) async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let host = try Self.emptyHost(directory)
        let socket = directory + "/bus"
        let config = PrivateBus.configuration(socketPath: socket).replacingOccurrences(
            of: "<allow receive_sender=\"*\"/>\n  </policy>",
            with:
                "<allow receive_sender=\"*\"/>\n    <deny send_destination=\"org.bluez\" send_interface=\"\(interface)\"/>\n  </policy>"
        )
        #expect(config.contains("send_interface=\"\(interface)\""))
        try config.write(toFile: directory + "/bus.conf", atomically: true, encoding: .utf8)
        let daemonPath =
            FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon")
            ? "/usr/bin/dbus-daemon" : "/bin/dbus-daemon"
        try await withResource(
            {
                try ChildProcess(
                    daemonPath, ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile", "--nosyslog"])
            }, stop: { await $0.terminate() }
        ) { _ in
            let address = BusAddress.address("unix:path=\(socket)")
            var simulatorConnection: BusConnection?
            // Started without --print-address: ready when a connect works, polled.
            try await waitUntil("the bus listens") {
                simulatorConnection = try? await BusConnection.connect(address)
                return simulatorConnection != nil
            }
            let connection = try #require(simulatorConnection)
            let simulator = SimulatedBluetoothd(
                bus: connection, options: SimulatorOptions(),
                fleet: FleetGenerator.make(count: 1, seed: 1, now: Int64(Date().timeIntervalSince1970 * 1000)))
            try await simulator.start()
            let checks = await Doctor.check(bus: address, adapter: nil, host: host)
            await connection.close()
            let policy = try #require(checks.first { $0.name == "D-Bus policy" }, "\(checks)")
            #expect(policy.status == .failed, "\(policy)")
            #expect(policy.detail.contains(kind) && policy.detail.contains("AccessDenied"), "\(policy)")
            let others = Doctor.probes(adapter: "hci0").map(\.kind).filter { !$0.hasPrefix(kind) }
            for other in others { #expect(!policy.detail.contains(other), "\(other) was let through: \(policy)") }
            #expect(policy.fix?.contains("usermod -aG bluetooth") == true || policy.fix?.contains("log out") == true)
            // The adapter is still checked: the read went through.
            #expect(checks.contains { $0.name == "adapter" })
        }
    }

    @Test func aSoftBlockedSwitchFailsWithTheCommandThisUserCanRun() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var host = try Self.emptyHost(directory)
        let rfkill = host.sysfs + "/class/rfkill/rfkill0"
        try Self.write("bluetooth\n", rfkill + "/type")
        try Self.write("hci0\n", rfkill + "/name")
        try Self.write("1\n", rfkill + "/soft")
        try Self.write("0\n", rfkill + "/hard")
        let unreachable = BusAddress.address("unix:path=\(directory)/no-bus")

        // Over SSH or in a service the rfkill device is not writable: sudo.
        host.rfkillDevice = directory + "/no-rfkill-device"
        let remote = try #require(
            await Doctor.check(bus: unreachable, adapter: nil, host: host).first { $0.name == "rfkill" })
        #expect(remote.status == .failed)
        #expect(remote.detail.contains("hci0 soft-blocked"), "\(remote)")
        #expect(remote.fix == "sudo rfkill unblock bluetooth")

        // At the seat (an ACL gives the user the device): no sudo.
        host.rfkillDevice = directory + "/rfkill-device"
        try Self.write("", host.rfkillDevice)
        let seat = try #require(
            await Doctor.check(bus: unreachable, adapter: nil, host: host).first { $0.name == "rfkill" })
        #expect(seat.fix == "rfkill unblock bluetooth")

        // Hard-blocked: rfkill cannot help.
        try Self.write("1\n", rfkill + "/hard")
        let hard = try #require(
            await Doctor.check(bus: unreachable, adapter: nil, host: host).first { $0.name == "rfkill" })
        #expect(hard.status == .failed)
        #expect(hard.detail.contains("hard-blocked"), "\(hard)")
        #expect(hard.fix?.contains("rfkill cannot") == true, "\(hard)")

        // Unblocked: ok.
        try Self.write("0\n", rfkill + "/hard")
        try Self.write("0\n", rfkill + "/soft")
        let fine = try #require(
            await Doctor.check(bus: unreachable, adapter: nil, host: host).first { $0.name == "rfkill" })
        #expect(fine.status == .ok, "\(fine)")
    }

    @Test func theControllerIsNamedAndAPisOnboardOneIsWarnedOf() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var host = try Self.emptyHost(directory)
        let unreachable = BusAddress.address("unix:path=\(directory)/no-bus")
        func controller() async throws -> DoctorCheck {
            try #require(
                await Doctor.check(bus: unreachable, adapter: nil, host: host).first { $0.name == "controller" })
        }
        // None.
        let none = try await controller()
        #expect(none.status == .failed && none.detail.contains("no Bluetooth controller"), "\(none)")

        // A Raspberry Pi's onboard controller, on its UART.
        let uart = host.sysfs + "/devices/platform/soc/fe201000.serial/serial0/serial0-0"
        try FileManager.default.createDirectory(atPath: uart, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            atPath: host.sysfs + "/class/bluetooth/hci0", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            atPath: host.sysfs + "/class/bluetooth/hci0/device", withDestinationPath: uart)
        try Self.write("Raspberry Pi 4 Model B Rev 1.4\0", host.deviceTreeModel)
        let pi = try await controller()
        #expect(pi.status == .warning, "\(pi)")
        #expect(pi.detail.contains("onboard controller of a Raspberry Pi 4 Model B Rev 1.4"), "\(pi)")
        #expect(pi.fix?.contains("dtoverlay=disable-bt") == true)

        // The same on another machine: built in, ok.
        host.deviceTreeModel = directory + "/no-model"
        let builtIn = try await controller()
        #expect(builtIn.status == .ok && builtIn.detail.contains("built in"), "\(builtIn)")

        // A USB dongle: its vendor, product and name from the USB device.
        let usbDevice = host.sysfs + "/devices/pci0000:00/0000:00:14.0/usb1/1-3"
        try FileManager.default.createDirectory(atPath: usbDevice + "/1-3:1.0", withIntermediateDirectories: true)
        try Self.write("0a12\n", usbDevice + "/idVendor")
        try Self.write("0001\n", usbDevice + "/idProduct")
        try Self.write("CSR8510 A10\n", usbDevice + "/product")
        try FileManager.default.removeItem(atPath: host.sysfs + "/class/bluetooth/hci0/device")
        try FileManager.default.createSymbolicLink(
            atPath: host.sysfs + "/class/bluetooth/hci0/device", withDestinationPath: usbDevice + "/1-3:1.0")
        host.deviceTreeModel = directory + "/model"
        let usb = try await controller()
        #expect(usb.status == .ok, "\(usb)")
        #expect(usb.detail.contains("USB dongle 0a12:0001 (CSR8510 A10)"), "\(usb)")
    }
}
