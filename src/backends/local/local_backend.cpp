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
  LockMode mode = LockMode::exclusive;
  bool evicted = false;  // force-released with a lock delay: closed until released or expired
};

// A key's holders: none, one exclusive, or shared ones (backend.hpp, "Shared holds").
struct KeyState {
  std::vector<Entry> holders;
  std::uint32_t permits = 0;          // of the shared holders
  Clock::time_point writer_claim{};   // a waiting writer refuses new readers until then
  Clock::time_point readers_claim{};  // waiting readers refuse new writers until then,
  std::uint64_t readers_claim_on = 0;  // while the key's last grant is still this one
  std::uint64_t last_grant = 0;       // the token of the key's latest new holder
};

// Waiters on one key. One release bumps the generation and wakes one waiter.
struct WakeSlot {
  std::uint64_t generation = 0;
  std::condition_variable cv;
};

std::chrono::milliseconds until(Clock::time_point t, Clock::time_point now) {
  return std::chrono::ceil<std::chrono::milliseconds>(t - now);
}

struct Store {
  std::mutex mutex;
  std::map<std::string, KeyState, std::less<>> keys;
  std::map<std::string, std::weak_ptr<WakeSlot>, std::less<>> slots;
  std::uint64_t last_token = 0;
  Activity activity;
  // Every backend's Backend::watch events, by backend.
  std::map<const void*, std::shared_ptr<backend::Events>> watchers;

  static bool live(const Entry& e, Clock::time_point now) { return (e.holds > 0 || e.evicted) && e.expires > now; }

  // Drops the holders whose leases ran out.
  static void prune(KeyState& state, Clock::time_point now) {
    std::erase_if(state.holders, [&](const Entry& e) { return !live(e, now); });
  }

  static LockInfo info(const std::string& key, const Entry& e, Clock::time_point now) {
    LockInfo info{key, e.owner, e.token, e.holds, until(e.expires, now),
                  std::chrono::floor<std::chrono::milliseconds>(now - e.acquired)};
    info.evicted = e.evicted;
    info.mode = e.mode;
    return info;
  }

  static std::vector<LockInfo> infos(const std::string& key, const KeyState& state, Clock::time_point now) {
    std::vector<LockInfo> out;
    for (const Entry& e : state.holders) out.push_back(info(key, e, now));
    return out;
  }

  // Caller holds `mutex`. Wakes one waiter of the key, or with `all` every one.
  void ring(std::string_view key, bool all = false) {
    const auto it = slots.find(key);
    if (it == slots.end()) return;
    if (auto slot = it->second.lock()) {
      ++slot->generation;
      if (all) {
        slot->cv.notify_all();
      } else {
        slot->cv.notify_one();
      }
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

  void pass_on() noexcept override {
    if (!consumed_) return;
    consumed_ = false;
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
    return {.records_acquisition_time = true, .shared_holders = true, .notifies_evictions = true};
  }

  backend::AcquireResult acquire(const backend::AcquireRequest& r) override {
    std::lock_guard lock(store_->mutex);
    return acquire_locked(r, Clock::now());
  }

  // The whole set under the store's mutex: a busy key undoes what the set took before it.
  std::optional<backend::AcquireSetResult> acquire_set(std::span<const backend::AcquireRequest> requests) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    std::vector<backend::Acquired> taken;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      auto result = acquire_locked(requests[i], now);
      if (auto* busy = std::get_if<backend::Busy>(&result)) {
        for (std::size_t j = taken.size(); j-- > 0;) {
          release_locked({requests[j].key, requests[j].owner, taken[j].token}, now, /*ring=*/false);
        }
        return backend::SetBusy{i, std::move(*busy)};
      }
      taken.push_back(std::get<backend::Acquired>(result));
    }
    return taken;
  }

