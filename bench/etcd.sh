#!/usr/bin/env bash
# The floors beside an etcd:// backend (issue 19), measured on a private single-member etcd
# (scripts/servers/etcd.sh, etcd's default durability): a Range of one key (linearizable and
# serializable), a Put (one durable write), the lock cycle's two Txns (put under a lease if
# absent + range of the prefix for the first created key; delete if the create revision is
# unchanged), a LeaseGrant + LeaseRevoke, and the delete seen by another client's Watch stream,
# alone and plus one Range (bench/etcd_yardstick.cpp, gRPC's synchronous C++ stubs generated
# from src/backends/etcd/proto/rpc.proto), then dlock's workloads on etcd:// in the same run
# (ping, uncontended, distinct with 8 clients, contended with 8, 2 and 64). JSON lines on stdout.
#
#   bench/etcd.sh [path/to/dlock]     (default build/release/dlock)
#
# Starts the server in a temporary directory and stops it afterwards. ITERATIONS: per
# primitive, a fifth of it for the watcher's (default 5000); DURATION: seconds per workload
# (default 10); TTL: the lease's (default 10s). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d /tmp/dlock-bench-etcd.XXXXXX)
trap 'scripts/servers/etcd.sh stop "$dir"; rm -rf "$dir"' EXIT
scripts/servers/etcd.sh start "$dir" >/dev/null
set -a
. "$dir/env"
set +a

. scripts/servers/common.sh
install_packages bench/etcd.sh libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
protoc -I src/backends/etcd/proto --cpp_out="$dir" --grpc_out="$dir" \
  --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" rpc.proto
yardstick=$dir/yardstick
# shellcheck disable=SC2046  # pkg-config's flags are words
g++ -O2 -std=c++20 -I"$dir" bench/etcd_yardstick.cpp "$dir/rpc.pb.cc" "$dir/rpc.grpc.pb.cc" \
  $(pkg-config --cflags --libs grpc++ protobuf) -o "$yardstick"
"$yardstick" "${DLOCK_ETCD_URL#etcd://}" "${ITERATIONS:-5000}"

dlock=$(realpath "${1:-build/release/dlock}")
run() {
  "$dlock" --url "$DLOCK_ETCD_URL/bench?ttl=${TTL:-10s}" bench --duration "${DURATION:-10}" "$@" ||
    echo "etcd.sh: failed: bench $*" >&2
}
run --workload ping --clients 1
run --workload uncontended
run --workload distinct --clients 8
for clients in 8 2 64; do
  run --workload contended --clients "$clients"
done
