"""Counts the HCI commands and events of a run's btsnoop (the guest's
btmon -w OUT/hci.btsnoop), and lists every HCI Disconnect and Disconnection
Complete: btmon -r crashed part-way through a whole run's trace here.

    python3 realstack/hci_summary.py OUT/hci.btsnoop [-v]   (-v: each disconnect packet)
"""

import collections
import struct
import sys

NAMES = {
    0x0406: "Disconnect", 0x200B: "LE Set Scan Parameters", 0x200C: "LE Set Scan Enable",
    0x200D: "LE Create Connection", 0x200E: "LE Create Connection Cancel",
    0x2011: "LE Add Device To Accept List", 0x2016: "LE Read Remote Features", 0x2005: "LE Set Random Address",
}
EVENTS = {0x05: "Disconnection Complete", 0x0E: "Command Complete", 0x0F: "Command Status", 0x13: "Completed Packets", 0x3E: "LE Meta"}
LE_EVENTS = {
    0x01: "LE Connection Complete", 0x02: "LE Advertising Report", 0x04: "LE Read Remote Features Complete",
    0x0A: "LE Enhanced Connection Complete",
}

data = open(sys.argv[1], "rb").read()
if data[:8] != b"btsnoop\0":
    sys.exit(f"{sys.argv[1]}: not a btsnoop file")
offset = 16
commands, events, disconnects = collections.Counter(), collections.Counter(), []
while offset + 24 <= len(data):
    _, length, flags, _, stamp = struct.unpack(">IIIIq", data[offset : offset + 24])
    packet = data[offset + 24 : offset + 24 + length]
    offset += 24 + length
    kind = flags & 0xFFFF  # the monitor's opcode: 2 command, 3 event
    if kind == 2 and len(packet) >= 2:
        opcode = struct.unpack("<H", packet[:2])[0]
        commands[NAMES.get(opcode, f"0x{opcode:04x}")] += 1
        if opcode == 0x0406:
            disconnects.append(("HCI Disconnect", packet.hex()))
    elif kind == 3 and packet:
        name = EVENTS.get(packet[0], f"0x{packet[0]:02x}")
        if packet[0] == 0x3E and len(packet) > 2:
            name = LE_EVENTS.get(packet[2], f"LE 0x{packet[2]:02x}")
        events[name] += 1
        if packet[0] == 0x05:
            disconnects.append(("Disconnection Complete", packet.hex()))
print("commands:", ", ".join(f"{n} {c}" for n, c in commands.most_common()))
print("events:", ", ".join(f"{n} {c}" for n, c in events.most_common()))
# Every link the host opened, closed: each LE connection complete (status 0)
# matched by an HCI Disconnect from the host and a Disconnection Complete.
print(
    f"links: {events['LE Connection Complete'] + events['LE Enhanced Connection Complete']} connection complete events,"
    f" {commands['Disconnect']} HCI Disconnect, {events['Disconnection Complete']} Disconnection Complete,"
    f" {commands['LE Create Connection Cancel']} LE Create Connection Cancel"
)
if "-v" in sys.argv[2:]:
    print("disconnects:", disconnects or "none")
