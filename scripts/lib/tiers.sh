# The test tiers, shared by scripts/test and scripts/soak (sourced, from the
# repository's root, after a `swift build --build-tests`).
#
# Tier 1: unit and in-process tests (pure code, SQLite, a private
# dbus-daemon, the simulator in-process, small peers such as busctl or
# python-dbusmock), all in parallel.
# Tier 2: end-to-end suites: every suite one of whose tests runs a built
# executable (beaconbench, beaconbench-sim, beaconbench-bench) or starts
# PostgreSQL or Chromium. All of ConsoleTests except its in-process suites
# below, and the few suites elsewhere listed below. In parallel too, except
# that suites marked `.exclusive(.postgreSQL)` or `.exclusive(.heavyLoad)`
# on their @Suite (Tests/ConsoleTests/ExclusiveSuites.swift) wait for one
# another.
#
# Every test is in exactly one tier: tier 2 is `--filter "$TIER2"`, tier 1
# `--skip "$TIER2"`, and run_tiers checks that the two runs' test counts add
# up to `swift test list`.

# ConsoleTests suites that run nothing built: they stay in tier 1.
TIER1_CONSOLE_SUITES=(BatchParserTests InvocationTests Terminal16UnitTests PostgresArrayTests DocTablesTests BenchSyncTests RendererTests OutputRuleTests)
# Suites outside ConsoleTests that run a built executable.
TIER2_OTHER_SUITES=(
  SimulatorTests.StockClientTests    # beaconbench-sim with bluetoothctl and bleak
  SimulatorTests.StateFileTests      # beaconbench-sim run twice on one state file
  SimulatorTests.FaultPlanBinaryTests # beaconbench-sim --fault-plan
  InventoryTests.InventoryTests      # beaconbench-bench as a writer killed mid-transaction
)

# A regular expression over test IDs (`Target.Suite/test()`, as `swift test
# list` prints them), in Swift's regex syntax: ConsoleTests but for the
# tier-1 suites (a negative lookahead), and the other tier-2 suites.
tier2_regex() {
  local console others
  console=$(IFS='|'; printf '%s' "${TIER1_CONSOLE_SUITES[*]}")
  others=$(printf '%s\n' "${TIER2_OTHER_SUITES[@]}" | sed 's/\./\\./' | paste -sd'|')
  printf '^(ConsoleTests\\.(?!(%s)(/|$))|(%s)(/|$))' "$console" "$others"
}
TIER2=$(tier2_regex)

now() { date +%s.%N; }
seconds_since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.1f", end - start }'; }

# run_tier NAME DIR QUIET ARGUMENTS…: `swift test --skip-build ARGUMENTS…`,
# its output in DIR/NAME.log (and on the terminal unless QUIET is 1), its
# xUnit results in DIR/NAME-swift-testing.xml. Sets TIER_STATUS and
# TIER_SECONDS.
run_tier() {
  local name=$1 dir=$2 quiet=$3 start errexit=0
  shift 3
  start=$(now)
  [[ $- != *e* ]] || errexit=1
  set +e
  if [[ $quiet == 1 ]]; then
    swift test --skip-build --xunit-output "$dir/$name.xml" "$@" >"$dir/$name.log" 2>&1
    TIER_STATUS=$?
  else
    swift test --skip-build --xunit-output "$dir/$name.xml" "$@" 2>&1 | tee "$dir/$name.log"
    TIER_STATUS=${PIPESTATUS[0]}
  fi
  if ((errexit)); then set -e; fi
  TIER_SECONDS=$(seconds_since "$start")
}

# The tests an xUnit file holds, one `Target.Suite/test()` a line, each
# followed by a tab and passed, failed or skipped.
xunit_results() {
  python3 - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    sys.exit(0)
for case in root.iter("testcase"):
    state = "failed" if case.find("failure") is not None else "skipped" if case.find("skipped") is not None else "passed"
    print(f"{case.get('classname')}/{case.get('name')}\t{state}")
PY
}

# Root-only tests skipped in LOGS: Swift Testing prints
#   ➜ Test name() skipped: "needs root: …"
# for a test disabled by `.enabled(if: isRoot, "needs root: …")` (or by any
# condition whose comment says "needs root").
root_only_skips() {
  grep -a -h -E ' Test .* skipped: ".*needs root' "$@" | sed -E 's/^[^A-Za-z]*Test //' || true
}

# check_root_skips LOGS…: under CI=true as root, a root-only test skipped
# is an error (returns 1); otherwise such skips are listed as a note.
check_root_skips() {
  local skips
  skips=$(root_only_skips "$@")
  [[ -n $skips ]] || return 0
  if [[ ${CI:-} == true && $(id -u) == 0 ]]; then
    echo "error: CI=true runs as root, yet root-only tests were skipped:" >&2
    sed 's/^/  /' <<<"$skips" >&2
    return 1
  fi
  echo "note: root-only tests skipped (a failure under CI=true as root):"
  sed 's/^/  /' <<<"$skips"
}

