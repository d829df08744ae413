#pragma once

// How a waiter of session mode waits: for the key's advisory lock itself, on a connection of its
// own (pg_advisory_lock). The server queues the waiters and grants the lock to one at a time,
// in the order they asked, the moment its holder gives it back or its session ends: one release
// wakes one waiter, and nothing polls. The granted connection holds the lock; the waiter's next
// attempt runs there and, if it takes the key, becomes the holder's connection.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "backends/postgres/pool.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::postgres {

class SessionWaiter final : public backend::Waiter {
 public:
  // An attempt; `granted` is the connection the server granted the lock, if any, which the
  // attempt moves out when it takes the key on it.
  using Attempt = std::function<backend::AcquireResult(const backend::AcquireRequest&, std::optional<Pool::Lease>& granted)>;

  SessionWaiter(Pool& pool, Attempt attempt, const backend::AcquireRequest& request, std::int64_t lock_id);
  ~SessionWaiter() override;
  SessionWaiter(const SessionWaiter&) = delete;
  SessionWaiter& operator=(const SessionWaiter&) = delete;

  backend::AcquireResult attempt() override;
  void wait_until(std::chrono::steady_clock::time_point deadline) override;

 private:
  Pool& pool_;
  const Attempt attempt_;
  const std::string key_, owner_;
  const std::chrono::milliseconds ttl_;
  const std::string lock_id_;
  std::optional<Pool::Lease> queued_;   // waits in the server for the lock
  std::optional<Pool::Lease> granted_;  // holds the lock: the key's next holder, unless an evicted holder's lease keeps it closed
};

}  // namespace dlock::backends::postgres
