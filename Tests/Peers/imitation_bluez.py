#!/usr/bin/python3
"""An independent BlueZ imitation with a fleet of factory-new SBeacons (issue 26).

Written apart from the project's simulator, only from the wire contract
(/work/shared/sbeacon-gatt.md), docs/bluez-failures.md Parts 1 and 2 (what
bluetoothd sends) and BlueZ's D-Bus API documents. It owns org.bluez on the
bus given and exports one adapter (hci0, fixed address) with an
ObjectManager, and N SBeacons that advertise while a discovery session runs.
See docs/imitation.md for the modes and the state file.

usage: imitation_bluez.py --bus ADDRESS --state FILE [--beacons N] [modes…]

Modes (combinable):
  --stale K                 beacons 1..K are stale from their first Connect:
                            Connected true, Failed "le-connection-abort-by-local",
                            Connected false, until Adapter1.RemoveDevice and
                            rediscovery.
  --slots N [--slot-text]   at most N LE links; beyond, Connect fails after a
                            delay (abort, or a "limited resources" text).
  --wedge / --wedge-later [--wedge-not-ready]
                            the adapter is wedged from start (or once the first
                            discovery session ends): StartDiscovery InProgress
                            (or NotReady), Powered stays true, no adverts,
                            Connect aborts after the connect timeout. Cured by
                            Powered false → true.
  --replug-after S / --replug-at-connect N
                            hci0 goes away (devices, then the adapter) and
                            comes back as hci1, same address, powered; devices
                            ever connected come back without RSSI.
  --shift-gatt              GATT handles move between connections of a beacon.
  --drop-after-write N      each beacon's link drops once, after its Nth write
                            (so a run reconnects, and sees shifted handles).
  --busy-while-discovering  Connect → InProgress "In Progress" while any
                            discovery session is active.
  --cached K                K more beacons exist at start as device objects
                            (RSSI −42, adverts cached) but never advertise:
                            Connect aborts after the connect timeout; the
                            objects go after --temporary-timeout unless a
                            Connect made them persistent.

The state (each beacon's config, identity, calibration, time offset, and the
counters) is written to --state at SIGTERM/SIGINT, and returned as JSON by
org.beaconbench.Imitation1.State() on /org/beaconbench/imitation.
"""
import argparse
import json
import os
import random
import signal
import struct
import sys
import time

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

OM = "org.freedesktop.DBus.ObjectManager"
PROPS = "org.freedesktop.DBus.Properties"
ADAPTER = "org.bluez.Adapter1"
DEVICE = "org.bluez.Device1"
SERVICE = "org.bluez.GattService1"
CHAR = "org.bluez.GattCharacteristic1"
DESC = "org.bluez.GattDescriptor1"
IBEACON_UUID = bytes.fromhex("E2C56DB5DFFB48D2B060D0F5A71096E0")
ADAPTER_ADDRESS = "00:1A:7D:DA:71:13"
ABORT = "le-connection-abort-by-local"
SLOT_TEXT = "Connection Rejected due to Limited Resources (0x0d)"


def std(short):
    return "0000%04x-0000-1000-8000-00805f9b34fb" % short


def sb(nnnn):
    return "5342%04x-6561-636f-6e00-000000000000" % nnnn


def err(name, message):
    return dbus.exceptions.DBusException(message, name="org.bluez.Error." + name)


def ay(data):
    return dbus.Array([dbus.Byte(b) for b in data], signature="y")


def crc16(data):
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def later(seconds, function, *arguments):
    def fire():
        function(*arguments)
        return False
    return GLib.timeout_add(max(0, int(seconds * 1000)), fire)


# --------------------------------------------------------------------------
# The beacon side: ground truth, the contract's GATT behaviour.

