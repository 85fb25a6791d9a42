import Console
import Testing

@Suite("the command line", .timeLimit(.minutes(2)))
struct InvocationTests {
    @Test func globalOptionsEnvironmentAndModes() throws {
        let environment = [
            "BEACONBENCH_BUS": "unix:path=/run/x", "BEACONBENCH_ADAPTER": "hci1", "BEACONBENCH_INVENTORY": "/tmp/i.db",
            "BEACONBENCH_PROFILES": "/a:/b", "BEACONBENCH_CONCURRENCY": "3", "BEACONBENCH_JSON": "1", "NO_COLOR": "1",
        ]
        let fromEnvironment = try Invocation.parse([], environment: environment)
        #expect(fromEnvironment.bus == .address("unix:path=/run/x"))
        #expect(fromEnvironment.adapter == "hci1")
        #expect(fromEnvironment.inventoryPath == "/tmp/i.db")
        #expect(fromEnvironment.profileDirectories == ["/a", "/b"])
        #expect(fromEnvironment.concurrency == 3)
        #expect(fromEnvironment.json)
        #expect(!fromEnvironment.color)
        #expect(fromEnvironment.mode == .interactive)

        // Options win over the environment.
        let options = try Invocation.parse(
            [
                "--bus", "session", "--adapter=hci0", "--concurrency", "7", "-v", "run", "x.batch", "--set", "a=b=c",
                "--set=d=", "--dry-run",
            ], environment: environment)
        #expect(options.bus == .session)
        #expect(options.adapter == "hci0")
        #expect(options.concurrency == 7)
        #expect(options.verbose)
        #expect(options.mode == .run(file: "x.batch", overrides: ["a": "b=c", "d": ""], dryRun: true))

        let oneShot = try Invocation.parse(["--sim", "4", "apply", "van", "c7d9a3b5"], environment: [:])
        #expect(oneShot.mode == .oneShot(["apply", "van", "c7d9a3b5"]))
        #expect(oneShot.simulation?.count == 4)
        #expect(try Invocation.parse(["--version"], environment: [:]).mode == .version)
    }

    @Test(arguments: [
        (["--concurrency", "0"], "--concurrency wants 1–64, got '0'"),
        (["--adapter", "wlan0"], "--adapter wants hciN, got 'wlan0'"),
        (["--bus"], "--bus needs a value"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["run"], "run needs a batch file (run FILE)"),
        (["run", "a", "b"], "run takes one batch file, got 'b' too"),
        (["run", "a", "--set", "x"], "--set wants NAME=VALUE, got 'x'"),
        (["run", "a", "--force"], "unknown option '--force' for run (--set NAME=VALUE, --dry-run)"),
        (["--sim", "many"], "--sim wants a number of beacons 1–10000, got 'many'"),
        (["--sim", "3", "--sim-fleet", "f.json"], "--sim and --sim-fleet exclude each other"),
        (["--sim-option", "--fresh"], "--sim-option needs --sim N, --sim-fleet FILE or --sim-state FILE"),
    ])
    func usageErrors(arguments: [String], message: String) {
        #expect(throws: Invocation.UsageError(message: message)) { try Invocation.parse(arguments, environment: [:]) }
    }
}
