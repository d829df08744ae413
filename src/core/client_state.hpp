#pragma once

// The core's shared state behind Client, Lease and Mutex: lease bookkeeping (holds, expiry,
// loss), the waiting loop and renewal. Backends see none of it.

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/activity.hpp"
#include "core/log.hpp"
#include "core/renewal.hpp"
#include "dlock/client.hpp"

namespace dlock::detail {

using SteadyClock = std::chrono::steady_clock;

// Resolved LockOptions.
struct LockSpec {
  std::string owner;
  std::chrono::milliseconds ttl;
  std::chrono::milliseconds margin;
  bool auto_renew;
  LockMode mode = LockMode::exclusive;
  std::uint32_t permits = 0;
};

// The deadline task of the leases a set took together (their deadlines are alike): one task
// for them all, dropped when the last of them is finished or lost.
struct DeadlineGroup {
  std::atomic<int> live{0};
  std::atomic<core::RenewalScheduler::TaskId> task{0};
};

// One acquisition (key, owner, token), shared by the Lease objects that hold it.
struct LeaseState {
  LeaseState(std::string key_, LockSpec spec_, std::uint64_t token_)
      : key(std::move(key_)), spec(std::move(spec_)), token(token_) {}

  const std::string key;
  const LockSpec spec;
  const std::uint64_t token;

  std::atomic<SteadyClock::rep> valid_until{0};  // steady-clock ticks
  std::atomic<bool> lost{false};
  std::stop_source stop;

  // Serializes renew, release and eviction checks of this acquisition, so none racing a
  // release can be mistaken for a loss.
  std::mutex op_mutex;
  bool freed = false;  // guarded by op_mutex: a release left the store no hold of it

  std::mutex mutex;  // guards the fields below
  core::RenewalScheduler::TaskId renew_task = 0;
  core::RenewalScheduler::TaskId deadline_task = 0;
  std::shared_ptr<DeadlineGroup> deadline_group;  // instead of deadline_task: a set's
  int local_holds = 0;
  bool finished = false;  // every local hold released or detached: nothing to renew
  std::vector<std::function<void(const LossInfo&)>> callbacks;

  SteadyClock::time_point valid_until_time() const {
    return SteadyClock::time_point(SteadyClock::duration(valid_until.load()));
  }
  void set_valid_until(SteadyClock::time_point t) { valid_until.store(t.time_since_epoch().count()); }
};

struct ClientState : std::enable_shared_from_this<ClientState> {
  ClientState(std::shared_ptr<backend::Backend> backend_, std::string url_, const ClientOptions& options);
  // Adds the activity not yet added to the store's totals.
  ~ClientState();

  const std::shared_ptr<backend::Backend> backend;
  const std::string id;
  const std::string url;
  const std::string owner_prefix;  // NAME@HOST of the default owners
  const std::chrono::milliseconds default_ttl;  // of a lock taken without a TTL
  // Renewals may block inside a slow backend call; deadlines run on their own thread so a
  // hung renewal cannot delay the stop token past valid_until.
  core::RenewalScheduler renewals;
  core::RenewalScheduler deadlines;
  core::ActivityCounters activity;

  LockSpec resolve(std::string_view key, const LockOptions& options) const;
  std::string default_owner() const;

  // The waiting loop: tries until acquired or the deadline (steady clock) passes.
  Attempt acquire_until(std::string_view key, const LockOptions& options,
                        SteadyClock::time_point deadline);

  void release(Lease& lease);

  // One try-once attempt at several keys in one request (Backend::acquire_set): every lease,
  // in the keys' order, or the index of the first busy key and its holders, nothing taken.
  // Nothing when the backend cannot take this set in one request. lease_sets.cpp.
  // `spec` is every key's (resolve() of any of them: they share their options).
  struct SetAttempt {
    std::vector<Lease> leases;
    std::optional<std::size_t> busy;
    std::vector<LockInfo> holders;
  };
  std::optional<SetAttempt> try_acquire_set(const std::vector<std::string_view>& keys, const LockSpec& spec);
  // Releases every lease, in one request where the backend can (Backend::release_set), else one
  // by one from the last. Throws the first LockLostError once all are released.
  void release_set(std::vector<Lease>& leases);
  void renew(LeaseState& state, std::chrono::milliseconds ttl);
  void drop_hold(const std::shared_ptr<LeaseState>& state);
  // Tells the backend where to report what it sees (Backend::watch), once.
  void watch();
  // Stops renewing and watching a lease that is finished or lost.
  void unschedule(LeaseState& state);
  // Schedules the deadline task of `group`, the leases of `leases` that joined it.
  void schedule_deadlines(const std::shared_ptr<DeadlineGroup>& group, const std::vector<Lease>& leases);
  // Marks the lease lost once and tells its callbacks and stop token.
  void mark_lost(LeaseState& state, LossReason reason, std::string message);
  static void add_loss_callback(LeaseState& state, std::function<void(const LossInfo&)> callback);

