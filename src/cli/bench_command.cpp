// `dlock bench`: the workloads of docs/bench.md, one JSON line per run.
//
// The parent drives a timeline (workers ready → ping baseline → 1 s warm-up → measure → stop)
// through a phase flag in a shared mapping; workers loop until they see the stop phase and
// then hand their latency histograms back. Clients are processes (each with its own Client) or,
// with --threads, threads sharing one Client.

#include "cli/bench_command.hpp"

#include <fmt/core.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli/bench_cycle.hpp"
#include "cli/bench_histogram.hpp"
#include "cli/commands.hpp"

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;

constexpr int kMaxClients = 256;
constexpr std::uint64_t kNsPerSecond = 1'000'000'000;

enum class Workload { ping, uncontended, distinct, contended };

struct BenchArgs {
  Workload workload = Workload::ping;
  std::string workload_name;
  int clients = 1;
  std::chrono::milliseconds duration = 10s;
  std::chrono::milliseconds hold{0};
  std::chrono::milliseconds ttl = kDefaultTtl;
  bool threads = false;
  std::string key_prefix;
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

std::string key_for(const BenchArgs& a, int index) {
  switch (a.workload) {
    case Workload::distinct:
      return fmt::format("{}distinct/{}", a.key_prefix, index);
    case Workload::contended:
      return a.key_prefix + "contended";
    default:
      return a.key_prefix + "uncontended";
  }
}

void wait_for_start(Shared& s) {
  s.ready.fetch_add(1);
  while (s.phase.load() == kStarting) std::this_thread::sleep_for(2ms);
}

// One client's loop. An op is measured when the phase was "measure" as it began.
WorkerResult run_worker(const Client& client, const BenchArgs& a, Shared& s, int index) {
  WorkerResult r;
  std::atomic<std::uint64_t>& ops = s.measured_ops[index].ops;
  const auto record = [&](std::uint64_t latency_ns) {
    r.latency.add(latency_ns);
    ops.fetch_add(1, std::memory_order_relaxed);
  };

  if (a.workload == Workload::ping) {
    wait_for_start(s);
    for (std::uint32_t phase; (phase = s.phase.load()) != kStop;) {
      const std::uint64_t t0 = mono_ns();
      client.ping();
      if (phase == kMeasure) record(mono_ns() - t0);
    }
    return r;
  }

  // The hold is a sleep of --hold: without this, Linux's default 50 µs timer slack makes a
  // 1 ms hold last 1.05 ms and charges the harness's oversleep to every backend's throughput.
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 µs
  // An explicit TTL: no auto-renewal, as in the other implementations measured beside dlock.
  Mutex mutex = client.mutex(key_for(a, index), LockOptions{.ttl = a.ttl});
  mutex.on_lost([&s](const LossInfo&) { s.leases_lost.fetch_add(1); });
  const std::chrono::milliseconds hold = a.hold;
  wait_for_start(s);
  ContendedState* contended = a.workload == Workload::contended ? &s.contended : nullptr;
  for (std::uint32_t phase; (phase = s.phase.load()) != kStop;) {
    run_cycle(mutex, hold, contended, phase == kMeasure, record, r.handoff);
    ++r.acquisitions;
  }
  return r;
}

template <class OpenClient>
WorkerResult run_guarded(OpenClient&& open, const BenchArgs& a, Shared& s, int index) {
  try {
    const Client client = open();
    return run_worker(client, a, s, index);
  } catch (const std::exception& e) {
    s.failed.store(1);
    WorkerResult r;
    r.error = e.what();
    return r;
  }
}

// --- processes -------------------------------------------------------------------------------

struct ResultHeader {
  std::uint64_t error_bytes;
  std::uint64_t acquisitions;
};

bool write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool send_result(int fd, const WorkerResult& r) {
  const ResultHeader h{r.error.size(), r.acquisitions};
  return write_all(fd, &h, sizeof h) && write_all(fd, r.error.data(), r.error.size()) &&
         write_all(fd, r.latency.data(), Histogram::kBytes) &&
         write_all(fd, r.handoff.data(), Histogram::kBytes);
}

std::optional<WorkerResult> receive_result(int fd) {
  ResultHeader h{};
  if (!read_all(fd, &h, sizeof h)) return std::nullopt;
  WorkerResult r;
  r.acquisitions = h.acquisitions;
  r.error.resize(h.error_bytes);
  if (!read_all(fd, r.error.data(), r.error.size()) || !read_all(fd, r.latency.data(), Histogram::kBytes) ||
      !read_all(fd, r.handoff.data(), Histogram::kBytes)) {
    return std::nullopt;
  }
  return r;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("exited with status {} without reporting", WEXITSTATUS(status));
}

// One process per client. They are forked while this process has no Client (the one that asked
// whether the store spans processes is closed by then): a Client runs a renewal thread, and a
// forked copy of a threaded process must not run library code.
class ProcessWorkers {
 public:
  ProcessWorkers(const GlobalOptions& global, const BenchArgs& a, Shared& s) : s_(s) {
    std::fflush(nullptr);  // or the children would write out the parent's buffered output again
    const pid_t parent = ::getpid();
    for (int i = 0; i < a.clients; ++i) {
      int fds[2];
      if (::pipe(fds) != 0) fail_to_start("pipe");
      const pid_t pid = ::fork();
      if (pid < 0) fail_to_start("fork");
      if (pid == 0) {
        // Die with the parent. Drop the read ends of earlier pipes: a worker holding one would
        // keep its owner from seeing EPIPE if the parent gives up reading.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(kExitError);
        for (const int fd : fds_) ::close(fd);
        ::close(fds[0]);
        const WorkerResult r = run_guarded([&global] { return open_client(global); }, a, s, i);
        ::_exit(send_result(fds[1], r) && r.error.empty() ? kExitOk : kExitError);
      }
      ::close(fds[1]);
      pids_.push_back(pid);
      fds_.push_back(fds[0]);
    }
  }
  ProcessWorkers(const ProcessWorkers&) = delete;
  ProcessWorkers& operator=(const ProcessWorkers&) = delete;
  ~ProcessWorkers() { reap(); }

