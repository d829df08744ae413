// ClientState's operations on several keys in one request (Backend::acquire_set and
// release_set), for multi-key locks: the same bookkeeping as one key's, one round trip.

#include <algorithm>
#include <mutex>

#include "core/client_state.hpp"

namespace dlock::detail {

std::optional<ClientState::SetAttempt> ClientState::try_acquire_set(const std::vector<std::string_view>& keys,
                                                                    const LockSpec& spec) {
  std::vector<backend::AcquireRequest> requests;
  requests.reserve(keys.size());
  for (const auto key : keys) {
    refuse_upgrade(key, spec);
    requests.push_back({key, spec.owner, spec.ttl, spec.mode, spec.permits});
  }
  const auto sent = SteadyClock::now();
  auto result = backend->acquire_set(requests);
  if (!result) return std::nullopt;
  SetAttempt attempt;
  if (auto* busy = std::get_if<backend::SetBusy>(&*result)) {
    activity.conflict();
    flush_activity_soon();
    attempt.busy = busy->index;
    attempt.holders = std::move(busy->busy.holders);
    return attempt;
  }
  auto& acquired = std::get<std::vector<backend::Acquired>>(*result);
  attempt.leases.reserve(keys.size());
  const auto group = std::make_shared<DeadlineGroup>();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (acquired[i].hold_count == 1) activity.acquired();
    attempt.leases.push_back(make_lease(std::string(keys[i]), spec, acquired[i],
                                        std::min(sent, acquired[i].sent.value_or(sent)), group));
  }
  schedule_deadlines(group, attempt.leases);
  flush_activity_soon();
  return attempt;
}

void ClientState::release_set(std::vector<Lease>& leases) {
  std::optional<LockLostError> first_error;
  const auto one_by_one = [&] {
    while (!leases.empty()) {
      try {
        leases.back().release();
      } catch (const LockLostError& e) {
        if (!first_error) first_error = e;
      }
      leases.pop_back();
    }
  };
  const bool any_lost = std::any_of(leases.begin(), leases.end(), [](const Lease& l) { return l.lost(); });
  if (leases.size() < 2 || any_lost) {
    one_by_one();  // a lost lease has its own path (release() frees what the store may keep)
  } else {
    std::vector<backend::LeaseRef> refs;
    std::vector<std::unique_lock<std::mutex>> ops;  // in key order, as every set takes them
    for (const Lease& lease : leases) {
      const LeaseState& state = *lease.state_;
      refs.push_back({state.key, state.spec.owner, state.token});
      ops.emplace_back(lease.state_->op_mutex);
    }
    std::optional<std::vector<std::optional<std::uint32_t>>> answers;
    try {
      answers = backend->release_set(refs);
    } catch (...) {
      ops.clear();
      throw;
    }
    if (!answers) {
      ops.clear();
      one_by_one();
    } else {
      for (std::size_t i = 0; i < leases.size(); ++i) {
        if ((*answers)[i] == 0u) leases[i].state_->freed = true;
      }
      ops.clear();
      for (std::size_t i = leases.size(); i-- > 0;) {
        if (auto error = settle_release(leases[i], (*answers)[i]); error && !first_error) first_error = *error;
      }
      leases.clear();
    }
  }
  if (first_error) throw *first_error;
}

}  // namespace dlock::detail
