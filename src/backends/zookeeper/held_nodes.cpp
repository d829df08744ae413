#include "backends/zookeeper/held_nodes.hpp"

#include <utility>

namespace dlock::backends::zookeeper {

std::optional<Place> HeldNodes::find(const backend::LeaseRef& lease) const {
  std::lock_guard lock(mutex_);
  const auto it = places_.find(id(lease));
  if (it == places_.end()) return std::nullopt;
  return it->second;
}

void HeldNodes::remember(const backend::LeaseRef& lease, const std::string& path, const NodeData& data,
                         int version) {
  std::lock_guard lock(mutex_);
  auto& place = places_[id(lease)];
  place.path = path;
  place.data = data;
  place.version = version;
}

void HeldNodes::releasing(const backend::LeaseRef& lease) {
  std::lock_guard lock(mutex_);
  const auto it = places_.find(id(lease));
  if (it != places_.end()) it->second.releasing = true;
}

void HeldNodes::forget(const backend::LeaseRef& lease) {
  std::lock_guard lock(mutex_);
  places_.erase(id(lease));
}

std::optional<std::string> HeldNodes::unwatched(const backend::LeaseRef& lease) {
  std::lock_guard lock(mutex_);
  auto& place = places_[id(lease)];
  if (place.watched) return std::nullopt;
  place.watched = true;
  return place.path;
}

Session::Watch HeldNodes::watch_for(std::string_view key, const std::string& path) {
  std::lock_guard lock(mutex_);
  for (auto& [lease, place] : places_) {
    if (place.path == path) place.watched = true;
  }
  return [this, key = std::string(key), path](int) {
    std::shared_ptr<backend::Events> events;
    {
      std::lock_guard guard(mutex_);
      bool ours = false;
      for (auto& [lease, place] : places_) {
        if (place.path != path) continue;
        place.watched = false;
        ours = ours || place.releasing;
      }
      if (!ours) events = events_;
    }
    if (events) events->evicted(key);
  };
}

void HeldNodes::report_to(std::shared_ptr<backend::Events> events) {
  std::lock_guard lock(mutex_);
  events_ = std::move(events);
}

void HeldNodes::session_expired() {
  std::shared_ptr<backend::Events> events;
  {
    std::lock_guard lock(mutex_);
    places_.clear();
    events = events_;
  }
  if (events) events->all_lost("its ZooKeeper session expired (the ensemble did not hear from it in time)");
}

}  // namespace dlock::backends::zookeeper