  // Waits up to `timeout`; false once a worker has failed. A worker writes to (or closes) its
  // pipe only when it is done, so a readable pipe before the stop phase means it failed or died.
  bool wait(std::chrono::milliseconds timeout) {
    std::vector<pollfd> polled;
    for (const int fd : fds_) polled.push_back({fd, POLLIN, 0});
    const int ready = ::poll(polled.data(), polled.size(), static_cast<int>(timeout.count()));
    return ready <= 0 && s_.failed.load() == 0;
  }

  std::vector<WorkerResult> collect() {
    s_.phase.store(kStop);
    std::vector<WorkerResult> results(pids_.size());
    std::vector<bool> received(pids_.size());
    for (std::size_t i = 0; i < fds_.size(); ++i) {
      if (auto r = receive_result(fds_[i])) {
        results[i] = std::move(*r);
        received[i] = true;
      }
    }
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      const int status = wait_for(pids_[i]);
      if (!received[i]) results[i].error = describe_exit(status);
    }
    pids_.clear();
    close_pipes();
    return results;
  }

 private:
  static int wait_for(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }

  void close_pipes() {
    for (const int fd : fds_) ::close(fd);
    fds_.clear();
  }

  // Workers finish their current op once they see the stop phase; closing the pipes first
  // makes any that are already writing their samples get EPIPE instead of blocking.
  void reap() {
    s_.phase.store(kStop);
    close_pipes();
    for (const pid_t pid : pids_) wait_for(pid);
    pids_.clear();
  }

  [[noreturn]] void fail_to_start(const char* what) {
    const int error = errno;
    reap();
    throw std::system_error(error, std::generic_category(), what);
  }

  Shared& s_;
  std::vector<pid_t> pids_;
  std::vector<int> fds_;
};

// --- threads ---------------------------------------------------------------------------------

class ThreadWorkers {
 public:
  ThreadWorkers(const Client& client, const BenchArgs& a, Shared& s) : s_(s), results_(a.clients) {
    try {
      for (int i = 0; i < a.clients; ++i) {
        threads_.emplace_back(
            [this, &client, &a, i] { results_[i] = run_guarded([&client] { return client; }, a, s_, i); });
      }
    } catch (...) {
      s_.phase.store(kStop);  // or the threads already started would wait for the start forever
      throw;
    }
  }
  ThreadWorkers(const ThreadWorkers&) = delete;
  ThreadWorkers& operator=(const ThreadWorkers&) = delete;
  ~ThreadWorkers() { s_.phase.store(kStop); }  // then threads_ joins

