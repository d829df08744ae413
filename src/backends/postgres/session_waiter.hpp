#pragma once

// How a waiter of session mode waits: for the key's advisory lock itself, on a connection of its
// own (pg_advisory_lock, or pg_advisory_lock_shared for a shared request). The server queues
// the waiters and grants the lock in the order they asked, the moment its holders give it back
// or their sessions end: one release wakes one writer, or the readers queued together, and
// nothing polls. The granted connection holds the lock and becomes the holder's: an exclusive
// waiter's wait is pipelined with take_fast, which takes the key as soon as the server grants
// the lock (no round trip after the wake-up); a shared waiter's next attempt runs there.
// While a waiter's statement is queued, its attempts only look at the key's holders: they
// must not take the key, nor re-enter a hold that statement took.
//
// Two refusals the lock cannot wait out. A full semaphore: its waiters line up for a freed
// permit (listen_bell.hpp: the first in line listens on the key's channel, which a shared
// release of a semaphore notifies). A claim (backend.hpp) that keeps a free key for others: the
// waiter gives back what the server granted it and looks again after Busy::retry_within.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "backends/postgres/common.hpp"
#include "backends/postgres/listen_bell.hpp"
#include "backends/postgres/pool.hpp"
#include "dlock/backend.hpp"

namespace dlock::backends::postgres {

class SessionWaiter final : public backend::Waiter {
 public:
  // The key taken by the waiter's statement: its token and server process, and when it was
  // taken at the earliest.
  struct Taken {
    std::optional<std::string> token, pid;
    std::chrono::steady_clock::time_point at;
  };
  // An attempt; `granted` is the connection the server granted the lock, if any, which the
  // attempt moves out when it takes the key on it, or which `taken` took the key on. `queued`:
  // the waiter's statement waits in the server, so the attempt only looks at the holders.
  using Attempt = std::function<backend::AcquireResult(const backend::AcquireRequest&, std::optional<Pool::Lease>& granted,
                                                       const Taken* taken, bool queued)>;

  SessionWaiter(Pool& pool, const Settings& settings, const std::string& take_fast, Attempt attempt,
                const backend::AcquireRequest& request, std::int64_t lock_id);
  ~SessionWaiter() override;
  SessionWaiter(const SessionWaiter&) = delete;
  SessionWaiter& operator=(const SessionWaiter&) = delete;

  backend::AcquireResult attempt() override;
  void wait_until(std::chrono::steady_clock::time_point deadline) override;

 private:
  enum class Wait { lock, permit, recheck };
  // The lock the server granted, given back (its connection to the pool).
  void give_back() noexcept;

  Pool& pool_;
  const Settings& settings_;
  const std::string& take_fast_;
  const Attempt attempt_;
  const std::string key_, owner_;
  const std::chrono::milliseconds ttl_;
  const LockMode mode_;
  const std::uint32_t permits_;
  const std::string lock_id_;
  std::uint64_t waited_behind_ = 0;
  Wait wait_ = Wait::lock;
  std::optional<Pool::Lease> queued_;   // waits in the server for the lock
  std::chrono::steady_clock::time_point queued_at_;  // when its statement was sent
  std::optional<Taken> taken_;
  std::optional<Pool::Lease> granted_;  // holds the lock: the key's next holder, unless an evicted holder's lease keeps it closed
  std::optional<ListenBell> permit_line_;  // a full semaphore's waiter, in line for a freed permit
};

}  // namespace dlock::backends::postgres
