// beaconbench: provisions SBeacon vehicle beacons over BlueZ. Everything is
// in the Console module; this only hands it the command line.
import Console
import Foundation

exit(await BeaconbenchMain.run(Array(CommandLine.arguments.dropFirst())))
