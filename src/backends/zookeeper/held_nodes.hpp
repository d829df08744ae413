#pragma once

// Where this client's acquisitions' nodes are, as it last saw them, and the watches on them
// that tell the core of a force-release (an eviction mark, a delete, another client's
// re-entry) or of the session's end.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "backends/zookeeper/nodes.hpp"
#include "backends/zookeeper/session.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::zookeeper {

// Where an acquisition's node is, as this client last saw it.
struct Place {
  std::string path;
  NodeData data;  // as last read or written: an evicted one was force-released with a lock delay
  int version = 0;
  bool watched = false;
  bool releasing = false;  // its last release is under way: the node's deletion is ours
};

class HeldNodes {
 public:
  std::optional<Place> find(const backend::LeaseRef& lease) const;
  void remember(const backend::LeaseRef& lease, const std::string& path, const NodeData& data, int version);
  // The lease's last release is under way: its node's deletion is no eviction.
  void releasing(const backend::LeaseRef& lease);
  void forget(const backend::LeaseRef& lease);

  // The path of a new holder's node that no watch of this client's covers yet, now marked
  // watched: the caller sets watch_for on it.
  std::optional<std::string> unwatched(const backend::LeaseRef& lease);
  // What a holder's node watch does: the core checks the key (inspect) and finds whether the
  // change ended this acquisition. Marks every acquisition at `path` watched.
  Session::Watch watch_for(std::string_view key, const std::string& path);

  // Where watches report to (Backend::watch).
  void report_to(std::shared_ptr<backend::Events> events);
  // Every node of the session is gone: forgets them all and tells the core.
  void session_expired();

 private:
  using Id = std::tuple<std::string, std::string, std::uint64_t>;  // key, owner, token
  static Id id(const backend::LeaseRef& lease) {
    return {std::string(lease.key), std::string(lease.owner), lease.token};
  }

  mutable std::mutex mutex_;  // never held while waiting for an answer
  std::shared_ptr<backend::Events> events_;
  std::map<Id, Place> places_;
};

}  // namespace dlock::backends::zookeeper
