#pragma once

// A key's queue of nodes, as one client sees it: making the caller's node and reading the queue
// in one round trip, finding that node again after a lost answer, removing a node, and
// describing the holders. Needs only a session and the URL's root path (layout: nodes.hpp).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
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

// Waits for the session to come back after a lost connection, as long as a request lost with it
// may: true when a request may be made again on it.
bool reconnected(const Session& s);

// The root and the container nodes of `keys`, made where missing; the keys' in one round trip.
void make_key_nodes(Session& s, const std::string& root, const std::vector<std::string_view>& keys);

// The queue as read into `look`, and the caller's node's place in it; false when the key's node
// or the caller's node is not there.
bool take_queue(Look& look, Reply<std::vector<std::string>>& names, std::string_view key);

// After a create's answer was lost: finds the caller's node by its attempt tag and reads the
// queue into `look`; false when the ensemble did not make it (or it is gone).
bool found(Look& look, const std::string& root, std::string_view key, const std::string& attempt_id);

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

// The nodes before the caller's that may be this owner's holds, which the request re-enters
// (by owner tag: their data tells whose they are): either mode when asked shared (a writer may
// also read), an exclusive one only when asked exclusive (a shared holder asking exclusive is
// Busy: no upgrades).
std::vector<std::size_t> own_holds(const Look& look, const backend::AcquireRequest& request);

// A shared request must ask the permits of the key's first shared node (a holder, or a reader
// waiting behind a writer): InvalidArgument naming both counts otherwise.
void check_permits(const backend::AcquireRequest& request, const Look& look);

// Reads of queue nodes, by their index in the look's queue.
using Reads = std::map<std::size_t, Reply<Node>>;

// Sends the reads of the holders before the caller's node that `reads` lacks.
void read_holders(Session& s, const std::string& root, std::string_view key, const Look& look, Reads& reads);

// Busy with the holders `reads` found, as an attempt reports them; nothing when every one went
// meanwhile. `gone`, if set: called with each read node found gone.
std::optional<backend::Busy> busy_from(std::string_view key, const Look& look, Reads& reads,
                                       const std::function<void(std::size_t)>& gone);

LockInfo to_info(std::string_view key, const Stat& stat, const NodeData& data, std::size_t waiters);

}  // namespace dlock::backends::zookeeper
