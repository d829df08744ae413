#!/usr/bin/env bash
# The admin page at scale (issue 4): LOCKS held locks (default 100000) in a fresh sqlite://
# file, `dlock serve` on it, then the API's first page (curl, 20 requests) and the page's
# first row in headless Chromium (tests/browser/first_row_bench.mjs, beside the browser tests'
# playwright-core). JSON lines on stdout.
#
#   bench/admin_page.sh [DLOCK_BINARY]     default: build/release/dlock
#
# The locks are written straight into the file's table (a `dlock acquire` per lock would take
# minutes); each is held for an hour by the host's CLOCK_BOOTTIME, as the backend judges it.
set -euo pipefail
cd "$(dirname "$0")/.."
dlock=$(realpath "${1:-build/release/dlock}")
locks=${LOCKS:-100000}
dir=$(mktemp -d /tmp/dlock-bench-page.XXXXXX)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"' EXIT
url="sqlite://$dir/locks.db"

"$dlock" --url "$url" acquire --ttl 1h --owner bench seed/0 >/dev/null  # creates the schema
now_us=$(awk '{printf "%d", $1 * 1000000}' /proc/uptime)  # CLOCK_BOOTTIME, near enough
sqlite3 "$dir/locks.db" <<SQL
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $locks)
INSERT INTO dlock_locks(name, owner, token, hold_count, expires_at, acquired_at)
SELECT printf('orders/%07d', i), printf('worker-%d', i % 97), i, 1, $now_us + 3600000000, $now_us FROM n;
SQL

"$dlock" --url "$url" serve --listen 127.0.0.1:0 --audit-log "$dir/audit.log" >"$dir/serve.out" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
base=$(sed -n 's/^dlock serve: listening on //p' "$dir/serve.out")

times=()
for _ in $(seq 20); do
  times+=("$(curl -s -o /dev/null -w '%{time_total}' "$base/api/locks?limit=50")")
done
printf '%s\n' "${times[@]}" | sort -n | awk -v n="$locks" '{t[NR] = $1 * 1000}
  END {printf "{\"what\":\"GET /api/locks?limit=50\",\"held_locks\":%d,\"requests\":%d,\"p50_ms\":%.2f,\"max_ms\":%.2f}\n",
       n + 1, NR, t[int((NR + 1) / 2)], t[NR]}'
metrics_ms=$(curl -s -o /dev/null -w '%{time_total}' "$base/metrics" | awk '{printf "%.1f", $1 * 1000}')
echo "{\"what\":\"GET /metrics\",\"held_locks\":$((locks + 1)),\"ms\":$metrics_ms}"
[ -d tests/browser/node_modules/playwright-core ] || (cd tests/browser && npm ci --no-audit --no-fund >/dev/null)
node tests/browser/first_row_bench.mjs "$base"
