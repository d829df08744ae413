#pragma once

// The Waiter of a lease store (see include/dlock/backend.hpp): attempts are the store's own
// one-shot acquire(), and between them the waiter sleeps on a bell that releases ring (a
// futex word, a condition variable, a BLPOP).

#include <chrono>
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
  // The waiting call ends without the key: a ring it took is passed on to another waiter.
  virtual void abandon() noexcept {}
};

class BellWaiter final : public backend::Waiter {
 public:
  BellWaiter(backend::Backend& backend, const backend::AcquireRequest& request, std::unique_ptr<Bell> bell)
      : backend_(backend), key_(request.key), owner_(request.owner), ttl_(request.ttl), bell_(std::move(bell)) {}
  ~BellWaiter() override {
    if (!acquired_) bell_->abandon();
  }
  BellWaiter(const BellWaiter&) = delete;
  BellWaiter& operator=(const BellWaiter&) = delete;

  backend::AcquireResult attempt() override {
    bell_->arm();
    auto result = backend_.acquire({key_, owner_, ttl_});
    acquired_ = std::holds_alternative<backend::Acquired>(result);
    return result;
  }
  void wait_until(std::chrono::steady_clock::time_point deadline) override { bell_->wait_until(deadline); }

 private:
  backend::Backend& backend_;
  const std::string key_;
  const std::string owner_;
  const std::chrono::milliseconds ttl_;
  std::unique_ptr<Bell> bell_;
  bool acquired_ = false;
};

}  // namespace dlock::backends
