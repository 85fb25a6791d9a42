import BeaconSimulator
import Foundation
import TestSupport
import Testing

/// `beaconbench --sim`: its private bus is this user's alone, and neither
/// the bus nor the simulator nor their directory outlives beaconbench,
/// however it ends (SIGTERM, SIGHUP, SIGKILL, its output closed).
@Suite("--sim leaves nothing behind", .timeLimit(.minutes(5)))
struct SimCleanupTests {
    /// The built beaconbench, run under umask 000 by bash with `script`
    /// (`"$@"` is beaconbench and its arguments), in an environment of its
    /// own whose TMPDIR, HOME and XDG directories are a fresh directory.
    struct Run {
        let directory: String
        let shell: ChildProcess

        static func start(script: String, _ arguments: [String]) throws -> Run {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "sim-cleanup-\(UUID().uuidString.prefix(8))"
            ).path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let environment = [
                "PATH=/usr/bin:/bin", "HOME=\(directory)", "TMPDIR=\(directory)", "XDG_DATA_HOME=\(directory)/data",
                "XDG_STATE_HOME=\(directory)/state", "XDG_CONFIG_HOME=\(directory)/config", "NO_COLOR=1",
            ]
            let shell = try ChildProcess(
                "/usr/bin/env",
                ["-i"] + environment + ["/bin/bash", "-c", "umask 000; " + script, "bash", builtProduct("beaconbench")]
                    + arguments,
                standardOutput: directory + "/stdout", standardError: directory + "/stderr")
            return Run(directory: directory, shell: shell)
        }

        /// The private bus's directories (`beaconbench-bus-*`) in TMPDIR.
        var busDirectories: [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
                .filter { $0.hasPrefix("beaconbench-bus-") }.map { directory + "/" + $0 }
        }

        /// Running processes (not zombies) whose command line names this
        /// run's directory: its dbus-daemon and beaconbench-sim.
        var processesLeft: [(pid: pid_t, parent: pid_t, command: String)] {
            let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }
            return pids.compactMap { pid in
                guard pid != getpid(),
                    let raw = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"),
                    let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                    let close = stat.lastIndex(of: ")")
                else { return nil }
                let command = String(decoding: raw.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                guard command.contains(directory), !command.hasPrefix("/usr/bin/env"),
                    !command.hasPrefix("/bin/bash"), fields.count > 1, fields[0] != "Z", fields[0] != "X"
                else { return nil }
                return (pid, pid_t(fields[1]) ?? 0, command)
            }
        }

        /// Waits (a stall guard of 5 minutes) for the simulator's ready line
        /// in its bus directory; that directory.
        func waitForSimulator() async throws -> String {
            var ready: String?
            do {
                try await waitUntil("the simulator's ready line") {
                    ready = busDirectories.first { bus in
                        (try? String(contentsOfFile: bus + "/sim.out", encoding: .utf8))?.hasPrefix("ready ") == true
                    }
                    return ready != nil
                }
            } catch { throw TestSupportError("\(error); the simulator did not start: \(text("stderr"))") }
            return ready!
        }

