#!/usr/bin/env bash
# Installs the build dependencies, builds the dlock tool (its progress shown), and runs two
# contending `dlock run` jobs on the embedded default backend (no URL given): job B visibly
# waits until job A is done.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --build-only
cmake --preset release -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_EXAMPLES=OFF
cmake --build --preset release --target dlock_cli
dlock=build/release/dlock

# Job A says through a FIFO when it holds the lock, so that job B surely comes second.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/holding"
echo
$dlock run nightly-report -- sh -c \
  'echo "[job A] holds nightly-report (fencing token $DLOCK_FENCING_TOKEN); working for 3 s"; echo > "$1"; sleep 3; echo "[job A] done"' \
  sh "$tmp/holding" &
job_a=$!
read -r _ < "$tmp/holding"
echo "[job B] starting; the lock is busy:"
$dlock status nightly-report
start=$(date +%s%N)
$dlock run nightly-report -- sh -c 'echo "[job B] got nightly-report (fencing token $DLOCK_FENCING_TOKEN)"'
echo "[job B] waited $(( ($(date +%s%N) - start) / 1000000 )) ms for job A"
wait "$job_a"