  bool wait(std::chrono::milliseconds timeout) {
    std::this_thread::sleep_for(timeout);
    return s_.failed.load() == 0;
  }

  std::vector<WorkerResult> collect() {
    s_.phase.store(kStop);
    threads_.clear();
    return std::move(results_);
  }

 private:
  Shared& s_;
  std::vector<WorkerResult> results_;
  std::vector<std::jthread> threads_;  // last: joined before results_ goes away
};

// --- the parent's timeline -------------------------------------------------------------------

// The round trip, measured from this process before the workload starts, while the workers
// are idle: pings for 1 s, of which only the second half counts. Some VMs answer the first
// few thousand round trips after an idle spell several times quicker than the sustained
// ones that every workload sees (20 against 75 µs on loopback here), which would inflate
// every ratio to it.
std::uint64_t ping_baseline_ns(const Client& client) {
  client.ping();  // the first call may pay for opening a connection
  Histogram samples;
  const std::uint64_t start = mono_ns();
  const std::uint64_t counted_from = start + kNsPerSecond / 2;
  // Until 1 s has passed and at least one ping counted (a ping may take longer than 0.5 s).
  for (std::uint64_t t0 = start; t0 < start + kNsPerSecond || samples.count() == 0; t0 = mono_ns()) {
    client.ping();
    if (t0 >= counted_from) samples.add(mono_ns() - t0);
  }
  return *samples.percentile(50);
}

class Progress {
 public:
  explicit Progress(std::string workload)
      : workload_(std::move(workload)), enabled_(::isatty(STDERR_FILENO) == 1) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() {
    if (enabled_) std::fputs("\r\033[K", stderr);
  }
  void show(const std::string& line) {
    if (enabled_) fmt::print(stderr, "\rdlock bench {}: {}\033[K", workload_, line);
  }

 private:
  std::string workload_;
  bool enabled_;
};

struct Timeline {
  std::uint64_t ping_p50_ns = 0;
  double measured_s = 0;  // the measure phase by this process's clock
};