# run_tiers DIR [QUIET]: tier 1 then tier 2, each tier's wall time printed;
# then the checks: the tiers' test counts add up to `swift test list`, and,
# under CI=true as root, no root-only test was skipped. Returns non-zero if
# a tier failed or a check did. DIR receives the logs and xUnit files,
# list.txt (every test) and results.txt (every test's outcome).
run_tiers() {
  local dir=$1 quiet=${2:-0} failed=0 listed tier1 tier2 tier
  mkdir -p "$dir"
  rm -f "$dir"/tier*.log "$dir"/tier*.xml

  swift test --skip-build list 2>/dev/null | grep -E '^[A-Za-z0-9_]+\.[A-Za-z0-9_]+/' >"$dir/list.txt" || true
  listed=$(wc -l <"$dir/list.txt")

  echo "== tier 1: unit and in-process tests (parallel)"
  run_tier tier1 "$dir" "$quiet" --skip "$TIER2"
  local status1=$TIER_STATUS time1=$TIER_SECONDS
  echo "== tier 2: end-to-end suites (parallel; heavy-load suites one at a time, PostgreSQL ones two at a time)"
  run_tier tier2 "$dir" "$quiet" --filter "$TIER2"
  local status2=$TIER_STATUS time2=$TIER_SECONDS

  xunit_results "$dir/tier1-swift-testing.xml" >"$dir/results.txt"
  tier1=$(wc -l <"$dir/results.txt")
  xunit_results "$dir/tier2-swift-testing.xml" >>"$dir/results.txt"
  tier2=$(($(wc -l <"$dir/results.txt") - tier1))
  for tier in 1 2; do
    if [[ ! -s $dir/tier$tier-swift-testing.xml ]]; then
      echo "error: tier $tier left no results (it crashed or was killed: see $dir/tier$tier.log)" >&2
      printf '(tier %s: no results)\tfailed\n' "$tier" >>"$dir/results.txt"
    fi
  done

  printf '== tier 1: %s tests, %s s, %s\n' "$tier1" "$time1" "$( ((status1 == 0)) && echo passed || echo "FAILED (exit $status1)")"
  printf '== tier 2: %s tests, %s s, %s\n' "$tier2" "$time2" "$( ((status2 == 0)) && echo passed || echo "FAILED (exit $status2)")"
  printf '== both tiers: %s s\n' "$(awk -v a="$time1" -v b="$time2" 'BEGIN { printf "%.1f", a + b }')"
  ((status1 == 0 && status2 == 0)) || failed=1
  if grep -q $'\tfailed$' "$dir/results.txt"; then
    echo "failed tests:"
    grep $'\tfailed$' "$dir/results.txt" | cut -f1 | sed 's/^/  /'
  fi

  if ((listed == 0 || tier1 + tier2 != listed)); then
    echo "error: the tiers ran $tier1 + $tier2 tests, swift test list has $listed:" >&2
    cut -f1 "$dir/results.txt" | { grep -v '^(tier ' || true; } | sort | comm -3 - <(sort "$dir/list.txt") |
      sed -e 's/^\t/  never ran: /' -e '/^  never ran/!s/^/  ran but not listed (or twice): /' >&2
    failed=1
  fi

  check_root_skips "$dir/tier1.log" "$dir/tier2.log" || failed=1
  return "$failed"
}

# check_time_limits: every top-level @Suite (and any @Test outside a suite)
# in Tests/ names a .timeLimit (a nested suite inherits its parent's).
check_time_limits() {
  python3 - <<'PY'
import glob, re, sys
missing = []
for path in sorted(glob.glob("Tests/**/*.swift", recursive=True)):
    text = open(path, encoding="utf-8").read()
    for match in re.finditer(r"^@(Suite|Test)\b", text, re.M):
        rest = text[match.start():]
        declaration = re.search(r"\b(struct|class|enum|actor|extension|func)\s+(\w+)", rest)
        attribute = rest[: declaration.start()] if declaration else rest[:300]
        if "timeLimit" not in attribute:
            line = text.count("\n", 0, match.start()) + 1
            name = declaration.group(2) if declaration else "?"
            missing.append(f"{path}:{line}: @{match.group(1)} {name} has no .timeLimit")
if missing:
    print("error: every suite needs a time limit (docs/development.md, Time limits):", file=sys.stderr)
    print("\n".join(missing), file=sys.stderr)
    sys.exit(1)
PY
}
