#pragma once

// The etcd:// layout. Under the URL's prefix (default /dlock) each key is a directory, its name
// the key with '%' and '/' percent-encoded (so the key's bytes never end it early, and a prefix
// of keys is a prefix of directories); in it, one node per holder or waiter,
// ROOT/KEY/LEASE-ATTEMPT: the client's lease id and a random attempt tag (16 hex digits each),
// so that several owners of one client can queue for one key. Each node lives under its
// client's lease. Who holds follows the create revisions (holders.hpp); a holder's create
// revision is its fencing token. A node's value: owner, hold count, the lease's TTL (ms),
// held | evicted, exclusive | shared, and a shared node's permits (0: a reader).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dlock/types.hpp"
#include "rpc.pb.h"

namespace dlock::backends::etcd {

// The directory of a key's nodes, ending in '/'.
std::string key_dir(const std::string& root, std::string_view key);
// The key whose directory holds `node`; nothing for a node not of dlock's layout.
std::optional<std::string> key_of_node(const std::string& root, std::string_view node);
// The directory of every key that starts with `prefix` starts with this.
std::string keys_from(const std::string& root, std::string_view prefix);
// A fresh node name in the key's directory.
std::string new_node(const std::string& root, std::string_view key, std::int64_t lease);
// The end of the range of every key starting with `prefix` (etcd's range_end).
std::string prefix_end(std::string prefix);

struct NodeValue {
  std::string owner;
  std::uint32_t holds = 1;
  std::chrono::milliseconds ttl{0};
  bool evicted = false;
  LockMode mode = LockMode::exclusive;
  std::uint32_t permits = 0;  // shared: the semaphore's permits (0: no limit, a reader)
};
std::string to_value(const NodeValue& value);
std::optional<NodeValue> from_value(std::string_view text);

// A holder as the store reports it: ttl_left is its lease's TTL, the longest the key stays
// held after its holder stops (Capabilities::lease_is_the_session).
LockInfo to_info(std::string_view key, const etcdserverpb::KeyValue& node, const NodeValue& value,
                 std::size_t waiters);

}  // namespace dlock::backends::etcd
