import Console
import Foundation
import TestSupport
import Testing

/// The command table is the one place a command is defined: the parser,
/// `help`, completion, the man page and the shell completions all read it.
@Suite("The command table", .timeLimit(.minutes(5)))
struct CommandTableTests {
    static let profiles: Set<String> = ["car", "van", "truck", "bus", "motorcycle"]

    static func parse(_ text: String, overrides: [String: String] = [:]) throws(BatchError) -> [LocatedCommand] {
        try BatchParser(
            file: "t.batch", overrides: overrides, profiles: profiles,
            identityRules: ["van": .init(major: 200, minor: .sequential)]
        ).parse(text)
    }

    @Test func everyCommandIsDefinedOnceAndItsExampleParses() throws {
        let specs = CommandTable.all.map { $0.spec }
        let names = specs.map(\.name) + specs.flatMap(\.aliases)
        #expect(Set(names).count == names.count, "a name is defined twice: \(names)")
        for spec in specs {
            #expect(!spec.summary.isEmpty && !spec.example.isEmpty, "\(spec.name)")
            #expect(spec.allOptions.allSatisfy { $0.name.hasPrefix("--") && !$0.summary.isEmpty }, "\(spec.name)")
            #expect(spec.allOptions.contains { $0.name == "--dry-run" } == spec.mayWriteToBeacons, "\(spec.name)")
            // The example, without what a shell would do with it.
            let example = spec.example.components(separatedBy: " > ")[0]
            let parsed = try Self.parse(example)
            #expect(parsed.count == 1, "\(spec.example)")
            #expect(
                type(of: parsed[0].command).spec.name == spec.name, "\(spec.example) parses as another command")
        }
    }

    @Test func optionsGoAnywhereAndDoubleDashEndsThem() throws {
        let forms = [
            "apply van a3b5c7d9 --dry-run", "apply --dry-run van a3b5c7d9", "apply van --dry-run a3b5c7d9",
        ]
        let parsed = try forms.map { try Self.parse($0)[0] }
        for located in parsed {
            #expect(located.dryRun)
            #expect(located.devices == [.macEnding("a3b5c7d9")])
            #expect((located.command as? ApplyCommand)?.profile == "van")
        }
        let scans = try ["scan 2s --json --rssi -70", "scan --rssi=-70 2s --json"].map { try Self.parse($0)[0] }
        for located in scans {
            #expect(located.json)
            #expect(located.command as? ScanCommand == ScanCommand(seconds: 2, rssiFloor: -70))
        }
        let filter = try Self.parse("devices -- --odd")[0]
        #expect(filter.command as? DevicesCommand == DevicesCommand(filter: "--odd"))
        let audit = try Self.parse("audit --json --live van")[0]
        #expect(audit.command as? AuditCommand == AuditCommand(profile: "van", source: .live))
        #expect(audit.command.isDeviceStep && !audit.command.onlyReadsTheInventory)
        #expect(try Self.parse("audit")[0].command.onlyReadsTheInventory)
    }

    @Test func mistakesAreNamedWithASuggestion() {
        let cases: [(String, String)] = [
            (
                "scan --rsi -80",
                "t.batch:1:6: error: scan has no option '--rsi' (did you mean '--rssi'?) (it takes --rssi, --until, --json)"
            ),
            ("info --dry-run", "t.batch:1:6: error: info has no option '--dry-run' (it takes --json)"),
            (
                "inventory lst",
                "t.batch:1:11: error: unknown inventory subcommand 'lst' (list, show, export, forget); did you mean 'list'?"
            ),
            ("inventory export --csv --json", "t.batch:1:1: error: inventory export takes --csv or --json, not both"),
            ("audit --live --passive", "t.batch:1:1: error: audit takes --live or --passive, not both"),
            ("completion tcsh", "t.batch:1:12: error: SHELL wants bash, zsh, fish, got 'tcsh' (did you mean 'bash'?)"),
            ("scan --rssi", "t.batch:1:6: error: --rssi needs a value: DBM (ignore beacons heard weaker than this)"),
            (
                "sync --to",
                "t.batch:1:6: error: --to needs a value: URL (the server (a password comes from PGPASSWORD or ~/.pgpass))"
            ),
            ("calibrate --json=yes", "t.batch:1:11: error: --json takes no value"),
        ]
        for (text, message) in cases {
            let error = #expect(throws: BatchError.self) { try Self.parse(text) }
            #expect(error?.description == message, "\(text)")
        }
    }

    /// `--set profil=van` (a typo) is refused with the name meant.
    @Test func aSetVariableTheBatchNeverUsesIsRefused() {
        let text = "set profile car\nselect new\napply ${profile}\n"
        #expect(throws: Never.self) { try Self.parse(text, overrides: ["profile": "van"]) }
        let error = #expect(throws: BatchError.self) { try Self.parse(text, overrides: ["profil": "van"]) }
        #expect(error?.message == "--set 'profil': the batch uses no variable of that name (did you mean 'profile'?)")
    }

    @Test func theCommandLineTakesOptionsAnywhere() throws {
        let after = try Invocation.parse(
            ["scan", "2s", "--json", "--inventory", "/tmp/i.sqlite", "--rssi", "-70"], environment: [:])
        #expect(after.json && after.inventoryPath == "/tmp/i.sqlite")
        #expect(after.mode == .oneShot(["scan", "2s", "--rssi", "-70"]))
        let dry = try Invocation.parse(["apply", "van", "a3b5c7d9", "--dry-run"], environment: [:])
        #expect(dry.dryRun && dry.mode == .oneShot(["apply", "van", "a3b5c7d9"]))
        let run = try Invocation.parse(
            ["run", "b.batch", "--json", "--set", "profile=van", "--dry-run"], environment: [:])
        #expect(run.json && run.mode == .run(file: "b.batch", overrides: ["profile": "van"], dryRun: true))
        let ended = try Invocation.parse(["devices", "--", "--json"], environment: [:])
        #expect(!ended.json && ended.mode == .oneShot(["devices", "--", "--json"]))
        #expect(try Invocation.parse(["audit", "--help"], environment: [:]).mode == .oneShot(["help", "audit"]))
    }

    @Test func helpShowsEveryCommandAndEachOneWithItsOptions() async throws {
        let binary = builtProduct("beaconbench")
        let all = try await runTool(binary, ["--no-color", "help"], environment: ["PATH": "/usr/bin:/bin"])
        #expect(all.status == 0, "\(all.stderr)")
        for spec in CommandTable.all.map({ $0.spec }) {
            #expect(all.stdout.contains(spec.synopsis), "help lacks \(spec.name)")
            let one = try await runTool(
                binary, ["--no-color", spec.name.split(separator: " ")[0].description, "--help"])
            #expect(one.status == 0 && one.stdout.contains("usage:   \(spec.synopsis)"), "\(spec.name): \(one.stdout)")
            for option in spec.options { #expect(one.stdout.contains(option.name), "\(spec.name) \(option.name)") }
        }
    }

    @Test func theManPageHasEveryCommandAndRenders() async throws {
        let binary = builtProduct("beaconbench")
        let page = try await runTool(binary, ["help", "--man"])
        #expect(page.status == 0 && page.stdout.hasPrefix(".TH BEACONBENCH 1"))
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("beaconbench-\(UUID()).1").path
        try page.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let rendered = try await runTool("/usr/bin/nroff", ["-man", "-ww", "-Tutf8", file])
        #expect(rendered.status == 0 && rendered.stderr.isEmpty, "\(rendered.stderr)")
        let text = rendered.stdout.replacingOccurrences(of: "\u{8}.", with: "", options: .regularExpression)
        for spec in CommandTable.all.map({ $0.spec }) {
            #expect(text.contains(spec.name), "the man page lacks \(spec.name)")
        }
    }

    /// The completion scripts, tried in the shells they are for.
    @Test func shellCompletionsComplete() async throws {
        let binary = builtProduct("beaconbench")
        let directory = URL(fileURLWithPath: binary).deletingLastPathComponent().path
        let environment = ["PATH": directory + ":/usr/bin:/bin", "HOME": NSTemporaryDirectory()]
        let bash = try await runTool(binary, ["completion", "bash"])
        let script = FileManager.default.temporaryDirectory.appendingPathComponent("bb-\(UUID()).bash").path
        try bash.stdout.write(toFile: script, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: script) }
        let probe = """
            source \(script)
            complete_line() {
                read -ra COMP_WORDS <<< "$1"; [[ $1 == *" " ]] && COMP_WORDS+=("")
                COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _beaconbench; echo "${COMPREPLY[*]}"
            }
            complete_line "beaconbench inventory "
            complete_line "beaconbench apply "
            complete_line "beaconbench scan --r"
            complete_line "beaconbench --sim 3 aud"
            """
        let answers = try await runTool("/bin/bash", ["-c", probe], environment: environment)
        let lines = answers.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        #expect(lines.count >= 4, "\(answers.stdout) \(answers.stderr)")
        #expect(lines[0] == "list show export forget" || lines[0].hasPrefix("list show export"), "\(lines)")
        #expect(lines[1].contains("van") && lines[1].contains("--dry-run"), "\(lines)")
        #expect(lines[2] == "--rssi", "\(lines)")
        #expect(lines[3] == "audit", "\(lines)")

        let fish = try await runTool(binary, ["completion", "fish"])
        let fishScript = script + ".fish"
        try fish.stdout.write(toFile: fishScript, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: fishScript) }
        let fishAnswers = try await runTool(
            "/usr/bin/fish", ["-c", "source \(fishScript); complete -C 'beaconbench inventory '"],
            environment: environment)
        #expect(fishAnswers.stdout.contains("list") && fishAnswers.stdout.contains("export"), "\(fishAnswers)")

        let zsh = try await runTool(binary, ["completion", "zsh"])
        let zshScript = script + ".zsh"
        try zsh.stdout.write(toFile: zshScript, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: zshScript) }
        let zshAnswers = try await runTool(
            "/usr/bin/zsh",
            ["-f", "-c", "autoload -U +X compinit && compinit -u; source \(zshScript); whence -w _beaconbench"],
            environment: environment)
        #expect(zshAnswers.stdout.contains("_beaconbench: function"), "\(zshAnswers)")
    }
}

