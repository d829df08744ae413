#pragma once

// A key's queue of nodes, as one client sees it: making the caller's node and reading the queue
// in one round trip, finding that node again after a lost answer, removing a node, and
// describing the holders. Needs only a session and the URL's root path (layout: nodes.hpp).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/zookeeper/nodes.hpp"
#include "backends/zookeeper/session.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::zookeeper {

// An attempt's view of the key: its own node (if it made one) and the queue.
struct Look {
  std::shared_ptr<Session> session;
  std::string node;  // the caller's own node's path, empty when none
  Stat stat{};       // of that node
  NodeData data;     // as that node was made
  std::vector<Child> queue;
  std::size_t index = 0;  // of the caller's node in the queue
};

// The key's container node.
std::string key_path(const std::string& root, std::string_view key);

// Makes the caller's node and reads the queue, in one round trip.
Look enqueue(std::shared_ptr<Session> session, const std::string& root,
             const backend::AcquireRequest& request);

// Reads the queue again for a caller whose node exists; false when that node is gone.
bool refresh(Look& look, const std::string& root, std::string_view key);

// Removes a node the caller no longer wants; if the ensemble cannot be told, the session's
// end removes it.
void drop(Session& s, const std::string& node, std::string_view key);

// Deletes a node, again after a connection loss while the session lives (the ensemble may
// have deleted it then: ZNONODE). The answer, and whether the delete was made again.
std::pair<int, bool> remove_surely(Session& s, const std::string& path, int version);

// The queue's holders, each with the waiters named in order; those gone meanwhile are left
// out. One round trip: every read is sent at once.
std::vector<LockInfo> holders(Session& s, const std::string& root, std::string_view key,
                              const std::vector<Child>& queue);

LockInfo to_info(std::string_view key, const Stat& stat, const NodeData& data, std::size_t waiters);

}  // namespace dlock::backends::zookeeper
