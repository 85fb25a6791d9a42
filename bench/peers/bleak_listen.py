#!/usr/bin/env python3
"""The peer of `beaconbench scan 60s`: a passive bleak 3.1 scanner that listens
to SBeacon adverts for a while and decodes each one (iBeacon identity and the
bench summary, ../shared/sbeacon-gatt.md section 1), as a user would write it
to watch a depot's beacons without connecting.

    DBUS_SYSTEM_BUS_ADDRESS=... python3 bench/peers/bleak_listen.py [--seconds 60]

BleakScanner sets the discovery filter {Transport: le, DuplicateData: false};
bluetoothd (and the simulator) then announce every RSSI change, and bleak
calls the detection callback for each. Prints one line of JSON:
`{"beacons": N, "callbacks": N, "adverts": N}` — beacons: distinct SBeacons
seen; callbacks: detection callbacks; adverts: the SBeacon ones decoded.
"""
import argparse
import asyncio
import json
import struct

from bleak import BleakScanner

SBEACON_PROXIMITY = bytes.fromhex("E2C56DB5DFFB48D2B060D0F5A71096E0")
APPLE, NORDIC = 0x004C, 0x0059


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    arguments = parser.parse_args()

    beacons = {}
    counts = {"callbacks": 0, "adverts": 0}

    def seen(device, advert):
        counts["callbacks"] += 1
        ibeacon = advert.manufacturer_data.get(APPLE, b"")
        if len(ibeacon) != 23 or ibeacon[:2] != b"\x02\x15" or ibeacon[2:18] != SBEACON_PROXIMITY:
            return
        major, minor, power = struct.unpack(">HHb", ibeacon[18:23])
        summary = advert.manufacturer_data.get(NORDIC, b"")
        if len(summary) == 13 and summary[:2] == b"S\x01":
            battery, status, fw_major, fw_minor, fw_patch, crc = struct.unpack("<BBBBBH", summary[6:13])
            state = (summary[2:6].hex(), battery, status, f"{fw_major}.{fw_minor}.{fw_patch}", crc)
        else:
            state = None
        counts["adverts"] += 1
        beacons[device.address] = (major, minor, power, advert.rssi, state)

    async with BleakScanner(detection_callback=seen):
        await asyncio.sleep(arguments.seconds)
    print(json.dumps({"beacons": len(beacons), **counts}), flush=True)


asyncio.run(main())
