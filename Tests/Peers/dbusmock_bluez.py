#!/usr/bin/python3
"""python-dbusmock's bluez5 template, an imitation of bluetoothd that this
project does not contain, with one adapter, one SBeacon (adverts per the
contract) and one other device. For BlueZClient's interoperability test.
Once all of that is in place it takes the name org.beaconbench.DbusmockReady.

usage: dbusmock_bluez.py ADDRESS
"""
import os
import subprocess
import sys
import time

import dbus

address = sys.argv[1]
env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=address)
mock = subprocess.Popen(
    ["/usr/bin/python3", "-m", "dbusmock", "--system", "--template", "bluez5"],
    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
bus = dbus.bus.BusConnection(address)
# dbusmock says nothing when it owns its name: asked every 50 ms, for at
# most two minutes.
for _ in range(2400):
    if bus.name_has_owner("org.bluez"):
        break
    time.sleep(0.05)
else:
    sys.exit("waited 120 s for python-dbusmock to own org.bluez")
control = dbus.Interface(bus.get_object("org.bluez", "/org/bluez"), "org.bluez.Mock")
control.AddAdapter("hci0", "dbusmock bench")
beacon = control.AddDevice("hci0", "C1:AA:BB:CC:DD:01", "SBeacon")
control.AddDevice("hci0", "11:22:33:44:55:66", "Headphones")
ibeacon = bytes.fromhex("0215E2C56DB5DFFB48D2B060D0F5A71096E0") + bytes([0x00, 0x64, 0x00, 0x2A, 0xC5])
summary = bytes([0x53, 0x01, 0xAA, 0xBB, 0xCC, 0xDD, 77, 0x03, 1, 0, 8, 0x34, 0x12])
data = dbus.Dictionary(
    {dbus.UInt16(0x004C): dbus.Array(ibeacon, signature="y"), dbus.UInt16(0x0059): dbus.Array(summary, signature="y")},
    signature="qv")
properties = dbus.Interface(bus.get_object("org.bluez", beacon), "org.freedesktop.DBus.Properties")
properties.Set("org.bluez.Device1", "ManufacturerData", data)
properties.Set("org.bluez.Device1", "RSSI", dbus.Int16(-55))
# Set up: said on the bus, where a test can wait for it (NameOwnerChanged).
bus.request_name("org.beaconbench.DbusmockReady")
print("ready", flush=True)
mock.wait()
