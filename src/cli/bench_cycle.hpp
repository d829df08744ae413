#pragma once

// The cycle a client of the benchmark workloads repeats (../shared/bench-workloads.md, as
// docs/bench.md quotes it): what is timed, and how the contended workload checks from outside
// the lock that it was exclusive. `dlock bench` and the peers measured beside it
// (bench/mysql_peers.cpp) both run it, so they are measured alike.

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "cli/bench_histogram.hpp"

namespace dlock::cli {

// CLOCK_MONOTONIC, as the workloads require for t_release; one clock for every sample.
inline std::uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// What the contended workload's lock protects, in memory all its clients share (MAP_SHARED;
// the atomics are lock-free). The counter is read and later written back + 1 (not
// fetch_add), so an acquisition that was not exclusive shows up as a lost update.
struct ContendedState {
  std::atomic<std::uint64_t> counter{0};
  std::atomic<std::uint64_t> t_release_ns{0};
  std::atomic<std::uint32_t> inside{0};
  std::atomic<std::uint32_t> readers_inside{0};  // holders of a shared lock (dlock bench --readers)
  std::atomic<std::uint64_t> overlaps{0};
};

// One lock + unlock of `lock` (lock() and unlock()). Uncontended and distinct: `record` gets
// the cycle's latency. Contended (`shared` given): `record` gets the wait, from calling lock()
// to holding, and `handoff` the time from the previous holder's release stamp to holding.
// Only a `measured` cycle records.
template <class Lock, class Record>
void run_cycle(Lock& lock, std::chrono::milliseconds hold, ContendedState* shared, bool measured, Record&& record,
               Histogram& handoff) {
  const std::uint64_t t0 = mono_ns();
  lock.lock();
  const std::uint64_t t_locked = mono_ns();
  if (!shared) {
    if (hold.count() > 0) std::this_thread::sleep_for(hold);
    lock.unlock();
    if (measured) record(mono_ns() - t0);
    return;
  }
  ContendedState& s = *shared;
  if (s.inside.fetch_add(1) != 0 || s.readers_inside.load() != 0) s.overlaps.fetch_add(1);
  const std::uint64_t previous_release = s.t_release_ns.load();
  const std::uint64_t value = s.counter.load();
  if (hold.count() > 0) std::this_thread::sleep_for(hold);
  s.counter.store(value + 1);
  s.inside.fetch_sub(1);
  s.t_release_ns.store(mono_ns());
  lock.unlock();
  if (measured) {
    record(t_locked - t0);
    // 0: nobody released before us. min(): an overlapping holder may have written it later.
    if (previous_release != 0) handoff.add(t_locked - std::min(previous_release, t_locked));
  }
}

// A reader's cycle of the contended workload: lock_shared() and unlock_shared(); `record` gets
// the wait. Readers overlap each other, never a writer (run_cycle), which the overlaps count.
template <class Lock, class Record>
void run_read_cycle(Lock& lock, std::chrono::milliseconds hold, ContendedState& s, bool measured, Record&& record) {
  const std::uint64_t t0 = mono_ns();
  lock.lock_shared();
  const std::uint64_t t_locked = mono_ns();
  s.readers_inside.fetch_add(1);
  if (s.inside.load() != 0) s.overlaps.fetch_add(1);
  if (hold.count() > 0) std::this_thread::sleep_for(hold);
  s.readers_inside.fetch_sub(1);
  lock.unlock_shared();
  if (measured) record(t_locked - t0);
}

}  // namespace dlock::cli
