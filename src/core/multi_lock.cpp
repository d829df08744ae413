// Several keys as one lock: the canonical order, all or nothing, a waiter that holds nothing
// while it sleeps, and the loss of one key as the loss of the set (dlock/multi_lock.hpp).

#include "dlock/multi_lock.hpp"

#include <algorithm>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "core/client_state.hpp"
#include "core/log.hpp"

namespace dlock {
namespace detail {

// What the leases of one set share: one stop source and the first loss.
struct MultiLeaseState {
  std::shared_ptr<ClientState> client;  // releases the set in one request where it can
  std::mutex mutex;
  std::stop_source stop;
  std::optional<LossInfo> loss;
  std::vector<std::function<void(const LossInfo&)>> callbacks;

  void lost(const LossInfo& info) {
    std::vector<std::function<void(const LossInfo&)>> to_call;
    {
      std::lock_guard lock(mutex);
      if (loss) return;
      loss = info;
      to_call = callbacks;
    }
    stop.request_stop();
    for (const auto& callback : to_call) callback(info);
  }

  // Ties every lease's loss to the set, and so its stop token: a lease's own stop token fires
  // only when it is lost (ClientState::mark_lost), just before its loss callbacks run.
  static MultiLease make(std::shared_ptr<ClientState> client, std::vector<Lease> leases) {
    auto state = std::make_shared<MultiLeaseState>();
    state->client = std::move(client);
    std::weak_ptr<MultiLeaseState> weak = state;
    for (Lease& lease : leases) {
      lease.on_lost([weak](const LossInfo& info) {
        if (auto set = weak.lock()) set->lost(info);
      });
    }
    return MultiLease(std::move(leases), std::move(state));
  }
};

struct MultiMutexState {
  std::shared_ptr<ClientState> client;
  std::vector<std::string> keys;
  LockOptions options;

  OwnerHolds<MultiLease> holds;
  std::mutex mutex;  // of last_failures
  struct Failure {
    std::string busy_key;
    std::vector<LockInfo> holders;
  };
  std::unordered_map<std::string, Failure> last_failures;

  std::string current_owner() const { return options.owner ? *options.owner : client->default_owner(); }
};

namespace {

// Sorted, without duplicates, each checked (with the TTL and owner) before any round trip.
std::vector<std::string> canonical(ClientState& client, std::vector<std::string> keys, const LockOptions& options) {
  if (keys.empty()) throw InvalidArgument("a multi-key lock needs at least one key");
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const auto& key : keys) static_cast<void>(client.resolve(key, options));
  return keys;
}

// Releases what a failed pass took, last key first, so that a waiter woken on an earlier key
// finds the later ones free.
void give_back(std::vector<Lease>& taken) noexcept {
  while (!taken.empty()) taken.pop_back();
}

// One pass in one request where the store can (Backend::acquire_set): the keys not yet held,
// all or none, with the waited one put back in its place. Nothing when the store cannot.
std::optional<ClientState::SetAttempt> take_set(ClientState& client, const std::vector<std::string>& keys,
                                                const LockSpec& spec,
                                                std::optional<std::pair<std::string, Lease>>& waited) {
  std::vector<std::string_view> wanted;
  wanted.reserve(keys.size());
  for (const auto& key : keys) {
    if (!waited || waited->first != key) wanted.push_back(key);
  }
  if (wanted.size() < 2) return std::nullopt;
  auto attempt = client.try_acquire_set(wanted, spec);
  if (!attempt) return attempt;
  if (attempt->busy) {
    attempt->busy = static_cast<std::size_t>(std::find(keys.begin(), keys.end(), wanted[*attempt->busy]) - keys.begin());
    return attempt;
  }
  if (waited) {
    const auto at = std::lower_bound(attempt->leases.begin(), attempt->leases.end(), waited->first,
                                     [](const Lease& lease, const std::string& key) { return lease.key() < key; });
    attempt->leases.insert(at, std::move(waited->second));
    waited.reset();
  }
  return attempt;
}

// `keys` as canonical() leaves them.
MultiAttempt acquire_canonical_until(const std::shared_ptr<ClientState>& shared_client,
                                     const std::vector<std::string>& keys, const LockOptions& options,
                                     SteadyClock::time_point deadline) {
  ClientState& client = *shared_client;
  // Every key's: the keys share their options, and each key was checked by canonical().
  const LockSpec spec = client.resolve(keys.front(), options);
  // The key this call last waited for, taken by that wait: the next pass starts with it held.
  std::optional<std::pair<std::string, Lease>> waited;
  for (;;) {
    std::vector<Lease> taken;
    taken.reserve(keys.size());
    std::optional<Attempt> busy;
    std::string busy_key;
    if (auto set = take_set(client, keys, spec, waited)) {
      if (!set->busy) return MultiAttempt(MultiLeaseState::make(shared_client, std::move(set->leases)));
      busy.emplace(std::move(set->holders));
      busy_key = keys[*set->busy];
    }
    for (const auto& key : keys) {
      if (busy) break;  // the set's one request found it busy
      if (waited && waited->first == key) {
        taken.push_back(std::move(waited->second));
        waited.reset();
        continue;
      }
      Attempt attempt = client.acquire_until(key, options, SteadyClock::now());
      if (!attempt) {
        busy.emplace(std::move(attempt));
        busy_key = key;
        break;
      }
      taken.push_back(std::move(attempt.lease()));
    }
    if (!busy) return MultiAttempt(MultiLeaseState::make(shared_client, std::move(taken)));
    give_back(taken);
    waited.reset();
    if (SteadyClock::now() >= deadline) return MultiAttempt(std::move(busy_key), busy->holders());
    // Sleep on the busy key holding nothing; the wait takes it when it frees.
    Attempt attempt = client.acquire_until(busy_key, options, deadline);
    if (!attempt) return MultiAttempt(std::move(busy_key), attempt.holders());
    waited.emplace(busy_key, std::move(attempt.lease()));
  }
}

MultiAttempt acquire_all_until(const std::shared_ptr<ClientState>& shared_client, std::vector<std::string> keys,
                               const LockOptions& options, SteadyClock::time_point deadline) {
  return acquire_canonical_until(shared_client, canonical(*shared_client, std::move(keys), options), options, deadline);
}

}  // namespace
}  // namespace detail

