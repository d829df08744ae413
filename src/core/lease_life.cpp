// A lease's life after its grant: the deadline that ends a lease no renewal moved, the
// renewals, and the losses the store reports (an eviction, a lease or session it knows gone),
// each turned into the same loss (LossInfo) at once.

#include <algorithm>

#include "core/client_state.hpp"
#include "core/log.hpp"

namespace dlock::detail {

// Fires the stop token once valid_until passes without a renewal having moved it.
std::optional<SteadyClock::time_point> ClientState::deadline_due(const std::shared_ptr<LeaseState>& state) {
  {
    std::lock_guard lock(state->mutex);
    if (state->finished || state->lost.load()) return std::nullopt;
  }
  const auto valid_until = state->valid_until_time();
  if (SteadyClock::now() < valid_until) return valid_until;  // renewed or re-entered meanwhile
  if (state->spec.auto_renew) {
    mark_lost(*state, LossReason::renewal_failed,
              "no renewal of '" + state->key + "' succeeded before its lease could no longer be trusted");
  } else {
    mark_lost(*state, LossReason::expired, "lease of '" + state->key + "' reached the end of its " +
                                               std::to_string(state->spec.ttl.count()) +
                                               " ms TTL without renewal");
  }
  return std::nullopt;
}

std::optional<SteadyClock::time_point> ClientState::renew_due(const std::shared_ptr<LeaseState>& state) {
  {
    std::lock_guard lock(state->mutex);
    if (state->finished || state->lost.load()) return std::nullopt;
  }
  const auto valid_until = state->valid_until_time();
  const auto retry_at = [&] {
    const auto interval = std::max<SteadyClock::duration>(state->spec.ttl / 10, std::chrono::milliseconds(10));
    return std::min(SteadyClock::now() + interval, valid_until);
  };
  std::unique_lock op(state->op_mutex);
  {
    std::lock_guard lock(state->mutex);
    if (state->finished || state->freed) return std::nullopt;
  }
  const auto sent = SteadyClock::now();
  bool renewed = false;
  try {
    renewed = backend->renew({state->key, state->spec.owner, state->token}, state->spec.ttl);
  } catch (const std::exception& e) {
    op.unlock();
    store_failing_.store(true);
    if (SteadyClock::now() >= valid_until) {
      mark_lost(*state, LossReason::renewal_failed,
                "renewals of '" + state->key + "' failed until its lease could no longer be trusted: " + e.what());
      return std::nullopt;
    }
    core::log(LogLevel::warning, "renewal of '" + state->key + "' failed, retrying: " + e.what());
    return retry_at();
  }
  op.unlock();
  store_failing_.store(false);
  if (!renewed) {
    mark_lost(*state, LossReason::not_owner,
              "the " + std::string(backend->name()) + " backend no longer holds '" + state->key +
                  "' for this owner (token " + std::to_string(state->token) +
                  "): it expired, was force-released or was taken over");
    return std::nullopt;
  }
  state->set_valid_until(std::max(state->valid_until_time(), sent + state->spec.ttl - state->spec.margin));
  activity.renewed();
  flush_activity_soon();
  return sent + state->spec.ttl / 3;
}

void ClientState::mark_lost(LeaseState& state, LossReason reason, std::string message) {
  std::vector<std::function<void(const LossInfo&)>> callbacks;
  {
    std::lock_guard lock(state.mutex);
    if (state.finished || state.lost.load()) return;
    activity.lost();  // counted before anyone can see the lease lost
    state.lost.store(true);
    callbacks.swap(state.callbacks);  // dropped after running: no user object outlives the loss
  }
  unschedule(state);
  flush_activity_soon();
  // A holder that registered a callback hears of the loss there; the log is the fallback.
  core::log(callbacks.empty() ? LogLevel::warning : LogLevel::info, "lock lost: " + message);
  state.stop.request_stop();
  const LossInfo info{state.key, state.token, reason, std::move(message)};
  for (auto& callback : callbacks) {
    try {
      callback(info);
    } catch (const std::exception& e) {
      core::log(LogLevel::error, std::string("a loss callback threw: ") + e.what());
    }
  }
}

// The store says these leases are gone (every lease, with an empty key): they are lost at
// once, on the renewal thread, as a failed renewal would find.
void ClientState::lose_soon(std::string_view key, std::string_view owner, std::uint64_t token, std::string why) {
  std::vector<std::weak_ptr<LeaseState>> leases;
  {
    std::lock_guard lock(registry_mutex_);
    for (const auto& [held, weak] : registry_) {
      if (key.empty() || (held.first == key && held.second == owner)) leases.push_back(weak);
    }
  }
  for (auto& weak : leases) {
    renewals.schedule(SteadyClock::now(), [this, weak, token, why]() -> std::optional<SteadyClock::time_point> {
      auto state = weak.lock();
      if (state && (token == 0 || state->token == token)) {
        mark_lost(*state, LossReason::not_owner,
                  "the " + std::string(backend->name()) + " backend lost '" + state->key + "' (token " +
                      std::to_string(state->token) + "): " + why);
      }
      return std::nullopt;
    });
  }
}

void ClientState::check_eviction_soon(std::string_view key) {
  std::vector<std::weak_ptr<LeaseState>> leases;
  {
    std::lock_guard lock(registry_mutex_);
    for (auto it = registry_.lower_bound(RegistryOrder::Views{key, {}}); it != registry_.end() && it->first.first == key; ++it)
      leases.push_back(it->second);
  }
  for (auto& weak : leases) {
    renewals.schedule(SteadyClock::now(), [this, weak]() -> std::optional<SteadyClock::time_point> {
      if (auto state = weak.lock()) check_eviction(*state);
      return std::nullopt;
    });
  }
}

// The store said the key was force-released: the lease is lost if the store no longer shows it
// as this acquisition's, or shows it evicted. Asking, not trusting the notice, keeps a spurious
// or late notice harmless.
void ClientState::check_eviction(LeaseState& state) {
  {
    std::lock_guard lock(state.mutex);
    if (state.finished || state.lost.load()) return;
  }
  std::vector<LockInfo> holders;
  {
    // A release that freed the key meanwhile is no eviction: the key is not ours because we let it go.
    std::lock_guard op(state.op_mutex);
    if (state.freed) return;
    try {
      holders = backend->inspect(state.key);
    } catch (const std::exception& e) {
      core::log(LogLevel::debug, "could not check '" + state.key + "' after a force-release notice: " + e.what());
      return;  // the next renewal finds out
    }
  }
  const bool still_ours = std::any_of(holders.begin(), holders.end(), [&](const LockInfo& holder) {
    return holder.owner == state.spec.owner && holder.token == state.token && !holder.evicted;
  });
  if (still_ours) return;
  mark_lost(state, LossReason::not_owner,
            "'" + state.key + "' (token " + std::to_string(state.token) + ") was force-released or taken over");
}

void ClientState::unschedule(LeaseState& state) {
  core::RenewalScheduler::TaskId renew_task = 0, deadline_task = 0;
  std::shared_ptr<DeadlineGroup> group;
  {
    std::lock_guard lock(state.mutex);
    std::swap(renew_task, state.renew_task);
    std::swap(deadline_task, state.deadline_task);
    std::swap(group, state.deadline_group);
  }
  if (renew_task != 0) renewals.cancel(renew_task);
  if (deadline_task != 0) deadlines.cancel(deadline_task);
  // A task not scheduled yet (a loss while its set is being made) runs once and ends.
  if (group && --group->live == 0) deadlines.cancel(group->task.load());
}

void ClientState::schedule_deadlines(const std::shared_ptr<DeadlineGroup>& group, const std::vector<Lease>& leases) {
  std::vector<std::weak_ptr<LeaseState>> members;
  auto due = SteadyClock::time_point::max();
  for (const Lease& lease : leases) {
    std::lock_guard lock(lease.state_->mutex);
    if (lease.state_->deadline_group != group) continue;
    members.push_back(lease.state_);
    due = std::min(due, lease.state_->valid_until_time());
  }
  if (members.empty()) return;
  // Each member's deadline, as its own task would run it; again at the earliest still ahead.
  group->task = deadlines.schedule(due, [this, members]() -> std::optional<SteadyClock::time_point> {
    std::optional<SteadyClock::time_point> next;
    for (const auto& weak : members) {
      const auto state = weak.lock();
      const auto again = state ? deadline_due(state) : std::nullopt;
      if (again) next = next ? std::min(*next, *again) : *again;
    }
    return next;
  });
}

void ClientState::add_loss_callback(LeaseState& state, std::function<void(const LossInfo&)> callback) {
  {
    std::lock_guard lock(state.mutex);
    if (!state.lost.load()) {
      state.callbacks.push_back(std::move(callback));
      return;
    }
  }
  // The loss may still be on its way to the stop token on the thread that found it (mark_lost):
  // the caller hears of it no sooner than the token does.
  state.stop.request_stop();
  callback(LossInfo{state.key, state.token, LossReason::not_owner, "the lease was already lost"});
}

}  // namespace dlock::detail
