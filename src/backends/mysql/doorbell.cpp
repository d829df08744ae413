// The doorbell a waiting call sleeps on (common.hpp: DoorbellChannel).

#include <algorithm>
#include <thread>

#include "backends/mysql/common.hpp"

namespace dlock::backends::mysql {

DoorbellChannel::DoorbellChannel(ModeBackend& backend, const backend::AcquireRequest& request,
                                 std::unique_ptr<Takeover> takeover)
    : backend_(backend),
      key_(request.key),
      bell_(backend.bell_name(key_)),
      takeover_(std::move(takeover)),
      owner_(request.owner),
      ttl_(request.ttl),
      mode_(request.mode),
      permits_(request.permits) {}

DoorbellChannel::~DoorbellChannel() {
  drop();
  if (takeover_ && connection_) takeover_->finish(**connection_, owner_, sessions_, acquired_);
  if (!taken_) return;
  // The waiting call ended without the attempt that would have claimed the key: free it.
  try {
    backend_.release(backend::LeaseRef{key_, owner_, taken_->token});
  } catch (...) {
    // Unreachable server: the lease runs out.
  }
}

backend::AcquireResult DoorbellChannel::attempt() {
  auto result =
      backend_.attempt({key_, owner_, ttl_, mode_, permits_, /*waiting=*/true, waited_behind_}, connection_ ? this : nullptr);
  waited_behind_ = backend::waited_behind(mode_, result);
  shared_holders_.clear();
  // A semaphore's waiter could wait for any one of its holders, which GET_LOCK cannot.
  if (const auto* busy = std::get_if<backend::Busy>(&result); busy && permits_ == 0) {
    for (const LockInfo& holder : busy->holders) {
      if (holder.mode == LockMode::shared) shared_holders_.push_back(holder.token);
    }
  }
  return result;
}

void DoorbellChannel::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (!connection_) {
    connection_.emplace(backend_.take_unpinned());
    sessions_ = std::to_string((*connection_)->id());
  }
  const bool guarding = std::exchange(guarding_, false);
  if (!guarding) drop();  // a doorbell left from an attempt that failed
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return;
  // The wait must end before the connection's read timeout would cut it.
  const auto cap = backend_.settings().connect.read_timeout - std::chrono::seconds(1);
  const auto left = std::min(std::chrono::duration_cast<std::chrono::microseconds>(deadline - now),
                             std::chrono::duration_cast<std::chrono::microseconds>(cap));
  if (!shared_holders_.empty()) {
    wait_for_shared_holders(left);
    return;
  }
  if (guarding) {
    // Nobody rings a bell this session holds: look again after a pause, and at once when the
    // evicted lease runs out (the holder's lease end bounds `deadline`).
    backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(1), std::chrono::milliseconds(250));
    pause(left);
    return;
  }
  // The doorbell was free while the key was held (its holder has no session ringing it):
  // back off instead of spinning, up to the holder's lease end that bounds `deadline`.
  pause(left);
  const auto start = std::chrono::steady_clock::now();
  bool rang = false;
  try {
    if (takeover_) {
      Takeover::Outcome outcome = takeover_->wait(**connection_, owner_, ttl_, left);
      holds_bell_ = outcome.rang;
      if (outcome.acquired) {
        taken_ = std::move(outcome.acquired);
        holds_bell_ = false;  // it went to the new lock
        backoff_ = std::chrono::milliseconds(0);
        return;
      }
      rang = outcome.rang;
    } else {
      const auto rows = (*connection_)->query("SELECT GET_LOCK(?, ? / 1000000)", {std::string_view(bell_), left.count()});
      rang = !rows.empty() && rows[0][0] == std::optional<std::string>("1");
      holds_bell_ = rang;
    }
  } catch (const SqlError& e) {
    if (!e.connection_broken && !ModeBackend::retryable(e)) raise(e, backend_.settings(), key_);
    // The server ended this session (KILL, restart): nothing is held. Or a lock wait gave up,
    // the statement rolled back, and a takeover's bell may be held. Wake spuriously; the next
    // attempt runs on a new connection, or returns the bell.
    holds_bell_ = takeover_ && !e.connection_broken;
    if (e.connection_broken) reconnect();
    return;
  }
  // Rang at once yet the key is held: its holder took it without the bell.
  if (rang) settle_backoff(start);
}

void DoorbellChannel::pause(std::chrono::microseconds left) {
  if (backoff_.count() > 0) std::this_thread::sleep_for(std::min<std::chrono::microseconds>(backoff_, left));
}

void DoorbellChannel::settle_backoff(std::chrono::steady_clock::time_point start) {
  if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1)) {
    backoff_ = std::clamp(backoff_ * 2, std::chrono::milliseconds(1), std::chrono::milliseconds(250));
  } else {
    backoff_ = std::chrono::milliseconds(0);
  }
}

void DoorbellChannel::wait_for_shared_holders(std::chrono::microseconds left) {
  pause(left);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + left;
  try {
    for (const std::uint64_t token : std::exchange(shared_holders_, {})) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return;
      const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
      const auto holder = static_cast<std::int64_t>(token);
      (*connection_)->query("SELECT IF(GET_LOCK(CONCAT(?, ':', ?), ? / 1000000) = 1, RELEASE_LOCK(CONCAT(?, ':', ?)), 0)",
                            {std::string_view(bell_), holder, wait.count(), std::string_view(bell_), holder});
    }
  } catch (const SqlError& e) {
    if (!e.connection_broken) raise(e, backend_.settings(), key_);
    reconnect();
    return;
  }
  // Every lock was free at once, yet the key was held shared: a holder without one (its
  // session ended, its lease has not) is waited out by looking again after a growing pause.
  settle_backoff(start);
}

void DoorbellChannel::reconnect() {
  holds_bell_ = false;
  if (takeover_) takeover_->session_lost();
  Pool::Lease fresh = backend_.take_unpinned();
  connection_.reset();
  connection_.emplace(std::move(fresh));
  sessions_ += ',';
  sessions_ += std::to_string((*connection_)->id());
}

void DoorbellChannel::drop() noexcept {
  if (!holds_bell_) return;
  holds_bell_ = false;
  try {
    (*connection_)->query("SELECT RELEASE_LOCK(?)", {std::string_view(bell_)});
  } catch (...) {
    // The session is gone, and its locks with it.
  }
}

}  // namespace dlock::backends::mysql
