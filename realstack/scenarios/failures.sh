# Failure modes of docs/bluez-failures.md produced through the real stack —
# a link dropped by the peer, Powered off and on, a beacon that stops
# advertising — with bluetoothd's D-Bus traffic recorded in order (busctl
# monitor, org.bluez only) and cut per case by realstack/dbus_trace.py, and
# whether the tool recovers (read from the beacon: its Real-time Event
# subscribed again). What is recorded is not judged here; a case fails only
# when it could not be produced.
source "$REALSTACK_DIR/scenarios/lib.sh"
busctl --system monitor --json=short org.bluez > /tmp/dbus-monitor.txt 2> "$out/dbus-monitor.err" &
monitor_pid=$!
marks=$out/marks.txt
: > "$marks"
mark() { echo "$1 $(date +%s%6N)" >> "$marks"; }
target=$(ctl '{"cmd":"state"}' | py -c 'import json,sys; print(json.load(sys.stdin)["beacons"][0]["address"])')
path=/org/bluez/hci0/dev_${target//:/_}
note "failures: target $target ($path)"
adapter_off() { busctl --system get-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Powered | grep -q false; }
known() { busctl --system get-property org.bluez "$path" org.bluez.Device1 Address > /dev/null 2>&1; }
gone() { ! known; }

# 1. The peer drops the link while the tool watches it.
mark drop-start
started=$(date +%s.%N)
watch_batch /tmp/drop.batch 45s "$target"
bb --json run /tmp/drop.batch > "$out/drop-watch.txt" 2>&1 &
pid=$!
if wait_for "the watch subscribed on $target" 60 subscribed "$target"; then
  mark drop
  at=$(date +%s.%N)
  note "drop: $(ctl "{\"cmd\":\"drop\",\"address\":\"$target\"}")"
  if await_quiet 40 subscribed "$target"; then note "drop: the tool subscribed again $(since "$at") s after the beacon dropped the link"
  else note "drop: the tool did not subscribe again within 40 s"; fi
fi
wait "$pid"
note "drop: watch exit $? after $(since "$started") s"
mark drop-end
links_closed drop 20

# 2. Powered off and on while the tool watches a beacon.
mark power-start
started=$(date +%s.%N)
watch_batch /tmp/power.batch 60s "$target"
bb --json run /tmp/power.batch > "$out/power-watch.txt" 2>&1 &
pid=$!
if wait_for "the watch subscribed on $target" 60 subscribed "$target"; then
  mark power-off
  at=$(date +%s.%N)
  busctl --system set-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Powered b false
  wait_for "hci0 powered off" 20 adapter_off && note "power: off $(since "$at") s after the Set"
  mark power-on
  at=$(date +%s.%N)
  busctl --system set-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Powered b true
  wait_for "hci0 powered on again" 30 adapter_powered && note "power: on $(since "$at") s after the Set"
  if await_quiet 45 subscribed "$target"; then note "power: the tool subscribed again $(since "$at") s after power on"
  else note "power: the tool did not subscribe again within 45 s of power on"; fi
fi
wait "$pid"
note "power: watch exit $? after $(since "$started") s"
mark power-end
links_closed power 20

# 3. A beacon stops advertising while the tool scans; then the scan ends
# and bluetoothd's temporary device timeout (30 s) runs.
mark silence-start
bb scan 30s > "$out/silence-scan.txt" 2>&1 &
pid=$!
if wait_for "bluetoothd knows $target" 30 known; then
  mark silence
  at=$(date +%s.%N)
  note "silence: $(ctl "{\"cmd\":\"silence\",\"address\":\"$target\"}")"
  wait "$pid"
  note "silence: scan exit $? ($(grep -c "$target" "$out/silence-scan.txt") line(s) name the silent beacon)"
  mark scan-end
  if await_quiet 60 gone; then note "silence: bluetoothd removed $path $(since "$at") s after it fell silent"
  else note "silence: bluetoothd still had $path 60 s after the scan ended"; fi
else
  wait "$pid"
fi
mark silence-end
ctl "{\"cmd\":\"resume\",\"address\":\"$target\"}" > /dev/null

kill "$monitor_pid" 2>/dev/null
wait "$monitor_pid" 2>/dev/null
py "$REALSTACK_DIR/dbus_trace.py" /tmp/dbus-monitor.txt "$marks" "$path" > "$out/failures-trace.txt" 2>&1 \
  || fail "dbus_trace.py could not read the trace (see failures-trace.txt)"
note "failures: $(grep -c '' /tmp/dbus-monitor.txt) D-Bus messages recorded, the cases cut in failures-trace.txt"
save_inventory
