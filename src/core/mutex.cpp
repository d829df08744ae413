// dlock::Mutex: the TimedLockable face of the client, holds kept per owner.

#include <stdexcept>

#include "core/client_state.hpp"
#include "core/log.hpp"

namespace dlock {

Mutex::Mutex(std::shared_ptr<detail::MutexState> state) : state_(std::move(state)) {}
Mutex::Mutex(Mutex&&) noexcept = default;
Mutex& Mutex::operator=(Mutex&&) noexcept = default;
Mutex::~Mutex() = default;

void Mutex::lock() {
  const bool acquired = try_lock_until_steady(std::chrono::steady_clock::time_point::max());
  if (!acquired) throw std::logic_error("blocking acquire returned without the lock");
}

bool Mutex::try_lock() { return try_lock_until_steady(std::chrono::steady_clock::now()); }

namespace {

void require_state(const std::shared_ptr<detail::MutexState>& state) {
  if (!state) throw std::logic_error("use of a moved-from dlock::Mutex");
}

}  // namespace

bool Mutex::try_lock_for_steady(std::chrono::steady_clock::duration timeout) {
  return try_lock_until_steady(detail::deadline_after(timeout));
}

bool Mutex::try_lock_until_steady(std::chrono::steady_clock::time_point deadline) {
  require_state(state_);
  const std::string owner = state_->current_owner();
  Attempt attempt = state_->client->acquire_until(state_->key, state_->options, deadline);
  if (!attempt) {
    std::lock_guard lock(state_->mutex);
    state_->last_holders[owner] = attempt.holders();
    return false;
  }
  state_->holds.adopt(std::move(attempt.lease()), owner);
  return true;
}

void Mutex::unlock() noexcept {
  if (!state_) {
    core::log(LogLevel::error, "unlock() of a moved-from dlock::Mutex");
    return;
  }
  try {
    state_->holds.release_latest(state_->current_owner(), "'" + state_->key + "'");
  } catch (const std::exception& e) {
    core::log(LogLevel::warning, "unlock() of '" + state_->key + "' failed: " + e.what());
  }
}

const std::string& Mutex::key() const noexcept {
  static const std::string none;
  return state_ ? state_->key : none;
}

const Lease* Mutex::lease() const {
  if (!state_) return nullptr;
  return state_->holds.latest(state_->current_owner());
}

std::vector<LockInfo> Mutex::last_holders() const {
  if (!state_) return {};
  const std::string owner = state_->current_owner();
  std::lock_guard lock(state_->mutex);
  const auto it = state_->last_holders.find(owner);
  return it == state_->last_holders.end() ? std::vector<LockInfo>{} : it->second;
}

void Mutex::on_lost(std::function<void(const LossInfo&)> callback) {
  require_state(state_);
  state_->holds.on_lost(std::move(callback));
}

}  // namespace dlock
