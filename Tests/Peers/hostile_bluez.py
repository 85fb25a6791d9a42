#!/usr/bin/python3
"""A bluetoothd that lies: it owns org.bluez on a private bus and answers
beaconbench with legal D-Bus that is wrong for BlueZ.

- GetManagedObjects: an adapter missing most of its properties, another
  with Powered as a string; devices with RSSI as a string, ManufacturerData
  of the wrong type, a 1 MiB manufacturer blob, an SBeacon-looking device
  whose GATT tree is incomplete, and 5,000 junk objects.
- Device1.Connect: on one device the wrong reply signature, on another no
  reply at all, on a third the device vanishes (InterfacesRemoved) mid-call.
- GATT ReadValue: the wrong signature, a huge array, or an unknown error.
- StartDiscovery / SetDiscoveryFilter: odd errors.

usage: hostile_bluez.py ADDRESS
"""
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

OM = "org.freedesktop.DBus.ObjectManager"
UUID = bytes.fromhex("E2C56DB5DFFB48D2B060D0F5A71096E0")


def ibeacon(major, minor):
    return dbus.Array(
        [dbus.Byte(b) for b in b"\x02\x15" + UUID + major.to_bytes(2, "big") + minor.to_bytes(2, "big") + b"\xc5"],
        signature="y")


class Root(dbus.service.Object):
    def __init__(self, bus):
        super().__init__(bus, "/")
        self.bus = bus
        self.objects = None

    @dbus.service.signal(OM, signature="oas")
    def InterfacesRemoved(self, path, interfaces):
        pass

    @dbus.service.method(OM, out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        # Built once: six commands ask at once, and building the 5,000 junk
        # objects per call made the last callers wait past their 10 s
        # timeout on a loaded machine (the 1 MiB value as a ByteArray: the
        # same `ay` on the wire, without a million Python objects).
        if self.objects is None:
            self.objects = self.build()
        return self.objects

    def build(self):
        objects = {
            "/org/bluez/hci0": {"org.bluez.Adapter1": {"Address": "00:11:22:33:44:55"}},
            "/org/bluez/hci1": {"org.bluez.Adapter1": {"Address": "00:11:22:33:44:56", "Powered": "yes",
                                                       "Roles": dbus.Array(["central"], signature="s")}},
            "/org/bluez/hci0/dev_C0_00_00_00_00_01": {"org.bluez.Device1": {
                "Address": "C0:00:00:00:00:01", "RSSI": "loud", "Adapter": dbus.ObjectPath("/org/bluez/hci0"),
                "ManufacturerData": dbus.String("not a dict")}},
            "/org/bluez/hci0/dev_C0_00_00_00_00_02": {"org.bluez.Device1": {
                "Address": "C0:00:00:00:00:02", "Adapter": dbus.ObjectPath("/org/bluez/hci0"),
                "Connected": False, "ServicesResolved": False, "RSSI": dbus.Int16(-50),
                "ManufacturerData": dbus.Dictionary({dbus.UInt16(0x004C): dbus.ByteArray(
                    b"\xaa" * (1024 * 1024), variant_level=1)}, signature="qv")}},
        }
        # SBeacon-looking devices whose connects go wrong in different ways.
        for number in (3, 4, 5, 6):
            path = "/org/bluez/hci0/dev_C0_00_00_00_00_0%d" % number
            objects[path] = {"org.bluez.Device1": {
                "Address": "C0:00:00:00:00:0%d" % number, "Adapter": dbus.ObjectPath("/org/bluez/hci0"),
                "Connected": number == 6, "ServicesResolved": number == 6, "RSSI": dbus.Int16(-40),
                "Name": "SBeacon",
                "ManufacturerData": dbus.Dictionary(
                    {dbus.UInt16(0x004C): dbus.Array(ibeacon(100, number), variant_level=1)}, signature="qv")}}
        # Device 6 says it is connected and resolved, with half a GATT tree.
        objects["/org/bluez/hci0/dev_C0_00_00_00_00_06/service0001"] = {"org.bluez.GattService1": {
            "UUID": "0000180a-0000-1000-8000-00805f9b34fb", "Primary": True}}
        objects["/org/bluez/hci0/dev_C0_00_00_00_00_06/service0001/char0002"] = {
            "org.bluez.GattCharacteristic1": {"UUID": 12345, "Flags": "read"}}
        for number in range(5000):
            objects["/junk/%d" % number] = {"org.example.Junk%d" % (number % 7): {"x": dbus.Int32(number)}}
        return objects


class Adapter(dbus.service.Object):
    @dbus.service.method("org.bluez.Adapter1", in_signature="a{sv}")
    def SetDiscoveryFilter(self, _filter):
        pass

    @dbus.service.method("org.bluez.Adapter1", out_signature="s")
    def StartDiscovery(self):
        return "started, sort of"

    @dbus.service.method("org.bluez.Adapter1")
    def StopDiscovery(self):
        raise dbus.exceptions.DBusException("no idea", name="org.bluez.Error.Weird")


class Device(dbus.service.Object):
    def __init__(self, bus, number):
        super().__init__(bus, "/org/bluez/hci0/dev_C0_00_00_00_00_0%d" % number)
        self.number = number

    @dbus.service.method("org.bluez.Device1", out_signature="as", async_callbacks=("ok", "fail"))
    def Connect(self, ok, fail):
        if self.number == 3:
            ok(["wrong", "signature"])
        elif self.number == 4:
            pass  # never answers
        elif self.number == 5:
            root.InterfacesRemoved(dbus.ObjectPath(self._object_path), ["org.bluez.Device1"])
            fail(dbus.exceptions.DBusException("gone", name="org.bluez.Error.Failed"))
        else:
            ok([])

    @dbus.service.method("org.bluez.Device1")
    def Disconnect(self):
        pass


if __name__ == "__main__":
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(sys.argv[1])
    root = Root(bus)
    Adapter(bus, "/org/bluez/hci0")
    for n in (3, 4, 5, 6):
        Device(bus, n)
    name = dbus.service.BusName("org.bluez", bus)  # kept: the name goes with the object
    print("ready", flush=True)
    GLib.MainLoop().run()
