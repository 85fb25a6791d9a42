// beaconbench-sim: the simulated bluetoothd and beacon fleet. The simulator
// itself arrives with the issue "Simulated bench"; until then this
// executable says so and fails, so nothing mistakes it for a working bench.
import BeaconSimulator
import Glibc

let message = "beaconbench-sim: the simulator is not built yet (issue \"Simulated bench\")\n"
_ = message.withCString { write(2, $0, strlen($0)) }
exit(2)
