#!/usr/bin/env bash
# Runs the command line of nightly-backup as cron would on two hosts at once, against an SQLite
# store instead of the shared server: one runs the job, the other exits 0 without a word. Then
# backup.sh twice in a row, as a late host would: the second run skips.
#   examples/cron/test.sh DLOCK_BINARY
set -euo pipefail
dlock=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
# A failed check leaves no job waiting: it is told to finish.
trap '{ echo finish >&4; } 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The crontab line without its schedule and user: `dlock run ... -- /usr/local/bin/backup.sh`.
read -r _ _ _ _ _ _ line < <(grep -E '^[0-9*]' "$here/nightly-backup")
set -f
# shellcheck disable=SC2206 # the line has no quotes: split on blanks, as cron's shell would
words=($line)
set +f
[ "${words[0]}" = dlock ] || fail "the crontab line does not start with dlock: $line"
words[0]=$dlock
# the job, as the crontab line runs it: cron_line JOB
cron_line() { "${words[@]/#\/usr\/local\/bin\/backup.sh/$1}"; }

export DLOCK_URL=sqlite://$tmp/locks.db
unset DLOCK_PASSWORD_FILE DLOCK_PASSWORD

# A job that says it started and then runs until told to finish, through two FIFOs, opened
# read-write here so that no open or write blocks and the timeouts below hold.
mkfifo "$tmp/started" "$tmp/finish"
exec 3<> "$tmp/started" 4<> "$tmp/finish"
cat > "$tmp/job.sh" <<EOF
#!/bin/sh
echo "\$DLOCK_OWNER" >> "$tmp/ran"
echo started > "$tmp/started"
read -r _ < "$tmp/finish"
EOF
chmod +x "$tmp/job.sh"

# Host A, which says "exited CODE" on the same FIFO when its dlock is done.
{
  rc=0
  cron_line "$tmp/job.sh" > "$tmp/a.out" 2> "$tmp/a.err" || rc=$?
  echo "exited $rc" > "$tmp/started"
} &
read -r -t 60 -u 3 said || true
[ "${said:-}" = started ] || fail "host A's job did not start (${said:-timeout}): $(cat "$tmp/a.err")"

rc=0
cron_line "$tmp/job.sh" > "$tmp/b.out" 2> "$tmp/b.err" || rc=$?
[ "$rc" = 0 ] || fail "host B exited $rc while host A held the lock: $(cat "$tmp/b.err")"
if [ -s "$tmp/b.out" ] || [ -s "$tmp/b.err" ]; then fail "host B printed something: $(cat "$tmp/b.out" "$tmp/b.err")"; fi
status=$("$dlock" status nightly-backup)
[[ $status == "nightly-backup: held by nightly-backup@"* ]] || fail "status does not name the job: $status"

echo finish >&4
read -r -t 60 -u 3 said || true
[ "${said:-}" = "exited 0" ] || fail "host A ${said:-did not end}: $(cat "$tmp/a.err")"
[ "$(wc -l < "$tmp/ran")" = 1 ] || fail "the job ran $(wc -l < "$tmp/ran") times"

export BACKUP_DEST=$tmp/backups
cron_line "$here/backup.sh"
first=$(cat "$BACKUP_DEST"/*.done)
cron_line "$here/backup.sh"
[ "$(cat "$BACKUP_DEST"/*.done)" = "$first" ] || fail "a second run the same day redid the backup"
echo "cron example: one host ran the job, the other was silent ($status); a second run skipped"
