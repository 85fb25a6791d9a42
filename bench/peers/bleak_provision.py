#!/usr/bin/env python3
"""The peer of `beaconbench run batches/provision-new.batch`: what a user would
write instead with bleak 3.1, from BlueZ' documentation and the contract
(../shared/sbeacon-gatt.md) alone. The benchmarks run it against the same
simulated bench as beaconbench (beaconbench-bench peers) and compare the CPU
both spend per device.

    DBUS_SYSTEM_BUS_ADDRESS=... python3 bench/peers/bleak_provision.py [--scan 3] [--concurrency 5]

The steps of provision-new.batch, with the car profile:

1. scan for `--scan` seconds; an SBeacon is a device whose iBeacon
   (ManufacturerData 0x004C) carries the SBeacon proximity UUID; the ones
   chosen are the batch's `select new`: bench summary (ManufacturerData
   0x0059) status bit 4, factory default;
2. per device, at most `--concurrency` at once (beaconbench's default, an
   adapter's 5 connection slots), with one connect at a time per adapter (a
   lock held until the connect returns, i.e. until the services are
   resolved: BlueZ answers a second LE connect with InProgress), retried on
   InProgress and on a connect abort:
   connect; read the battery level and the firmware revision; require
   battery >= 30 % and firmware >= 1.0.8 (skipped otherwise); read uptime
   and time offset, write the offset when it is 0 or off by more than 2 s;
   calibrate (notifications on 0202, write 01, wait for `80 result x y z`,
   then read the calibration state); read the identity, write major 100
   and a minor no other beacon of this run has (sequential from 1, in the
   order the devices are taken); read the driving-behaviour config and
   write the car's thresholds when they differ; read both back and compare.

The scan stops before the devices are worked on, as a script written this
way does. BlueZ then removes a device that is not connected after its
TemporaryTimeout (30 s): the benchmark runs the simulator with
`--temporary-timeout 600` for both tools, so that no device vanishes before
its turn (with 30 s and a realistic radio, most of a 100-beacon fleet would).

(`beaconbench-bench peers` also runs it once without that, on a realistic
radio, and counts the devices lost: errors "device 'dev_…' not found".)

Prints one line of JSON:
`{"found": N, "selected": N, "provisioned": N, "skipped": N, "failed": N,
  "errors": {...}}` — provisioned counts the devices whose every step
succeeded (beaconbench's "changed").
"""
import argparse
import asyncio
import json
import re
import struct
import time

from bleak import BleakClient, BleakScanner
from bleak.exc import BleakDBusError, BleakError

SBEACON_PROXIMITY = bytes.fromhex("E2C56DB5DFFB48D2B060D0F5A71096E0")
APPLE, NORDIC = 0x004C, 0x0059


def std(short):
    return f"0000{short}-0000-1000-8000-00805f9b34fb"


def sbeacon(nnnn):
    return f"5342{nnnn}-6561-636f-6e00-000000000000"


BATTERY_LEVEL = std("2a19")
FIRMWARE_REVISION = std("2a26")
UPTIME = sbeacon("0106")
TIME_OFFSET = sbeacon("0107")
DRIVING_BEHAVIOUR_CONFIG = sbeacon("0201")
CALIBRATION_CONTROL_POINT = sbeacon("0202")
CALIBRATION_STATE = sbeacon("0203")
IDENTITY = sbeacon("0204")

# profiles/car.json
CAR_CONFIG = struct.pack("<5H", 350, 350, 450, 300, 0x0001 | 0x0004)
CAR_MAJOR = 100
MINIMUM_BATTERY = 30
MINIMUM_FIRMWARE = (1, 0, 8)


class Skipped(Exception):
    pass


def is_sbeacon(advert):
    ibeacon = advert.manufacturer_data.get(APPLE, b"")
    return len(ibeacon) == 23 and ibeacon[:2] == b"\x02\x15" and ibeacon[2:18] == SBEACON_PROXIMITY


def is_new(advert):
    summary = advert.manufacturer_data.get(NORDIC, b"")
    return len(summary) == 13 and summary[:2] == b"S\x01" and summary[7] & 0x10 != 0


async def scan(seconds):
    found = {}

    def seen(device, advert):
        if is_sbeacon(advert):
            found[device.address] = (device, advert)

    async with BleakScanner(detection_callback=seen):
        await asyncio.sleep(seconds)
    return found


