#!/usr/bin/env bash
# Installs dependencies, builds dlock, and runs two contending `dlock run` jobs on the embedded
# default backend (no URL given): job B visibly waits until job A is done.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release -DDLOCK_BUILD_TESTS=OFF >/dev/null
cmake --build --preset release -j2 >/dev/null
dlock=build/release/dlock

$dlock run nightly-report -- sh -c \
  'echo "[job A] holds nightly-report (fencing token $DLOCK_FENCING_TOKEN); working for 3 s"; sleep 3; echo "[job A] done"' &
job_a=$!
sleep 0.5
echo "[job B] starting; the lock is busy:"
$dlock status nightly-report
start=$(date +%s%N)
$dlock run nightly-report -- sh -c 'echo "[job B] got nightly-report (fencing token $DLOCK_FENCING_TOKEN)"'
echo "[job B] waited $(( ($(date +%s%N) - start) / 1000000 )) ms for job A"
wait "$job_a"