extension CommandTableTests {
    /// A command type that is not in the table would be a command nobody
    /// can run: every conformance in Sources/Console/Commands is listed.
    @Test func everyCommandTypeIsInTheTable() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/Console/Commands")
        let listed = Set(CommandTable.all.map { String(describing: $0) })
        var declared: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: root.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") where line.hasPrefix("public struct ") {
                let conformances = line.split(separator: ":").dropFirst().joined(separator: ":")
                if conformances.contains("Command") {
                    declared.append(String(line.dropFirst(14).prefix { $0 != ":" }))
                }
            }
        }
        #expect(declared.count >= 30)
        #expect(Set(declared).isSubset(of: listed), "not in CommandTable.all: \(Set(declared).subtracting(listed))")
    }
}

extension CommandTableTests {
    /// The console reaches beacons only through the workbench: no file of
    /// it imports the BlueZ client or the D-Bus binding.
    @Test func theConsoleReachesBeaconsOnlyThroughTheWorkbench() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/Console")
        let files =
            FileManager.default.enumerator(atPath: root.path)?.compactMap { $0 as? String }
            .filter { $0.hasSuffix(".swift") } ?? []
        #expect(files.count > 20)
        for file in files {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") where line.hasPrefix("import ") {
                #expect(line != "import BlueZClient" && line != "import DBusBinding", "\(file): \(line)")
            }
        }
    }
}

