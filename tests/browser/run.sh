#!/usr/bin/env bash
# End-to-end browser test of the `dlock serve` admin page.
#   DLOCK_BINARY=/path/to/dlock [DLOCK_SCREENSHOT=/path/to/admin-page.png] tests/browser/run.sh
# Needs Debian's chromium (apt-get install chromium) and Node 20+; playwright-core comes from
# npm (package-lock.json) and drives /usr/bin/chromium: no browser is downloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ ! -x /usr/bin/chromium ]]; then
  echo "run.sh: /usr/bin/chromium is missing; install Debian's browser first: apt-get install chromium" >&2
  exit 1
fi
if [[ -z "${DLOCK_BINARY:-}" ]]; then
  echo "run.sh: set DLOCK_BINARY to the dlock binary, e.g. DLOCK_BINARY=build/release/dlock" >&2
  exit 1
fi
# Relative paths are the caller's: make them absolute before they are used from here.
case "$DLOCK_BINARY" in /*) ;; *) DLOCK_BINARY="$OLDPWD/$DLOCK_BINARY" ;; esac
export DLOCK_BINARY
if [[ -n "${DLOCK_SCREENSHOT:-}" ]]; then
  case "$DLOCK_SCREENSHOT" in /*) ;; *) DLOCK_SCREENSHOT="$OLDPWD/$DLOCK_SCREENSHOT" ;; esac
  export DLOCK_SCREENSHOT
fi

if [[ ! -d node_modules/playwright-core ]]; then
  npm ci --no-audit --no-fund
fi
exec node --test admin_page.test.mjs