        /// Waits (a stall guard of 5 minutes) until no process of the run is
        /// left and its bus directory is gone; what is left then.
        func waitUntilNothingIsLeft() async throws -> (processes: [String], directories: [String]) {
            let deadline = ContinuousClock.now + .seconds(300)
            while true {
                let processes = processesLeft.map(\.command)
                let directories = busDirectories
                if processes.isEmpty && directories.isEmpty || ContinuousClock.now >= deadline {
                    return (processes, directories)
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }

        /// The shell's wait status, on a thread of its own; killed after 60 s.
        func waitForExit() async -> Int32 {
            let shell = shell
            let killer = Watchdog(after: 60) { kill(shell.pid, SIGKILL) }
            defer { killer.cancel() }
            return await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: shell.waitForExit().status) }
            }
        }

        func text(_ name: String) -> String {
            (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? ""
        }

        func remove() {
            for process in processesLeft { kill(process.pid, SIGKILL) }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    /// The directory 0700, every file in it 0600, under umask 000; a
    /// policy that names only this user and lets nobody eavesdrop.
    static func expectPrivate(_ bus: String) throws {
        #expect(mode(bus) == 0o700, "\(bus): \(String(mode(bus), radix: 8))")
        let files = try FileManager.default.contentsOfDirectory(atPath: bus)
        #expect(Set(files).isSuperset(of: ["bus", "bus.conf", "sim.out", "sim.err"]), "\(files)")
        for file in files {
            #expect(mode(bus + "/" + file) == 0o600, "\(file): \(String(mode(bus + "/" + file), radix: 8))")
        }
        let configuration = try String(contentsOfFile: bus + "/bus.conf", encoding: .utf8)
        let uid = getuid()
        #expect(!configuration.contains("eavesdrop"))
        #expect(configuration.contains("<policy user=\"\(uid)\">"))
        #expect(configuration.contains("<allow user=\"\(uid)\"/>"))
        for line in configuration.split(separator: "\n") where line.contains("user=\"") {
            let element = line.trimmingCharacters(in: .whitespaces)
            let named = element.split(separator: "user=\"", maxSplits: 1)[1].prefix { $0 != "\"" }
            #expect(
                named == "\(uid)" || (named == "*" && element.hasPrefix("<deny")),
                "bus.conf admits more than user \(uid): \(element)")
        }
    }

    /// `scan 30s` under umask 000, then a signal: beaconbench exits 128 +
    /// the signal (or is killed by SIGKILL), and within seconds its bus and
    /// simulator are gone and so is their directory (after SIGKILL the
    /// simulator, seeing its lifeline close, does it).
    @Test(arguments: [SIGTERM, SIGHUP, SIGKILL])
    func aSignalLeavesNothingBehind(signal: Int32) async throws {
        let run = try Run.start(script: "exec \"$@\"", ["--sim", "5", "scan", "30s"])
        defer { run.remove() }
        let bus = try await run.waitForSimulator()
        try Self.expectPrivate(bus)
        let children = run.processesLeft
        #expect(
            children.count == 2 && children.allSatisfy { $0.parent == run.shell.pid },
            "beaconbench's children: \(children)")
        #expect(children.contains { $0.command.hasPrefix("/usr/bin/dbus-daemon") })
        #expect(children.contains { $0.command.contains("beaconbench-sim") })

        let started = ContinuousClock.now
        kill(run.shell.pid, signal)
        let status = await run.waitForExit()
        if signal == SIGKILL {
            #expect(status & 0x7f == SIGKILL, "wait status \(status)")
        } else {
            #expect(status & 0x7f == 0 && status >> 8 == 128 + signal, "wait status \(status): \(run.text("stderr"))")
        }
        let left = try await run.waitUntilNothingIsLeft()
        #expect(left.processes.isEmpty, "left running: \(left.processes)")
        #expect(left.directories.isEmpty, "left: \(left.directories)")
        print("signal \(signal): nothing left after \(ContinuousClock.now - started)")
    }

    /// `--json` output into `head -1`, then more output: beaconbench exits
    /// 141 quietly and leaves nothing.
    @Test func aClosedPipeLeavesNothingBehind() async throws {
        let run = try Run.start(
            script: "printf 'scan 300ms\\nscan 300ms\\nscan 30s\\n' | \"$@\" | head -1; echo \"${PIPESTATUS[1]}\" >&2",
            ["--sim", "5", "--json"])
        defer { run.remove() }
        // Not waiting for the simulator's ready line: on a loaded machine
        // the whole run can be over before it is seen. The scan's line in
        // stdout says the simulator ran.
        let status = await run.waitForExit()
        #expect(status == 0, "wait status \(status)")
        #expect(run.text("stdout").split(separator: "\n").count == 1, "\(run.text("stdout"))")
        #expect(run.text("stderr") == "141\n", "beaconbench's status and messages: \(run.text("stderr"))")
        let left = try await run.waitUntilNothingIsLeft()
        #expect(left.processes.isEmpty, "left running: \(left.processes)")
        #expect(left.directories.isEmpty, "left: \(left.directories)")
    }

    /// Another user cannot use a private bus even when its socket is
    /// reachable; its own user can, a monitor (`dbus-monitor`, which calls
    /// BecomeMonitor) included.
    @Test(.enabled(if: getuid() == 0, "another user needs root (CI runs as root)"))
    func onlyItsOwnUserMayUseThePrivateBus() async throws {
        try await withResource({ try await PrivateBus.start() }, stop: { await $0.stop() }) { bus in
            // Open the way to the socket, so that only the policy stands.
            chmod(bus.directory, 0o755)
            chmod(bus.directory + "/bus", 0o666)
            let nobody = try await runTool(
                "/usr/bin/setpriv",
                [
                    "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/busctl", "--address",
                    bus.address,
                    "list",
                ])
            #expect(nobody.status != 0, "nobody used the bus: \(nobody.stdout)")
            let own = try await runTool("/usr/bin/busctl", ["--address", bus.address, "list"])
            #expect(own.status == 0 && own.stdout.contains("org.freedesktop.DBus"), "\(own.stderr)")

            // dbus-monitor says NameLost once it has become a monitor (it gives
            // up its name); the call comes after that, and it must be seen.
            let monitored = bus.directory + "/monitor.out"
            let monitor = try ChildProcess(
                "/usr/bin/dbus-monitor", ["--address", bus.address], standardOutput: monitored,
                standardError: bus.directory + "/monitor.err")
            func seen() -> String { (try? String(contentsOfFile: monitored, encoding: .utf8)) ?? "" }
            try await waitUntil("dbus-monitor to become a monitor (NameLost)") { seen().contains("member=NameLost") }
            let call = try await runTool(
                "/usr/bin/busctl",
                [
                    "--address", bus.address, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus", "GetId",
                ])
            #expect(call.status == 0, "\(call.stderr)")
            try await waitUntil("dbus-monitor to show the GetId call") { seen().contains("member=GetId") }
            await monitor.terminate()
        }
    }

    @Test func theSimulatorsParentOptionsGoTogether() throws {
        #expect(throws: SimulatorCommandLine.UsageError.self) {
            try SimulatorCommandLine(arguments: ["--bus-directory", "/tmp/x"])
        }
        let parsed = try SimulatorCommandLine(arguments: [
            "--exit-with-parent", "3", "--bus-daemon", "42", "--bus-directory", "/tmp/x",
        ])
        #expect(parsed.lifeline?.descriptor == 3)
        #expect(parsed.lifeline?.busDaemon == 42)
        #expect(parsed.lifeline?.busDirectory == "/tmp/x")
    }
}
