#pragma once

// A client's activity counters (dlock::Activity) and the part of them it has not yet added to
// the store's totals.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "dlock/backend.hpp"
#include "dlock/types.hpp"

namespace dlock::core {

class ActivityCounters {
 public:
  void acquired() { acquisitions_.fetch_add(1, std::memory_order_relaxed); }
  void conflict() { conflicts_.fetch_add(1, std::memory_order_relaxed); }
  void waited(std::chrono::steady_clock::duration how_long);
  void renewed() { renewals_.fetch_add(1, std::memory_order_relaxed); }
  void lost() { losses_.fetch_add(1, std::memory_order_relaxed); }

  // Everything counted since the client opened.
  Activity totals() const;
  // Adds to the store what was counted since the last successful flush. Throws what the
  // backend throws; what it failed to add is tried again next time.
  void flush(backend::Backend& backend);

 private:
  std::atomic<std::uint64_t> acquisitions_{0}, conflicts_{0}, waits_{0}, wait_us_{0}, renewals_{0}, losses_{0};
  std::mutex flush_mutex_;
  Activity flushed_;  // guarded by flush_mutex_
};

}  // namespace dlock::core
