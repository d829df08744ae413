#include "backends/postgres/session_waiter.hpp"

#include <algorithm>
#include <thread>

namespace dlock::backends::postgres {
namespace {

// How long a waiter whose connection broke (or cannot be made) pauses before it goes on.
constexpr std::chrono::milliseconds kRetryPause{50};

}  // namespace

SessionWaiter::SessionWaiter(Pool& pool, Attempt attempt, const backend::AcquireRequest& request, std::int64_t lock_id)
    : pool_(pool),
      attempt_(std::move(attempt)),
      key_(request.key),
      owner_(request.owner),
      ttl_(request.ttl),
      lock_id_(std::to_string(lock_id)) {}

SessionWaiter::~SessionWaiter() {
  // Still in line: the server would keep the request queued (and grant it) after the
  // connection closes, so it is cancelled first.
  if (queued_) (*queued_)->cancel_and_discard();
  if (granted_) {
    try {
      (*granted_)->query("SELECT pg_advisory_unlock($1::bigint)", {lock_id_});
    } catch (const PgError&) {
      (*granted_)->discard();  // the lock ends with the session
    }
  }
}

backend::AcquireResult SessionWaiter::attempt() {
  return attempt_({key_, owner_, ttl_, LockMode::exclusive, 0, /*waiting=*/true, 0}, granted_);
}

void SessionWaiter::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (granted_) {
    // The lock is this waiter's, but an evicted holder's lease keeps the key closed until the
    // deadline (which it bounds): the others wait behind this one meanwhile.
    std::this_thread::sleep_until(deadline);
    return;
  }
  try {
    if (!queued_) {
      queued_.emplace(pool_.take());
      (*queued_)->send("SELECT pg_advisory_lock($1::bigint)", {lock_id_});
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
