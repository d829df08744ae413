#pragma once

// A fault-injecting Backend decorator for tests (STYLE.md #3: inject faults through the seam).
//
// It forwards every call to a real backend and, when told to, makes renewals fail as if the
// store were unreachable, answer "not yours any more", or stall; makes releases fail; and
// counts the calls the core makes (attempts, waiters and their waits), so tests can
// check the core's loss, retry and "one round trip" rules without a network.
//
// Threads: every member is thread-safe; the knobs may be turned while the core runs (from the
// test thread while the client's renewal thread calls in).
//
//   auto faults = std::make_shared<dlock::test::FaultBackend>(real_backend);
//   auto client = dlock::Client::with_backend(faults);
//   faults->fail_renewals(true);   // the next renewals throw ConnectionError

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <variant>

#include "dlock/backend.hpp"
#include "dlock/errors.hpp"

namespace dlock::test {

class FaultBackend final : public backend::Backend {
 public:
  using milliseconds = std::chrono::milliseconds;

  explicit FaultBackend(std::shared_ptr<backend::Backend> inner) : inner_(std::move(inner)) {}

  // ---- knobs ----

  // While on, renew() throws ConnectionError without reaching the store.
  void fail_renewals(bool on) noexcept { fail_renewals_.store(on); }
  // The next `n` renew() calls throw ConnectionError, then renewals work again.
  void fail_next_renewals(int n) noexcept { fail_next_renewals_.store(n); }
  // While on, renew() answers false ("no longer ours") without reaching the store.
  void renewals_report_lost(bool on) noexcept { renewals_report_lost_.store(on); }
  // While on, release() throws ConnectionError without reaching the store.
  void fail_releases(bool on) noexcept { fail_releases_.store(on); }
  // Every renew() sleeps this long before reaching the store: a slow network or a stalled
  // server (the request hangs, then the store answers).
  void delay_renewals(milliseconds delay) noexcept { renew_delay_ms_.store(delay.count()); }
  // Every attempt (acquire() or a waiter's) sleeps this long before reaching the store.
  void delay_acquires(milliseconds delay) noexcept { acquire_delay_ms_.store(delay.count()); }
  // Acquisitions report that their attempt was sent this long before the attempt was made, as
  // a waiter that takes the key inside its wait does.
  void backdate_acquisitions(milliseconds by) noexcept { backdate_ms_.store(by.count()); }
  // Runs `hook` on the calling thread with each attempt's answer, before the core sees it: a
  // test notes what refused a call (the holders a Busy names). Set it before the client makes
  // attempts (this knob alone is not for turning while the core runs).
  void after_attempts(std::function<void(const backend::AcquireResult&)> hook) { after_attempts_ = std::move(hook); }

  // ---- what the core did ----