MultiLease::MultiLease(std::vector<Lease> leases, std::shared_ptr<detail::MultiLeaseState> state)
    : leases_(std::move(leases)), state_(std::move(state)) {}
MultiLease::MultiLease(MultiLease&& other) noexcept = default;

MultiLease& MultiLease::operator=(MultiLease&& other) noexcept {
  if (this != &other) {
    release_all(false);
    leases_ = std::move(other.leases_);
    state_ = std::move(other.state_);
  }
  return *this;
}

MultiLease::~MultiLease() { release_all(false); }

std::vector<std::string> MultiLease::keys() const {
  std::vector<std::string> keys;
  keys.reserve(leases_.size());
  for (const Lease& lease : leases_) keys.push_back(lease.key());
  return keys;
}

const Lease& MultiLease::lease(std::string_view key) const {
  const auto it = std::lower_bound(leases_.begin(), leases_.end(), key,
                                   [](const Lease& lease, std::string_view k) { return lease.key() < k; });
  if (it == leases_.end() || it->key() != key) {
    throw std::out_of_range("'" + std::string(key) + "' is not one of the keys of this multi-key lease");
  }
  return *it;
}

std::chrono::steady_clock::time_point MultiLease::valid_until() const noexcept {
  auto earliest = std::chrono::steady_clock::time_point::max();
  for (const Lease& lease : leases_) earliest = std::min(earliest, lease.valid_until());
  return leases_.empty() ? std::chrono::steady_clock::time_point{} : earliest;
}

std::chrono::milliseconds MultiLease::ttl() const noexcept {
  auto shortest = std::chrono::milliseconds::max();
  for (const Lease& lease : leases_) shortest = std::min(shortest, lease.ttl());
  return leases_.empty() ? std::chrono::milliseconds(0) : shortest;
}

bool MultiLease::lost() const noexcept {
  return std::any_of(leases_.begin(), leases_.end(), [](const Lease& lease) { return lease.lost(); });
}

bool MultiLease::held() const noexcept {
  return !leases_.empty() && std::all_of(leases_.begin(), leases_.end(), [](const Lease& lease) { return lease.held(); });
}

std::stop_token MultiLease::stop_token() const noexcept { return state_ ? state_->stop.get_token() : std::stop_token(); }

void MultiLease::on_lost(std::function<void(const LossInfo&)> callback) {
  if (!state_) throw std::logic_error("use of a moved-from dlock::MultiLease");
  std::optional<LossInfo> already;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->loss) {
      already = state_->loss;
    } else {
      state_->callbacks.push_back(callback);
    }
  }
  if (already) callback(*already);
}

