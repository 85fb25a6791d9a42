"""The real-stack bench, run inside the VM: a Bumble controller on the kernel's
/dev/vhci (hci0 to bluetoothd) and N SBeacons (sbeacon.py), each with its own
Bumble controller, on one LocalLink.

Fixes to Bumble 0.0.236's link and controller are made here
(docs/realstack.md):
- LE data is sent from the address the connection was made with, not the
  sending controller's current random address (the kernel scans and
  initiates from fresh private addresses);
- an active scan gets each advertiser's own scan response (Bumble's
  controller reports the advert's data twice, as ADV_IND and SCAN_RSP);
- the controller on /dev/vhci sends LE Enhanced Connection Complete when the
  host unmasks it (the kernel waits for that event alone), and LE Create
  Connection Cancel ends a pending connection as the specification says.

A control socket (line of JSON in, line of JSON out) lets the scenario read
the beacons' own state and make things happen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import struct

from bumble import hci, ll
from bumble.controller import Controller
from bumble.core import PhysicalTransport
from bumble.device import Device
from bumble.host import Host
from bumble.link import LocalLink
from bumble.transport import open_transport
from bumble.transport.common import AsyncPipeSink

from sbeacon import BeaconState, Incident, SBeacon

log = logging.getLogger("bench")

# Legacy advertising only: an SBeacon sends legacy adverts (31 bytes); with
# the extended-advertising feature off, the kernel scans with the legacy
# commands and the beacons' hosts advertise with them.
LEGACY_FEATURES = Controller.le_features & ~hci.LeFeatureMask.LE_EXTENDED_ADVERTISING & ~hci.LeFeatureMask.LE_PERIODIC_ADVERTISING


class BenchLink(LocalLink):
    def send_acl_data(self, sender_controller, destination_address, transport, data):
        if transport != PhysicalTransport.LE:
            return super().send_acl_data(sender_controller, destination_address, transport, data)
        connection = sender_controller.le_connections.get(destination_address)
        source_address = connection.self_address if connection else sender_controller.random_address
        destination = self.find_le_controller(destination_address)
        if destination is not None:
            asyncio.get_running_loop().call_soon(
                lambda: destination.on_link_acl_data(source_address, transport, data)
            )

    def advertiser_of(self, address: hci.Address) -> Controller | None:
        for controller in self.controllers:
            advertiser = controller.le_legacy_advertiser
            if advertiser.enabled and advertiser.address == address:
                return controller
        return None


class BeaconController(Controller):
    le_features = LEGACY_FEATURES

    def on_ll_control_pdu(self, sender_address, packet) -> None:
        if isinstance(packet, ll.TerminateInd):
            log.info("%s: LL terminate from %s (known: %s)", self.name, sender_address, list(map(str, self.le_connections)))
        super().on_ll_control_pdu(sender_address, packet)


class CentralController(Controller):
    """The controller the kernel drives through /dev/vhci."""

    le_features = LEGACY_FEATURES

    def __init__(self, *args, rssi_of=None, scan_response_every=1, **kwargs):
        super().__init__(*args, **kwargs)
        self.rssi_of = rssi_of or (lambda _address: -60)
        self.scan_response_every = scan_response_every
        self.adverts_heard: dict[str, int] = {}
        self.host_disconnects: set[int] = set()

    # The LE event mask's bit for LE Enhanced Connection Complete
    # (subevent 0x0A: bit 9).
    ENHANCED_CONNECTION_COMPLETE = 1 << (hci.HCI_LE_ENHANCED_CONNECTION_COMPLETE_EVENT - 1)

    def send_hci_packet(self, packet) -> None:
        """A controller with LL Privacy sends LE Enhanced Connection Complete,
        not LE Connection Complete, once the host unmasks it (Core 5.3, Vol 4,
        Part E, 7.7.65.10). The kernel unmasks it and waits for it alone
        (use_enhanced_conn_complete: LL Privacy or extended advertising);
        Bumble 0.0.236 always sends the plain event, so the kernel's
        hci_le_create_conn_sync timed out on every connection (20 s), sent LE
        Create Connection Cancel and took the link for failed: it never sent
        HCI Disconnect for it (docs/realstack.md)."""
        if isinstance(packet, hci.HCI_LE_Connection_Complete_Event) and self.le_event_mask & self.ENHANCED_CONNECTION_COMPLETE:
            packet = hci.HCI_LE_Enhanced_Connection_Complete_Event(
                status=packet.status,
                connection_handle=packet.connection_handle,
                role=packet.role,
                peer_address_type=packet.peer_address_type,
                peer_address=packet.peer_address,
                local_resolvable_private_address=hci.Address.ANY,
                peer_resolvable_private_address=hci.Address.ANY,
                connection_interval=packet.connection_interval,
                peripheral_latency=packet.peripheral_latency,
                supervision_timeout=packet.supervision_timeout,
                central_clock_accuracy=packet.central_clock_accuracy,
            )
        if isinstance(packet, hci.HCI_Disconnection_Complete_Event) and packet.connection_handle in self.host_disconnects:
            # The host ended it: the controller reports "terminated by local
            # host" (Core 5.3, Vol 4, Part E, 7.1.6), whatever reason the
            # host gave the peer. Bumble echoes the host's reason (0x13
            # "remote user terminated"): the kernel then reported a remote
            # disconnect (mgmt reason 3) after bluetoothd's own (reason 2).
            self.host_disconnects.discard(packet.connection_handle)
            packet = hci.HCI_Disconnection_Complete_Event(
                status=packet.status,
                connection_handle=packet.connection_handle,
                reason=hci.HCI_ErrorCode.CONNECTION_TERMINATED_BY_LOCAL_HOST_ERROR,
            )
        if isinstance(packet, (hci.HCI_LE_Connection_Complete_Event, hci.HCI_LE_Enhanced_Connection_Complete_Event)):
            log.info(
                "hci0: %s to %s, status 0x%02x, handle 0x%04x", type(packet).__name__.removeprefix("HCI_").removesuffix("_Event"),
                packet.peer_address, packet.status, packet.connection_handle,
            )
        super().send_hci_packet(packet)

    def on_hci_le_create_connection_cancel_command(self, command):
        """Core 5.3, Vol 4, Part E, 7.8.13: with a connection pending, the
        controller stops it and, after the Command Complete, sends the
        connection complete event with Unknown Connection Identifier (0x02);
        with none pending the command is disallowed. Bumble 0.0.236 answers
        success and keeps the connection pending (the next LE Create
        Connection is then refused, and the kernel never hears the attempt
        end)."""
        pending = self.pending_le_connection
        log.info("hci0: LE Create Connection Cancel (%s)", f"pending to {pending.peer_address}" if pending else "nothing pending")
        if pending is None:
            return hci.HCI_StatusReturnParameters(hci.HCI_ErrorCode.COMMAND_DISALLOWED_ERROR)
        self.pending_le_connection = None
        cancelled = hci.HCI_LE_Connection_Complete_Event(
            status=hci.HCI_ErrorCode.UNKNOWN_CONNECTION_IDENTIFIER_ERROR,
            connection_handle=0,
            role=hci.Role.CENTRAL,
            peer_address_type=pending.peer_address_type,
            peer_address=pending.peer_address,
            connection_interval=0,
            peripheral_latency=0,
            supervision_timeout=0,
            central_clock_accuracy=0,
        )
        # Queued now, it reaches the host after the Command Complete this
        # handler's return value becomes (send_hci_packet queues both).
        asyncio.get_running_loop().call_soon(self.send_hci_packet, cancelled)
        return hci.HCI_StatusReturnParameters(hci.HCI_ErrorCode.SUCCESS)

    def on_hci_disconnect_command(self, command):
        connection = self.find_le_connection_by_handle(command.connection_handle)
        log.info(
            "hci0: HCI Disconnect handle 0x%04x (%s), reason 0x%02x", command.connection_handle,
            f"{connection.self_address} -> {connection.peer_address}" if connection else "no LE connection", command.reason,
        )
        if connection is not None:
            self.host_disconnects.add(command.connection_handle)
        return super().on_hci_disconnect_command(command)

    def on_advertising_pdu(self, pdu) -> None:
        if isinstance(pdu, ll.AdvInd) and self.le_scan_enable:
            address = pdu.advertiser_address
            rssi = self.rssi_of(address)
            report = hci.HCI_LE_Advertising_Report_Event.Report(
                event_type=hci.HCI_LE_Advertising_Report_Event.EventType.ADV_IND,
                address_type=address.address_type,
                address=address,
                data=pdu.data,
                rssi=rssi,
            )
            self.send_hci_packet(hci.HCI_LE_Advertising_Report_Event([report]))
            heard = self.adverts_heard.get(str(address), 0) + 1
            self.adverts_heard[str(address)] = heard
            # Active scanning: the advertiser answers the scan request with
            # its own scan response (not every time: a scanner backs off).
            advertiser = self.link.advertiser_of(address)
            if self.le_scan_type == 1 and advertiser is not None and heard % self.scan_response_every == 0:
                response = hci.HCI_LE_Advertising_Report_Event.Report(
                    event_type=hci.HCI_LE_Advertising_Report_Event.EventType.SCAN_RSP,
                    address_type=address.address_type,
                    address=address,
                    data=advertiser.le_legacy_advertiser.scan_response_data,
                    rssi=rssi,
                )
                self.send_hci_packet(hci.HCI_LE_Advertising_Report_Event([response]))
        if (pending := self.pending_le_connection) and pending.peer_address == pdu.advertiser_address:
            self.create_le_connection(pdu.advertiser_address)


def fleet(count: int, seed: int) -> list[BeaconState]:
    """N factory-new beacons: one with a low battery, one with old firmware
    (when N ≥ 3), some with records to pull."""
    rng = random.Random(seed)
    states = []
    for i in range(1, count + 1):
        # Static random addresses (top two bits 11).
        address = f"C0:5B:{rng.randrange(256):02X}:{rng.randrange(256):02X}:{i >> 8:02X}:{i & 0xFF:02X}"
        state = BeaconState(address=address, serial=f"SB1-{seed}-{i}", minor=i)
        state.battery = rng.randrange(55, 100)
        if count >= 3 and i == 2:
            state.battery = 12
        if count >= 3 and i == 3:
            state.firmware = (1, 0, 5)
        if i % 3 == 1:
            state.trips = [(k, 100 + 600 * k, 400 + 600 * k) for k in range(i % 4 + 1)]
            # 18 bytes each (contract 3): index, type (5 harsh braking),
            # timestamp, duration 500 ms, average 400 mG, maximum 1000 mG,
            # the average vector.
            state.events = [
                bytes([k, 5]) + struct.pack("<IHHH3h", 200 + 600 * k, 500, 400, 1000, 0, -400, 0)
                for k in range(2)
            ]
            state.incidents = [Incident(1, 321, [(100 * j, -50 * j, 1000) for j in range(5)])]
        states.append(state)
    return states


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.link = BenchLink()
        self.beacons: dict[str, SBeacon] = {}
        self.held_back: list[BeaconState] = []
        # Where each beacon lies, as the scanner hears it: the box on the
        # pallet (-70 dBm), a beacon that arrived on the bench (-50 dBm:
        # `station --rssi-min -60` serves only those).
        self.arrived: set[str] = set()

    def rssi_of(self, address: hci.Address) -> int:
        return -50 if str(address) in self.arrived else -70

    async def start(self) -> None:
        transport = await open_transport("vhci")
        self.transport = transport
        self.central = CentralController(
            "hci0",
            host_source=transport.source,
            host_sink=transport.sink,
            link=self.link,
            public_address="F0:F1:F2:F3:F4:F5",
            rssi_of=self.rssi_of,
            scan_response_every=self.args.scan_response_every,
        )
        states = fleet(self.args.beacons, self.args.seed)
        arriving = self.args.arriving
        for state in states[: len(states) - arriving]:
            await self.add(state)
        self.held_back = states[len(states) - arriving :]

    async def add(self, state: BeaconState) -> SBeacon:
        controller = BeaconController(f"beacon-{state.address}", link=self.link)
        address = hci.Address(state.address, hci.Address.RANDOM_DEVICE_ADDRESS)
        device = Device(name="SBeacon", address=address, host=Host(controller, AsyncPipeSink(controller)))
        device.bench_controller = controller
        beacon = SBeacon(device, state)
        await device.power_on()
        device.advertising_data = state.advertising_data()
        device.scan_response_data = state.scan_response_data()
        await self.advertise(device)
        self.beacons[state.address] = beacon
        return beacon

    async def advertise(self, device: Device) -> None:
        await device.start_advertising(
            own_address_type=hci.OwnAddressType.RANDOM,
            auto_restart=True,
            advertising_interval_min=self.args.interval_ms,
            advertising_interval_max=self.args.interval_ms,
        )

    async def heartbeat(self) -> None:
        """Every 10 s, one line: what the link is doing (for the record)."""
        while True:
            await asyncio.sleep(10)
            central = self.central
            pending = central.pending_le_connection
            advertising = sum(b.device.bench_controller.le_legacy_advertiser.enabled for b in self.beacons.values())
            connected = sum(len(b.connections) for b in self.beacons.values())
            log.info(
                "heartbeat: adverts heard %d, scanning %s (type %d), connecting to %s, %d advertising, %d links",
                sum(central.adverts_heard.values()), central.le_scan_enable, central.le_scan_type,
                pending.peer_address if pending else "-", advertising, connected,
            )

    def state(self) -> list[dict]:
        out = []
        for beacon in self.beacons.values():
            entry = beacon.state.as_json()
            entry["connected"] = len(beacon.connections)
            entry["advertising"] = beacon.device.bench_controller.le_legacy_advertiser.enabled
            entry["realtimeSubscribers"] = beacon.realtime_subscribers()
            entry["rssi"] = self.rssi_of(hci.Address(beacon.state.address, hci.Address.RANDOM_DEVICE_ADDRESS))
            out.append(entry)
        return out

    async def command(self, request: dict) -> dict:
        match request.get("cmd"):
            case "state":
                return {"beacons": self.state(), "adverts": self.central.adverts_heard}
            case "arrive":
                if not self.held_back:
                    return {"error": "no beacon left to arrive"}
                state = self.held_back.pop(0)
                self.arrived.add(state.address)
                beacon = await self.add(state)
                return {"arrived": beacon.state.address}
            case "event":
                beacon = self.beacons.get(request.get("address", ""))
                if beacon is None:
                    return {"error": "no such beacon"}
                subscribers = beacon.realtime_subscribers()
                await beacon.realtime_event(int(request.get("type", 5)), int(request.get("axis", 0x59)), int(request.get("flags", 0x40)))
                return {"notified": beacon.state.address, "subscribers": subscribers}
            case "drop":
                # The beacon ends its links itself (a link dropped by the peer).
                beacon = self.beacons.get(request.get("address", ""))
                if beacon is None:
                    return {"error": "no such beacon"}
                links = list(beacon.connections)
                for connection in links:
                    await connection.disconnect(hci.HCI_ErrorCode.REMOTE_USER_TERMINATED_CONNECTION_ERROR)
                return {"dropped": beacon.state.address, "links": len(links)}
            case "silence":
                # The beacon stops advertising (taken off the bench, battery out).
                beacon = self.beacons.get(request.get("address", ""))
                if beacon is None:
                    return {"error": "no such beacon"}
                await beacon.device.stop_advertising()
                return {"silenced": beacon.state.address}
            case "resume":
                beacon = self.beacons.get(request.get("address", ""))
                if beacon is None:
                    return {"error": "no such beacon"}
                await self.advertise(beacon.device)
                return {"resumed": beacon.state.address}
            case other:
                return {"error": f"unknown command {other!r}"}

    async def serve(self, path: str) -> None:
        async def client(reader, writer):
            try:
                while line := await reader.readline():
                    try:
                        reply = await self.command(json.loads(line))
                    except Exception as error:  # a bad request is answered, never fatal
                        reply = {"error": repr(error)}
                    writer.write(json.dumps(reply).encode() + b"\n")
                    await writer.drain()
            finally:
                writer.close()

        server = await asyncio.start_unix_server(client, path=path + ".tmp")
        os.rename(path + ".tmp", path)  # it appears only when it serves
        async with server:
            await server.serve_forever()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--beacons", type=int, default=10)
    parser.add_argument("--arriving", type=int, default=0, help="beacons held back until 'arrive'")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--interval-ms", type=float, default=200)
    parser.add_argument("--scan-response-every", type=int, default=2)
    parser.add_argument("--control", required=True)
    parser.add_argument("--state-out")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    bench = Bench(args)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    await bench.start()
    log.info("bench: %d beacons on the link, %d held back", len(bench.beacons), len(bench.held_back))
    asyncio.get_running_loop().create_task(bench.heartbeat())
    try:
        await bench.serve(args.control)
    finally:
        if args.state_out:
            with open(args.state_out, "w") as f:
                json.dump(bench.state(), f, indent=1)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
