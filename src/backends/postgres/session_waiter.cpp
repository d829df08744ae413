#include "backends/postgres/session_waiter.hpp"

#include <algorithm>
#include <thread>
#include <variant>

namespace dlock::backends::postgres {
namespace {

// How long a waiter whose connection broke (or cannot be made) pauses before it goes on.
constexpr std::chrono::milliseconds kRetryPause{50};

// How soon a waiter that a claim refused looks again.
constexpr std::chrono::milliseconds kClaimRecheck{50};

// Whether every holder that refused `busy` is evicted, keeping the key closed until its lease
// ends (a lock delay): the lock stays with the waiter meanwhile.
bool all_evicted(const backend::Busy& busy) {
  return std::all_of(busy.holders.begin(), busy.holders.end(), [](const LockInfo& h) { return h.evicted; });
}

// Whether `busy` is a semaphore's permits all taken.
bool full(const backend::Busy& busy, LockMode mode, std::uint32_t permits) {
  return mode == LockMode::shared && permits > 0 && busy.holders.size() >= permits &&
         std::all_of(busy.holders.begin(), busy.holders.end(), [](const LockInfo& h) { return h.mode == LockMode::shared; });
}

}  // namespace

SessionWaiter::SessionWaiter(Pool& pool, const Settings& settings, Attempt attempt,
                             const backend::AcquireRequest& request, std::int64_t lock_id)
    : pool_(pool),
      settings_(settings),
      attempt_(std::move(attempt)),
      key_(request.key),
      owner_(request.owner),
      ttl_(request.ttl),
      mode_(request.mode),
      permits_(request.permits),
      lock_id_(std::to_string(lock_id)) {}

SessionWaiter::~SessionWaiter() {
  // Still in line: the server would keep the request queued (and grant it) after the
  // connection closes, so it is cancelled first.
  if (queued_) (*queued_)->cancel_and_discard();
  give_back();
}

void SessionWaiter::give_back() noexcept {
  if (!granted_) return;
  try {
    (*granted_)->query(mode_ == LockMode::shared ? "SELECT pg_advisory_unlock_shared($1::bigint)"
                                                 : "SELECT pg_advisory_unlock($1::bigint)",
                       {lock_id_});
  } catch (...) {
    (*granted_)->discard();  // the lock ends with the session
  }
  granted_.reset();
}

backend::AcquireResult SessionWaiter::attempt() {
  if (permit_line_) permit_line_->arm();
  const bool had_lock = granted_.has_value();
  auto result = attempt_({key_, owner_, ttl_, mode_, permits_, /*waiting=*/true, waited_behind_}, granted_);
  waited_behind_ = backend::waited_behind(mode_, result);
  const auto* busy = std::get_if<backend::Busy>(&result);
  if (!busy) {
    wait_ = Wait::lock;
  } else if (full(*busy, mode_, permits_)) {
    wait_ = Wait::permit;
  } else if (had_lock && (busy->holders.empty() || !all_evicted(*busy))) {
    // Refused with the lock in hand, by a claim, which the lock cannot wait out. (Without it, a
    // busy key with no holder to name is being handed over, or is another key's with the same
    // lock id: the waiter keeps its place in line.)
    wait_ = Wait::recheck;
  } else {
    wait_ = Wait::lock;
  }
  // Leaving the permits' line lets the next waiter in it listen.
  if (wait_ != Wait::permit) permit_line_.reset();
  // A lock granted for a key that a claim or a semaphore's permits keep closed would keep out
  // the very holders the waiter waits for.
  if (wait_ != Wait::lock) {
    give_back();
    if (queued_) (*queued_)->cancel_and_discard();
    queued_.reset();
  }
  return result;
}

void SessionWaiter::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (wait_ == Wait::recheck) {
    // A claim keeps the key for others, who are about to take it.
    std::this_thread::sleep_until(std::min(deadline, std::chrono::steady_clock::now() + kClaimRecheck));
    return;
  }
  if (wait_ == Wait::lock && granted_) {
    // The lock is this waiter's, but an evicted holder's lease keeps the key closed until the
    // deadline (which it bounds): the others wait behind this one meanwhile.
    std::this_thread::sleep_until(deadline);
    return;
  }
  if (wait_ == Wait::permit) {
    if (!permit_line_) permit_line_.emplace(pool_, settings_, key_);
    permit_line_->wait_until(deadline);
    return;
  }
  try {
    if (!queued_) {
      queued_.emplace(pool_.take());
      (*queued_)->send(mode_ == LockMode::shared ? "SELECT pg_advisory_lock_shared($1::bigint)"
                                                 : "SELECT pg_advisory_lock($1::bigint)",
                       {lock_id_});
    }
    // A deadline ends this wait, not the place in line: the request stays queued in the
    // server, and attempts meanwhile use pooled connections.
    if (!(*queued_)->finish_sent(deadline)) return;
    granted_ = std::move(queued_);
    queued_.reset();
  } catch (const PgError&) {
    // The connection broke (killed, a restart) or cannot be made: the call goes on, its
    // attempts reporting what they find, after a short pause so that a server refusing only
    // this connection does not become a busy loop.
    if (queued_) (*queued_)->discard();
    queued_.reset();
    std::this_thread::sleep_until(std::min(deadline, std::chrono::steady_clock::now() + kRetryPause));
  }
}

}  // namespace dlock::backends::postgres
