#!/usr/bin/env bash
# Profiles a provisioning run: a private dbus-daemon, N fresh simulated
# beacons with no radio latency, then `perf record -g` of
# `beaconbench run batches/provision-new.batch` (docs/benchmarks.md, issue 30).
#
#   bench/profile/provision.sh [N] [OUT.perf]     (release binaries: scripts/release-build)
set -euo pipefail
count=${1:-200}
out=$(realpath -m "${2:-provision.perf}")
source "$(dirname "$0")/private-bench.sh"
simulate --count "$count" --fresh --latency none
perf record -F 2999 -g -o "$out" "$bin/beaconbench" --bus "$address" --inventory "$dir/inventory.sqlite" \
  run "$root/batches/provision-new.batch" --set scan=3s --set expect="$count" | tail -1
echo "perf report -i $out"
