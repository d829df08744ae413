// The client's state behind the public types: owners, acquisition and release (a lease's
// deadline, renewals and losses: lease_life.cpp).

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "core/client_state.hpp"
#include "core/log.hpp"
#include "core/owner.hpp"
#include "core/validate.hpp"

namespace dlock {
namespace detail {
namespace {

std::string random_client_id() {
  std::random_device device;  // getrandom(2) on Linux
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char chunk[9];
    std::snprintf(chunk, sizeof chunk, "%08x", static_cast<unsigned>(device()));
    id += chunk;
  }
  return id;
}

// Unique for the life of the process, unlike kernel thread ids, which are reused: a new thread
// must never inherit holds a dead thread leaked.
std::uint64_t thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t serial = next.fetch_add(1);
  return serial;
}

// DLOCK_TTL, the default lease of a client opened without ClientOptions::default_ttl.
std::chrono::milliseconds ttl_from_environment() {
  const char* text = std::getenv("DLOCK_TTL");
  if (!text || !*text) return kDefaultTtl;
  std::chrono::milliseconds ttl;
  try {
    ttl = parse_duration(text);
  } catch (const Error& e) {
    throw ConfigurationError(std::string("DLOCK_TTL='") + text + "' is not a duration (" + e.what() +
                             "): set it to a lease such as 30s or 2m, or unset it for the default 30s");
  }
  if (ttl.count() <= 0) {
    throw ConfigurationError(std::string("DLOCK_TTL='") + text + "' must be a positive duration, such as 30s");
  }
  return ttl;
}

// How long a client keeps counts before adding them to the store's totals: /metrics lags by
// at most this, and a busy client writes them once per interval.
constexpr std::chrono::seconds kActivityFlush{5};

}  // namespace

std::string describe(const LockInfo& holder) {
  return "held by " + holder.owner + " (token " + std::to_string(holder.token) + ", " +
         std::to_string(holder.ttl_left.count()) + " ms left)";
}

// Where the backend reports what it sees. Not a weak_ptr to the client: the backend's thread
// must never end up owning, and so destroying, the client that owns the backend.
class ClientState::Inbox final : public backend::Events {
 public:
  explicit Inbox(ClientState* client) : client_(client) {}
  void detach() {
    std::lock_guard lock(mutex_);
    client_ = nullptr;
  }
  void evicted(std::string_view key) override {
    std::lock_guard lock(mutex_);
    if (client_) client_->check_eviction_soon(key);
  }
  void lost(const backend::LeaseRef& lease, std::string_view why) override {
    std::lock_guard lock(mutex_);
    if (client_) client_->lose_soon(lease.key, lease.owner, lease.token, std::string(why));
  }
  void all_lost(std::string_view why) override {
    std::lock_guard lock(mutex_);
    if (client_) client_->lose_soon({}, {}, 0, std::string(why));
  }

 private:
  std::mutex mutex_;
  ClientState* client_;
};

ClientState::ClientState(std::shared_ptr<backend::Backend> backend_, std::string url_, const ClientOptions& options)
    : backend(std::move(backend_)),
      id(random_client_id()),
      url(std::move(url_)),
      owner_prefix(core::owner_prefix(options.name, core::host_name())),
      default_ttl(options.default_ttl ? *options.default_ttl : ttl_from_environment()),
      inbox_(std::make_shared<Inbox>(this)) {}

ClientState::~ClientState() {
  inbox_->detach();
  // Their tasks use this state's members. A task that kept the state alive instead would let
  // the last user-side reference go without waiting for it: a process could then exit while a
  // flush still talked to the store.
  renewals.stop();
  deadlines.stop();
  if (store_failing_.load()) return;
  try {
    activity.flush(*backend);
  } catch (const std::exception& e) {
    core::log(LogLevel::debug, std::string("could not add this client's activity to the store's totals: ") + e.what());
  }
}

void ClientState::watch() { backend->watch(inbox_); }

