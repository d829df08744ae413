#pragma once

// One background thread per client that runs timed tasks: lease renewals at about TTL/3 and
// expiry notices for leases that do not renew. Started on first use.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <vector>

namespace dlock::core {

class RenewalScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs when due; returns when to run again, or nothing to drop the task.
  using Task = std::function<std::optional<Clock::time_point>()>;

  RenewalScheduler() = default;
  RenewalScheduler(const RenewalScheduler&) = delete;
  RenewalScheduler& operator=(const RenewalScheduler&) = delete;
  ~RenewalScheduler();

  // The task is skipped and dropped once `alive` has expired.
  void schedule(Clock::time_point due, std::weak_ptr<void> alive, Task task);

 private:
  struct Entry {
    Clock::time_point due;
    std::uint64_t seq;
    std::weak_ptr<void> alive;
    Task task;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.due != b.due ? a.due > b.due : a.seq > b.seq;
    }
  };

  // Owned jointly by the scheduler and its thread, so a thread that ends up destroying its
  // own scheduler (a callback dropping the last client reference) never touches freed state.
  struct Shared {
    std::mutex mutex;
    std::condition_variable_any wake;
    std::priority_queue<Entry, std::vector<Entry>, Later> queue;
    std::uint64_t next_seq = 0;
  };
  static void run(const std::shared_ptr<Shared>& shared, std::stop_token stop);

  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::jthread thread_;
};

}  // namespace dlock::core
