#pragma once

// `dlock bench`'s clients: what each one repeats, and how they run, as processes (each with its
// own Client) or threads sharing one. The parent (bench_command.cpp) drives them through the
// phase flag in Shared, a MAP_SHARED mapping, and collects their histograms.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_cycle.hpp"
#include "cli/bench_histogram.hpp"
#include "cli/commands.hpp"

namespace dlock::cli {

inline constexpr int kMaxClients = 256;

enum class Workload { ping, uncontended, distinct, contended };

struct BenchArgs {
  Workload workload = Workload::ping;
  std::string workload_name;
  int clients = 1;
  std::chrono::milliseconds duration{10'000};
  std::chrono::milliseconds hold{0};
  std::chrono::milliseconds ttl = kDefaultTtl;
  bool threads = false;
  std::string key_prefix;
  int keys = 1;             // --keys: each cycle locks this many keys of the client's
  bool one_by_one = false;  // --one-by-one: as separate mutexes in sequence, not one multi-key lock
  int readers = 0;          // --readers: clients 0..readers-1 take the key shared (contended)
};

enum Phase : std::uint32_t { kStarting, kWarmup, kMeasure, kStop };

// Atomics in a MAP_SHARED mapping work across processes only when they are lock-free.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The state shared by the parent and every worker, placed in an anonymous MAP_SHARED mapping
// (in both modes, so both run the same code). Groups written at different rates get their own
// cache lines so that the bookkeeping does not slow down what is measured.
struct Shared {
  alignas(64) std::atomic<std::uint32_t> phase{kStarting};
  std::atomic<std::uint32_t> ready{0};
  std::atomic<std::uint32_t> failed{0};
  std::atomic<std::uint64_t> leases_lost{0};

  alignas(64) ContendedState contended;  // what the contended workload's lock protects

  // Measured ops per worker, read by the progress display.
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> ops{0};
  };
  Slot measured_ops[kMaxClients];
};

struct WorkerResult {
  std::string error;               // empty when the worker succeeded
  std::uint64_t acquisitions = 0;  // every phase: lost_updates compares it with the counter
  Histogram latency;               // measured ops: ping, lock+unlock cycle, or (contended) wait
  Histogram handoff;               // contended only
};

// The running clients.
class Workers {
 public:
  virtual ~Workers() = default;
  // Sleeps up to `timeout`; false once a worker failed.
  virtual bool wait(std::chrono::milliseconds timeout) = 0;
  // Stops the workers and returns what each measured.
  virtual std::vector<WorkerResult> collect() = 0;
};

// One process per client, forked while this process has no Client.
std::unique_ptr<Workers> start_process_workers(const GlobalOptions& global, const BenchArgs& a, Shared& s);
// One thread per client, sharing `client`.
std::unique_ptr<Workers> start_thread_workers(const Client& client, const BenchArgs& a, Shared& s);

}  // namespace dlock::cli
