#include "backends/etcd/held_nodes.hpp"

#include <utility>
#include <vector>

#include "core/signal_free_thread.hpp"

namespace dlock::backends::etcd {

HeldNodes::HeldNodes(Watches& watches, std::function<void(std::function<void()>)> before_notice)
    : watches_(watches), before_notice_(std::move(before_notice)) {}

HeldNodes::~HeldNodes() {
  stop_arming();
  for (const auto& [id, handle] : watching_) watches_.cancel(handle);
}

void HeldNodes::stop_arming() {
  {
    std::lock_guard lock(arming_mutex_);
    arming_stopped_ = true;
    due_.clear();
  }
  arming_cv_.notify_all();
  if (arming_.joinable()) arming_.join();
}

void HeldNodes::arm_later(const backend::LeaseRef& lease, std::int64_t revision) {
  {
    std::lock_guard lock(arming_mutex_);
    if (arming_stopped_) return;
    due_.emplace(Clock::now() + kArmLater, std::make_pair(id(lease), revision));
    if (!arming_.joinable()) arming_ = core::signal_free_thread([this] { run_arming(); });
  }
  arming_cv_.notify_all();
}

void HeldNodes::run_arming() {
  std::unique_lock lock(arming_mutex_);
  while (!arming_stopped_) {
    if (due_.empty()) {
      arming_cv_.wait(lock);
      continue;
    }
    const auto next = due_.begin();
    if (const Clock::time_point when = next->first; Clock::now() < when) {
      arming_cv_.wait_until(lock, when);  // a copy: the entry may go while this waits
      continue;
    }
    const auto [held, revision] = next->second;
    due_.erase(next);
    lock.unlock();
    arm(held, revision);  // nothing when it was forgotten meanwhile
    lock.lock();
  }
}

std::optional<Place> HeldNodes::find(const backend::LeaseRef& lease) const {
  std::lock_guard lock(mutex_);
  const auto it = places_.find(id(lease));
  if (it == places_.end()) return std::nullopt;
  return it->second;
}

void HeldNodes::remember(const backend::LeaseRef& lease, const pb::KeyValue& node, const NodeValue& value) {
  std::lock_guard lock(mutex_);
  auto& place = places_[id(lease)];
  place.node = node;
  place.value = value;
}

void HeldNodes::releasing(const backend::LeaseRef& lease) {
  std::lock_guard lock(mutex_);
  const auto it = places_.find(id(lease));
  if (it != places_.end()) it->second.releasing = true;
}

void HeldNodes::forget(const backend::LeaseRef& lease) {
  std::optional<Watches::Handle> handle;
  {
    std::lock_guard lock(mutex_);
    places_.erase(id(lease));
    const auto it = watching_.find(id(lease));
    if (it != watching_.end()) {
      handle = it->second;
      watching_.erase(it);
    }
  }
  if (handle) watches_.cancel(*handle);
}

void HeldNodes::arm(const backend::LeaseRef& lease, std::int64_t revision) { arm(id(lease), revision); }

void HeldNodes::arm(const Id& held, std::int64_t revision) {
  std::string node;
  {
    std::lock_guard lock(mutex_);
    const auto it = places_.find(held);
    if (it == places_.end() || it->second.watched) return;
    it->second.watched = true;
    node = it->second.node.key();
  }
  const auto handle = watches_.watch(node, revision, /*any_change=*/true,
                                     [this, held](std::optional<std::int64_t>) { changed(held); });
  std::optional<Watches::Handle> stale;
  {
    std::lock_guard lock(mutex_);
    if (places_.count(held) != 0) {
      watching_[held] = handle;
    } else {
      stale = handle;  // forgotten meanwhile
    }
  }
  if (stale) watches_.cancel(*stale);
}

void HeldNodes::changed(const Id& held) {
  std::shared_ptr<backend::Events> events;
  {
    std::lock_guard lock(mutex_);
    watching_.erase(held);
    const auto it = places_.find(held);
    if (it == places_.end()) return;
    it->second.watched = false;  // the next renewal watches it again
    if (it->second.releasing) return;
    events = events_;
  }
  if (!events) return;
  before_notice_([events, key = std::get<0>(held)] { events->evicted(key); });
}

void HeldNodes::report_to(std::shared_ptr<backend::Events> events) {
  std::lock_guard lock(mutex_);
  events_ = std::move(events);
}

void HeldNodes::session_lost(const std::string& why) {
  std::shared_ptr<backend::Events> events;
  std::map<Id, Watches::Handle> watching;
  {
    std::lock_guard lock(mutex_);
    places_.clear();
    watching.swap(watching_);
    events = events_;
  }
  for (const auto& [held, handle] : watching) watches_.cancel(handle);
  if (events) events->all_lost(why);
}

}  // namespace dlock::backends::etcd
