#pragma once

// What an administrator asks of the keys under the URL's root: their holders, a page of them,
// force-release and the removal of idle container nodes. Needs only a session and the root
// (layout: nodes.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/zookeeper/session.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::zookeeper {

// The key's holders, each with the waiters named in order (Backend::inspect).
std::vector<LockInfo> inspect_key(Session& s, const std::string& root, std::string_view key);

// Held keys from `prefix` after `after`, at most `limit` of them (Backend::list).
ListPage list_keys(Session& s, const std::string& root, std::string_view prefix, std::string_view after,
                   std::size_t limit);

// Force-release of the key's holders, or only the one with `token` (Backend::force_release):
// an immediate eviction deletes the holder's node, a delayed one marks it evicted.
std::vector<LockInfo> evict(Session& s, const std::string& root, std::string_view key, Eviction eviction,
                            std::optional<std::uint64_t> token);

// Container nodes go by themselves; this removes the empty ones now (Backend::collect_idle).
// Tokens are zxids, so nothing about fencing is kept in them.
std::size_t remove_idle_keys(Session& s, const std::string& root);

}  // namespace dlock::backends::zookeeper