extension CommandTableTests {
    /// What the session and the batch checker once asked of a command's
    /// type, the spec answers (`pulls`, `showsWhatItRead`, `setsSelection`,
    /// `needsDevices`, `endsTheRun`) or the command (`definesVariable`,
    /// `liveAudit`): each answered by exactly the commands that asked it.
    @Test func specFlagsAnswerWhatTypeChecksDid() throws {
        let specs = CommandTable.specs
        let named = { (flag: (CommandSpec) -> Bool) in Set(specs.filter(flag).map(\.name)) }
        #expect(named { $0.pulls != nil } == ["trips", "events", "incidents"])
        #expect(
            Dictionary(uniqueKeysWithValues: specs.compactMap { spec in spec.pulls.map { (spec.name, $0) } })
                == ["trips": .trip, "events": .event, "incidents": .incident])
        #expect(named(\.showsWhatItRead) == ["info"])
        #expect(named(\.setsSelection) == ["select"])
        #expect(named(\.needsDevices) == ["watch"])
        #expect(named(\.endsTheRun) == ["quit"])
        let lines = try Self.parse("set profile van\naudit --live van\naudit --live\naudit van\nquit\nexit")
        #expect(lines[0].command.definesVariable?.name == "profile" && lines[0].command.definesVariable?.value == "van")
        #expect(lines.dropFirst().allSatisfy { $0.command.definesVariable == nil })
        #expect(lines[1].command.liveAudit == LiveAudit(profile: "van"))
        #expect(lines[2].command.liveAudit == LiveAudit(profile: nil))
        #expect(lines[3].command.liveAudit == nil && lines[0].command.liveAudit == nil)
        #expect(lines.map(\.isQuit) == [false, false, false, false, true, true])
        // A kind is declared once.
        for spec in specs { #expect(Set(spec.emits).count == spec.emits.count, "\(spec.name)") }
    }
}
