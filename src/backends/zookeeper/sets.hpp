#pragma once

// Several keys' queues at once (Backend::acquire_set and release_set): the caller's node made in
// every key's queue in one transaction and every queue read with it, in one round trip; a set's
// nodes removed, or one hold of each dropped, in one transaction. Who holds is decided by the
// single key's rules (nodes.hpp, queue.hpp), key by key.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/zookeeper/nodes.hpp"
#include "backends/zookeeper/queue.hpp"
#include "backends/zookeeper/session.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::zookeeper {

// Makes the caller's node in every request's queue, all or none (the key nodes first where
// missing, as enqueue() does), and reads every queue: one round trip. One Look per request, in
// order; the nodes' czxid, their token, is the transaction's zxid.
std::vector<Look> enqueue_set(const std::shared_ptr<Session>& session, const std::string& root,
                              std::span<const backend::AcquireRequest> requests);

// What a set's looks say, request by request in order, by the single key's rules.
struct SetVerdict {
  // A request may re-enter a hold of its owner (queue.hpp, own_holds).
  bool reenters = false;
  // Else the first request whose node does not hold; none when every node holds.
  std::optional<std::size_t> busy;
};
// Throws InvalidArgument as check_permits() does.
SetVerdict judge(std::span<const backend::AcquireRequest> requests, const std::vector<Look>& looks);

// Removes the looks' nodes in one transaction (one by one if one is gone already); throws
// ConnectionError as drop() does. `key`: for errors.
void drop_set(Session& s, std::vector<Look>& looks, std::string_view key);

// A node of this client's, as last read or written.
struct HeldNode {
  std::string path;
  NodeData data;
  int version = 0;
};

// Drops one hold of each node in one transaction, as release() does one: a node's last hold
// deletes it, another hold decrements its count, each versioned. Nothing when a node went or
// changed since it was read: then nothing was done. `key`: for errors.
std::optional<std::vector<HeldNode>> drop_holds(Session& s, const std::vector<HeldNode>& nodes, std::string_view key);

}  // namespace dlock::backends::zookeeper
