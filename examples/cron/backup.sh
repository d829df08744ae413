#!/bin/sh
# The job /etc/cron.d/nightly-backup runs under the lock (a stand-in: it writes a note where a
# real backup would write the dump). The lock keeps two hosts from running it at once; it does
# not keep a host whose clock is late from starting it again once the first host has finished,
# so the job records in the shared destination that today's run is done, and skips a second.
set -eu
dest=${BACKUP_DEST:-/srv/backups}
done_file=$dest/$(date +%F).done
[ ! -e "$done_file" ] || exit 0
mkdir -p "$dest"
# ... the dump goes here; the fencing token, greater for each run, tells a stale one apart.
echo "backup by $DLOCK_OWNER, fencing token $DLOCK_FENCING_TOKEN" > "$done_file.tmp"
mv "$done_file.tmp" "$done_file"
