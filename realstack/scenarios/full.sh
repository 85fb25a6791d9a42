# Issue 50's whole scenario through the real stack: scan, provision-new.batch
# twice (the rerun writes nothing), audit from adverts and live,
# pull-records, watch with a notified real-time event, station with beacons
# arriving one by one (bench.py holds REALSTACK_ARRIVING back; they arrive on
# the bench at -50 dBm, the box lies at -70), doctor; then the inventory
# compared with the beacons' own state.
source "$REALSTACK_DIR/scenarios/lib.sh"
provision_steps

audit_step

# pull-records: what the beacons hold, pulled into the inventory and cleared
# on the beacons (both read back: the beacons' state, `records list`).
held=$(ctl '{"cmd":"state"}' | py -c 'import json,sys; d=json.load(sys.stdin)["beacons"]; print(*(sum(b["records"][k] for b in d) for k in ("trips","events","incidents")))')
step pull-records 0 bb run batches/pull-records.batch --set scan=20s --set expect=$n
left=$(ctl '{"cmd":"state"}' | py -c 'import json,sys; d=json.load(sys.stdin)["beacons"]; print(*(sum(b["records"][k] for b in d) for k in ("trips","events","incidents")))')
bb --json records list --limit 1000 > "$out/records.jsonl" 2>&1
stored=$(py -c 'import json,sys; k=[json.loads(l).get("kind") for l in open(sys.argv[1]) if l.startswith("{")]; print(k.count("trip"), k.count("event"), k.count("incident"))' "$out/records.jsonl")
note "pull-records: the beacons held $held (trips events incidents), hold $left now; the inventory has $stored"
[ "$left" = "0 0 0" ] || fail "pull-records left $left on the beacons"
[ "$stored" = "$held" ] || fail "pull-records stored $stored of $held"
links_closed pull-records

# watch: a real-time event the beacon notifies while the tool watches it.
target=$(ctl '{"cmd":"state"}' | py -c 'import json,sys; print(next(b["address"] for b in json.load(sys.stdin)["beacons"] if b["major"] == 100))')
started=$(date +%s.%N)
watch_batch /tmp/watch.batch 40s "$target"
bb --json run /tmp/watch.batch > "$out/watch.txt" 2>&1 &
watch_pid=$!
if wait_for "the watch subscribed to Real-time Event on $target" 60 subscribed "$target"; then
  note "watch: subscribed to $target's Real-time Event after $(echo "$(date +%s.%N) - $started" | bc | cut -c1-5) s (the beacon's CCCD)"
  ctl "{\"cmd\":\"event\",\"address\":\"$target\",\"type\":5,\"axis\":89,\"flags\":64}" > "$out/event.json"
fi
wait "$watch_pid"
status=$?
note "watch: exit $status in $(echo "$(date +%s.%N) - $started" | bc | cut -c1-5) s"
[ "$status" = 0 ] || fail "watch exited $status"
events=$(py -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if l.startswith("{") and (e := json.loads(l)).get("kind") == "watch_event" and e.get("type") == "real_time" and e.get("device") == sys.argv[2]))' "$out/watch.txt" "$target")
note "watch: $events real-time event(s) from $target shown"
[ "$events" = 1 ] || fail "watch showed $events real-time events from $target (1 notified)"
links_closed watch

# station: beacons put on the bench one by one, each provisioned before the
# next arrives.
if [ "$arriving" -gt 0 ]; then
  started=$(date +%s.%N)
  bb station --profile car --rssi-min -60 --count "$arriving" --for 600s > "$out/station.txt" 2>&1 &
  station_pid=$!
  provisioned_now() { ctl '{"cmd":"state"}' | py -c 'import json,sys; sys.exit(not any(b["address"] == sys.argv[1] and b["major"] == 100 and b["calibrated"] and b["config"]["acceleration"] == 450 and b["timeOffsetMs"] for b in json.load(sys.stdin)["beacons"]))' "$1"; }
  for i in $(seq "$arriving"); do
    address=$(ctl '{"cmd":"arrive"}' | py -c 'import json,sys; print(json.load(sys.stdin).get("arrived", ""))')
    at=$(date +%s.%N)
    wait_for "the station provisioned $address" 180 provisioned_now "$address" \
      && note "station: $address arrived and was provisioned (read from the beacon) in $(echo "$(date +%s.%N) - $at" | bc | cut -c1-5) s"
  done
  wait "$station_pid"
  status=$?
  note "station: exit $status in $(echo "$(date +%s.%N) - $started" | bc | cut -c1-5) s; $(grep -c '^✔' "$out/station.txt") converged line(s)"
  [ "$status" = 0 ] || fail "station exited $status"
  links_closed station
fi

step doctor 0 bb doctor
ctl '{"cmd":"state"}' > "$out/beacons-final.json"
bb --json inventory list > "$out/inventory-list.jsonl" 2>&1
if py "$REALSTACK_DIR/truth.py" "$out/beacons-final.json" "$out/inventory-list.jsonl" > "$out/truth.txt"; then
  note "$(tail -1 "$out/truth.txt")"
else
  note "$(tail -1 "$out/truth.txt")"; sed 's/^/  /' "$out/truth.txt" | head -20 >> "$result"
  fail "the inventory differs from the beacons"
fi
save_inventory
