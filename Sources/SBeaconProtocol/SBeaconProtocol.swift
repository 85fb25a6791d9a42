// SBeaconProtocol: the SBeacon wire contract (../shared/sbeacon-gatt.md) as
// pure functions: bytes in, typed values out, no I/O. The UUID table lives in
// one file of this target.
//
// Filled by the issue "BlueZ client and SBeacon operations".
