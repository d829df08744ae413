#pragma once

// How a waiter of session mode waits: for the key's advisory lock itself, on a connection of its
// own (pg_advisory_lock, or pg_advisory_lock_shared for a shared request). The server queues
// the waiters and grants the lock in the order they asked, the moment its holders give it back
// or their sessions end: one release wakes one writer, or the readers queued together, and
// nothing polls. The granted connection holds the lock; the waiter's next attempt runs there
// and, if it takes the key, becomes the holder's connection.
//
// Two refusals the lock cannot wait out. A full semaphore: its waiters line up for a freed
// permit (listen_bell.hpp: the first in line listens on the key's channel, which a shared
// release of a semaphore notifies). A claim (backend.hpp) that keeps a free key for others from
// a waiter the server granted the lock: the waiter gives the lock back and looks again within
// 50 ms.

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
  // An attempt; `granted` is the connection the server granted the lock, if any, which the
  // attempt moves out when it takes the key on it.
  using Attempt = std::function<backend::AcquireResult(const backend::AcquireRequest&, std::optional<Pool::Lease>& granted)>;

  SessionWaiter(Pool& pool, const Settings& settings, Attempt attempt, const backend::AcquireRequest& request,
                std::int64_t lock_id);
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
  const Attempt attempt_;
  const std::string key_, owner_;
  const std::chrono::milliseconds ttl_;
  const LockMode mode_;
  const std::uint32_t permits_;
  const std::string lock_id_;
  std::uint64_t waited_behind_ = 0;
  Wait wait_ = Wait::lock;
  std::optional<Pool::Lease> queued_;   // waits in the server for the lock
  std::optional<Pool::Lease> granted_;  // holds the lock: the key's next holder, unless an evicted holder's lease keeps it closed
  std::optional<ListenBell> permit_line_;  // a full semaphore's waiter, in line for a freed permit
};

}  // namespace dlock::backends::postgres
