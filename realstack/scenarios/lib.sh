# Sourced by the scenarios (provision.sh, full.sh): the helpers and the
# steps they share. Each step's output is kept in the out share; every check
# reads the beacons' own state from the bench (bench.py's control socket),
# never the tool's word.
cd "$REALSTACK_DIR/.."
inventory=/tmp/inventory.sqlite   # tmpfs: 9p cannot hold SQLite's WAL index
bb() { "$REALSTACK_BIN" --inventory "$inventory" --no-color "$@"; }
ctl() { "$REALSTACK_PYTHON" "$REALSTACK_DIR/ctl.py" /run/realstack-bench "$1"; }
# The box: the beacons on the link from the start (bench.py holds
# REALSTACK_ARRIVING more back for the station, which arrive one by one).
arriving=${REALSTACK_ARRIVING:-0}
n=$(( ${REALSTACK_BEACONS:-10} - arriving ))
eligible=$(( n >= 3 ? n - 2 : n ))   # bench.py: beacon 2 low battery, beacon 3 old firmware
py() { "$REALSTACK_PYTHON" "$@"; }

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
writes() { ctl '{"cmd":"state"}' | py -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({b["address"]: b["writes"] for b in d["beacons"]}, sort_keys=True))'; }


# Every link the tool opened is closed and every beacon advertises again,
# in the beacons' own view (within $2 s: the tool's Disconnect reaches the
# beacon through bluetoothd, the kernel and the link).
# watch_batch FILE DURATION ADDRESS: a batch that finds the beacon, then
# watches it (watch alone works on devices bluetoothd knows already; the
# one-shot command's own search gives up after a few seconds).
watch_batch() {
  printf 'scan 20s --until %s\nwatch %s %s\n' "$n" "$2" "$3" > "$1"
}

# The beacon $1 has a link subscribed to its Real-time Event (its CCCD).
subscribed() { ctl '{"cmd":"state"}' | py -c 'import json,sys; sys.exit(not any(b["address"] == sys.argv[1] and b["realtimeSubscribers"] for b in json.load(sys.stdin)["beacons"]))' "$1"; }
# Like wait_for, for what is recorded rather than required: returns 1 after
# $1 s without failing the scenario.
await_quiet() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" > /dev/null 2>&1; do
    [ "$(date +%s)" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}
since() { echo "$(date +%s.%N) - $1" | bc | cut -c1-5; }

all_idle() {
  ctl '{"cmd":"state"}' | py -c 'import json,sys; d=json.load(sys.stdin)["beacons"]; sys.exit(not all(b["connected"] == 0 and b["advertising"] for b in d))'
}
links_closed() {
  local after=$1 cap=${2:-15}
  if wait_for "every link closed and every beacon advertising after $after" "$cap" all_idle; then
    note "$after: every link closed, all $(ctl '{"cmd":"state"}' | py -c 'import json,sys; print(len(json.load(sys.stdin)["beacons"]))') beacons advertising (the beacons' view)"
  else
    ctl '{"cmd":"state"}' | py -c 'import json,sys; print("  still linked or silent:", " ".join(b["address"] for b in json.load(sys.stdin)["beacons"] if b["connected"] or not b["advertising"]))' | tee -a "$result"
  fi
}

provision_steps() {
  step scan 0 bb scan 15s
  seen=$(sed -n 's/^scan: \([0-9]*\) SBeacons seen.*/\1/p' "$out/scan.txt" | tail -1)
  note "scan: $seen of $n beacons seen"
  [ "$seen" = "$n" ] || fail "scan saw $seen of $n"
  links_closed scan

  step provision-1 0 bb run batches/provision-new.batch --set scan=30s --set expect=$n
  ctl '{"cmd":"state"}' > "$out/beacons-after-1.json"
  writes > "$out/writes-1.json"
  provisioned=$("$REALSTACK_PYTHON" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(1 for b in d["beacons"] if b["major"] == 100 and b["calibrated"] and b["config"]["acceleration"] == 450 and b["timeOffsetMs"] != 0))' "$out/beacons-after-1.json")
  note "provision-1: $provisioned of $eligible eligible beacons hold the car profile, major 100, calibrated, clock set (read from the beacons)"
  [ "$provisioned" = "$eligible" ] || fail "provision-1 left $provisioned of $eligible eligible beacons provisioned"
  links_closed provision-1

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
  links_closed provision-2
}

# audit.batch: from adverts, then live. The beacons run 1 could not
# provision (low battery, old firmware) have no profile: a finding each, so
# exit 2, and both audits must say so of the whole box.
audit_step() {
  step audit 2 bb run batches/audit.batch --set scan=20s --set expect=$n
  local verdict="$n devices: $eligible clean, $((n - eligible)) with findings"
  for kind in passive live; do
    if grep -A $((n + 3)) "^AUDIT ($kind)" "$out/audit.txt" | grep -qx "$verdict"; then
      note "audit ($kind): $verdict"
    else
      fail "audit ($kind) did not say '$verdict'"
    fi
  done
  links_closed audit
}

save_inventory() {
  bb inventory list > "$out/inventory-list.txt" 2>&1
  py -c 'import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()' "$inventory" /tmp/inventory-copy.sqlite \
    && cp /tmp/inventory-copy.sqlite "$out/inventory.sqlite"
}