void ClientState::flush_activity_soon() {
  if (flush_scheduled_.exchange(true)) return;
  renewals.schedule(SteadyClock::now() + kActivityFlush, [this]() -> std::optional<SteadyClock::time_point> {
    flush_scheduled_.store(false);
    try {
      activity.flush(*backend);
    } catch (const std::exception& e) {
      // Kept for the next flush.
      core::log(LogLevel::debug, std::string("could not add activity to the store's totals: ") + e.what());
    }
    return std::nullopt;
  });
}

std::string ClientState::default_owner() const {
  // Built on every acquisition and unlock: kept per thread for the last client it served, and
  // the pid read once per process (getpid() is a system call; only a fork changes it).
  static std::atomic<long> pid{0};
  static const int forget_pid_in_children =
      pthread_atfork(nullptr, nullptr, [] { pid.store(0, std::memory_order_relaxed); });
  static_cast<void>(forget_pid_in_children);
  long current = pid.load(std::memory_order_relaxed);
  if (current == 0) {
    current = ::getpid();
    pid.store(current, std::memory_order_relaxed);
  }
  struct Cached {
    const ClientState* client = nullptr;
    std::string client_id;
    long pid = 0;
    std::string owner;
  };
  thread_local Cached cached;
  if (cached.client != this || cached.pid != current || cached.client_id != id) {
    cached = {this, id, current, core::owner_of(owner_prefix, current, thread_serial(), id)};
  }
  return cached.owner;
}

LockSpec ClientState::resolve(std::string_view key, const LockOptions& options) const {
  core::validate_key(key, backend->max_key_bytes());
  LockSpec spec;
  spec.ttl = options.ttl.value_or(default_ttl);
  core::validate_ttl(spec.ttl, key);
  spec.auto_renew = options.auto_renew.value_or(!options.ttl.has_value());
  spec.owner = options.owner ? *options.owner : default_owner();
  core::validate_owner(spec.owner);
  spec.margin = options.safety_margin.value_or(std::chrono::milliseconds(2) + spec.ttl / 100);
  if (spec.margin.count() < 0 || spec.margin >= spec.ttl) {
    throw InvalidArgument("safety margin must be at least 0 and shorter than the TTL", std::string(key));
  }
  spec.mode = options.mode;
  spec.permits = options.permits;
  if (spec.mode == LockMode::exclusive && spec.permits != 0) {
    throw InvalidArgument("permits (" + std::to_string(spec.permits) +
                              ") apply to shared holds only: set LockOptions::mode to LockMode::shared for a "
                              "semaphore, or leave permits at 0",
                          std::string(key));
  }
  if (spec.mode == LockMode::shared && !backend->capabilities().shared_holders) {
    throw ConfigurationError("this " + std::string(backend->name()) +
                                 " store keeps one holder per key, so it cannot take read locks or semaphore "
                                 "permits: use a store (or mode) that keeps several, such as sqlite://, "
                                 "redis:// or mysql:// in lease mode",
                             std::string(backend->name()));
  }
  return spec;
}

void ClientState::refuse_upgrade(std::string_view key, const LockSpec& spec) {
  if (spec.mode != LockMode::exclusive) return;
  std::shared_ptr<LeaseState> held;
  {
    std::lock_guard lock(registry_mutex_);
    const auto it = registry_.find(RegistryOrder::Views{key, spec.owner});
    if (it != registry_.end()) held = it->second.lock();
  }
  if (!held || held->spec.mode != LockMode::shared || held->lost.load()) return;
  {
    std::lock_guard lock(held->mutex);
    if (held->finished) return;
  }
  throw InvalidArgument("owner " + spec.owner + " holds '" + std::string(key) +
                            "' shared (token " + std::to_string(held->token) +
                            "); a shared hold cannot be upgraded, since the exclusive request would wait for "
                            "itself: release the shared hold first",
                        std::string(key));
}