async def connect(device, lock):
    client = BleakClient(device, timeout=30.0)
    for attempt in range(20):
        try:
            async with lock:
                await client.connect()
            return client
        except (BleakDBusError, BleakError) as error:
            text = str(error)
            if attempt == 19 or not ("InProgress" in text or "In Progress" in text or "abort" in text):
                raise
            await asyncio.sleep(0.05 * (attempt + 1))
    raise BleakError("unreachable")


async def provision(client, minor):
    battery = (await client.read_gatt_char(BATTERY_LEVEL))[0]
    firmware_text = (await client.read_gatt_char(FIRMWARE_REVISION)).decode()
    firmware = tuple(int(part) for part in firmware_text.split("."))
    if battery < MINIMUM_BATTERY:
        raise Skipped(f"battery {battery} %")
    if firmware < MINIMUM_FIRMWARE:
        raise Skipped(f"firmware {firmware_text}")

    # sync-time
    uptime = struct.unpack("<I", await client.read_gatt_char(UPTIME))[0]
    offset = struct.unpack("<q", await client.read_gatt_char(TIME_OFFSET))[0]
    wanted = int(time.time() * 1000) - uptime * 1000
    if offset == 0 or abs(offset - wanted) > 2000:
        await client.write_gatt_char(TIME_OFFSET, struct.pack("<q", wanted), response=True)

    # calibrate
    result = asyncio.get_running_loop().create_future()

    def on_calibration(_, data):
        if not result.done():
            result.set_result(bytes(data))

    await client.start_notify(CALIBRATION_CONTROL_POINT, on_calibration)
    await client.write_gatt_char(CALIBRATION_CONTROL_POINT, b"\x01", response=True)
    answer = await asyncio.wait_for(result, 10.0)
    if len(answer) != 8 or answer[0] != 0x80:
        raise BleakError(f"calibration: malformed answer {answer.hex()}")
    if answer[1] != 0:
        raise BleakError("calibration failed: " + ("motion detected" if answer[1] == 1 else "sensor fault"))
    state = await client.read_gatt_char(CALIBRATION_STATE)
    if state[0] != 1 or state[5:11] != answer[2:8]:
        raise BleakError("calibration state does not match the result")

    # identity
    identity = struct.pack("<HH", CAR_MAJOR, minor)
    if bytes(await client.read_gatt_char(IDENTITY)) != identity:
        await client.write_gatt_char(IDENTITY, identity, response=True)

    # apply, then verify
    if bytes(await client.read_gatt_char(DRIVING_BEHAVIOUR_CONFIG)) != CAR_CONFIG:
        await client.write_gatt_char(DRIVING_BEHAVIOUR_CONFIG, CAR_CONFIG, response=True)
    if bytes(await client.read_gatt_char(DRIVING_BEHAVIOUR_CONFIG)) != CAR_CONFIG:
        raise BleakError("verify: the config read back differs")
    if bytes(await client.read_gatt_char(IDENTITY)) != identity:
        raise BleakError("verify: the identity read back differs")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scan", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=5)
    arguments = parser.parse_args()

    found = await scan(arguments.scan)
    chosen = sorted((device for device, advert in found.values() if is_new(advert)), key=lambda d: d.address)
    slots = asyncio.Semaphore(arguments.concurrency)
    connect_lock = asyncio.Lock()
    counts = {"provisioned": 0, "skipped": 0, "failed": 0}
    errors = {}

    async def one(device, minor):
        async with slots:
            client = None
            try:
                client = await connect(device, connect_lock)
                await provision(client, minor)
                counts["provisioned"] += 1
            except Skipped:
                counts["skipped"] += 1
            except Exception as error:  # a bench full of radios: record and go on
                counts["failed"] += 1
                key = type(error).__name__ + ": " + re.sub(r"dev_[0-9A-Fa-f_]+", "dev_…", str(error))[:60]
                errors[key] = errors.get(key, 0) + 1
            finally:
                if client is not None:
                    try:
                        await client.disconnect()
                    except Exception:
                        pass

    await asyncio.gather(*(one(device, minor) for minor, device in enumerate(chosen, start=1)))
    print(json.dumps({"found": len(found), "selected": len(chosen), **counts, "errors": errors}), flush=True)


asyncio.run(main())
