#!/usr/bin/env bash
# Profiles a listening run: a private dbus-daemon, 2,000 simulated
# beacons advertising at 1 Hz, then `perf record -g` of `beaconbench scan`
# for S seconds (docs/benchmarks.md, issue 30).
#
#   bench/profile/scan.sh [S] [OUT.perf]     (release binaries: scripts/release-build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$root/scripts/release-build" --bin-path)
seconds=${1:-20}
out=$(realpath -m "${2:-scan.perf}")
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
cat > "$dir/bus.conf" <<EOC
<busconfig><type>system</type><listen>unix:path=$dir/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy></busconfig>
EOC
dbus-daemon --config-file="$dir/bus.conf" --nofork --print-address > "$dir/addr" 2>/dev/null &
until [[ -s $dir/addr ]]; do sleep 0.05; done
address=$(head -1 "$dir/addr")
"$bin/beaconbench-sim" --bus "$address" --count 2000 --latency none --advert-ms 1000 > "$dir/sim.out" &
until grep -q ready "$dir/sim.out" 2>/dev/null; do sleep 0.05; done
perf record -F 999 -g -o "$out" "$bin/beaconbench" --bus "$address" --inventory "$dir/inventory.sqlite" \
  --json scan "${seconds}s" > /dev/null
echo "perf report -i $out"
