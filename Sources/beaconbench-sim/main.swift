// beaconbench-sim: a simulated bluetoothd and fleet of SBeacons on D-Bus.
import BeaconSimulator
import Foundation

do {
    let commandLine = try SimulatorCommandLine(arguments: Array(CommandLine.arguments.dropFirst()))
    if commandLine.showHelp {
        print(SimulatorCommandLine.usage)
        exit(0)
    }
    try await SimulatorMain.run(commandLine)
} catch let error as SimulatorCommandLine.UsageError {
    FileHandle.standardError.write(Data("error: \(error)\n\n\(SimulatorCommandLine.usage)\n".utf8))
    exit(1)
} catch let error as FleetFileError {
    FileHandle.standardError.write(Data("error: \(error)\n".utf8))
    exit(1)
} catch {
    FileHandle.standardError.write(Data("beaconbench-sim: \(error)\n".utf8))
    exit(3)
}
