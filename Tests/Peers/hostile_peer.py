#!/usr/bin/python3
"""A peer that owns a name on a private bus and answers badly on purpose.

Used by DBusBindingTests.InteropTests: every answer here is legal D-Bus but
wrong for what the caller expects (wrong signatures, huge arrays, missing
properties, unix fds, signals of the wrong shape), so the binding must turn
each into a typed error, never a crash or a hang.

usage: hostile_peer.py ADDRESS NAME
"""
import os
import sys

import dbus
import dbus.lowlevel
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

IFACE = "org.example.Hostile1"


class Hostile(dbus.service.Object):
    @dbus.service.method("org.freedesktop.DBus.ObjectManager", out_signature="as")
    def GetManagedObjects(self):
        return ["not", "a", "dictionary"]

    @dbus.service.method(IFACE, out_signature="ay")
    def HugeBytes(self):
        return dbus.ByteArray(b"\xAA" * (8 * 1024 * 1024))

    @dbus.service.method(IFACE, out_signature="av")
    def ManyVariants(self):
        return [dbus.String("x", variant_level=1)] * 200000

    @dbus.service.method(IFACE, out_signature="v")
    def DeepVariant(self):
        value = dbus.String("core")
        for level in range(1, 25):
            value = dbus.Array([value], signature="v" if level > 1 else "s")
        return value

    @dbus.service.method(IFACE, out_signature="h")
    def FileDescriptor(self):
        return dbus.types.UnixFd(os.open("/dev/null", os.O_RDONLY))

    @dbus.service.method(IFACE, out_signature="a{sv}")
    def WithFdInside(self):
        return {"fd": dbus.types.UnixFd(os.open("/dev/null", os.O_RDONLY), variant_level=1), "ok": dbus.Int32(1, variant_level=1)}

    @dbus.service.method(IFACE, in_signature="", out_signature="")
    def BadSignals(self):
        # PropertiesChanged with the wrong body, then a correct one.
        bad = dbus.lowlevel.SignalMessage(
            "/org/example/Hostile", "org.freedesktop.DBus.Properties", "PropertiesChanged")
        bad.append("org.bluez.Device1", signature="s")
        self.connection.send_message(bad)
        good = dbus.lowlevel.SignalMessage(
            "/org/example/Hostile", "org.freedesktop.DBus.Properties", "PropertiesChanged")
        good.append("org.bluez.Device1", {"RSSI": dbus.Int16(-42)}, dbus.Array([], signature="s"),
                    signature="sa{sv}as")
        self.connection.send_message(good)

    @dbus.service.method(IFACE, out_signature="")
    def Vanish(self):
        # Quit while the caller waits: it must get an error, not hang.
        os._exit(0)


def main():
    address, name = sys.argv[1], sys.argv[2]
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    Hostile(bus, "/org/example/Hostile")
    bus.request_name(name)
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
