#pragma once

// When a lease's loss callback first ran, and what it said: set once from any thread (the
// callback's), read by the test.
//
//   auto loss = std::make_shared<LossRecord>();
//   lease.on_lost([loss](const LossInfo& info) { loss->set(info); });

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "dlock/types.hpp"

namespace dlock::test {

struct LossRecord {
  using Clock = std::chrono::steady_clock;
  std::mutex mutex;
  std::optional<Clock::time_point> at;
  std::optional<LossInfo> info;
  void set(const LossInfo& loss) {
    std::lock_guard lock(mutex);
    if (at) return;
    at = Clock::now();
    info = loss;
  }
  std::optional<Clock::time_point> when() {
    std::lock_guard lock(mutex);
    return at;
  }
  std::string message() {
    std::lock_guard lock(mutex);
    return info ? info->message : std::string();
  }
  std::optional<LossReason> reason() {
    std::lock_guard lock(mutex);
    return info ? std::optional<LossReason>(info->reason) : std::nullopt;
  }
};

}  // namespace dlock::test
