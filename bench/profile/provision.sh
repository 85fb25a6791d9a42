#!/usr/bin/env bash
# Profiles a provisioning run: a private dbus-daemon, N fresh simulated
# beacons with no radio latency, then `perf record -g` of
# `beaconbench run batches/provision-new.batch` (docs/benchmarks.md, issue 30).
#
#   bench/profile/provision.sh [N] [OUT.perf]     (release binaries: scripts/release-build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$root/scripts/release-build" --bin-path)
count=${1:-200}
out=$(realpath -m "${2:-provision.perf}")
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
cat > "$dir/bus.conf" <<EOC
<busconfig><type>system</type><listen>unix:path=$dir/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>
EOC
dbus-daemon --config-file="$dir/bus.conf" --nofork --print-address > "$dir/addr" 2>/dev/null &
until [[ -s $dir/addr ]]; do sleep 0.05; done
address=$(head -1 "$dir/addr")
"$bin/beaconbench-sim" --bus "$address" --count "$count" --fresh --latency none > "$dir/sim.out" &
until grep -q ready "$dir/sim.out" 2>/dev/null; do sleep 0.05; done
perf record -F 2999 -g -o "$out" "$bin/beaconbench" --bus "$address" --inventory "$dir/inventory.sqlite" \
  run "$root/batches/provision-new.batch" --set scan=3s --set expect="$count" | tail -1
echo "perf report -i $out"
