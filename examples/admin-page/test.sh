#!/usr/bin/env bash
# Checks what dlock-serve.service and nginx.conf rely on, on a free loopback port and an SQLite
# store: with a token file, a request without the token is refused (401) and one with it served
# (200); the name nginx passes on (--allow-host) is served and another name refused (403).
#   examples/admin-page/test.sh DLOCK_BINARY      (exit 77, skipped, without curl)
set -euo pipefail
dlock=$1
command -v curl > /dev/null || { echo "skipped: no curl"; exit 77; }
tmp=$(mktemp -d)
serve=
trap '[ -z "$serve" ] || kill "$serve" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

export DLOCK_URL=sqlite://$tmp/locks.db
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > "$tmp/token")
# The token travels in a header file, not on curl's command line, which every user can read.
printf 'Authorization: Bearer %s\n' "$(cat "$tmp/token")" > "$tmp/auth"

mkfifo "$tmp/out"
"$dlock" serve --listen 127.0.0.1:0 --token-file "$tmp/token" --audit-log "$tmp/audit.log" \
  --allow-host locks.example.com > "$tmp/out" 2> "$tmp/err" &
serve=$!
exec 3< "$tmp/out"  # its first line says where it listens; end of file if it failed to start
read -r -t 60 -u 3 line || fail "dlock serve did not start: $(cat "$tmp/err")"
url=${line##* }  # dlock serve: listening on http://127.0.0.1:PORT

"$dlock" acquire --owner admin-page-test --ttl 5m examples/admin-page > /dev/null
# status PATH [curl options...]: the HTTP status of GET PATH
status() { curl -s -o "$tmp/body" -w '%{http_code}' "$url$1" "${@:2}"; }

[ "$(status /api/locks)" = 401 ] || fail "no token: $(cat "$tmp/body")"
[ "$(status /api/locks -H @"$tmp/auth")" = 200 ] || fail "with the token: $(cat "$tmp/body")"
grep -q '"owner":"admin-page-test"' "$tmp/body" || fail "the held lock is not listed: $(cat "$tmp/body")"
[ "$(status /api/locks -H @"$tmp/auth" -H 'Host: locks.example.com')" = 200 ] ||
  fail "the proxy's name: $(cat "$tmp/body")"
[ "$(status /api/locks -H @"$tmp/auth" -H 'Host: elsewhere.example.com')" = 403 ] ||
  fail "another name: $(cat "$tmp/body")"

kill -TERM "$serve"
rc=0
wait "$serve" || rc=$?
serve=
[ "$rc" = 0 ] || fail "dlock serve exited $rc on SIGTERM: $(cat "$tmp/err")"
echo "admin page example: 401 without the token, 200 with it, 403 for a name not allowed"
