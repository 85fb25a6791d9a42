#!/usr/bin/env bash
# Profiles a listening run: a private dbus-daemon, 2,000 simulated beacons
# advertising at 1 Hz, then `perf record -g` of `beaconbench scan` for S
# seconds (docs/benchmarks.md, issue 30).
#
#   bench/profile/scan.sh [S] [OUT.perf]     (release binaries: scripts/release-build)
set -euo pipefail
seconds=${1:-20}
out=$(realpath -m "${2:-scan.perf}")
source "$(dirname "$0")/private-bench.sh"
simulate --count 2000 --latency none --advert-ms 1000
perf record -F 999 -g -o "$out" "$bin/beaconbench" --bus "$address" --inventory "$dir/inventory.sqlite" \
  --json scan "${seconds}s" > /dev/null
echo "perf report -i $out"