void MultiLease::renew(std::optional<std::chrono::milliseconds> ttl) {
  std::exception_ptr first;
  for (Lease& lease : leases_) {
    try {
      lease.renew(ttl);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void MultiLease::release() { release_all(true); }

void MultiLease::detach() noexcept {
  for (Lease& lease : leases_) lease.detach();
  leases_.clear();
}

void MultiLease::release_all(bool rethrow) {
  std::exception_ptr first;
  if (leases_.size() > 1 && state_ && state_->client) {
    try {
      state_->client->release_set(leases_);
    } catch (const std::exception& e) {
      first = std::current_exception();
      if (!rethrow) core::log(LogLevel::warning, std::string("release of a multi-key lock failed: ") + e.what());
    }
  }
  // What release_set left (a store error): one by one.
  while (!leases_.empty()) {
    try {
      leases_.back().release();
    } catch (const std::exception& e) {
      if (!first) first = std::current_exception();
      if (!rethrow) core::log(LogLevel::warning, "release of '" + leases_.back().key() + "' failed: " + e.what());
    }
    leases_.pop_back();
  }
  if (first && rethrow) std::rethrow_exception(first);
}

MultiLease& MultiAttempt::lease() {
  if (!lease_) throw std::logic_error("MultiAttempt::lease() on a failed attempt (busy key '" + busy_key_ + "')");
  return *lease_;
}

MultiMutex::MultiMutex(std::shared_ptr<detail::MultiMutexState> state) : state_(std::move(state)) {}
MultiMutex::MultiMutex(MultiMutex&&) noexcept = default;
MultiMutex& MultiMutex::operator=(MultiMutex&&) noexcept = default;
MultiMutex::~MultiMutex() = default;

namespace {

void require_state(const std::shared_ptr<detail::MultiMutexState>& state) {
  if (!state) throw std::logic_error("use of a moved-from dlock::MultiMutex");
}

}  // namespace

void MultiMutex::lock() {
  if (!try_lock_until_steady(std::chrono::steady_clock::time_point::max())) {
    throw std::logic_error("blocking acquire returned without the lock");
  }
}

bool MultiMutex::try_lock() { return try_lock_until_steady(std::chrono::steady_clock::now()); }

bool MultiMutex::try_lock_for_steady(std::chrono::steady_clock::duration timeout) {
  return try_lock_until_steady(detail::deadline_after(timeout));
}

bool MultiMutex::try_lock_until_steady(std::chrono::steady_clock::time_point deadline) {
  require_state(state_);
  const std::string owner = state_->current_owner();
  MultiAttempt attempt = detail::acquire_canonical_until(state_->client, state_->keys, state_->options, deadline);
  if (!attempt) {
    std::lock_guard lock(state_->mutex);
    state_->last_failures[owner] = {attempt.busy_key(), attempt.holders()};
    return false;
  }
  state_->holds.adopt(std::move(attempt.lease()), owner);
  return true;
}

void MultiMutex::unlock() noexcept {
  if (!state_) {
    core::log(LogLevel::error, "unlock() of a moved-from dlock::MultiMutex");
    return;
  }
  try {
    state_->holds.release_latest(state_->current_owner(), "a multi-key lock");
  } catch (const std::exception& e) {
    core::log(LogLevel::warning, std::string("unlock() of a multi-key lock failed: ") + e.what());
  }
}

const std::vector<std::string>& MultiMutex::keys() const noexcept {
  static const std::vector<std::string> none;
  return state_ ? state_->keys : none;
}

const MultiLease* MultiMutex::lease() const {
  if (!state_) return nullptr;
  return state_->holds.latest(state_->current_owner());
}

std::string MultiMutex::last_busy_key() const {
  if (!state_) return {};
  const std::string owner = state_->current_owner();
  std::lock_guard lock(state_->mutex);
  const auto it = state_->last_failures.find(owner);
  return it == state_->last_failures.end() ? std::string() : it->second.busy_key;
}

std::vector<LockInfo> MultiMutex::last_holders() const {
  if (!state_) return {};
  const std::string owner = state_->current_owner();
  std::lock_guard lock(state_->mutex);
  const auto it = state_->last_failures.find(owner);
  return it == state_->last_failures.end() ? std::vector<LockInfo>{} : it->second.holders;
}

void MultiMutex::on_lost(std::function<void(const LossInfo&)> callback) {
  require_state(state_);
  state_->holds.on_lost(std::move(callback));
}

MultiMutex Client::multi_mutex(std::vector<std::string> keys, LockOptions options) const {
  auto state = std::make_shared<detail::MultiMutexState>();
  state->keys = detail::canonical(*state_, std::move(keys), options);
  state->client = state_;
  state->options = std::move(options);
  return MultiMutex(std::move(state));
}

MultiLease Client::acquire_all(std::vector<std::string> keys, const LockOptions& options) const {
  auto attempt = detail::acquire_all_until(state_, std::move(keys), options, std::chrono::steady_clock::time_point::max());
  return std::move(attempt.lease());
}

MultiAttempt Client::try_acquire_all(std::vector<std::string> keys, const LockOptions& options) const {
  return detail::acquire_all_until(state_, std::move(keys), options, std::chrono::steady_clock::now());
}

MultiAttempt Client::try_acquire_all_for(std::vector<std::string> keys, std::chrono::steady_clock::duration timeout,
                                         const LockOptions& options) const {
  return detail::acquire_all_until(state_, std::move(keys), options, detail::deadline_after(timeout));
}

MultiAttempt Client::try_acquire_all_until(std::vector<std::string> keys, std::chrono::steady_clock::time_point deadline,
                                           const LockOptions& options) const {
  return detail::acquire_all_until(state_, std::move(keys), options, deadline);
}

}  // namespace dlock
