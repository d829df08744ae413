#pragma once

// Several keys' queues at once (Backend::acquire_set and release_set): the caller's node made in
// every key's queue in one transaction and every queue read with it, in one round trip; a set's
// nodes removed, or one hold of each dropped, in one transaction. Who holds is decided by the
// single key's rules (nodes.hpp, queue.hpp), key by key.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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

// The keys a set of this client's found busy lately. A set's nodes made in busy queues and
// dropped again wake and reorder those queues' waiters (8 processes on the same 2 keys took 62
// sets/s so, against 324 key by key), so a set with such a key reads every queue first and
// goes only when all are empty; any other set goes at once, one round trip fewer.
class ContendedKeys {
 public:
  // How long a key found busy makes sets read first.
  static constexpr std::chrono::seconds kMemory{1};
  // How many keys it remembers at most.
  static constexpr std::size_t kMostKeys = 1024;

  void saw_busy(std::string_view key);
  bool any(std::span<const backend::AcquireRequest> requests);

 private:
  std::mutex mutex_;
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> busy_since_;
};

// One try-once attempt at every request (Backend::acquire_set): one transaction makes the
// caller's node in every key's queue, read with it; then, by the single key's rules, every node
// holds (`grant` makes each a lease), or the set's nodes go in another transaction, sent with
// the reads of the first busy key's holders. Nothing when a request may re-enter a hold of its
// owner: a re-entry reads that hold to confirm the owner, then writes it (settle), which the
// core's key-by-key path does for this rare set; nothing either when `contended` knows a key
// and one of the queues, read first, is not empty.
using Grant = std::function<backend::Acquired(const backend::AcquireRequest&, const Look&)>;
std::optional<backend::AcquireSetResult> take_set(const std::shared_ptr<Session>& session,
                                                  const std::string& root,
                                                  std::span<const backend::AcquireRequest> requests,
                                                  const Grant& grant, ContendedKeys& contended);

// A node of this client's, as last read or written.
struct HeldNode {
  std::string path;
  NodeData data;
  int version = 0;
};

// Drops one hold of each node in one transaction, as release() does one: a node's last hold
// deletes it, another hold decrements its count, each versioned. Nothing when a node went or
// changed since it was read: then nothing was done. `key`: for errors.
std::optional<std::vector<HeldNode>> drop_holds(Session& s, const std::vector<HeldNode>& nodes,
                                                std::string_view key);

}  // namespace dlock::backends::zookeeper
