import Console
import Foundation
import Inventory
import Profiles
import SBeaconProtocol
import Testing
import Workbench

@Suite("The batch language: checked whole, errors at FILE:LINE:COL", .timeLimit(.minutes(2)))
struct BatchParserTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let profiles: Set<String> = ["car", "van", "truck", "bus", "motorcycle"]

    /// A command as a comparable value.
    static func key(_ command: any ConsoleCommand) -> AnyHashable { AnyHashable(command) }

    @Test func everyShippedBatchParses() throws {
        let shipped = try ProfileLoader.loadAll(from: [Self.root.appendingPathComponent("profiles").path])
        #expect(Set(shipped.keys) == Self.profiles)
        let directory = Self.root.appendingPathComponent("batches").path
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".batch") }
            .sorted()
        #expect(
            files == [
                "apply-profile.batch", "audit.batch", "bench-test.batch", "converge.batch", "provision-new.batch",
                "pull-records.batch",
            ])
        for file in files {
            let text = try String(contentsOfFile: directory + "/" + file, encoding: .utf8)
            // --set only what the batch uses: an unused one is a typo.
            let overrides = text.contains("${profile}") ? ["profile": "truck"] : [:]
            let parser = BatchParser(file: file, overrides: overrides, profiles: shipped)
            #expect(throws: Never.self) { try parser.parse(text) }
        }
        let provision = try BatchParser(
            file: "provision-new.batch", overrides: ["profile": "van"], profiles: shipped
        )
        .parse(try String(contentsOfFile: directory + "/provision-new.batch", encoding: .utf8))
        #expect(
            provision.map(\.command).filter(\.isDeviceStep).map(Self.key) == [
                Self.key(RequireCommand(.battery(atLeast: 30))),
                Self.key(RequireCommand(.firmware(atLeast: FirmwareVersion(major: 1, minor: 0, patch: 8)))),
                Self.key(SyncTimeCommand()), Self.key(CalibrateCommand()),
                Self.key(IdentityCommand(profile: "van", major: nil, minor: nil)),
                Self.key(ApplyCommand(profile: "van")),
                Self.key(VerifyCommand(profile: "van")),
            ])
    }

    @Test func deviceCommandsBecomeFleetRunnerSteps() throws {
        let shipped = try ProfileLoader.loadAll(from: [Self.root.appendingPathComponent("profiles").path])
        let text = try String(
            contentsOfFile: Self.root.appendingPathComponent("batches/provision-new.batch").path, encoding: .utf8)
        let commands = try BatchParser(file: "provision-new.batch", profiles: shipped).parse(text)
        let steps = commands.map(\.command).filter(\.isDeviceStep).compactMap { $0.step(profiles: shipped) }
        #expect(
            steps == [
                .requireBattery(atLeast: 30), .requireFirmware(atLeast: FirmwareVersion(major: 1, minor: 0, patch: 8)),
                .syncTime, .calibrate, .identity(IdentityPlan(major: 100, minor: .next, source: .profile("car"))),
                .apply(shipped["car"]!),
                .verify(shipped["car"]!),
            ])
        #expect(ScanCommand(seconds: 1).step(profiles: shipped) == nil)
    }

    @Test func continuationsCommentsQuotesAndVariables() throws {
        let text = """
            # a comment
            set p van   # trailing comment
            select new \\
                   battery<30 minor=1-40
            apply ${p}
            devices "a b"
            """
        let commands = try BatchParser(file: "t.batch", profiles: Self.profiles).parse(text)
        #expect(
            commands.map(\.command).map(Self.key) == [
                Self.key(SetCommand(name: "p", value: "van")),
                Self.key(SelectCommand([.new, .batteryBelow(30), .minorRange(1, 40)])),
                Self.key(ApplyCommand(profile: "van")), Self.key(DevicesCommand(filter: "a b")),
            ])
        #expect(commands[1].line == 3 && commands[2].line == 5)
        // --set wins over set.
        let overridden = try BatchParser(file: "t.batch", overrides: ["p": "bus"], profiles: Self.profiles).parse(text)
        #expect(Self.key(overridden[2].command) == Self.key(ApplyCommand(profile: "bus")))
    }

    static let broken: [(String, String)] = [
        ("scna 10s", "1:1: error: unknown command 'scna' (did you mean 'scan'?) ('help' lists them)"),
        (
            "scan forever",
            "1:6: error: 'forever' is not a duration in 100 ms–3600 s (decimal digits and a unit: 10s, 500ms, 2m, 1h; none is seconds)"
        ),
        ("scan 10s --rssi 20", "1:17: error: --rssi wants DBM in -127–0, got '20'"),
        ("select", "1:1: error: select needs SELECTOR (usage: select SELECTOR…)"),
        ("select new battery<300", "1:12: error: battery< wants a percentage 0–100, got '300'"),
        ("select minor=40-1", "1:8: error: minor= wants a range A-B with A ≤ B in 0–65535, got '40-1'"),
        (
            "select profile=hovercraft",
            "1:16: error: no profile 'hovercraft' (known: bus, car, motorcycle, truck, van)"
        ),
        (
            "select somebody",
            "1:8: error: unknown selector 'somebody' (all, new, unprovisioned, in-range, profile=NAME, battery<N, firmware<X, minor=A-B, an address or a MAC ending)"
        ),
        ("\n\napply lorry", "3:7: error: no profile 'lorry' (known: bus, car, motorcycle, truck, van)"),
        ("apply ${profile}", "1:7: error: variable 'profile' is not set (use --set profile=… or 'set profile …')"),
        ("apply ${profile", "1:7: error: '${' without a closing '}'"),
        ("require battery>=101", "1:9: error: battery>= wants a percentage 0–100, got '101'"),
        ("require firmware>=1.0", "1:9: error: firmware>= wants a version like 1.0.8, got '1.0'"),
        ("require voltage>=3", "1:9: error: unknown requirement 'voltage>=3' (battery>=N or firmware>=X.Y.Z)"),
        (
            "identity minor=auto",
            "1:1: error: identity needs a profile or major=N (usage: identity [PROFILE] [major=N] [minor=auto|keep|N] [DEVICE…] [--dry-run])"
        ),
        ("identity major=70000", "1:10: error: major must be 0–65535 or 'profile', got '70000'"),
        ("factory-reset", "1:1: error: factory-reset erases a beacon: write 'factory-reset --yes'"),
        (
            "calibrate now",
            "1:11: error: calibrate takes no argument (only devices), got 'now' (usage: calibrate [DEVICE…] [--dry-run])"
        ),
        ("trips --purge", "1:7: error: trips has no option '--purge' (it takes --clear, --json, --dry-run)"),
        ("devices \"unterminated", "1:9: error: a quote is not closed"),
        ("audit --deep", "1:7: error: audit has no option '--deep' (it takes --live, --passive, --json)"),
        ("help me", "1:6: error: no command 'me' (did you mean 'set'?)"),
        (
            "scan 10s\nselect all\nsync-time\nshell rm -rf /",
            "4:1: error: unknown command 'shell' (did you mean 'help'?) ('help' lists them)"
        ),
    ]

    @Test func brokenBatchesAreRefusedAtTheirPlace() {
        for (text, message) in Self.broken {
            let error = #expect(throws: BatchError.self) {
                try BatchParser(file: "bad.batch", profiles: Self.profiles).parse(text)
            }
            #expect(error?.description == "bad.batch:" + message, "\(text)")
        }
    }
}
