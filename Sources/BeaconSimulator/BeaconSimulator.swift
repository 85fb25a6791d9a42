// BeaconSimulator: a BlueZ-faithful bluetoothd and a fleet of simulated
// SBeacons on a private bus, built on DBusBinding.
//
// Filled by the issue "Simulated bench".