 private:
  // Called after counting: adds the counts to the store's totals within kActivityFlush.
  void flush_activity_soon();

  // A new acquisition gets its own deadline task, or joins `group`'s (a set's, scheduled by
  // the caller once every lease of the set is made).
  Lease make_lease(std::string key, const LockSpec& spec, const backend::Acquired& acquired,
                   SteadyClock::time_point sent, const std::shared_ptr<DeadlineGroup>& group = nullptr);
  // After the store answered a release of `lease` (under its op_mutex): the bookkeeping, and
  // the LockLostError to throw when the lease was no longer ours.
  std::optional<LockLostError> settle_release(Lease& lease, std::optional<std::uint32_t> holds_left);
  LockLostError lost_before_release(const LeaseState& state, const std::string& why) const;
  std::optional<SteadyClock::time_point> renew_due(const std::shared_ptr<LeaseState>& state);
  std::optional<SteadyClock::time_point> deadline_due(const std::shared_ptr<LeaseState>& state);
  void check_eviction_soon(std::string_view key);
  void lose_soon(std::string_view key, std::string_view owner, std::uint64_t token, std::string why);
  // Throws InvalidArgument when an exclusive request comes from an owner this client knows to
  // hold the key shared: an upgrade would wait for itself.
  void refuse_upgrade(std::string_view key, const LockSpec& spec);
  void check_eviction(LeaseState& state);

  std::atomic<bool> flush_scheduled_{false};
  // The last renewal attempt failed: a final flush could only wait for a timeout.
  std::atomic<bool> store_failing_{false};

  // Where the backend's reports go while this client lives.
  class Inbox;
  const std::shared_ptr<Inbox> inbox_;

  // (key, owner) -> its live acquisition. Looked up by views, so that a lookup copies nothing.
  struct RegistryOrder {
    using is_transparent = void;
    using Views = std::pair<std::string_view, std::string_view>;
    static Views views(const std::pair<std::string, std::string>& k) noexcept { return {k.first, k.second}; }
    static Views views(const Views& k) noexcept { return k; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
      return views(a) < views(b);
    }
  };
  std::mutex registry_mutex_;
  std::map<std::pair<std::string, std::string>, std::weak_ptr<LeaseState>, RegistryOrder> registry_;
};

// now + timeout, or the end of time when that would not fit.
SteadyClock::time_point deadline_after(SteadyClock::duration timeout);

// "held by OWNER (token T, N ms left)", for log lines.
std::string describe(const LockInfo& holder);

// The holds a TimedLockable (Mutex, MultiMutex) keeps per owner, newest last, and the loss
// callbacks every hold gets. Thread-safe.
template <class Hold>
class OwnerHolds {
 public:
  void adopt(Hold hold, const std::string& owner) {
    std::lock_guard lock(mutex_);
    for (const auto& callback : callbacks_) hold.on_lost(callback);
    holds_[owner].push_back(std::move(hold));
  }

  // The owner's latest hold, or nullptr (a deque keeps the pointer stable).
  const Hold* latest(const std::string& owner) const {
    std::lock_guard lock(mutex_);
    const auto it = holds_.find(owner);
    return it == holds_.end() || it->second.empty() ? nullptr : &it->second.back();
  }

  // Releases the owner's latest hold (`what` names the lock in log lines). Never throws; a
  // hold found lost is reported through its loss callbacks.
  void release_latest(const std::string& owner, const std::string& what) noexcept {
    try {
      std::optional<Hold> hold;
      {
        std::lock_guard lock(mutex_);
        const auto it = holds_.find(owner);
        if (it != holds_.end() && !it->second.empty()) {
          hold.emplace(std::move(it->second.back()));
          it->second.pop_back();
          if (it->second.empty()) holds_.erase(it);
        }
      }
      if (!hold) {
        core::log(LogLevel::error, "unlock() of " + what + " by an owner that does not hold it");
        return;
      }
      hold->release();
    } catch (const LockLostError&) {
      // Reported through the loss callbacks and the log.
    } catch (const std::exception& e) {
      core::log(LogLevel::warning, "unlock() of " + what + " failed: " + e.what());
    }
  }

  // Called when any hold, present or to come, is lost.
  void on_lost(std::function<void(const LossInfo&)> callback) {
    std::lock_guard lock(mutex_);
    for (auto& [owner, holds] : holds_) {
      for (auto& hold : holds) hold.on_lost(callback);
    }
    callbacks_.push_back(std::move(callback));
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::deque<Hold>> holds_;
  std::vector<std::function<void(const LossInfo&)>> callbacks_;
};

struct MutexState {
  std::shared_ptr<ClientState> client;
  std::string key;
  LockOptions options;

  OwnerHolds<Lease> holds;
  std::mutex mutex;  // of last_holders
  std::unordered_map<std::string, std::vector<LockInfo>> last_holders;

  std::string current_owner() const {
    return options.owner ? *options.owner : client->default_owner();
  }
};

}  // namespace dlock::detail
