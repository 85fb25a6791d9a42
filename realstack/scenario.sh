# Sourced by realstack/guest.sh inside the VM, with REALSTACK_OUT (the out
# share), REALSTACK_DIR, REALSTACK_BEACONS, REALSTACK_BIN and
# REALSTACK_SCENARIO set. Writes $REALSTACK_OUT/result: "passed" or
# "failed: <what>" on its first line, then one line per step.
out=$REALSTACK_OUT
result=$out/result.tmp
: > "$result"
failures=()
note() { echo "$*" >> "$result"; echo "realstack: $*"; }
fail() { failures+=("$1"); note "FAILED $1"; }

# Waits (up to $2 s) for a command to succeed; the step named $1 fails if
# it never does.
wait_for() {
  local what=$1 cap=$2; shift 2
  local deadline=$(( $(date +%s) + cap ))
  until "$@" > /dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then fail "$what (waited $cap s)"; return 1; fi
    sleep 0.2
  done
}
adapter_powered() { busctl --system get-property org.bluez /org/bluez/hci0 org.bluez.Adapter1 Powered | grep -q true; }

"$REALSTACK_PYTHON" "$REALSTACK_DIR/bench.py" --beacons "${REALSTACK_BEACONS:-10}" --arriving "${REALSTACK_ARRIVING:-0}" --control /run/realstack-bench \
  --state-out "$out/beacons.json" > /tmp/bench.log 2>&1 &
bench_pid=$!
if wait_for "the Bumble bench ready" 600 test -S /run/realstack-bench \
  && wait_for "bluetoothd's adapter hci0 powered" 300 adapter_powered; then
  stamp "real stack ready"
  note "stack: $(uname -r), $(bluetoothd --version 2>&1 | head -1) bluetoothd, bumble $("$REALSTACK_PYTHON" -c 'import importlib.metadata as m; print(m.version("bumble"))')"
  source "$REALSTACK_DIR/scenarios/$REALSTACK_SCENARIO.sh"
fi
kill "$bench_pid" 2>/dev/null
wait "$bench_pid" 2>/dev/null
if [ ${#failures[@]} -eq 0 ]; then
  { echo "passed"; cat "$result"; } > "$out/result"
else
  { echo "failed: ${failures[*]}"; cat "$result"; } > "$out/result"
fi
rm -f "$result"
