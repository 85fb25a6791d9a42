# The tool's main job through the real stack, as a new user runs it: scan,
# provision-new.batch twice (the second must write nothing: the beacons'
# own write counters, read from the beacon side, hold it), audit from
# adverts and live, doctor. Each step's output is kept in the out share.
cd "$REALSTACK_DIR/.."
inventory=/tmp/inventory.sqlite   # tmpfs: 9p cannot hold SQLite's WAL index
bb() { "$REALSTACK_BIN" --inventory "$inventory" --no-color "$@"; }
ctl() { "$REALSTACK_PYTHON" "$REALSTACK_DIR/ctl.py" /run/realstack-bench "$1"; }
n=${REALSTACK_BEACONS:-10}
eligible=$(( n >= 3 ? n - 2 : n ))   # bench.py: beacon 2 low battery, beacon 3 old firmware

# step NAME EXPECTED-STATUS COMMAND…: runs it, keeps its output, times it.
step() {
  local name=$1 expected=$2; shift 2
  local started=$(date +%s.%N) status
  "$@" > "$out/$name.txt" 2>&1
  status=$?
  local took=$(echo "$(date +%s.%N) - $started" | bc)
  note "$name: exit $status in ${took%???????} s"
  [ "$status" = "$expected" ] || fail "$name exited $status (expected $expected)"
}
writes() { ctl '{"cmd":"state"}' | "$REALSTACK_PYTHON" -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({b["address"]: b["writes"] for b in d["beacons"]}, sort_keys=True))'; }

step scan 0 bb scan 15s
seen=$(sed -n 's/^scan: \([0-9]*\) SBeacons seen.*/\1/p' "$out/scan.txt" | tail -1)
note "scan: $seen of $n beacons seen"
[ "$seen" = "$n" ] || fail "scan saw $seen of $n"

step provision-1 0 bb run batches/provision-new.batch --set scan=30s --set expect=$n
ctl '{"cmd":"state"}' > "$out/beacons-after-1.json"
writes > "$out/writes-1.json"
provisioned=$("$REALSTACK_PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(1 for b in d["beacons"] if b["major"] == 100 and b["calibrated"] and b["config"]["acceleration"] == 450 and b["timeOffsetMs"] != 0))' "$out/beacons-after-1.json")
note "provision-1: $provisioned of $eligible eligible beacons hold the car profile, major 100, calibrated, clock set (read from the beacons)"
[ "$provisioned" = "$eligible" ] || fail "provision-1 left $provisioned of $eligible eligible beacons provisioned"

# The rerun: select all re-checks the whole box; nothing may be written.
step provision-2 0 bb run batches/provision-new.batch --set scan=30s --set expect=$n --set select=all
writes > "$out/writes-2.json"
# "Wrote nothing" counts only if the rerun heard the whole box.
seen2=$(sed -n 's/^scan: \([0-9]*\) SBeacons\{0,1\} seen.*/\1/p' "$out/provision-2.txt" | tail -1)
note "provision-2: its scan heard ${seen2:-0} of $n beacons"
[ "${seen2:-0}" = "$n" ] || fail "provision-2's scan heard ${seen2:-0} of $n (the rerun re-checked only those)"
# What run 1 provisioned must not be written again; a beacon run 1 did not
# reach may be provisioned now (and is counted).
rewritten=$("$REALSTACK_PYTHON" -c '
import json, sys
after1 = json.load(open(sys.argv[1]))["beacons"]
w1, w2 = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
done = [b["address"] for b in after1 if b["major"] == 100]
print(" ".join(a for a in done if w1[a] != w2[a]))' "$out/beacons-after-1.json" "$out/writes-1.json" "$out/writes-2.json")
if [ -z "$rewritten" ]; then
  note "provision-2: nothing written to the $provisioned beacons run 1 provisioned (their write counters unchanged)"
else
  fail "provision-2 wrote again to $rewritten"
fi
ctl '{"cmd":"state"}' > "$out/beacons-after-2.json"

step audit 0 bb run batches/audit.batch --set scan=20s --set expect=$n
step doctor 0 bb doctor
bb inventory list > "$out/inventory-list.txt" 2>&1
"$REALSTACK_PYTHON" -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()' "$inventory" /tmp/inventory-copy.sqlite \
  && cp /tmp/inventory-copy.sqlite "$out/inventory.sqlite"