  // Attempts: acquire() calls and waiters' attempt() calls.
  std::uint64_t acquire_calls() const noexcept { return acquire_calls_.load(); }
  // When the latest attempt reached this decorator: no later than the store saw it,
  // no earlier than the core took its "sent" time.
  std::chrono::steady_clock::time_point last_acquire_started() const noexcept {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_acquire_.load()));
  }
  std::uint64_t renew_calls() const noexcept { return renew_calls_.load(); }
  // Renewals that reached the store and succeeded.
  std::uint64_t renewals_ok() const noexcept { return renewals_ok_.load(); }
  std::uint64_t release_calls() const noexcept { return release_calls_.load(); }
  std::uint64_t waiters() const noexcept { return waiters_.load(); }
  // Waiter::wait_until calls: how often a waiter went to sleep.
  std::uint64_t waits() const noexcept { return waits_->load(); }
  void reset_counts() noexcept {
    acquire_calls_ = 0;
    renew_calls_ = 0;
    renewals_ok_ = 0;
    release_calls_ = 0;
    waiters_ = 0;
    waits_->store(0);
  }

  const std::shared_ptr<backend::Backend>& inner() const noexcept { return inner_; }

  // ---- backend::Backend ----

  std::string_view name() const noexcept override { return inner_->name(); }
  std::size_t max_key_bytes() const noexcept override { return inner_->max_key_bytes(); }
  backend::Capabilities capabilities() const noexcept override { return inner_->capabilities(); }

  backend::AcquireResult acquire(const backend::AcquireRequest& request) override {
    return attempted([&] { return inner_->acquire(request); });
  }

  std::unique_ptr<backend::Waiter> waiter(const backend::AcquireRequest& request) override {
    ++waiters_;
    return std::make_unique<CountingWaiter>(*this, inner_->waiter(request));
  }

  bool renew(const backend::LeaseRef& lease, milliseconds ttl) override {
    ++renew_calls_;
    sleep_ms(renew_delay_ms_.load());
    if (fail_renewals_.load()) throw unreachable("renew", lease.key);
    for (int n = fail_next_renewals_.load(); n > 0;) {
      if (fail_next_renewals_.compare_exchange_weak(n, n - 1)) throw unreachable("renew", lease.key);
    }
    if (renewals_report_lost_.load()) return false;
    const bool renewed = inner_->renew(lease, ttl);
    if (renewed) ++renewals_ok_;
    return renewed;
  }

  std::optional<std::uint32_t> release(const backend::LeaseRef& lease) override {
    ++release_calls_;
    if (fail_releases_.load()) throw unreachable("release", lease.key);
    return inner_->release(lease);
  }

  std::vector<LockInfo> inspect(std::string_view key) override { return inner_->inspect(key); }
  ListPage list(std::string_view prefix, std::string_view after, std::size_t limit) override {
    return inner_->list(prefix, after, limit);
  }
  std::vector<LockInfo> force_release(std::string_view key, Eviction eviction,
                                      std::optional<std::uint64_t> token) override {
    return inner_->force_release(key, eviction, token);
  }
  bool watch(std::shared_ptr<backend::Events> events) override { return inner_->watch(std::move(events)); }
  void ping() override { inner_->ping(); }
  std::size_t collect_idle() override { return inner_->collect_idle(); }

 private:
  // Counts and delays an attempt, and backdates what it took when told to.
  template <class Attempt>
  backend::AcquireResult attempted(Attempt&& attempt) {
    ++acquire_calls_;
    last_acquire_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    sleep_ms(acquire_delay_ms_.load());
    auto result = attempt();
    if (auto* acquired = std::get_if<backend::Acquired>(&result); acquired && backdate_ms_.load() > 0) {
      acquired->sent = last_acquire_started() - milliseconds(backdate_ms_.load());
    }
    if (after_attempts_) after_attempts_(result);
    return result;
  }

  class CountingWaiter final : public backend::Waiter {
   public:
    CountingWaiter(FaultBackend& faults, std::unique_ptr<backend::Waiter> inner)
        : faults_(faults), inner_(std::move(inner)), waits_(faults.waits_) {}
    backend::AcquireResult attempt() override {
      return faults_.attempted([&] { return inner_->attempt(); });
    }
    void wait_until(std::chrono::steady_clock::time_point deadline) override {
      ++*waits_;
      inner_->wait_until(deadline);
    }

   private:
    FaultBackend& faults_;
    std::unique_ptr<backend::Waiter> inner_;
    std::shared_ptr<std::atomic<std::uint64_t>> waits_;
  };

  static void sleep_ms(milliseconds::rep ms) {
    if (ms > 0) std::this_thread::sleep_for(milliseconds(ms));
  }

  ConnectionError unreachable(const char* what, std::string_view key) const {
    return ConnectionError(std::string("injected fault: ") + what + " could not reach the store",
                           std::string(inner_->name()), std::string(key));
  }

  std::shared_ptr<backend::Backend> inner_;

  std::atomic<bool> fail_renewals_{false};
  std::atomic<int> fail_next_renewals_{0};
  std::atomic<bool> renewals_report_lost_{false};
  std::atomic<bool> fail_releases_{false};
  std::atomic<milliseconds::rep> renew_delay_ms_{0};
  std::function<void(const backend::AcquireResult&)> after_attempts_;
  std::atomic<milliseconds::rep> acquire_delay_ms_{0};
  std::atomic<milliseconds::rep> backdate_ms_{0};

  std::atomic<std::uint64_t> acquire_calls_{0};
  std::atomic<std::chrono::steady_clock::rep> last_acquire_{0};
  std::atomic<std::uint64_t> renew_calls_{0};
  std::atomic<std::uint64_t> renewals_ok_{0};
  std::atomic<std::uint64_t> release_calls_{0};
  std::atomic<std::uint64_t> waiters_{0};
  // Shared with the waiters, which may outlive a reset or be destroyed on another thread.
  std::shared_ptr<std::atomic<std::uint64_t>> waits_ = std::make_shared<std::atomic<std::uint64_t>>(0);
};

}  // namespace dlock::test