// Sleeps until `end_ns`, calling `redraw` about 5 times a second. False once a worker failed.
template <class Workers, class Redraw>
bool sleep_until(Workers& workers, std::uint64_t end_ns, Redraw&& redraw) {
  for (std::uint64_t now; (now = mono_ns()) < end_ns;) {
    const auto left = std::chrono::milliseconds((end_ns - now + 999'999) / 1'000'000);
    if (!workers.wait(std::min(left, std::chrono::milliseconds(200)))) return false;
    redraw(mono_ns());
  }
  return true;
}

// Ready → ping baseline → warm-up → measure → stop. Nullopt once a worker failed.
template <class Workers>
std::optional<Timeline> drive(Workers& workers, Shared& s, const Client& client, const BenchArgs& a) {
  Progress progress(a.workload_name);
  progress.show("starting clients");
  while (s.ready.load() < static_cast<std::uint32_t>(a.clients)) {
    if (!workers.wait(5ms)) return std::nullopt;
  }
  progress.show("ping baseline");
  Timeline t;
  t.ping_p50_ns = ping_baseline_ns(client);

  const auto seconds = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e9; };
  s.phase.store(kWarmup);
  const std::uint64_t warmup_start = mono_ns();
  if (!sleep_until(workers, warmup_start + kNsPerSecond, [&](std::uint64_t now) {
        progress.show(fmt::format("warm-up {:.1f}/1 s", seconds(now - warmup_start)));
      })) {
    return std::nullopt;
  }

  s.phase.store(kMeasure);
  const std::uint64_t start = mono_ns();
  const auto measured_ops = [&s, &a] {
    std::uint64_t total = 0;
    for (int i = 0; i < a.clients; ++i) total += s.measured_ops[i].ops.load(std::memory_order_relaxed);
    return total;
  };
  if (!sleep_until(workers, start + static_cast<std::uint64_t>(a.duration.count()) * (kNsPerSecond / 1000),
                   [&](std::uint64_t now) {
                     const std::uint64_t ops = measured_ops();
                     const double elapsed = seconds(now - start);
                     progress.show(fmt::format("{:.1f}/{}, {} ops, {:.0f} ops/s", elapsed, format_duration(a.duration),
                                               ops, static_cast<double>(ops) / elapsed));
                   })) {
    return std::nullopt;
  }
  s.phase.store(kStop);
  t.measured_s = seconds(mono_ns() - start);
  return t;
}

// Rounded through a power of ten so that the JSON shows 12.3, not 12.300000000000001.
double round_to(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}
double us(std::uint64_t ns) { return static_cast<double>(ns) / 1e3; }

template <class Workers>
int finish(Workers& workers, Shared& s, const Client& client, const BenchArgs& a) {
  const std::optional<Timeline> timeline = drive(workers, s, client, a);
  std::vector<WorkerResult> results = workers.collect();

  int failures = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].error.empty()) continue;
    if (failures++ == 0) fmt::print(stderr, "dlock: bench worker {}: {}\n", i, results[i].error);
  }
  if (failures > 1) fmt::print(stderr, "dlock: {} of {} bench workers failed\n", failures, results.size());
  if (failures > 0 || !timeline) return kExitError;
  if (const std::uint64_t lost = s.leases_lost.load(); lost > 0) {
    fmt::print(stderr, "dlock: bench: {} leases (TTL {} ms) were lost during the run; its figures are void\n",
               lost, a.ttl.count());
    return kExitError;
  }

  Histogram latency;
  Histogram handoff;
  std::uint64_t acquisitions = 0;
  for (const WorkerResult& r : results) {
    latency.merge(r.latency);
    handoff.merge(r.handoff);
    acquisitions += r.acquisitions;
  }
  const std::uint64_t ops = latency.count();

  nlohmann::ordered_json j;
  j["impl"] = "dlock";
  j["backend"] = std::string(client.backend_name());
  j["workload"] = a.workload_name;
  j["clients"] = a.clients;
  j["mode"] = a.threads ? "threads" : "processes";
  if (a.workload != Workload::ping) {
    j["hold_ms"] = a.hold.count();
    j["ttl_ms"] = a.ttl.count();
  }
  // Whole seconds stay an integer, as before --duration took units.
  if (a.duration.count() % 1000 == 0) {
    j["duration_s"] = a.duration.count() / 1000;
  } else {
    j["duration_s"] = static_cast<double>(a.duration.count()) / 1000;
  }
  j["ops"] = ops;
  j["ops_per_s"] = round_to(static_cast<double>(ops) / timeline->measured_s, 1);
  if (results.size() > 1) {
    // How evenly the ops were spread: starved clients show up here, not in the totals.
    const auto [fewest, most] = std::minmax_element(
        results.begin(), results.end(),
        [](const auto& x, const auto& y) { return x.latency.count() < y.latency.count(); });
    j["client_ops_min"] = fewest->latency.count();
    j["client_ops_max"] = most->latency.count();
  }
  const std::optional<std::uint64_t> p50 = latency.percentile(50);
  if (p50) {
    j["p50_us"] = us(*p50);
    j["p99_us"] = us(*latency.percentile(99));
  }
  if (const std::optional<std::uint64_t> handoff_p50 = handoff.percentile(50)) {
    j["handoff_p50_us"] = us(*handoff_p50);
    j["handoff_p99_us"] = us(*handoff.percentile(99));
  }
  j["ping_p50_us"] = us(timeline->ping_p50_ns);
  if (p50 && timeline->ping_p50_ns > 0) {
    j["p50_over_ping"] = round_to(static_cast<double>(*p50) / static_cast<double>(timeline->ping_p50_ns), 2);
  }
  if (a.workload == Workload::contended) {
    j["lost_updates"] = static_cast<std::int64_t>(acquisitions - s.contended.counter.load());
    j["overlaps"] = s.contended.overlaps.load();
  }
  fmt::print("{}\n", j.dump());
  std::fflush(stdout);
  return kExitOk;
}

int run_bench(const GlobalOptions& global, const BenchArgs& a) {
  void* memory = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
  const std::unique_ptr<void, void (*)(void*)> unmap(memory, [](void* p) { ::munmap(p, sizeof(Shared)); });
  Shared& s = *new (memory) Shared;

  // Declaration order matters for destruction: workers stop before the client they use goes,
  // and the mapping (which the loss callbacks write to) outlives both.
  if (a.threads) {
    const Client client = open_client(global);
    ThreadWorkers workers(client, a, s);
    return finish(workers, s, client, a);
  }
  ProcessWorkers workers(global, a, s);
  const Client client = open_client(global);
  return finish(workers, s, client, a);
}

