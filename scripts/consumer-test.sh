#!/usr/bin/env bash
# Consumes dlock as a user would, each from a fresh build directory, the consumer naming neither
# dlock's dependencies nor a C++ standard (tests/consumer/):
#   1. find_package(dlock) on a static install,
#   2. find_package(dlock) on a shared install (build/release: shared libdlock),
#   3. pkg-config (g++ main.cpp $(pkg-config --cflags --libs dlock)) on each install,
#   4. examples/, a project of its own, against the static install, with its ctest,
#   5. add_subdirectory(dlock) in a parent project, SQLite only: only the library is built, and
#      neither the tools' and tests' dependencies nor MariaDB's and hiredis' are looked for.
# Each install goes to a temporary prefix (cmake --install --prefix), not the one configured,
# so a consumer also shows that the installed files find their own place. Each program built
# runs (a lock taken on sqlite://). The library builds are kept in build/consumer-* and
# build/release for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
work=$(mktemp -d /tmp/dlock-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT
url="sqlite://$work/locks.db"
step() { echo "consumer-test: $*"; }
fail() { echo "consumer-test: FAILED: $*" >&2; exit 1; }

# The installs: static from a library-only build of its own, shared from the release preset's.
step "static install"
cmake -S . -B build/consumer-static -G Ninja -DDLOCK_INSTALL=ON -DDLOCK_BUILD_CLI=OFF -DDLOCK_BUILD_SERVE=OFF \
  -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build build/consumer-static -j2
cmake --install build/consumer-static --prefix "$work/static" >/dev/null
step "shared install (release preset)"
cmake --preset release >/dev/null
cmake --build --preset release -j2
cmake --install build/release --prefix "$work/shared" >/dev/null
[ -e "$work/shared/lib/libdlock.so.0.1" ] || fail "no libdlock.so.0.1 in the shared install"

# Runs a consumer; $1 says whether it must use the shared libdlock of $2 (the prefix) or none.
check_run() {
  local program=$1 linkage=$2 prefix=$3 libraries
  # Read whole before grep -q looks: grep quitting at the first match could end ldd with
  # SIGPIPE, which pipefail takes for a failed check (CI failed so once).
  libraries=$(ldd "$program")
  if [ "$linkage" = shared ]; then
    grep -q "libdlock.so.0.1 => $prefix/lib/" <<<"$libraries" || fail "$program does not load $prefix's libdlock"
  elif grep -q libdlock <<<"$libraries"; then
    fail "$program loads a shared libdlock, built against the static install"
  fi
  "$program" "$url"
}

for kind in static shared; do
  step "find_package, $kind"
  cmake -S tests/consumer -B "$work/cmake-$kind" -G Ninja -DCMAKE_PREFIX_PATH="$work/$kind" >/dev/null
  cmake --build "$work/cmake-$kind" >/dev/null
  check_run "$work/cmake-$kind/consumer" "$kind" "$work/$kind"

  step "pkg-config, $kind"
  pc_path="$work/$kind/lib/pkgconfig"
  # shellcheck disable=SC2046  # the flags are words
  g++ -o "$work/pc-$kind" tests/consumer/main.cpp $(PKG_CONFIG_PATH=$pc_path pkg-config --cflags --libs dlock)
  LD_LIBRARY_PATH="$work/$kind/lib" check_run "$work/pc-$kind" "$kind" "$work/$kind"
done

step "examples/ against the static install"
cmake -S examples -B "$work/examples" -G Ninja -DCMAKE_PREFIX_PATH="$work/static" >/dev/null
cmake --build "$work/examples" >/dev/null
ctest --test-dir "$work/examples" --output-on-failure

step "add_subdirectory, SQLite only"
parent=$work/subdirectory
cmake -S tests/consumer/subdirectory -B "$parent" -G Ninja -DDLOCK_SOURCE_DIR="$src" >/dev/null
for found in MariaDB_ Hiredis_ ZooKeeper_ GTest_DIR fmt_DIR CLI11_DIR nlohmann_json_DIR HTTPLIB_; do
  ! grep -q "^$found" "$parent/CMakeCache.txt" || fail "add_subdirectory looked for $found"
done
cmake --build "$parent" -j2 >/dev/null
built=$(cd "$parent" && find . -type f -perm -u+x -name '*' ! -name '*.so*' ! -path '*/CMakeFiles/*' | sort | tr '\n' ' ')
[ "$built" = "./consumer " ] || fail "add_subdirectory built more than the library: $built"
[ ! -e "$parent/dlock/tests" ] || fail "add_subdirectory configured the tests"
check_run "$parent/consumer" static ""
step "all passed"
