#pragma once

// What an administrator asks of the keys under the URL's prefix: a key's holder, a page of
// held keys, force-release (layout: nodes.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/etcd/connection.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

// The key's holders, with its waiters named in order (Backend::inspect).
std::vector<LockInfo> inspect_key(Connection& c, const std::string& root, std::string_view key);

// Held keys from `prefix` after `after`, at most `limit` of them (Backend::list): one range
// over their directories.
ListPage list_keys(Connection& c, const std::string& root, std::string_view prefix, std::string_view after,
                   std::size_t limit);

// Force-release of the key's holders, or only of the one whose token is `token`
// (Backend::force_release): an immediate eviction deletes a holder's node, a delayed one marks it
// evicted, so that it keeps its place (and the key) until its holder releases it or its lease ends.
std::vector<LockInfo> evict(Connection& c, const std::string& root, std::string_view key, Eviction eviction,
                            std::optional<std::uint64_t> token);

}  // namespace dlock::backends::etcd
