#!/usr/bin/env bash
# Installs what building and testing dlock needs on Debian 12. Safe to run repeatedly: it
# only calls apt-get when a package is missing.
#   --build-only   only what building the library, the tools and the .deb needs (the README's
#                  Install section lists the same packages)
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libsqlite3-dev libmariadb-dev libhiredis-dev libssl-dev zlib1g-dev libfmt-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libzookeeper-mt-dev  # zookeeper://: ZooKeeper's C client
  libpq-dev postgresql-server-dev-15  # postgres://: libpq, and for the static tool libpq's helpers
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # etcd://: gRPC, and the stubs made from its proto
  help2man dpkg-dev file  # dlock(1), and the .deb's dependencies (cpack: dpkg-shlibdeps)
)
case "${1:-}" in
  --build-only) ;;
  "") packages+=(
    libgtest-dev libgmock-dev
    util-linux hyperfine sqlite3
    debootstrap  # the .deb's install test on a fresh Debian 12 (scripts/deb-test.sh)
    redis-server  # the private servers of the redis:// tests (scripts/servers/redis.sh)
    zookeeper  # the private servers of the zookeeper:// tests (scripts/servers/zookeeper.sh)
    postgresql-15  # the private server of the postgres:// tests (scripts/servers/postgres.sh)
    etcd-server etcd-client  # the private servers of the etcd:// tests (scripts/servers/etcd.sh)
    chromium  # the admin page's browser tests (tests/browser), driven by playwright-core from npm
  ) ;;
  *) echo "usage: $0 [--build-only]" >&2; exit 64 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
