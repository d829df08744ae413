#include "backends/local/local_backend.hpp"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/bell_waiter.hpp"
#include "dlock/errors.hpp"

namespace dlock::backends {
namespace {

using Clock = std::chrono::steady_clock;

struct Entry {
  std::string owner;
  std::uint64_t token = 0;
  std::uint32_t holds = 0;
  Clock::time_point expires;
  Clock::time_point acquired;
  bool evicted = false;  // force-released with a lock delay: closed until released or expired
};

// Waiters on one key. One release bumps the generation and wakes one waiter.
struct WakeSlot {
  std::uint64_t generation = 0;
  std::condition_variable cv;
};

struct Store {
  std::mutex mutex;
  std::map<std::string, Entry, std::less<>> entries;
  std::map<std::string, std::weak_ptr<WakeSlot>, std::less<>> slots;
  std::uint64_t last_token = 0;
  Activity activity;
  // Every backend's Backend::watch events, by backend.
  std::map<const void*, std::shared_ptr<backend::Events>> watchers;

  bool live(const Entry& e, Clock::time_point now) const { return (e.holds > 0 || e.evicted) && e.expires > now; }

  LockInfo info(const std::string& key, const Entry& e, Clock::time_point now) const {
    LockInfo info{key, e.owner, e.token, e.holds, std::chrono::ceil<std::chrono::milliseconds>(e.expires - now),
                  std::chrono::floor<std::chrono::milliseconds>(now - e.acquired)};
    info.evicted = e.evicted;
    return info;
  }

  // Caller holds `mutex`.
  void ring(std::string_view key) {
    const auto it = slots.find(key);
    if (it == slots.end()) return;
    if (auto slot = it->second.lock()) {
      ++slot->generation;
      slot->cv.notify_one();
    } else {
      slots.erase(it);
    }
  }
};

class LocalBell final : public Bell {
 public:
  LocalBell(std::shared_ptr<Store> store, std::shared_ptr<WakeSlot> slot)
      : store_(std::move(store)), slot_(std::move(slot)) {}

  void arm() override {
    std::lock_guard lock(store_->mutex);
    seen_ = slot_->generation;
  }

  bool wait_until(Clock::time_point deadline) override {
    std::unique_lock lock(store_->mutex);
    consumed_ = slot_->cv.wait_until(lock, deadline, [&] { return slot_->generation != seen_; });
    return consumed_;
  }

  void abandon() noexcept override {
    if (!consumed_) return;
    std::lock_guard lock(store_->mutex);
    slot_->cv.notify_one();
  }

 private:
  std::shared_ptr<Store> store_;
  std::shared_ptr<WakeSlot> slot_;
  std::uint64_t seen_ = 0;
  bool consumed_ = false;
};

class LocalBackend final : public backend::Backend, public backend::ActivityLedger {
 public:
  explicit LocalBackend(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  ~LocalBackend() override {
    std::lock_guard lock(store_->mutex);
    store_->watchers.erase(this);
  }
  LocalBackend(const LocalBackend&) = delete;
  LocalBackend& operator=(const LocalBackend&) = delete;

  std::string_view name() const noexcept override { return "local"; }
  // The store lives in this process: nothing outside it sees its locks or outlives it.
  backend::Capabilities capabilities() const noexcept override {
    return {.records_acquisition_time = true, .notifies_evictions = true};
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& r) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    auto [it, inserted] = store_->entries.try_emplace(std::string(r.key));
    Entry& e = it->second;
    if (inserted || !store_->live(e, now)) {
      e = Entry{std::string(r.owner), ++store_->last_token, 1, now + r.ttl, now};
      return backend::Acquired{e.token, 1};
    }
    if (e.owner == r.owner && !e.evicted) {
      ++e.holds;
      e.expires = std::max(e.expires, now + r.ttl);
      return backend::Acquired{e.token, e.holds};
    }
    return backend::Busy{{store_->info(it->first, e, now)},
                         std::chrono::ceil<std::chrono::milliseconds>(e.expires - now)};
  }

  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    Entry* e = find_ours(lease, now);
    if (!e) return false;
    e->expires = now + ttl;
    return true;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    std::lock_guard lock(store_->mutex);
    Entry* e = find_live(lease, Clock::now());
    if (!e) return std::nullopt;
    if (e->evicted) {  // the evicted holder acknowledges its loss: the key opens
      e->evicted = false;
      e->owner.clear();
      store_->ring(lease.key);
      return std::nullopt;
    }
    if (--e->holds == 0) {
      e->owner.clear();
      store_->ring(lease.key);
    }
    return e->holds;
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    const auto it = store_->entries.find(key);
    if (it == store_->entries.end() || !store_->live(it->second, now)) return {};
    return {store_->info(it->first, it->second, now)};
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    ListPage page;
    if (limit == 0) return page;
    auto it = after.empty() ? store_->entries.lower_bound(prefix) : store_->entries.upper_bound(after);
    for (; it != store_->entries.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) {
        if (it->first > prefix) break;
        continue;
      }
      if (!store_->live(it->second, now)) continue;
      if (page.locks.size() == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      page.locks.push_back(store_->info(it->first, it->second, now));
    }
    return page;
  }

  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    std::vector<std::shared_ptr<backend::Events>> watchers;
    std::vector<LockInfo> released;
    {
      std::lock_guard lock(store_->mutex);
      const auto now = Clock::now();
      const auto it = store_->entries.find(key);
      if (it == store_->entries.end() || !store_->live(it->second, now)) return {};
      Entry& e = it->second;
      if (token && e.token != *token) return {};
      released.push_back(store_->info(it->first, e, now));
      e.holds = 0;
      if (eviction == Eviction::delayed) {
        e.evicted = true;
      } else {
        e.evicted = false;
        e.owner.clear();
        store_->ring(key);
      }
      for (const auto& [backend, events] : store_->watchers) watchers.push_back(events);
    }
    for (const auto& events : watchers) events->evicted(key);
    return released;
  }