  std::optional<std::vector<std::optional<std::uint32_t>>> release_set(
      std::span<const backend::LeaseRef> leases) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    std::vector<std::optional<std::uint32_t>> left;
    for (const auto& lease : leases) left.push_back(release_locked(lease, now, /*ring=*/true));
    return left;
  }

 private:
  // Caller holds the store's mutex.
  backend::AcquireResult acquire_locked(const backend::AcquireRequest& r, Clock::time_point now) {
    auto [it, inserted] = store_->keys.try_emplace(std::string(r.key));
    KeyState& state = it->second;
    Store::prune(state, now);
    auto& holders = state.holders;
    const auto mine = std::find_if(holders.begin(), holders.end(),
                                   [&](const Entry& e) { return e.owner == r.owner && !e.evicted; });
    const bool upgrade = mine != holders.end() && mine->mode == LockMode::shared && r.mode == LockMode::exclusive;
    if (mine != holders.end() && !upgrade) {
      ++mine->holds;
      mine->expires = std::max(mine->expires, now + r.ttl);
      return backend::Acquired{mine->token, mine->holds};
    }
    auto retry = std::chrono::milliseconds::max();
    for (const Entry& e : holders) retry = std::min(retry, until(e.expires, now));
    const auto busy = [&](std::chrono::milliseconds within) {
      return backend::Busy{Store::infos(it->first, state, now), within};
    };
    if (r.mode == LockMode::exclusive) {
      const bool readers_first = state.readers_claim > now && state.readers_claim_on == state.last_grant;
      if (!holders.empty() || readers_first) {
        if (!r.waiting) return busy(holders.empty() ? until(state.readers_claim, now) : retry);
        state.writer_claim = now + backend::kWriterClaim;
        return busy(std::min(retry, backend::kWriterClaim / 2));
      }
      // The readers the claim held back look again now, find this writer, and so queue behind
      // it (the readers' claim): they go before its next hold.
      if (state.writer_claim > now) store_->ring(r.key, /*all=*/true);
      state.writer_claim = {};
    } else {
      const bool shared = !holders.empty() && holders.front().mode == LockMode::shared;
      if (shared && state.permits != r.permits) {
        throw backend::permits_disagree(it->first, state.permits, r.permits);
      }
      if (!holders.empty() && !shared) {
        if (!r.waiting) return busy(retry);
        state.readers_claim = now + backend::kWriterClaim;
        state.readers_claim_on = holders.front().token;
        return busy(std::min(retry, backend::kWriterClaim / 2));
      }
      if (state.writer_claim > now && r.waited_behind == 0) {
        return busy(std::min(retry, until(state.writer_claim, now)));
      }
      if (r.permits != 0 && holders.size() >= r.permits) return busy(retry);
      state.permits = r.permits;
    }
    holders.push_back(Entry{std::string(r.owner), ++store_->last_token, 1, now + r.ttl, now, r.mode});
    state.last_grant = holders.back().token;
    return backend::Acquired{holders.back().token, 1};
  }

  // Caller holds the store's mutex. `ring`: wake a waiter when a hold ends (not when a set
  // undoes its own take, which no one saw).
  std::optional<std::uint32_t> release_locked(const backend::LeaseRef& lease, Clock::time_point now, bool ring) {
    Entry* e = find_live(lease, now);
    if (!e) return std::nullopt;
    std::optional<std::uint32_t> left;
    if (!e->evicted) {  // an evicted holder's release acknowledges its loss: its hold ends
      left = --e->holds;
      if (*left > 0) return left;
    }
    auto& holders = store_->keys.find(lease.key)->second.holders;
    holders.erase(holders.begin() + (e - holders.data()));
    if (ring) store_->ring(lease.key);
    return left;
  }

 public:
  bool renew(const backend::LeaseRef& lease, std::chrono::milliseconds ttl) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    Entry* e = find_live(lease, now);
    if (!e || e->evicted) return false;
    e->expires = now + ttl;
    return true;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    std::lock_guard lock(store_->mutex);
    return release_locked(lease, Clock::now(), /*ring=*/true);
  }

  std::vector<LockInfo> inspect(std::string_view key) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    const auto it = store_->keys.find(key);
    if (it == store_->keys.end()) return {};
    Store::prune(it->second, now);
    return Store::infos(it->first, it->second, now);
  }

  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    ListPage page;
    if (limit == 0) return page;
    std::size_t keys = 0;
    auto it = after.empty() ? store_->keys.lower_bound(prefix) : store_->keys.upper_bound(after);
    for (; it != store_->keys.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) {
        if (it->first > prefix) break;
        continue;
      }
      Store::prune(it->second, now);
      if (it->second.holders.empty()) continue;
      if (keys == limit) {
        page.next_after = page.locks.back().key;
        break;
      }
      ++keys;
      for (const Entry& e : it->second.holders) page.locks.push_back(Store::info(it->first, e, now));
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
      const auto it = store_->keys.find(key);
      if (it == store_->keys.end()) return {};
      auto& holders = it->second.holders;
      Store::prune(it->second, now);
      for (Entry& e : holders) {
        if (token && e.token != *token) continue;
        released.push_back(Store::info(it->first, e, now));
        e.holds = 0;
        e.evicted = eviction == Eviction::delayed;
      }
      if (released.empty()) return {};
      if (eviction == Eviction::immediate) {
        Store::prune(it->second, now);
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

  // Tokens come from one sequence per store, so dropping keys cannot repeat a token. A waiting
  // writer's or readers' claim keeps its key.
  std::size_t collect_idle() override {
    std::lock_guard lock(store_->mutex);
    const auto now = Clock::now();
    std::size_t removed = 0;
    for (auto it = store_->keys.begin(); it != store_->keys.end();) {
      Store::prune(it->second, now);
      if (it->second.holders.empty() && it->second.writer_claim <= now && it->second.readers_claim <= now) {
        it = store_->keys.erase(it);
        ++removed;
      } else {
        ++it;
      }
    }
    return removed;
  }

 private:
  // The live acquisition (owner, token), evicted or not.
  Entry* find_live(const backend::LeaseRef& lease, Clock::time_point now) {
    const auto it = store_->keys.find(lease.key);
    if (it == store_->keys.end()) return nullptr;
    for (Entry& e : it->second.holders) {
      if (Store::live(e, now) && e.owner == lease.owner && e.token == lease.token) return &e;
    }
    return nullptr;
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
