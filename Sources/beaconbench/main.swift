// beaconbench: the workbench's command-line entry point. Until the console
// lands (issue "Console"), it answers --version and --help only.
import DBusBinding
import Glibc

let version = "0.1.0-dev"
let arguments = Array(CommandLine.arguments.dropFirst())

switch arguments.first {
case "--version":
    print("beaconbench \(version)")
case "--help", "-h", nil:
    print(
        """
        usage: beaconbench [--version] [--help]

        beaconbench configures and provisions SBeacon vehicle beacons over BlueZ.
        This build has the D-Bus layer, the BlueZ client, the beacon operations and
        the simulator (beaconbench-sim); the REPL, batches and fleet runner
        arrive with the console.
        """)
default:
    var standardError = StandardError()
    print("error: unknown command '\(arguments[0])'; try 'beaconbench --help'", to: &standardError)
    exit(1)
}

struct StandardError: TextOutputStream {
    mutating func write(_ string: String) { _ = string.withCString { Glibc.write(2, $0, strlen($0)) } }
}
