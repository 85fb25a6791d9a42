#!/usr/bin/env python3
"""An SBeacon client written with bleak, only from BlueZ' documentation and
the contract (../shared/sbeacon-gatt.md): scan, connect, read the firmware
revision, write a driving-behaviour config, read it back, and receive the
calibration notification. Run with DBUS_SYSTEM_BUS_ADDRESS pointing at a
bus where beaconbench-sim serves.

Prints `key value` lines for the test to check.
"""
import asyncio
import struct

from bleak import BleakClient, BleakScanner

SBEACON_PROXIMITY = bytes.fromhex("E2C56DB5DFFB48D2B060D0F5A71096E0")
FIRMWARE_REVISION = "00002a26-0000-1000-8000-00805f9b34fb"
DRIVING_BEHAVIOUR_CONFIG = "53420201-6561-636f-6e00-000000000000"
CALIBRATION_CONTROL_POINT = "53420202-6561-636f-6e00-000000000000"


async def main():
    found = await BleakScanner.discover(timeout=2.0, return_adv=True)
    beacons = sorted(
        (device for device, advert in found.values()
         if advert.manufacturer_data.get(0x004C, b"")[2:18] == SBEACON_PROXIMITY),
        key=lambda device: device.address)
    print("beacons", len(beacons))
    device = beacons[0]
    print("address", device.address)
    async with BleakClient(device, timeout=20.0) as client:
        firmware = await client.read_gatt_char(FIRMWARE_REVISION)
        print("firmware", firmware.decode())
        config = struct.pack("<5H", 450, 500, 350, 300, 0x0007)
        await client.write_gatt_char(DRIVING_BEHAVIOUR_CONFIG, config, response=True)
        print("config", (await client.read_gatt_char(DRIVING_BEHAVIOUR_CONFIG)).hex())
        received = asyncio.Event()
        values = []

        def on_value(_, data):
            values.append(bytes(data))
            received.set()

        await client.start_notify(CALIBRATION_CONTROL_POINT, on_value)
        await client.write_gatt_char(CALIBRATION_CONTROL_POINT, b"\x01", response=True)
        await asyncio.wait_for(received.wait(), 10.0)
        print("notification", values[0].hex())


asyncio.run(main())
