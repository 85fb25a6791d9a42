// beaconbench-sim: a simulated bluetoothd and fleet of SBeacons on D-Bus.
import BeaconSimulator
import Foundation

let commandLine: SimulatorCommandLine
do {
    commandLine = try SimulatorCommandLine(arguments: Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("error: \(error)\n\n\(SimulatorCommandLine.usage)\n".utf8))
    exit(1)
}
if commandLine.showHelp {
    print(SimulatorCommandLine.usage)
    exit(0)
}
do {
    try await SimulatorMain.run(commandLine)
    exit(0)
} catch let error as SimulatorCommandLine.UsageError {
    SimulatorMain.tidyAfterFailure(commandLine)
    FileHandle.standardError.write(Data("error: \(error)\n\n\(SimulatorCommandLine.usage)\n".utf8))
    exit(1)
} catch let error as FleetFileError {
    SimulatorMain.tidyAfterFailure(commandLine)
    FileHandle.standardError.write(Data("error: \(error)\n".utf8))
    exit(1)
} catch {
    SimulatorMain.tidyAfterFailure(commandLine)
    FileHandle.standardError.write(Data("beaconbench-sim: \(error)\n".utf8))
    exit(3)
}
