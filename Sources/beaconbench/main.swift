// beaconbench: provisions SBeacon vehicle beacons over BlueZ. Everything is
// in the Console module; this only hands it the command line.
import Console
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
// `--version` and `--help` are answered before any thread is started.
if let status = BeaconbenchMain.immediate(arguments) { exit(status) }
exit(await BeaconbenchMain.run(arguments))