class Beacon:
    DEFAULT_CONFIG = struct.pack("<HHHHH", 300, 300, 300, 500, 0x0001)

    def __init__(self, number, address, battery=80, firmware="1.0.8", present=True):
        self.number = number
        self.address = address
        self.serial = "SB1-%05d" % number
        self.battery = battery
        self.firmware = firmware
        self.present = present  # advertising on the bench
        self.power_on = time.time() - random.uniform(100, 5000)
        self.rssi_base = random.randint(-72, -48)
        self.stale = False  # bluetoothd's device state for it (mode 1)
        self.handle_base = 0x0010
        self.factory_reset()

    def factory_reset(self):
        self.config = self.DEFAULT_CONFIG
        self.major, self.minor = 1, self.number
        self.calibrated, self.calibrated_at, self.vector = False, 0, (0, 0, 0)
        self.time_offset = 0
        self.factory_default = True

    def uptime(self):
        return int(time.time() - self.power_on)

    def ibeacon(self):
        return b"\x02\x15" + IBEACON_UUID + struct.pack(">HHb", self.major, self.minor, -59)

    def summary(self):
        status = (1 if self.calibrated else 0) | (2 if self.config_value()[4] & 1 else 0) \
            | (16 if self.factory_default else 0)
        mac = bytes(int(part, 16) for part in self.address.split(":")[2:])
        fw = [int(part) for part in self.firmware.split(".")]
        return b"\x53\x01" + mac + bytes([self.battery, status] + fw) + struct.pack("<H", crc16(self.config))

    def manufacturer_data(self):
        return dbus.Dictionary({
            dbus.UInt16(0x004C): dbus.Array(ay(self.ibeacon()), variant_level=1),
            dbus.UInt16(0x0059): dbus.Array(ay(self.summary()), variant_level=1),
        }, signature="qv")

    def config_value(self):
        return struct.unpack("<HHHHH", self.config)

    def truth(self):
        c = self.config_value()
        return {
            "address": self.address, "number": self.number, "battery": self.battery, "firmware": self.firmware,
            "present": self.present, "serial": self.serial,
            "config": {"cornering": c[0], "braking": c[1], "acceleration": c[2], "duration": c[3], "enable": c[4]},
            "major": self.major, "minor": self.minor,
            "calibration": {"calibrated": self.calibrated, "at": self.calibrated_at, "x": self.vector[0],
                            "y": self.vector[1], "z": self.vector[2]},
            "timeOffset": self.time_offset, "factoryDefault": self.factory_default, "stale": self.stale,
        }

    # The GATT database: (service uuid, [(char uuid, flags)]).
    LAYOUT = [
        (std(0x180A), [(std(0x2A29), ["read"]), (std(0x2A24), ["read"]), (std(0x2A25), ["read"]),
                       (std(0x2A27), ["read"]), (std(0x2A26), ["read"])]),
        (std(0x180F), [(std(0x2A19), ["read", "notify"])]),
        (sb(0x0100), [(sb(0x0101), ["read", "notify"]), (sb(0x0102), ["read"]), (sb(0x0103), ["write", "notify"]),
                      (sb(0x0104), ["notify"]), (sb(0x0105), ["notify"]), (sb(0x0106), ["read"]),
                      (sb(0x0107), ["read", "write"])]),
        (sb(0x0200), [(sb(0x0201), ["read", "write"]), (sb(0x0202), ["write", "notify"]), (sb(0x0203), ["read"]),
                      (sb(0x0204), ["read", "write"]), (sb(0x0205), ["write"])]),
    ]

    def read(self, uuid):
        values = {
            std(0x2A29): b"Imitation Beacons", std(0x2A24): b"SB-1", std(0x2A25): self.serial.encode(),
            std(0x2A27): b"B", std(0x2A26): self.firmware.encode(), std(0x2A19): bytes([self.battery]),
            sb(0x0101): b"\x00", sb(0x0102): b"\x00" * 6, sb(0x0106): struct.pack("<I", self.uptime()),
            sb(0x0107): struct.pack("<q", self.time_offset), sb(0x0201): self.config,
            sb(0x0203): struct.pack("<BIhhh", 1 if self.calibrated else 0, self.calibrated_at, *self.vector),
            sb(0x0204): struct.pack("<HH", self.major, self.minor),
        }
        if uuid not in values:
            raise err("NotPermitted", "Read not permitted")
        return values[uuid]

    def write(self, uuid, value, notify, drop_link):
        """Applies a write; `notify(uuid, bytes)` sends a notification later."""
        if uuid == sb(0x0107):
            if len(value) != 8:
                raise err("InvalidArguments", "Invalid Length")
            self.time_offset = struct.unpack("<q", value)[0]
        elif uuid == sb(0x0201):
            if len(value) != 10:
                raise err("InvalidArguments", "Invalid Length")
            c, b, a, d, e = struct.unpack("<HHHHH", value)
            if not all(50 <= t <= 5000 for t in (c, b, a)) or not 1 <= d <= 10000 or e & ~0x0007:
                raise err("Failed", "Operation failed with ATT error: 0x13")
            self.config = bytes(value)
            self.factory_default = False
        elif uuid == sb(0x0204):
            if len(value) != 4:
                raise err("InvalidArguments", "Invalid Length")
            self.major, self.minor = struct.unpack("<HH", value)
            self.factory_default = False
        elif uuid == sb(0x0202):
            if bytes(value) != b"\x01":
                raise err("Failed", "Operation failed with ATT error: 0x13")
            later(1.5, self.calibration_done, notify)
        elif uuid == sb(0x0103):
            if len(value) != 1:
                raise err("InvalidArguments", "Invalid Length")
            op = value[0]
            if op in (1, 2, 3):
                later(0.05, notify, sb(0x0103), bytes([0x80, op, 3, 0, 0]))
            elif op in (0x11, 0x12, 0x13):
                later(0.05, notify, sb(0x0103), bytes([0x80, op, 0, 0, 0]))
            else:
                later(0.05, notify, sb(0x0103), bytes([0x80, op, 1, 0, 0]))
        elif uuid == sb(0x0205):
            if bytes(value) == b"\x01":
                later(0.05, drop_link)
            elif bytes(value) == b"\x02\x5a\xa5":
                self.factory_reset()
                later(0.05, drop_link)
            else:
                raise err("Failed", "Operation failed with ATT error: 0x13")
        else:
            raise err("NotPermitted", "Write not permitted")

    def calibration_done(self, notify):
        self.vector = (random.randint(-30, 30), random.randint(-30, 30), random.randint(985, 1015))
        self.calibrated, self.calibrated_at = True, self.uptime()
        self.factory_default = False
        notify(sb(0x0202), b"\x80\x00" + struct.pack("<hhh", *self.vector))


