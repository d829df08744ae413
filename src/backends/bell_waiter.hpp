#pragma once

// The Waiter of a lease store (see include/dlock/backend.hpp): attempts are the store's own
// one-shot acquire(), and between them the waiter sleeps on a bell that releases ring (a
// futex word, a condition variable, a BLPOP).

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "dlock/backend.hpp"

namespace dlock::backends {

// What a lease store's release rings. arm() is called before every attempt, so a ring between
// that attempt and the next wait_until() is never missed. A release should wake one waiter.
class Bell {
 public:
  virtual ~Bell() = default;
  virtual void arm() = 0;
  // Blocks until rung (true), the deadline or spuriously (false).
  virtual bool wait_until(std::chrono::steady_clock::time_point deadline) = 0;
  // A ring the last wait took, and which this waiter will not use, goes to another waiter; at
  // most once per ring.
  virtual void pass_on() noexcept {}
  // The waiting call ends without the key: as pass_on().
  virtual void abandon() noexcept { pass_on(); }
  // Wakes every waiter of the key. Empty where the store's own grant already wakes them.
  virtual void ring_all() noexcept {}
};

class BellWaiter final : public backend::Waiter {
 public:
  // How an attempt is made: the store's acquire(), or the same on a connection the waiter keeps
  // for its whole wait (postgres://, whose bell is that connection).
  using Attempt = std::function<backend::AcquireResult(const backend::AcquireRequest&)>;

  BellWaiter(backend::Backend& backend, const backend::AcquireRequest& request, std::unique_ptr<Bell> bell)
      : BellWaiter([&backend](const backend::AcquireRequest& r) { return backend.acquire(r); }, request,
                   std::move(bell)) {}
  BellWaiter(Attempt attempt, const backend::AcquireRequest& request, std::unique_ptr<Bell> bell)
      : attempt_(std::move(attempt)),
        key_(request.key),
        owner_(request.owner),
        ttl_(request.ttl),
        mode_(request.mode),
        permits_(request.permits),
        bell_(std::move(bell)) {}
  ~BellWaiter() override {
    if (!acquired_) bell_->abandon();
  }
  BellWaiter(const BellWaiter&) = delete;
  BellWaiter& operator=(const BellWaiter&) = delete;

  backend::AcquireResult attempt() override {
    bell_->arm();
    auto result = attempt_({key_, owner_, ttl_, mode_, permits_, /*waiting=*/true, waited_behind_});
    acquired_ = std::holds_alternative<backend::Acquired>(result);
    waited_behind_ = backend::waited_behind(mode_, result);
    // One release rings one waiter. A shared holder passes its ring on, since the next waiter
    // may share the key too; so does a waiter kept out of a key with no holder (a waiting
    // writer's claim), since no holder of that key will ring when it leaves.
    const auto* busy = std::get_if<backend::Busy>(&result);
    if ((acquired_ && mode_ == LockMode::shared) || (busy && busy->holders.empty())) bell_->pass_on();
    // A writer that readers kept waiting placed the writer's claim, which refuses the readers
    // who came meanwhile; its grant ends the claim and wakes them all, so that they look again,
    // find it and queue behind it (the readers' claim) rather than enter one ring at a time
    // after it (backend.hpp, "Shared holds").
    if (busy && mode_ == LockMode::exclusive) {
      held_back_readers_ = held_back_readers_ || std::any_of(busy->holders.begin(), busy->holders.end(),
                                                             [](const LockInfo& h) { return h.mode == LockMode::shared; });
    }
    if (acquired_ && held_back_readers_) bell_->ring_all();
    return result;
  }
  void wait_until(std::chrono::steady_clock::time_point deadline) override { bell_->wait_until(deadline); }

 private:
  const Attempt attempt_;
  const std::string key_;
  const std::string owner_;
  const std::chrono::milliseconds ttl_;
  const LockMode mode_;
  const std::uint32_t permits_;
  std::unique_ptr<Bell> bell_;
  bool acquired_ = false;
  bool held_back_readers_ = false;  // an exclusive attempt was refused by shared holders
  std::uint64_t waited_behind_ = 0;  // the exclusive holder the last attempt found (AcquireRequest)
};

}  // namespace dlock::backends
