# Sourced by the profiling scripts here: a private dbus-daemon (its address
# in $address) and a simulated bluetoothd started with the arguments given
# to `simulate`, both stopped on exit; release binaries in $bin.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$("$root/scripts/release-build" --bin-path)
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
cat > "$dir/bus.conf" <<EOC
<busconfig><type>system</type><listen>unix:path=$dir/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>
EOC
dbus-daemon --config-file="$dir/bus.conf" --nofork --print-address > "$dir/addr" 2>/dev/null &
until [[ -s $dir/addr ]]; do sleep 0.05; done
address=$(head -1 "$dir/addr")

simulate() {
  "$bin/beaconbench-sim" --bus "$address" "$@" > "$dir/sim.out" &
  until grep -q ready "$dir/sim.out" 2>/dev/null; do sleep 0.05; done
}
