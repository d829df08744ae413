#!/usr/bin/env bash
# Builds the .deb (cmake --preset release && cmake --build --preset release --target package) and
# installs it with apt-get on a fresh Debian 12 (debootstrap minbase in a temporary directory,
# used with chroot), then uses it there as a new user would: dlock --version, a `dlock run` on
# the default store, dlock serve --help, the man page and the completion in place, and a
# consumer program (tests/consumer) built with find_package and with pkg-config against the
# installed package, with no -dev package beyond the compiler, cmake and pkg-config, and the
# README's first hour of a C++ service, run verbatim.
# Needs root (debootstrap, chroot, mount) and the network (the Debian archive).
#   DLOCK_DEB_MIRROR   the Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=${DLOCK_DEB_MIRROR:-http://deb.debian.org/debian}
step() { echo "deb-test: $*"; }
[ "$(id -u)" -eq 0 ] || { echo "deb-test: needs root (debootstrap, chroot, mount)" >&2; exit 1; }

step "building the package"
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target package >/dev/null
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' build/release/CMakeCache.txt)
deb=build/release/dlock_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || { echo "deb-test: $deb was not written" >&2; exit 1; }
dpkg-deb --info "$deb" | sed -n 's/^ \(Depends\|Installed-Size\):/deb-test:   &/p'

root=$(mktemp -d /tmp/dlock-deb.XXXXXX)
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
step "debootstrap bookworm (minbase) in $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || { cat "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
mount -t proc proc "$root/proc"
cp "$deb" tests/consumer/main.cpp tests/consumer/CMakeLists.txt "$root/tmp/"
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"; }
# apt-get in the chroot, its chatter (no /dev/pts, no apt-utils) shown only if it fails.
apt_in_root() {
  in_root env DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root -y -qq "$@" >"$root/tmp/apt.log" 2>&1 ||
    { cat "$root/tmp/apt.log" >&2; return 1; }
}

step "apt-get install ./$(basename "$deb")"
apt_in_root update
apt_in_root install --no-install-recommends "/tmp/$(basename "$deb")"

step "using it"
in_root sh -euxc '
  test "$(dlock --version)" = '"$version"'
  dlock run -n some-key true
  dlock --json status some-key
  dlock serve --help >/dev/null
  dlock-serve --help >/dev/null
  zcat /usr/share/man/man1/dlock.1.gz | grep -q "^\.TH DLOCK \"1\""
  test -s /usr/share/bash-completion/completions/dlock
  bash -c ". /usr/share/bash-completion/completions/dlock && complete -p dlock"
  for f in /usr/bin/dlock-serve /usr/lib/libdlock.so.0.1; do if ldd "$f" | grep "not found"; then exit 1; fi; done
'

step "a consumer against the installed package"
apt_in_root install --no-install-recommends g++ cmake make pkg-config
in_root sh -euxc '
  cd /tmp
  cmake -S . -B build >/dev/null && cmake --build build >/dev/null
  ./build/consumer sqlite:///tmp/locks.db
  g++ -o pc-consumer main.cpp $(pkg-config --cflags --libs dlock)
  ./pc-consumer sqlite:///tmp/locks.db
'
step "the README's first hour of a C++ service, verbatim"
awk '/^## Your first hour: a C\+\+ service/ { section = 1 } section && /^```sh$/ { code = 1; next }
     code && /^```$/ { exit } code { print }' README.md >"$root/tmp/first-hour.sh"
[ -s "$root/tmp/first-hour.sh" ] || { echo "deb-test: no sh block under the README's C++ first hour" >&2; exit 1; }
in_root bash -eu /tmp/first-hour.sh >"$root/tmp/first-hour.out" 2>&1 || { cat "$root/tmp/first-hour.out" >&2; exit 1; }
# Two copies, three rounds each, taking turns: six lines, the tokens rising 1 to 6.
tokens=$(sed -n 's/^pid [0-9]*: round [1-3], fencing token \([0-9]*\)$/\1/p' "$root/tmp/first-hour.out" | tr '\n' ' ')
[ "$tokens" = "1 2 3 4 5 6 " ] || { cat "$root/tmp/first-hour.out" >&2; echo "deb-test: tokens '$tokens'" >&2; exit 1; }

step "all passed"
