#pragma once

// Where this client's acquisitions' nodes are, as it last saw them, and the watch on each that
// tells the core at once of a force-release (the node marked evicted or deleted) or of any other
// change (another client's re-entry: the core then finds the lease still its own).
//
// A new hold's watch is set kArmLater after the grant, not at once: most holds end sooner, and
// a watch costs the cluster and this client a create, the event of the release and a cancel
// (a third of an uncontended cycle on a 2-core machine). The watch starts from the grant's
// revision, which the cluster replays, so nothing is missed meanwhile, and an evicted holder
// still learns within about a second (Capabilities::notifies_evictions).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
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
  // The same, kArmLater from now, if the lease is still remembered then (see the top).
  void arm_later(const backend::LeaseRef& lease, std::int64_t revision);
  // No watch is set from now on (the backend is closing).
  void stop_arming();

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
  void arm(const Id& held, std::int64_t revision);
  void run_arming();

  Watches& watches_;
  const std::function<void(std::function<void()>)> before_notice_;
  mutable std::mutex mutex_;  // never held while waiting for an answer
  std::shared_ptr<backend::Events> events_;
  std::map<Id, Place> places_;
  std::map<Id, Watches::Handle> watching_;

  using Clock = std::chrono::steady_clock;
  std::mutex arming_mutex_;  // guards the three below
  std::condition_variable arming_cv_;
  std::multimap<Clock::time_point, std::pair<Id, std::int64_t>> due_;  // (lease, revision) by when
  bool arming_stopped_ = false;
  std::thread arming_;  // started by the first arm_later()
};

inline constexpr std::chrono::milliseconds kArmLater{100};

}  // namespace dlock::backends::etcd