Attempt ClientState::acquire_until(std::string_view key, const LockOptions& options,
                                   SteadyClock::time_point deadline) {
  const LockSpec spec = resolve(key, options);
  refuse_upgrade(key, spec);
  const backend::AcquireRequest request{key, spec.owner, spec.ttl, spec.mode, spec.permits};
  std::optional<SteadyClock::time_point> waiting_since;
  // Counts the call once it returns, however it returns.
  struct Count {
    ClientState& client;
    const std::optional<SteadyClock::time_point>& waiting_since;
    bool conflict = false;
    ~Count() {
      if (conflict) client.activity.conflict();
      if (waiting_since) client.activity.waited(SteadyClock::now() - *waiting_since);
      if (conflict || waiting_since) client.flush_activity_soon();
    }
  } count{*this, waiting_since};
  // A call that cannot wait makes its one attempt without a waiter.
  std::unique_ptr<backend::Waiter> waiter;
  if (SteadyClock::now() < deadline) waiter = backend->waiter(request);
  for (;;) {
    const auto sent = SteadyClock::now();
    auto result = waiter ? waiter->attempt() : backend->acquire(request);
    if (auto* acquired = std::get_if<backend::Acquired>(&result)) {
      if (acquired->hold_count == 1) {
        activity.acquired();
        flush_activity_soon();
      }
      return Attempt(make_lease(std::string(key), spec, *acquired, std::min(sent, acquired->sent.value_or(sent))));
    }
    auto& busy = std::get<backend::Busy>(result);
    if (!waiting_since) count.conflict = true;
    const auto now = SteadyClock::now();
    if (!waiter || now >= deadline) return Attempt(std::move(busy.holders));
    if (!waiting_since) waiting_since = now;
    // Never sleep past the holder's lease: expiry rings no bell.
    waiter->wait_until(std::min(deadline, now + busy.retry_within + std::chrono::milliseconds(1)));
  }
}

Lease ClientState::make_lease(std::string key, const LockSpec& asked, const backend::Acquired& acquired,
                              SteadyClock::time_point sent, const std::shared_ptr<DeadlineGroup>& group) {
  LockSpec spec = asked;
  if (acquired.lease && *acquired.lease < spec.ttl) {
    // The store grants less than asked (a session's timeout): trust and renew by what it grants.
    spec.ttl = *acquired.lease;
    spec.margin = std::min(spec.margin, spec.ttl / 2);
  }
  const auto valid_until = sent + spec.ttl - spec.margin;
  std::shared_ptr<LeaseState> state;
  {
    std::lock_guard lock(registry_mutex_);
    auto at = registry_.lower_bound(RegistryOrder::Views{key, spec.owner});
    if (at == registry_.end() || at->first.first != key || at->first.second != spec.owner) {
      at = registry_.emplace_hint(at, std::pair{key, spec.owner}, std::weak_ptr<LeaseState>());
    }
    auto& slot = at->second;
    state = slot.lock();
    if (state && state->token == acquired.token && !state->lost.load()) {
      std::lock_guard state_lock(state->mutex);
      if (!state->finished) {
        ++state->local_holds;
        // A re-entry extends the lease to ttl from now, and never shortens it.
        state->set_valid_until(std::max(state->valid_until_time(), valid_until));
        return Lease(shared_from_this(), state, acquired.hold_count);
      }
    }
    state = std::make_shared<LeaseState>(key, spec, acquired.token);
    state->local_holds = 1;
    state->set_valid_until(valid_until);
    slot = state;
  }
  std::weak_ptr<LeaseState> weak = state;
  core::RenewalScheduler::TaskId deadline_task = 0;
  if (group) {
    ++group->live;
  } else {
    deadline_task = deadlines.schedule(valid_until, [this, weak]() -> std::optional<SteadyClock::time_point> {
      auto locked = weak.lock();
      return locked ? deadline_due(locked) : std::nullopt;
    });
  }
  core::RenewalScheduler::TaskId renew_task = 0;
  if (spec.auto_renew) {
    renew_task = renewals.schedule(sent + spec.ttl / 3, [this, weak]() -> std::optional<SteadyClock::time_point> {
      auto locked = weak.lock();
      return locked ? renew_due(locked) : std::nullopt;
    });
  }
  {
    std::lock_guard lock(state->mutex);
    state->deadline_task = deadline_task;
    state->deadline_group = group;
    state->renew_task = renew_task;
  }
  return Lease(shared_from_this(), state, acquired.hold_count);
}

