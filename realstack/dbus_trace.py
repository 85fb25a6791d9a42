"""Cuts a real-stack run's D-Bus trace (the guest's `busctl monitor
--json=short org.bluez`) into its cases and prints, for each, what bluetoothd
said in order about one device and its adapter: signals (PropertiesChanged
with the properties named, InterfacesAdded/Removed), the calls made to them
and their replies or errors. Advert-only changes (RSSI, ManufacturerData,
TxPower) are counted, not listed.

    python3 dbus_trace.py TRACE.jsonl MARKS DEVICE-PATH

MARKS: lines `NAME MICROSECONDS` (realstack/scenarios/failures.sh); a case
runs from NAME-start to NAME-end, its times counted from the first other mark
inside it (the fault).
"""

import json
import sys

ADVERT = {"RSSI", "ManufacturerData", "TxPower", "ServiceData"}
LIMIT = 400  # lines per case


def value(v):
    """busctl's {type, data} as short text; nothing longer than 60 chars."""
    if isinstance(v, dict) and "type" in v and "data" in v:
        v = v["data"]
    text = json.dumps(v, separators=(",", ":"))
    return text if len(text) <= 60 else text[:57] + "..."


def short(path, device):
    if path == device:
        return "dev"
    if path.startswith(device + "/"):
        return "dev/" + path[len(device) + 1 :]
    return path


def main():
    trace_path, marks_path, device = sys.argv[1:4]
    adapter = device.rsplit("/", 1)[0]
    marks = []
    for line in open(marks_path):
        name, usec = line.split()
        marks.append((name, int(usec)))
    messages = []
    for line in open(trace_path, errors="replace"):
        if line.startswith("{"):
            try:
                messages.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    calls = {}  # (sender, cookie) -> text
    for m in messages:
        if m.get("type") == "method_call":
            calls[(m.get("sender"), m.get("cookie"))] = m
    starts = {name[: -len("-start")]: usec for name, usec in marks if name.endswith("-start")}
    ends = {name[: -len("-end")]: usec for name, usec in marks if name.endswith("-end")}
    print(f"{len(messages)} messages; device {device}")
    for case, start in starts.items():
        end = ends.get(case, 1 << 62)
        faults = [(n, u) for n, u in marks if start < u < end and not n.endswith(("-start", "-end"))]
        zero = faults[0][1] if faults else start
        print(f"\n== {case}: " + ", ".join(f"{n} at +{(u - start) / 1e6:.3f} s" for n, u in faults))
        lines, adverts = [], 0
        for n, u in faults:
            lines.append((u, f"-- mark {n}"))
        for m in messages:
            t = m.get("timestamp-realtime", 0)
            if not start <= t <= end:
                continue
            kind, path = m.get("type"), m.get("path", "")
            data = m.get("payload", {}).get("data", [])
            if kind == "signal":
                member = m.get("member")
                if member == "PropertiesChanged" and (path == device or path.startswith(device + "/") or path == adapter):
                    changed = data[1] if len(data) > 1 else {}
                    if set(changed) <= ADVERT and not (len(data) > 2 and data[2]):
                        adverts += 1
                        continue
                    props = " ".join(f"{k}={value(v)}" for k, v in changed.items())
                    invalidated = " ".join(f"{k}=(invalidated)" for k in (data[2] if len(data) > 2 else []))
                    iface = data[0].rsplit(".", 1)[-1] if data else "?"
                    lines.append((t, f"signal {iface} {short(path, device)}: {props} {invalidated}".rstrip()))
                elif member in ("InterfacesAdded", "InterfacesRemoved") and data and (data[0] == device or data[0].startswith(device + "/")):
                    ifaces = data[1] if isinstance(data[1], list) else list(data[1])
                    ifaces = ",".join(i.rsplit(".", 1)[-1] for i in ifaces)
                    lines.append((t, f"signal {member} {short(data[0], device)} [{ifaces}]"))
            elif kind == "method_call" and (path == device or path.startswith(device + "/") or path == adapter):
                args = " ".join(value(a) for a in data)
                lines.append((t, f"call {m.get('interface', '').rsplit('.', 1)[-1]}.{m.get('member')} {short(path, device)} {args}".rstrip()))
            elif kind in ("method_return", "error"):
                call = calls.get((m.get("destination"), m.get("reply_cookie")))
                if call is None:
                    continue
                cpath = call.get("path", "")
                if not (cpath == device or cpath.startswith(device + "/") or cpath == adapter):
                    continue
                what = f"{call.get('member')} {short(cpath, device)}"
                waited = (t - call.get("timestamp-realtime", t)) / 1e6
                if kind == "error":
                    lines.append((t, f"error {m.get('error_name')} to {what} after {waited:.3f} s: {value(data[0]) if data else ''}"))
                else:
                    lines.append((t, f"return {what} after {waited:.3f} s"))
        lines.sort(key=lambda x: x[0])
        for t, text in lines[:LIMIT]:
            print(f"{(t - zero) / 1e6:+9.3f} s  {text}")
        if len(lines) > LIMIT:
            print(f"  … {len(lines) - LIMIT} more")
        print(f"  ({adverts} advert-only PropertiesChanged not listed)")


main()
