#pragma once

// A background thread that runs timed tasks: lease renewals at about TTL/3 and the deadline
// checks that fire a lease's stop token. Started on first use.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace dlock::core {

class RenewalScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs when due; returns when to run again, or nothing to drop the task.
  using Task = std::function<std::optional<Clock::time_point>()>;
  using TaskId = std::uint64_t;

  RenewalScheduler() = default;
  RenewalScheduler(const RenewalScheduler&) = delete;
  RenewalScheduler& operator=(const RenewalScheduler&) = delete;
  ~RenewalScheduler();

  TaskId schedule(Clock::time_point due, Task task);
  // Drops a task, so a released lease leaves nothing queued behind (leases are taken far
  // faster than their TTLs run out). Harmless for a task already gone.
  void cancel(TaskId id);
  // Ends the thread once the task it runs (if any) returns, and waits for that unless called
  // from that task; queued and later tasks never run. For an owner whose tasks use its
  // members: called first in its destructor, no task runs while they go.
  void stop();

 private:
  using Key = std::pair<Clock::time_point, TaskId>;
  // Owned jointly by the scheduler and its thread, so a thread that ends up destroying its
  // own scheduler (a callback dropping the last client reference) never touches freed state.
  struct Shared {
    std::mutex mutex;
    std::condition_variable_any wake;
    std::map<Key, Task> queue;
    std::unordered_map<TaskId, Clock::time_point> due;  // queued tasks only
    TaskId next_id = 1;
    // When the thread wakes on its own: min() while it is awake (it looks at the queue before
    // it sleeps again), max() while it sleeps with nothing due. A task due no earlier needs no
    // notify: a lock taken and released leaves its cancelled tasks' wake-up in place, and the
    // next lock's tasks (due later) then cost the threads no wake-up at all.
    Clock::time_point wakes_at = Clock::time_point::min();
    TaskId running = 0;
    bool running_cancelled = false;
    bool stopped = false;
  };
  static void run(const std::shared_ptr<Shared>& shared, std::stop_token stop);

  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::jthread thread_;
};

}  // namespace dlock::core
