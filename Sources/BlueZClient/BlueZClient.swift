// BlueZClient: adapters, discovery, devices and GATT over org.bluez, built on
// DBusBinding. Neighbours: DBusBinding below, Workbench above.
//
// Filled by the issue "BlueZ client and SBeacon operations".