# --------------------------------------------------------------------------
# D-Bus objects with properties.

class PropObject(dbus.service.Object):
    def __init__(self, daemon, path, interface, properties):
        super().__init__(daemon.bus, path)
        self.daemon = daemon
        self.path = path
        self.interface = interface
        self.props = properties
        self.exported = True

    def unexport(self):
        if self.exported:
            self.exported = False
            self.remove_from_connection()

    def set(self, name, value):
        self.props[name] = value
        if self.exported:
            self.PropertiesChanged(self.interface, {name: value}, [])

    def invalidate(self, name):
        if name in self.props:
            del self.props[name]
            if self.exported:
                self.PropertiesChanged(self.interface, {}, [name])

    @dbus.service.method(PROPS, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        if interface != self.interface or name not in self.props:
            raise dbus.exceptions.DBusException("No such property", name="org.freedesktop.DBus.Error.InvalidArgs")
        return self.props[name]

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        return self.props if interface == self.interface else {}

    @dbus.service.method(PROPS, in_signature="ssv")
    def Set(self, interface, name, value):
        raise dbus.exceptions.DBusException("read-only", name="org.freedesktop.DBus.Error.PropertyReadOnly")

    @dbus.service.signal(PROPS, signature="sa{sv}as")
    def PropertiesChanged(self, interface, changed, invalidated):
        pass


class Root(dbus.service.Object):
    def __init__(self, daemon):
        super().__init__(daemon.bus, "/")
        self.daemon = daemon

    @dbus.service.method(OM, out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        return {o.path: {o.interface: o.props} for o in self.daemon.objects()}

    @dbus.service.signal(OM, signature="oa{sa{sv}}")
    def InterfacesAdded(self, path, interfaces):
        pass

    @dbus.service.signal(OM, signature="oas")
    def InterfacesRemoved(self, path, interfaces):
        pass


class Control(dbus.service.Object):
    def __init__(self, daemon):
        super().__init__(daemon.bus, "/org/beaconbench/imitation")
        self.daemon = daemon

    @dbus.service.method("org.beaconbench.Imitation1", out_signature="s")
    def State(self):
        return json.dumps(self.daemon.state())


class Adapter(PropObject):
    def __init__(self, daemon, index):
        super().__init__(daemon, "/org/bluez/hci%d" % index, ADAPTER, {
            "Address": dbus.String(ADAPTER_ADDRESS), "AddressType": dbus.String("public"),
            "Name": dbus.String("bench"), "Alias": dbus.String("bench"), "Class": dbus.UInt32(0x7c010c),
            "Powered": dbus.Boolean(True), "PowerState": dbus.String("on"), "Discoverable": dbus.Boolean(False),
            "DiscoverableTimeout": dbus.UInt32(180), "Pairable": dbus.Boolean(False),
            "PairableTimeout": dbus.UInt32(0), "Discovering": dbus.Boolean(False),
            "UUIDs": dbus.Array([], signature="s"), "Modalias": dbus.String("usb:v1D6Bp0246d0548"),
            "Roles": dbus.Array(["central", "peripheral"], signature="s"),
        })
        self.sessions = {}  # sender → filter dict
        self.wedged = False

    def powered(self):
        return bool(self.props["Powered"])

    @dbus.service.method(ADAPTER, in_signature="a{sv}", sender_keyword="sender")
    def SetDiscoveryFilter(self, properties, sender=None):
        self.daemon.filters[sender] = dict(properties)
        if sender in self.sessions:
            self.sessions[sender] = dict(properties)

    @dbus.service.method(ADAPTER, out_signature="as")
    def GetDiscoveryFilters(self):
        return ["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"]

    @dbus.service.method(ADAPTER, sender_keyword="sender", async_callbacks=("ok", "fail"))
    def StartDiscovery(self, ok, fail, sender=None):
        d = self.daemon
        d.count("startDiscovery")
        if not self.powered():
            return fail(err("NotReady", "Resource Not Ready"))
        if sender in self.sessions:
            return fail(err("InProgress", "Operation already in progress"))
        if self.wedged:
            d.count("discoveryRefused")
            if d.args.wedge_not_ready:
                return fail(err("NotReady", "Resource Not Ready"))
            return fail(err("InProgress", "Operation already in progress"))
        d.watch(sender)
        self.sessions[sender] = d.filters.get(sender, {})
        ok()
        if not self.props["Discovering"]:
            d.session_started = time.time()
            self.set("Discovering", dbus.Boolean(True))

    @dbus.service.method(ADAPTER, sender_keyword="sender")
    def StopDiscovery(self, sender=None):
        if sender not in self.sessions:
            raise err("Failed", "No discovery started")
        self.end_session(sender)

    def end_session(self, sender):
        self.sessions.pop(sender, None)
        if not self.sessions and self.props["Discovering"]:
            self.discovery_cleanup()
            self.set("Discovering", dbus.Boolean(False))
            if self.daemon.args.wedge_later and not self.daemon.wedge_used:
                self.daemon.wedge_used = True
                self.wedged = True

    def discovery_cleanup(self):
        for device in list(self.daemon.devices.values()):
            if device.adapter is self and device.found_this_session:
                device.found_this_session = False
                device.invalidate("RSSI")

    @dbus.service.method(ADAPTER, in_signature="o", async_callbacks=("ok", "fail"))
    def RemoveDevice(self, path, ok, fail):
        d = self.daemon
        device = next((x for x in d.devices.values() if x.path == str(path) and x.adapter is self), None)
        if device is None:
            return fail(err("DoesNotExist", "Does Not Exist"))
        if not self.powered():
            return fail(err("NotReady", "Resource Not Ready"))
        d.counters["removeDevice"][device.beacon.address] = d.counters["removeDevice"].get(device.beacon.address,
                                                                                          0) + 1
        d.log("RemoveDevice %s" % device.beacon.address)
        if device.props["Connected"]:
            device.pending_removals.append(ok)
            device.disconnect("org.bluez.Reason.Local", "Connection terminated by local host")
        else:
            d.remove_device(device, forget=True)
            ok()

    @dbus.service.method(PROPS, in_signature="ssv", async_callbacks=("ok", "fail"))
    def Set(self, interface, name, value, ok, fail):
        if interface != ADAPTER or name != "Powered":
            return fail(dbus.exceptions.DBusException("read-only", name="org.freedesktop.DBus.Error.PropertyReadOnly"))
        self.daemon.set_powered(self, bool(value))
        ok()


class Device(PropObject):
    def __init__(self, daemon, adapter, beacon, rssi=None, temporary=True):
        path = "%s/dev_%s" % (adapter.path, beacon.address.replace(":", "_"))
        properties = {
            "Address": dbus.String(beacon.address), "AddressType": dbus.String("random"),
            "Name": dbus.String("SBeacon"), "Alias": dbus.String("SBeacon"), "Paired": dbus.Boolean(False),
            "Bonded": dbus.Boolean(False), "Trusted": dbus.Boolean(False), "Blocked": dbus.Boolean(False),
            "LegacyPairing": dbus.Boolean(False), "Connected": dbus.Boolean(False),
            "UUIDs": dbus.Array([], signature="s"), "Adapter": dbus.ObjectPath(adapter.path),
            "ServicesResolved": dbus.Boolean(False),
        }
        if rssi is not None:
            properties["RSSI"] = dbus.Int16(rssi)
            properties["TxPower"] = dbus.Int16(4)
            properties["ManufacturerData"] = beacon.manufacturer_data()
        super().__init__(daemon, path, DEVICE, properties)
        self.adapter = adapter
        self.beacon = beacon
        self.temporary = temporary
        self.last_seen = time.time()
        self.found_this_session = rssi is not None
        self.pending = None  # (ok, fail, timer)
        self.pending_removals = []
        self.gatt = []  # exported GATT objects of this device (services, chars, descs)
        self.gatt_base = None  # the handle base the exported objects were built from
        self.connections = 0
        self.linked = False  # a link (slot) is held

    def advert(self, rssi):
        self.last_seen = time.time()
        self.found_this_session = True
        filters = self.daemon.active_filters(self.adapter)
        proximity = any("RSSI" in f or "Pathloss" in f for f in filters)
        duplicate = any(bool(f.get("DuplicateData", False)) for f in filters)
        old = self.props.get("RSSI")
        if old is None or proximity or abs(int(old) - rssi) >= 8:
            self.set("RSSI", dbus.Int16(rssi))
        data = self.beacon.manufacturer_data()
        if duplicate or self.props.get("ManufacturerData") != data:
            self.set("ManufacturerData", data)

    @dbus.service.method(DEVICE, async_callbacks=("ok", "fail"))
    def Connect(self, ok, fail):
        self.daemon.connect(self, ok, fail)

    @dbus.service.method(DEVICE, async_callbacks=("ok", "fail"))
    def Disconnect(self, ok, fail):
        self.daemon.count("disconnectCalls")
        if self.pending is not None:
            self.answer_pending(err("Failed", "br-connection-canceled"))
        if self.props["Connected"]:
            self.disconnect("org.bluez.Reason.Local", "Connection terminated by local host")
        ok()

    @dbus.service.method(DEVICE)
    def Pair(self):
        raise err("Failed", "Pairing not supported by this beacon")

    @dbus.service.method(DEVICE)
    def CancelPairing(self):
        raise err("DoesNotExist", "Does Not Exist")

    @dbus.service.method(DEVICE, in_signature="s")
    def ConnectProfile(self, uuid):
        raise err("NotSupported", "Not Supported")

    @dbus.service.signal(DEVICE, signature="ss")
    def Disconnected(self, reason, message):
        pass

    def answer_pending(self, error=None):
        if self.pending is None:
            return
        ok, fail, timer = self.pending
        self.pending = None
        if timer:
            GLib.source_remove(timer)
        if error is not None and not self.props["Connected"]:
            self.linked = False
        if error is None:
            ok()
        else:
            fail(error)

    def disconnect(self, reason, message):
        """src/device.c device_remove_connection order."""
        self.linked = False
        if self.props["ServicesResolved"]:
            self.set("ServicesResolved", dbus.Boolean(False))
        self.answer_pending(err("Failed", "br-connection-canceled"))
        if self.exported:
            self.Disconnected(reason, message)
        if self.props["Connected"]:
            self.set("Connected", dbus.Boolean(False))
        for note in self.gatt:
            if isinstance(note, Characteristic) and note.props["Notifying"]:
                note.set("Notifying", dbus.Boolean(False))
        removals, self.pending_removals = self.pending_removals, []
        if removals:
            self.daemon.remove_device(self, forget=True)
            for ok in removals:
                ok()
        self.daemon.link_freed(self.adapter)


class Gatt(PropObject):
    pass


class Service(Gatt):
    def __init__(self, daemon, device, handle, uuid):
        super().__init__(daemon, "%s/service%04x" % (device.path, handle), SERVICE, {
            "UUID": dbus.String(uuid), "Device": dbus.ObjectPath(device.path), "Primary": dbus.Boolean(True),
            "Includes": dbus.Array([], signature="o"), "Handle": dbus.UInt16(handle)})


class Descriptor(Gatt):
    def __init__(self, daemon, char, handle):
        super().__init__(daemon, "%s/desc%04x" % (char.path, handle), DESC, {
            "UUID": dbus.String(std(0x2902)), "Characteristic": dbus.ObjectPath(char.path),
            "Value": ay(b""), "Flags": dbus.Array(["read", "write"], signature="s"), "Handle": dbus.UInt16(handle)})

    @dbus.service.method(DESC, in_signature="a{sv}", out_signature="ay")
    def ReadValue(self, options):
        return ay(b"\x00\x00")


class Characteristic(Gatt):
    def __init__(self, daemon, device, service, handle, uuid, flags):
        super().__init__(daemon, "%s/char%04x" % (service.path, handle), CHAR, {
            "UUID": dbus.String(uuid), "Service": dbus.ObjectPath(service.path), "Value": ay(b""),
            "Notifying": dbus.Boolean(False), "Flags": dbus.Array(flags, signature="s"),
            "Handle": dbus.UInt16(handle + 1), "MTU": dbus.UInt16(247)})
        self.device = device
        self.uuid = uuid

    def usable(self):
        d = self.device
        if not d.props["Connected"] or not self.exported:
            raise err("Failed", "Not connected")

    @dbus.service.method(CHAR, in_signature="a{sv}", out_signature="ay", async_callbacks=("ok", "fail"))
    def ReadValue(self, options, ok, fail):
        def answer():
            try:
                self.usable()
                value = self.device.beacon.read(self.uuid)
            except dbus.exceptions.DBusException as error:
                return fail(error)
            self.props["Value"] = ay(value)
            ok(ay(value))
        later(self.daemon.att_delay(), answer)

    @dbus.service.method(CHAR, in_signature="aya{sv}", async_callbacks=("ok", "fail"))
    def WriteValue(self, value, options, ok, fail):
        data = bytes(value)

        def answer():
            try:
                self.usable()
                self.device.beacon.write(self.uuid, data, self.daemon.notifier(self.device),
                                         lambda: self.device.props["Connected"] and self.device.disconnect(
                                             "org.bluez.Reason.Remote", "Connection terminated by remote user"))
            except dbus.exceptions.DBusException as error:
                return fail(error)
            self.daemon.count("writes")
            address = self.device.beacon.address
            written = self.daemon.counters["writesPerBeacon"].get(address, 0) + 1
            self.daemon.counters["writesPerBeacon"][address] = written
            ok()
            if written == self.daemon.args.drop_after_write:
                # The link drops once, right after this write landed (a
                # remote disconnect): the next connection resolves afresh.
                self.daemon.log("drop link %s after write %d" % (address, written))
                later(0.01, lambda: self.device.props["Connected"] and self.device.disconnect(
                    "org.bluez.Reason.Remote", "Connection terminated by remote user"))
        later(self.daemon.att_delay(), answer)

    @dbus.service.method(CHAR, async_callbacks=("ok", "fail"))
    def StartNotify(self, ok, fail):
        if not self.device.props["Connected"]:
            return fail(err("Failed", "Not connected"))
        if "notify" not in self.props["Flags"]:
            return fail(err("NotSupported", "Operation is not supported"))
        if not self.props["Notifying"]:
            self.set("Notifying", dbus.Boolean(True))
        ok()

    @dbus.service.method(CHAR, async_callbacks=("ok", "fail"))
    def StopNotify(self, ok, fail):
        if self.props["Notifying"]:
            self.set("Notifying", dbus.Boolean(False))
        ok()


# --------------------------------------------------------------------------
# bluetoothd

class Daemon:
    def __init__(self, bus, args):
        self.bus = bus
        self.args = args
        self.started = time.time()
        self.root = Root(self)
        self.control = Control(self)
        self.filters = {}
        self.watched = set()
        self.devices = {}  # address → Device
        self.adapters = []
        self.adapter_index = 0
        self.session_started = None
        self.wedge_used = False
        self.replugged = False
        self.connect_calls_total = 0
        self.counters = {"connect": {}, "removeDevice": {}, "powerCycles": 0, "powerOff": 0, "powerOn": 0,
                         "replugs": 0, "writesPerBeacon": {}, "writes": 0, "startDiscovery": 0,
                         "discoveryRefused": 0, "disconnectCalls": 0, "connectFailures": {},
                         "slotRefusals": 0, "busyRefusals": 0, "staleAborts": 0, "maxLinks": 0}
        self.events = []
        self.beacons = []
        for number in range(1, args.beacons + 1):
            battery = 20 if number > args.beacons - args.low_battery - args.old_firmware and \
                number <= args.beacons - args.old_firmware else random.randint(60, 95)
            firmware = "1.0.6" if number > args.beacons - args.old_firmware else "1.0.8"
            self.beacons.append(Beacon(number, "D0:1B:00:00:%02X:%02X" % (number // 256, number % 256),
                                       battery=battery, firmware=firmware))
        for index in range(args.stale):
            self.beacons[index].stale = True
        self.cached = []
        for number in range(1, args.cached + 1):
            beacon = Beacon(900 + number, "D0:1C:00:00:%02X:%02X" % (number // 256, number % 256),
                            present=False)
            self.cached.append(beacon)
        adapter = self.add_adapter()
        if args.wedge:
            adapter.wedged = True
            self.wedge_used = True
        for beacon in self.cached:
            device = Device(self, adapter, beacon, rssi=-42)
            self.devices[beacon.address] = device
        self.bus.add_signal_receiver(self.owner_changed, "NameOwnerChanged", "org.freedesktop.DBus",
                                     "org.freedesktop.DBus", "/org/freedesktop/DBus")
        GLib.timeout_add(int(args.advert_interval * 1000), self.advertise)
        GLib.timeout_add(500, self.expire)
        if args.replug_after is not None:
            later(args.replug_after, self.replug)

    # -- helpers
    def log(self, text):
        line = "%.3f %s" % (time.time() - self.started, text)
        self.events.append(line)
        if self.args.verbose:
            print(line, file=sys.stderr, flush=True)

    def count(self, name):
        self.counters[name] += 1

    def att_delay(self):
        return random.uniform(0.005, 0.03)

    def objects(self):
        result = list(self.adapters)
        for device in self.devices.values():
            result.append(device)
            result.extend(x for x in device.gatt if x.exported)
        return [o for o in result if o.exported]

    def adapter(self):
        return self.adapters[0] if self.adapters else None

    def active_filters(self, adapter):
        return list(adapter.sessions.values())

    def watch(self, sender):
        self.watched.add(sender)

    def owner_changed(self, name, old, new):
        if name.startswith(":") and not new:
            self.filters.pop(name, None)
            for adapter in self.adapters:
                if name in adapter.sessions:
                    adapter.end_session(name)

    def export(self, obj):
        self.root.InterfacesAdded(dbus.ObjectPath(obj.path), {obj.interface: obj.props})

    def add_adapter(self):
        adapter = Adapter(self, self.adapter_index)
        self.adapters = [adapter]
        self.export(adapter)
        return adapter

    def links(self, adapter):
        return sum(1 for d in self.devices.values() if d.adapter is adapter and d.linked)

    def link_freed(self, adapter):
        pass

    def notifier(self, device):
        def notify(uuid, value):
            for obj in device.gatt:
                if isinstance(obj, Characteristic) and obj.uuid == uuid and obj.exported:
                    if obj.props["Notifying"] and device.props["Connected"]:
                        obj.set("Value", ay(value))
        return notify

    # -- adverts and expiry
    def advertise(self):
        adapter = self.adapter()
        if adapter is None or not adapter.powered() or adapter.wedged or not adapter.props["Discovering"]:
            return True
        for beacon in self.beacons:
            if not beacon.present or random.random() < 0.1:  # an advert lost now and then
                continue
            rssi = beacon.rssi_base + random.randint(-3, 3)
            device = self.devices.get(beacon.address)
            if device is None or not device.exported:
                device = Device(self, adapter, beacon, rssi=rssi)
                self.devices[beacon.address] = device
                self.export(device)
                self.log("found %s" % beacon.address)
            else:
                device.advert(rssi)
        return True

    def expire(self):
        now = time.time()
        for device in list(self.devices.values()):
            if device.temporary and not device.props["Connected"] and device.pending is None \
                    and now - device.last_seen > self.args.temporary_timeout:
                self.log("temporary timeout %s" % device.beacon.address)
                self.remove_device(device, forget=True)
        return True

    def remove_device(self, device, forget):
        for obj in reversed(device.gatt):
            if obj.exported:
                self.root.InterfacesRemoved(dbus.ObjectPath(obj.path), [obj.interface])
                obj.unexport()
        device.gatt = []
        if device.exported:
            self.root.InterfacesRemoved(dbus.ObjectPath(device.path), [DEVICE])
            device.unexport()
        if self.devices.get(device.beacon.address) is device:
            del self.devices[device.beacon.address]
        if forget:
            device.beacon.stale = False  # storage and GATT cache deleted: the cure of mode 1

    # -- Connect
    def connect(self, device, ok, fail):
        address = device.beacon.address
        adapter = device.adapter
        self.counters["connect"][address] = self.counters["connect"].get(address, 0) + 1
        self.connect_calls_total += 1
        self.log("Connect %s" % address)

        def failed(error):
            self.counters["connectFailures"][address] = self.counters["connectFailures"].get(address, 0) + 1
            self.log("Connect %s failed: %s" % (address, error.get_dbus_message()))
            fail(error)

        if self.args.replug_at_connect and self.connect_calls_total == self.args.replug_at_connect \
                and not self.replugged:
            later(0.05, self.replug)
        if device.pending is not None:
            return failed(err("InProgress", "In Progress"))
        if device.props["Connected"]:
            return ok()
        if not adapter.powered():
            return failed(err("Failed", "le-connection-adapter-not-powered"))
        if self.args.busy_while_discovering and adapter.props["Discovering"]:
            self.count("busyRefusals")
            return failed(err("InProgress", "In Progress"))
        device.temporary = False  # btd_device_set_temporary(false): static random → persistent
        beacon = device.beacon

        def timeout_abort():
            device.pending = None
            failed(err("Failed", ABORT))
            return False

        if adapter.wedged or not beacon.present:
            timer = GLib.timeout_add(int(self.args.connect_timeout * 1000), timeout_abort)
            device.pending = (ok, failed, timer)
            return
        if self.args.slots is not None and self.links(adapter) >= self.args.slots:
            self.count("slotRefusals")
            text = SLOT_TEXT if self.args.slot_text else ABORT

            def refuse():
                device.pending = None
                failed(err("Failed", text))
                return False
            timer = GLib.timeout_add(int(self.args.slot_delay * 1000), refuse)
            device.pending = (ok, failed, timer)
            return
        device.linked = True
        self.counters["maxLinks"] = max(self.counters["maxLinks"], self.links(adapter))

        def link_up():
            device.pending = (ok, failed, None)
            device.set("Connected", dbus.Boolean(True))
            if beacon.stale:
                self.count("staleAborts")
                device.pending = None
                failed(err("Failed", ABORT))
                later(0.05, lambda: device.props["Connected"] and device.disconnect(
                    "org.bluez.Reason.Local", "Connection terminated by local host"))
                return False
            device.pending = None
            device.connections += 1
            ok()
            later(random.uniform(0.05, 0.15), self.resolve, device)
            return False
        timer = GLib.timeout_add(int(random.uniform(0.08, 0.25) * 1000), link_up)
        device.pending = (ok, failed, timer)

    def resolve(self, device):
        if not device.props["Connected"] or not device.exported:
            return
        beacon = device.beacon
        if self.args.shift_gatt and device.connections > 1:
            beacon.handle_base += 0x10
        if device.gatt_base != beacon.handle_base:
            for obj in reversed(device.gatt):  # children first
                if obj.exported:
                    self.root.InterfacesRemoved(dbus.ObjectPath(obj.path), [obj.interface])
                    obj.unexport()
            device.gatt = []
            handle = beacon.handle_base
            for service_uuid, chars in Beacon.LAYOUT:
                service = Service(self, device, handle, service_uuid)
                self.export(service)
                device.gatt.append(service)
                handle += 1
                for uuid, flags in chars:
                    char = Characteristic(self, device, service, handle, uuid, flags)
                    self.export(char)
                    device.gatt.append(char)
                    handle += 2
                    if "notify" in flags:
                        desc = Descriptor(self, char, handle)
                        self.export(desc)
                        device.gatt.append(desc)
                        handle += 1
                handle += 1
            device.gatt_base = beacon.handle_base
        device.set("UUIDs", dbus.Array([s for s, _ in Beacon.LAYOUT], signature="s"))
        device.set("ServicesResolved", dbus.Boolean(True))

    # -- power and replug
    def set_powered(self, adapter, on):
        if on == adapter.powered():
            return
        if not on:
            self.count("powerOff")
            self.log("power off %s" % adapter.path)
            adapter.props["PowerState"] = dbus.String("off-disabling")
            for device in list(self.devices.values()):
                if device.adapter is adapter:
                    device.answer_pending(err("Failed", "le-connection-abort-by-local"))
            for sender in list(adapter.sessions):
                adapter.sessions.pop(sender)
            adapter.discovery_cleanup()
            for device in list(self.devices.values()):
                if device.adapter is adapter and device.props["Connected"]:
                    device.disconnect("org.bluez.Reason.Unknown", "Unspecified")
            if adapter.props["Discovering"]:
                adapter.set("Discovering", dbus.Boolean(False))
            adapter.set("Powered", dbus.Boolean(False))
            adapter.set("PowerState", dbus.String("off"))
        else:
            self.count("powerOn")
            if self.counters["powerOff"] > self.counters["powerCycles"]:
                self.counters["powerCycles"] += 1
            self.log("power on %s" % adapter.path)
            adapter.wedged = False
            adapter.set("Powered", dbus.Boolean(True))
            adapter.set("PowerState", dbus.String("on"))

    def replug(self):
        if self.replugged:
            return
        self.replugged = True
        self.count("replugs")
        old = self.adapter()
        self.log("unplug %s" % old.path)
        for device in list(self.devices.values()):
            device.answer_pending(err("Failed", "br-connection-canceled"))
            device.linked = False
            self.remove_device(device, forget=False)
            if device.temporary:
                continue
            self.devices[device.beacon.address] = device  # kept in storage by adapter address
        persistent = [d for d in self.devices.values()]
        self.devices = {}
        old.sessions.clear()
        self.root.InterfacesRemoved(dbus.ObjectPath(old.path), [ADAPTER])
        old.unexport()
        self.adapters = []

        def back():
            self.adapter_index += 1
            adapter = self.add_adapter()
            self.log("replugged as %s" % adapter.path)
            for stored in persistent:
                device = Device(self, adapter, stored.beacon, rssi=None, temporary=False)
                self.devices[stored.beacon.address] = device
                self.export(device)
            return False
        later(self.args.replug_gone, back)

    # -- state
    def state(self):
        return {
            "adapter": {"address": ADAPTER_ADDRESS, "path": self.adapter().path if self.adapter() else None},
            "beacons": [b.truth() for b in self.beacons],
            "cached": [b.truth() for b in self.cached],
            "counters": self.counters,
            "events": self.events[-400:],
        }


def main():
    parser = argparse.ArgumentParser(description="An independent BlueZ imitation with SBeacons.")
    parser.add_argument("--bus", required=True)
    parser.add_argument("--state", help="JSON file written at SIGTERM/SIGINT")
    parser.add_argument("--beacons", type=int, default=8)
    parser.add_argument("--low-battery", type=int, default=1, help="beacons at 20 %% battery (before the last)")
    parser.add_argument("--old-firmware", type=int, default=1, help="the last beacons, on firmware 1.0.6")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--advert-interval", type=float, default=0.5)
    parser.add_argument("--connect-timeout", type=float, default=20.0, help="the kernel's LE connect timeout")
    parser.add_argument("--temporary-timeout", type=float, default=30.0)
    parser.add_argument("--stale", type=int, default=0)
    parser.add_argument("--slots", type=int)
    parser.add_argument("--slot-text", action="store_true")
    parser.add_argument("--slot-delay", type=float, default=1.0)
    parser.add_argument("--wedge", action="store_true")
    parser.add_argument("--wedge-later", action="store_true")
    parser.add_argument("--wedge-not-ready", action="store_true")
    parser.add_argument("--replug-after", type=float)
    parser.add_argument("--replug-at-connect", type=int, default=0)
    parser.add_argument("--replug-gone", type=float, default=1.5)
    parser.add_argument("--shift-gatt", action="store_true")
    parser.add_argument("--drop-after-write", type=int, default=0,
                        help="drop each beacon's link once, right after its Nth successful write")
    parser.add_argument("--busy-while-discovering", action="store_true")
    parser.add_argument("--cached", type=int, default=0)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    random.seed(args.seed)

    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(args.bus)
    daemon = Daemon(bus, args)
    name = dbus.service.BusName("org.bluez", bus, do_not_queue=True)  # kept: the name goes with the object
    loop = GLib.MainLoop()

    def finish(*_):
        if args.state:
            temporary = args.state + ".tmp"
            with open(temporary, "w") as out:
                json.dump(daemon.state(), out, indent=1)
            os.replace(temporary, args.state)
        loop.quit()
        return False
    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGTERM, finish)
    GLib.unix_signal_add(GLib.PRIORITY_HIGH, signal.SIGINT, finish)
    print("ready", flush=True)
    loop.run()
    del name


if __name__ == "__main__":
    main()