  bool watch(std::shared_ptr<backend::Events> events) override {
    std::lock_guard lock(store_->mutex);
    store_->watchers[this] = std::move(events);
    return true;
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    return std::make_unique<BellWaiter>(*this, request, bell(request.key));
  }

  std::unique_ptr<Bell> bell(std::string_view key) {
    std::lock_guard lock(store_->mutex);
    auto& weak = store_->slots[std::string(key)];
    auto slot = weak.lock();
    if (!slot) {
      slot = std::make_shared<WakeSlot>();
      weak = slot;
    }
    return std::make_unique<LocalBell>(store_, std::move(slot));
  }

  void ping() override { std::lock_guard lock(store_->mutex); }

  backend::ActivityLedger* activity() noexcept override { return this; }
  void add(const Activity& delta) override {
    std::lock_guard lock(store_->mutex);
    store_->activity += delta;
  }

  Activity totals() override {
    std::lock_guard lock(store_->mutex);
    return store_->activity;
  }

  // Tokens come from one sequence per store, so dropping entries cannot repeat a token.
  std::size_t collect_idle() override {
    std::lock_guard lock(store_->mutex);
    return std::erase_if(store_->entries, [&](const auto& kv) { return !store_->live(kv.second, Clock::now()); });
  }

 private:
  Entry* find_live(const backend::LeaseRef& lease, Clock::time_point now) {
    const auto it = store_->entries.find(lease.key);
    if (it == store_->entries.end()) return nullptr;
    Entry& e = it->second;
    if (!store_->live(e, now) || e.owner != lease.owner || e.token != lease.token) return nullptr;
    return &e;
  }
  // A live acquisition that is still ours: not evicted.
  Entry* find_ours(const backend::LeaseRef& lease, Clock::time_point now) {
    Entry* e = find_live(lease, now);
    return e && !e->evicted ? e : nullptr;
  }

  std::shared_ptr<Store> store_;
};

}  // namespace

std::shared_ptr<backend::Backend> make_local_backend(const core::Url& url) {
  core::UrlOptions(url).finish();
  if (!url.path.empty() && url.path != "/") {
    throw ConfigurationError("local:// takes a store name only, as in local://tests; got path '" + url.path + "'",
                             "local");
  }
  // Stores live as long as the process, so fencing tokens never repeat within it.
  static std::mutex stores_mutex;
  static std::map<std::string, std::shared_ptr<Store>> stores;
  std::lock_guard lock(stores_mutex);
  auto& store = stores[url.host];
  if (!store) store = std::make_shared<Store>();
  return std::make_shared<LocalBackend>(store);
}

}  // namespace dlock::backends
