// Workbench: provisioning operations (discover, sync clock, calibrate,
// configure, read back, pull records) and the fleet runner. Neighbours:
// BlueZClient and SBeaconProtocol below, Inventory and Profiles beside,
// Console above.
//
// Filled by the issues "BlueZ client and SBeacon operations" and "Console".