void ClientState::drop_hold(const std::shared_ptr<LeaseState>& state) {
  bool finished = false;
  {
    std::lock_guard lock(state->mutex);
    finished = --state->local_holds <= 0;
    if (finished) {
      state->finished = true;
      state->callbacks.clear();
    }
  }
  if (!finished) return;
  unschedule(*state);
  std::lock_guard lock(registry_mutex_);
  const auto it = registry_.find(RegistryOrder::Views{state->key, state->spec.owner});
  if (it != registry_.end() && (it->second.expired() || it->second.lock() == state)) registry_.erase(it);
}

LockLostError ClientState::lost_before_release(const LeaseState& state, const std::string& why) const {
  return LockLostError("lock '" + state.key + "' (token " + std::to_string(state.token) + ") was lost before release: " +
                           why + "; the critical section may not have been exclusive",
                       state.key, std::string(backend->name()));
}

void ClientState::release(Lease& lease) {
  auto& state = *lease.state_;
  if (state.lost.load()) {
    lease.released_ = true;
    drop_hold(lease.state_);
    // A lease lost by local timing may still be held by the store: free it, by owner and
    // token, which can never touch a newer acquisition.
    try {
      std::lock_guard op(state.op_mutex);
      backend->release({state.key, state.spec.owner, state.token});
    } catch (const std::exception&) {
    }
    throw lost_before_release(state, "it had been reported lost earlier");
  }
  std::optional<std::uint32_t> holds_left;
  {
    std::lock_guard op(state.op_mutex);
    holds_left = backend->release({state.key, state.spec.owner, state.token});
    if (holds_left == 0u) state.freed = true;
  }
  if (auto error = settle_release(lease, holds_left)) throw *error;
}

std::optional<LockLostError> ClientState::settle_release(Lease& lease, std::optional<std::uint32_t> holds_left) {
  auto& state = *lease.state_;
  lease.released_ = true;
  if (!holds_left) {
    mark_lost(state, LossReason::not_owner,
              "release of '" + state.key + "' found it no longer held by this owner (token " +
                  std::to_string(state.token) + ")");
    drop_hold(lease.state_);
    return lost_before_release(state, "the backend no longer had it (expired, force-released or taken over)");
  }
  drop_hold(lease.state_);
  return std::nullopt;
}

void ClientState::renew(LeaseState& state, std::chrono::milliseconds ttl) {
  core::validate_ttl(ttl, state.key);
  if (state.lost.load()) {
    throw LockLostError("lock '" + state.key + "' was already lost", state.key, std::string(backend->name()));
  }
  const auto sent = SteadyClock::now();
  bool renewed = false;
  {
    std::lock_guard op(state.op_mutex);
    renewed = backend->renew({state.key, state.spec.owner, state.token}, ttl);
  }
  if (!renewed) {
    mark_lost(state, LossReason::not_owner, "renewal of '" + state.key + "' found it no longer held by this owner");
    throw LockLostError("lock '" + state.key + "' is no longer held (expired, force-released or taken over)",
                        state.key, std::string(backend->name()));
  }
  state.set_valid_until(sent + ttl - std::min(state.spec.margin, ttl / 2));
  activity.renewed();
  flush_activity_soon();
}

// now + timeout, or the end of time when that would not fit.
SteadyClock::time_point deadline_after(std::chrono::steady_clock::duration timeout) {
  const auto now = std::chrono::steady_clock::now();
  return timeout >= std::chrono::steady_clock::time_point::max() - now ? std::chrono::steady_clock::time_point::max()
                                                                       : now + timeout;
}

}  // namespace detail
}  // namespace dlock
