#include "core/activity.hpp"

namespace dlock {

Activity& Activity::operator+=(const Activity& other) noexcept {
  acquisitions += other.acquisitions;
  conflicts += other.conflicts;
  waits += other.waits;
  wait_us += other.wait_us;
  renewals += other.renewals;
  losses += other.losses;
  return *this;
}

Activity Activity::operator-(const Activity& other) const noexcept {
  return Activity{acquisitions - other.acquisitions, conflicts - other.conflicts, waits - other.waits,
                  wait_us - other.wait_us, renewals - other.renewals, losses - other.losses};
}

namespace core {

void ActivityCounters::waited(std::chrono::steady_clock::duration how_long) {
  waits_.fetch_add(1, std::memory_order_relaxed);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(how_long).count();
  wait_us_.fetch_add(us > 0 ? static_cast<std::uint64_t>(us) : 0, std::memory_order_relaxed);
}

Activity ActivityCounters::totals() const {
  return Activity{acquisitions_.load(std::memory_order_relaxed), conflicts_.load(std::memory_order_relaxed),
                  waits_.load(std::memory_order_relaxed),        wait_us_.load(std::memory_order_relaxed),
                  renewals_.load(std::memory_order_relaxed),     losses_.load(std::memory_order_relaxed)};
}

void ActivityCounters::flush(backend::Backend& backend) {
  std::lock_guard lock(flush_mutex_);
  const Activity now = totals();
  const Activity delta = now - flushed_;
  if (delta.empty()) return;
  if (auto* ledger = backend.activity()) ledger->add(delta);
  flushed_ = now;
}

}  // namespace core
}  // namespace dlock
