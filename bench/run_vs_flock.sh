#!/bin/sh
# The cost of `dlock run KEY -- true` next to `flock FILE true`, the issue's yardstick:
# hyperfine medians over ROUNDS rounds of RUNS runs each, and their ratio.
#
#   bench/run_vs_flock.sh [DLOCK_BINARY]     default: build/release/dlock (cmake --preset release)
#
# Environment: ROUNDS (default 3), RUNS (default 500), URL (default sqlite:///tmp/dlock-vs-flock.db).
set -eu
dlock=${1:-build/release/dlock}
rounds=${ROUNDS:-3}
runs=${RUNS:-500}
url=${URL:-sqlite:///tmp/dlock-vs-flock.db}
lockfile=$(mktemp)
out=$(mktemp)
trap 'rm -f "$lockfile" "$out"' EXIT

i=1
while [ "$i" -le "$rounds" ]; do
  hyperfine -N --warmup 50 --runs "$runs" --export-json "$out" \
    "flock $lockfile true" "$dlock --url $url run bench-vs-flock -- true" >/dev/null 2>&1
  /usr/bin/python3 - "$out" "$i" <<'PY'
import json, sys
flock, run = (r["median"] * 1000 for r in json.load(open(sys.argv[1]))["results"])
print(f'{{"round":{sys.argv[2]},"flock_median_ms":{flock:.3f},"dlock_run_median_ms":{run:.3f},"ratio":{run / flock:.2f}}}')
PY
  i=$((i + 1))
done