// --- command line ----------------------------------------------------------------------------

// Workers in separate processes contend only on a store that spans processes: on local:// each
// would get a store of its own. The store's name where it does not, else nothing. The Client
// that asks is closed on return, its threads joined, so the workers can be forked after it.
std::optional<std::string> in_process_store(const GlobalOptions& global) {
  const Client client = open_client(global);
  if (client.capabilities().spans_processes) return std::nullopt;
  return std::string(client.backend_name());
}

struct Flags {
  std::string workload;
  int clients = 0;
  std::chrono::milliseconds duration = 10s;
  std::optional<std::chrono::milliseconds> hold;
  std::optional<std::chrono::milliseconds> ttl;
  bool threads = false;
  std::string key_prefix;
};

int usage_error(const std::string& message) {
  fmt::print(stderr, "dlock: {}\n", message);
  return kExitUsage;
}

int run_from_flags(const GlobalOptions& global, const Flags& f, bool clients_given) {
  BenchArgs a;
  a.workload_name = f.workload;
  a.workload = f.workload == "ping"          ? Workload::ping
               : f.workload == "uncontended" ? Workload::uncontended
               : f.workload == "distinct"    ? Workload::distinct
                                             : Workload::contended;
  const bool multi = a.workload == Workload::distinct || a.workload == Workload::contended;
  a.clients = clients_given ? f.clients : multi ? 8 : 1;
  a.duration = f.duration;
  a.hold = f.hold.value_or(a.workload == Workload::contended ? 1ms : 0ms);
  a.threads = f.threads;
  a.key_prefix = f.key_prefix.empty() ? fmt::format("dlock-bench/{}/", ::getpid()) : f.key_prefix;

  if (a.workload == Workload::ping && (f.hold || f.ttl)) {
    return usage_error("--hold and --ttl do not apply to --workload ping (it takes no lock)");
  }
  if (a.workload == Workload::uncontended && a.clients != 1) {
    return usage_error(
        "--clients: uncontended is one client by definition; "
        "--workload distinct runs C clients on keys of their own");
  }
  a.ttl = f.ttl.value_or(kDefaultTtl);
  if (a.duration < 1s || a.duration > 24h) {
    return usage_error(fmt::format("--duration {} must be from 1s to 24h", format_duration(a.duration)));
  }
  if (a.hold > 1h) return usage_error(fmt::format("--hold {} is longer than 1h", format_duration(a.hold)));
  if (a.hold >= a.ttl) {
    return usage_error(
        fmt::format("--hold {} must be shorter than --ttl ({}), or leases would expire "
                    "inside the critical section",
                    format_duration(a.hold), format_duration(a.ttl)));
  }
  if (!a.threads && a.clients > 1) {
    if (const auto store = in_process_store(global)) {
      return usage_error(fmt::format(
          "{}:// locks live in one process: separate processes would each have a store of their own; add --threads",
          *store));
    }
  }
  return run_bench(global, a);  // main reports what it throws
}

}  // namespace

void add_bench_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure throughput and latency of a workload; prints one JSON line");
  cmd->add_option("--workload", flags->workload, "ping, uncontended, distinct or contended")
      ->required()
      ->check(CLI::IsMember({"ping", "uncontended", "distinct", "contended"}));
  CLI::Option* clients =
      cmd->add_option(
             "--clients", flags->clients,
             "concurrent clients, processes unless --threads (default 1; 8 for distinct and contended)")
          ->check(CLI::Range(1, kMaxClients));
  add_duration_option(*cmd, "--duration", flags->duration, "measured work, after a 1 s warm-up; 1s to 24h")
      ->default_str("10s");
  add_duration_option(*cmd, "--hold", flags->hold,
                      "time inside the critical section, at most 1h (default 0; 1ms for contended)");
  add_duration_option(*cmd, "--ttl", flags->ttl, "lease of every acquisition; no auto-renewal (default 30s)");
  cmd->add_flag("--threads", flags->threads,
                "run the clients as threads sharing one Client (required for local://)");
  cmd->add_option("--key-prefix", flags->key_prefix, "prefix of the keys locked (default dlock-bench/PID/)");
  cmd->callback([flags, &global, &exit_code, clients] {
    exit_code = run_from_flags(global, *flags, clients->count() > 0);
  });
}

}  // namespace dlock::cli
