"""An SBeacon as a Bumble peripheral, written from the wire contract
(/work/shared/sbeacon-gatt.md, "SBeacon over BLE: the contract, version 1"),
not from the project's simulator. Each beacon has its own controller on the
bench's link, its own static random address, adverts, GATT server and state.

Section numbers in comments are the contract's.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from dataclasses import dataclass, field

from bumble import hci
from bumble.att import ATT_Error, ErrorCode
from bumble.device import Connection, Device
from bumble.gatt import Characteristic, CharacteristicValue, Service

log = logging.getLogger("sbeacon")

PROXIMITY_UUID = bytes.fromhex("E2C56DB5DFFB48D2B060D0F5A71096E0")
APPLE = 0x004C
NORDIC = 0x0059


def sbeacon_uuid(nnnn: int) -> str:
    return f"5342{nnnn:04x}-6561-636f-6e00-000000000000"


def crc16_ccitt_false(data: bytes) -> int:
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def ad(kind: int, payload: bytes) -> bytes:
    return bytes([len(payload) + 1, kind]) + payload


@dataclass
class Incident:
    ident: int
    timestamp: int
    samples: list[tuple[int, int, int]]


@dataclass
class BeaconState:
    """What the beacon holds: the truth the harness reads back (4, 3)."""

    address: str
    serial: str
    battery: int = 90
    firmware: tuple[int, int, int] = (1, 0, 8)
    # Driving Behaviour Config (4): cornering, braking, acceleration mG,
    # duration ms, enable bits.
    config: tuple[int, int, int, int, int] = (300, 300, 300, 500, 0x0001)
    major: int = 1
    minor: int = 1
    calibrated: bool = False
    calibrated_at: int = 0
    gravity: tuple[int, int, int] = (0, 0, 0)
    time_offset_ms: int = 0
    factory_default: bool = True
    trip_status: int = 0
    trips: list[tuple[int, int, int]] = field(default_factory=list)
    events: list[bytes] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    powered_on: float = field(default_factory=time.monotonic)
    # Counters the harness reports: what clients wrote.
    writes: dict[str, int] = field(default_factory=dict)

    def uptime(self) -> int:
        return int(time.monotonic() - self.powered_on)

    def config_bytes(self) -> bytes:
        return struct.pack("<5H", *self.config)

    def status_bits(self) -> int:
        bits = 0
        if self.calibrated:
            bits |= 1 << 0
        if self.config[4] & 0x0001:
            bits |= 1 << 1
        if self.trip_status in (1, 2):
            bits |= 1 << 2
        if self.trips or self.events or self.incidents:
            bits |= 1 << 3
        if self.factory_default:
            bits |= 1 << 4
        return bits

    def ibeacon(self) -> bytes:
        # 1: 02 15, proximity UUID, major and minor BIG-endian, measured power.
        return bytes([0x02, 0x15]) + PROXIMITY_UUID + struct.pack(">HHb", self.major, self.minor, -59)

    def summary(self) -> bytes:
        mac = bytes.fromhex(self.address.replace(":", ""))
        return (
            b"\x53\x01"
            + mac[2:]
            + bytes([self.battery, self.status_bits(), *self.firmware])
            + struct.pack("<H", crc16_ccitt_false(self.config_bytes()))
        )

    def advertising_data(self) -> bytes:
        # The advert: flags and the iBeacon data (3 + 27 = 30 of 31 bytes).
        return ad(0x01, b"\x06") + ad(0xFF, struct.pack("<H", APPLE) + self.ibeacon())

    def scan_response_data(self) -> bytes:
        # The scan response: the name and the bench summary.
        return ad(0x09, b"SBeacon") + ad(0xFF, struct.pack("<H", NORDIC) + self.summary())

    def as_json(self) -> dict:
        c = self.config
        return {
            "address": self.address,
            "serial": self.serial,
            "battery": self.battery,
            "firmware": ".".join(map(str, self.firmware)),
            "config": {"cornering": c[0], "braking": c[1], "acceleration": c[2], "duration": c[3], "enable": c[4]},
            "major": self.major,
            "minor": self.minor,
            "calibrated": self.calibrated,
            "timeOffsetMs": self.time_offset_ms,
            "factoryDefault": self.factory_default,
            "records": {"trips": len(self.trips), "events": len(self.events), "incidents": len(self.incidents)},
            "writes": dict(self.writes),
        }

    # The harness adds "connected" and "advertising" (bench.py).


class SBeacon:
    """The GATT server (2, 3, 4) and adverts (1) of one beacon."""

    def __init__(self, device: Device, state: BeaconState) -> None:
        self.device = device
        self.state = state
        self.connections: list[Connection] = []
        self.busy = False
        device.on("connection", self._on_connection)
        self._build()

    # --- plumbing ---------------------------------------------------------

    def _on_connection(self, connection: Connection) -> None:
        self.connections.append(connection)
        log.info("%s: connected from %s", self.state.address, connection.peer_address)

        def gone(reason) -> None:
            self.connections.remove(connection)
            log.info("%s: disconnected (reason 0x%02x)", self.state.address, reason)

        connection.on("disconnection", gone)

    def _count(self, name: str) -> None:
        self.state.writes[name] = self.state.writes.get(name, 0) + 1

    def _task(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or log.error("task: %r", t.exception()))

    def refresh_adverts(self) -> None:
        """A changed state changes what the beacon announces (1)."""
        self.device.advertising_data = self.state.advertising_data()
        self.device.scan_response_data = self.state.scan_response_data()
        # The controller sends what it was given by HCI; a running advert
        # takes the new data at once (bench.py gives the device its controller).
        controller = getattr(self.device, "bench_controller", None)
        if controller is not None:
            controller.le_legacy_advertiser.advertising_data = self.device.advertising_data
            controller.le_legacy_advertiser.scan_response_data = self.device.scan_response_data

    @staticmethod
    def _readable(uuid: str, value, notify: bool = False, write=None) -> Characteristic:
        properties = Characteristic.Properties.READ
        permissions = Characteristic.READABLE
        if notify:
            properties |= Characteristic.Properties.NOTIFY
        if write is not None:
            properties |= Characteristic.Properties.WRITE
            permissions |= Characteristic.WRITEABLE
        read = value if callable(value) else (lambda _c, v=value: v)
        return Characteristic(uuid, properties, permissions, CharacteristicValue(read=read, write=write))

    # --- the services -----------------------------------------------------

    def _build(self) -> None:
        s = self.state
        P = Characteristic.Properties
        fw = ".".join(map(str, s.firmware)).encode()
        info = Service(
            "180A",
            [
                self._readable("2A29", b"SBeacon Labs"),
                self._readable("2A24", b"SB-1"),
                self._readable("2A25", s.serial.encode()),
                self._readable("2A27", b"B"),
                self._readable("2A26", fw),
            ],
        )
        self.battery = self._readable("2A19", lambda _c: bytes([self.state.battery]), notify=True)
        battery = Service("180F", [self.battery])

        self.trip_status = self._readable(sbeacon_uuid(0x0101), lambda _c: bytes([self.state.trip_status]), notify=True)
        trip_info = self._readable(
            sbeacon_uuid(0x0102),
            lambda _c: struct.pack("<3H", len(self.state.trips), len(self.state.incidents), len(self.state.events)),
        )
        self.record_cp = Characteristic(
            sbeacon_uuid(0x0103),
            P.WRITE | P.NOTIFY,
            Characteristic.WRITEABLE,
            CharacteristicValue(write=self._write_record_cp),
        )
        self.record_data = Characteristic(sbeacon_uuid(0x0104), P.NOTIFY, Characteristic.READABLE, b"")
        self.realtime = Characteristic(sbeacon_uuid(0x0105), P.NOTIFY, Characteristic.READABLE, b"")
        uptime = self._readable(sbeacon_uuid(0x0106), lambda _c: struct.pack("<I", self.state.uptime()))
        time_offset = self._readable(
            sbeacon_uuid(0x0107), lambda _c: struct.pack("<q", self.state.time_offset_ms), write=self._write_time_offset
        )
        sbeacon = Service(
            sbeacon_uuid(0x0100),
            [self.trip_status, trip_info, self.record_cp, self.record_data, self.realtime, uptime, time_offset],
        )

        config = self._readable(sbeacon_uuid(0x0201), lambda _c: self.state.config_bytes(), write=self._write_config)
        self.calibration_cp = Characteristic(
            sbeacon_uuid(0x0202),
            P.WRITE | P.NOTIFY,
            Characteristic.WRITEABLE,
            CharacteristicValue(write=self._write_calibration_cp),
        )
        calibration_state = self._readable(
            sbeacon_uuid(0x0203),
            lambda _c: struct.pack("<BI3h", int(self.state.calibrated), self.state.calibrated_at, *self.state.gravity),
        )
        identity = self._readable(
            sbeacon_uuid(0x0204), lambda _c: struct.pack("<2H", self.state.major, self.state.minor), write=self._write_identity
        )
        device_control = Characteristic(
            sbeacon_uuid(0x0205), P.WRITE, Characteristic.WRITEABLE, CharacteristicValue(write=self._write_device_control)
        )
        config_service = Service(sbeacon_uuid(0x0200), [config, self.calibration_cp, calibration_state, identity, device_control])
        self.device.add_services([info, battery, sbeacon, config_service])

    # --- writes -----------------------------------------------------------

    def _write_time_offset(self, _connection, value: bytes) -> None:
        if len(value) != 8:
            raise ATT_Error(ErrorCode.INVALID_ATTRIBUTE_LENGTH)
        self.state.time_offset_ms = struct.unpack("<q", value)[0]
        self._count("timeOffset")

    def _write_config(self, _connection, value: bytes) -> None:
        if len(value) != 10:
            raise ATT_Error(ErrorCode.INVALID_ATTRIBUTE_LENGTH)
        cornering, braking, acceleration, duration, enable = struct.unpack("<5H", value)
        if not all(50 <= t <= 5000 for t in (cornering, braking, acceleration)):
            raise ATT_Error(ErrorCode.VALUE_NOT_ALLOWED)
        if not 1 <= duration <= 10000 or enable & ~0x0007:
            raise ATT_Error(ErrorCode.VALUE_NOT_ALLOWED)
        self.state.config = (cornering, braking, acceleration, duration, enable)
        self.state.factory_default = False
        self._count("config")
        self.refresh_adverts()

    def _write_identity(self, _connection, value: bytes) -> None:
        if len(value) != 4:
            raise ATT_Error(ErrorCode.INVALID_ATTRIBUTE_LENGTH)
        self.state.major, self.state.minor = struct.unpack("<2H", value)
        self.state.factory_default = False
        self._count("identity")
        self.refresh_adverts()

    def _write_device_control(self, connection: Connection, value: bytes) -> None:
        if value == b"\x01":
            self._count("reboot")
            self._task(self._reboot(connection, reset=False))
        elif value == b"\x02\x5a\xa5":
            self._count("factoryReset")
            self._task(self._reboot(connection, reset=True))
        else:
            raise ATT_Error(ErrorCode.VALUE_NOT_ALLOWED)

    async def _reboot(self, connection: Connection, reset: bool) -> None:
        await asyncio.sleep(0.05)  # the write response goes first
        s = self.state
        if reset:
            s.config = (300, 300, 300, 500, 0x0001)
            s.calibrated, s.calibrated_at, s.gravity = False, 0, (0, 0, 0)
            s.major, s.minor = 1, int(s.serial.rsplit("-", 1)[-1])
            s.time_offset_ms = 0
            s.factory_default = True
        s.powered_on = time.monotonic()
        self.refresh_adverts()
        try:
            await connection.disconnect(hci.HCI_REMOTE_USER_TERMINATED_CONNECTION_ERROR)
        except Exception as error:  # the link may be gone already
            log.info("reboot disconnect: %r", error)

    def _write_calibration_cp(self, connection: Connection, value: bytes) -> None:
        if value != b"\x01":
            raise ATT_Error(ErrorCode.VALUE_NOT_ALLOWED)
        self._count("calibrate")
        self._task(self._calibrate(connection))

    async def _calibrate(self, connection: Connection) -> None:
        await asyncio.sleep(1.5)  # 4.1: about 1.5 s later
        s = self.state
        s.calibrated, s.calibrated_at, s.gravity = True, s.uptime(), (12, -8, 998)
        self.refresh_adverts()
        await self.device.notify_subscriber(connection, self.calibration_cp, b"\x80\x00" + struct.pack("<3h", *s.gravity))

    def _write_record_cp(self, connection: Connection, value: bytes) -> None:
        if len(value) != 1:
            raise ATT_Error(ErrorCode.INVALID_ATTRIBUTE_LENGTH)
        self._task(self._record_transfer(connection, value[0]))

    async def _record_transfer(self, connection: Connection, opcode: int) -> None:
        s = self.state

        async def respond(result: int, count: int) -> None:
            await self.device.notify_subscriber(connection, self.record_cp, bytes([0x80, opcode, result]) + struct.pack("<H", count))

        async def send(record: bytes) -> None:
            await self.device.notify_subscriber(connection, self.record_data, record)

        if self.busy:
            await respond(2, 0)
            return
        self.busy = True
        try:
            if opcode == 0x01:
                if not s.trips:
                    return await respond(3, 0)
                for index, start, end in s.trips:
                    await send(b"\x01" + struct.pack("<BII", index, start, end))
                await respond(0, len(s.trips))
            elif opcode == 0x02:
                if not s.events:
                    return await respond(3, 0)
                for event in s.events:
                    await send(b"\x02" + event)
                await respond(0, len(s.events))
            elif opcode == 0x03:
                if not s.incidents:
                    return await respond(3, 0)
                for incident in s.incidents:
                    xs = [v[0] for v in incident.samples]
                    ys = [v[1] for v in incident.samples]
                    zs = [v[2] for v in incident.samples]
                    n = len(incident.samples)
                    resultants = [int((x * x + y * y + z * z) ** 0.5) for x, y, z in incident.samples]
                    header = struct.pack(
                        "<HIHHH3h",
                        incident.ident,
                        incident.timestamp,
                        n,
                        max(resultants),
                        sum(resultants) // n,
                        sum(xs) // n,
                        sum(ys) // n,
                        sum(zs) // n,
                    )
                    await send(b"\x03" + header)
                    for seq, first in enumerate(range(0, n, 2)):
                        chunk = b"".join(struct.pack("<3h", *v) for v in incident.samples[first : first + 2])
                        await send(b"\x04" + struct.pack("<HB", incident.ident, seq) + chunk)
                await respond(0, len(s.incidents))
            elif opcode in (0x11, 0x12, 0x13):
                {0x11: s.trips, 0x12: s.events, 0x13: s.incidents}[opcode].clear()
                self._count("clear")
                self.refresh_adverts()
                await respond(0, 0)
            else:
                await respond(1, 0)
        finally:
            self.busy = False

    # --- what the harness makes happen --------------------------------------

    def realtime_subscribers(self) -> int:
        """The links that enabled notifications of Real-time Event (Bumble's
        server forgets a link's subscriptions when it drops)."""
        return sum(1 for cccds in self.device.gatt_server.subscribers.values() if cccds.get(self.realtime.handle, b"\0")[0] & 0x01)

    async def realtime_event(self, event_type: int, axis: int, flags: int) -> None:
        """A real-time event (3, 0105), notified to every subscriber."""
        await self.device.notify_subscribers(self.realtime, bytes([0xAA, event_type, axis, flags]))
