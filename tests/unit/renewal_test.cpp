// The background thread that runs a client's timed tasks (src/core/renewal.cpp).

#include "core/renewal.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace {

using dlock::core::RenewalScheduler;
using namespace std::chrono_literals;

// A task that holds the scheduler's thread until the test lets it go.
struct Gate {
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false;
  bool open = false;

  void pass() {
    std::unique_lock lock(mutex);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_entered() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return entered; });
  }
  void let_go() {
    std::lock_guard lock(mutex);
    open = true;
    cv.notify_all();
  }
};

// A client's destructor stops its schedulers first: the task under way must have returned when
// stop() does, and no other may start, or it would use the client's members as they go.
TEST(RenewalScheduler, StopWaitsForTheRunningTaskAndRunsNoOther) {
  RenewalScheduler scheduler;
  Gate gate;
  std::atomic<bool> first_returned{false};
  std::atomic<bool> second_ran{false};
  scheduler.schedule(RenewalScheduler::Clock::now(), [&]() -> std::optional<RenewalScheduler::Clock::time_point> {
    gate.pass();
    first_returned = true;
    return std::nullopt;
  });
  scheduler.schedule(RenewalScheduler::Clock::now(), [&]() -> std::optional<RenewalScheduler::Clock::time_point> {
    second_ran = true;
    return std::nullopt;
  });
  gate.wait_entered();

  std::atomic<bool> returned_after_task{false};
  std::thread stopper([&] {
    scheduler.stop();
    returned_after_task = first_returned.load();
  });
  std::this_thread::sleep_for(100ms);  // stop() is under way, or about to be
  gate.let_go();
  stopper.join();
  EXPECT_TRUE(returned_after_task) << "stop() returned while a task still ran";
  EXPECT_FALSE(second_ran) << "a queued task ran after stop()";

  std::atomic<bool> later_ran{false};
  scheduler.schedule(RenewalScheduler::Clock::now(), [&]() -> std::optional<RenewalScheduler::Clock::time_point> {
    later_ran = true;
    return std::nullopt;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(later_ran) << "a task scheduled after stop() ran";
}

// A task may drop the last reference to its scheduler's owner: stop() from that task cannot
// wait for itself, and the thread ends once the task returns.
TEST(RenewalScheduler, StopFromItsOwnTaskReturns) {
  auto scheduler = std::make_unique<RenewalScheduler>();
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  scheduler->schedule(RenewalScheduler::Clock::now(), [&]() -> std::optional<RenewalScheduler::Clock::time_point> {
    scheduler.reset();  // the destructor stops it, on its own thread
    std::lock_guard lock(mutex);
    done = true;
    cv.notify_all();
    return std::nullopt;
  });
  std::unique_lock lock(mutex);
  EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return done; }));
}

}  // namespace
