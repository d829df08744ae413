#pragma once

// Where this client's acquisitions' nodes are, as it last saw them, and the watch on each that
// tells the core at once of a force-release (the node marked evicted or deleted) or of any other
// change (another client's re-entry: the core then finds the lease still its own).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "backends/etcd/nodes.hpp"
#include "backends/etcd/watches.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::etcd {

// Where an acquisition's node is.
struct Place {
  pb::KeyValue node;  // as last read or written (its create revision is the lease's token)
  NodeValue value;
  bool watched = false;
  bool releasing = false;  // its last release is under way: the node's deletion is ours
};

class HeldNodes {
 public:
  // `before_notice`: runs its argument once the holder's lease was kept alive (Session).
  HeldNodes(Watches& watches, std::function<void(std::function<void()>)> before_notice);
  ~HeldNodes();

  std::optional<Place> find(const backend::LeaseRef& lease) const;
  void remember(const backend::LeaseRef& lease, const pb::KeyValue& node, const NodeValue& value);
  void releasing(const backend::LeaseRef& lease);
  void forget(const backend::LeaseRef& lease);
  // Watches the lease's node from `revision` on, unless a watch of this client's covers it.
  void arm(const backend::LeaseRef& lease, std::int64_t revision);

  // Where watches report to (Backend::watch).
  void report_to(std::shared_ptr<backend::Events> events);
  // Every node of the session is gone: forgets them all and tells the core.
  void session_lost(const std::string& why);

 private:
  using Id = std::tuple<std::string, std::string, std::uint64_t>;  // key, owner, token
  static Id id(const backend::LeaseRef& lease) {
    return {std::string(lease.key), std::string(lease.owner), lease.token};
  }
  void changed(const Id& id);

  Watches& watches_;
  const std::function<void(std::function<void()>)> before_notice_;
  mutable std::mutex mutex_;  // never held while waiting for an answer
  std::shared_ptr<backend::Events> events_;
  std::map<Id, Place> places_;
  std::map<Id, Watches::Handle> watching_;
};

}  // namespace dlock::backends::etcd
