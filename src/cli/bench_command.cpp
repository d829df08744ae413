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
#include "cli/bench_workers.hpp"
#include "cli/commands.hpp"
#include "cli/store_probe.hpp"

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kNsPerSecond = 1'000'000'000;

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
template <class Redraw>
bool sleep_until(Workers& workers, std::uint64_t end_ns, Redraw&& redraw) {
  for (std::uint64_t now; (now = mono_ns()) < end_ns;) {
    const auto left = std::chrono::milliseconds((end_ns - now + 999'999) / 1'000'000);
    if (!workers.wait(std::min(left, std::chrono::milliseconds(200)))) return false;
    redraw(mono_ns());
  }
  return true;
}

// Ready → ping baseline → warm-up → measure → stop. Nullopt once a worker failed.
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
                     progress.show(fmt::format("{:.1f}/{}, {} ops, {:.0f} ops/s", elapsed,
                                               format_duration(a.duration), ops,
                                               static_cast<double>(ops) / elapsed));
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
  if (a.keys > 1) {
    j["keys"] = a.keys;
    j["one_by_one"] = a.one_by_one;
  }
  if (a.readers > 0) {
    // Readers' and writers' measured ops apart: clients 0..readers-1 read.
    std::uint64_t reads = 0;
    for (int i = 0; i < a.readers; ++i) reads += results[static_cast<std::size_t>(i)].latency.count();
    j["readers"] = a.readers;
    j["reads_per_s"] = round_to(static_cast<double>(reads) / timeline->measured_s, 1);
    j["writes_per_s"] = round_to(static_cast<double>(ops - reads) / timeline->measured_s, 1);
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
    const auto workers = start_thread_workers(client, a, s);
    return finish(*workers, s, client, a);
  }
  const auto workers = start_process_workers(global, a, s);
  const Client client = open_client(global);
  return finish(*workers, s, client, a);
}

// --- command line ----------------------------------------------------------------------------

// The store's name when it does not span processes, else nothing.
std::optional<std::string> store_within_process(const GlobalOptions& global) {
  const Client client = open_client(global);
  if (client.capabilities().spans_processes) return std::nullopt;
  return std::string(client.backend_name());
}

// Workers in separate processes contend only on a store that spans processes: on local:// each
// would get a store of its own. The store's name where it does not, else nothing. Asked in a
// child process (store_probe.hpp): the workers are forked from this one afterwards. When the
// child cannot tell, this process asks, so that an error is reported as opening a client
// reports it.
std::optional<std::string> in_process_store(const GlobalOptions& global) {
  const auto store = store_traits_in_child(global);
  if (!store) return store_within_process(global);
  if (store->capabilities.spans_processes) return std::nullopt;
  return store->name;
}

struct Flags {
  std::string workload;
  int clients = 0;
  std::chrono::milliseconds duration = 10s;
  std::optional<std::chrono::milliseconds> hold;
  std::optional<std::chrono::milliseconds> ttl;
  bool threads = false;
  std::string key_prefix;
  int keys = 1;
  bool one_by_one = false;
  int readers = 0;
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
  a.keys = f.keys;
  a.one_by_one = f.one_by_one;
  a.readers = f.readers;
  if (a.workload == Workload::ping && (a.keys > 1 || a.readers > 0)) {
    return usage_error("--keys and --readers do not apply to --workload ping (it takes no lock)");
  }
  if (a.one_by_one && a.keys < 2) return usage_error("--one-by-one needs --keys 2 or more");
  if (a.readers > 0 && (a.workload != Workload::contended || a.keys > 1 || a.readers >= a.clients)) {
    return usage_error(fmt::format(
        "--readers {} needs --workload contended, one key, and at least one writer among the --clients ({})",
        a.readers, a.clients));
  }

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
      return usage_error(
          fmt::format("{}:// locks live in one process: separate processes would each have a store of their "
                      "own; add --threads",
                      *store));
    }
  }
  return run_bench(global, a);  // main reports what it throws
}

}  // namespace

void add_bench_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd =
      app.add_subcommand("bench", "Measure throughput and latency of a workload; prints one JSON line");
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
  cmd->add_option("--keys", flags->keys, "keys each cycle locks, as one multi-key lock (default 1)")
      ->check(CLI::Range(1, 64));
  cmd->add_flag(
      "--one-by-one", flags->one_by_one,
      "with --keys: lock them as separate mutexes one after another, the multi-key lock's yardstick");
  cmd->add_option("--readers", flags->readers,
                  "contended: this many of the clients take the key shared (a read-write lock's readers), "
                  "the others exclusive")
      ->check(CLI::Range(0, kMaxClients));
  cmd->callback([flags, &global, &exit_code, clients] {
    exit_code = run_from_flags(global, *flags, clients->count() > 0);
  });
}

}  // namespace dlock::cli
