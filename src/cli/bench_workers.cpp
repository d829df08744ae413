// `dlock bench`'s clients (bench_workers.hpp).

#include "cli/bench_workers.hpp"

#include <fmt/core.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <optional>
#include <system_error>
#include <thread>

namespace dlock::cli {
namespace {

using namespace std::chrono_literals;

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

// Several mutexes taken one after another in the order given, released in reverse: the
// yardstick of a multi-key lock (and, with one mutex, the plain workloads' lock).
struct InSequence {
  std::vector<Mutex> mutexes;
  void lock() {
    for (Mutex& m : mutexes) m.lock();
  }
  void unlock() {
    for (auto it = mutexes.rbegin(); it != mutexes.rend(); ++it) it->unlock();
  }
};

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
  const LockOptions options{.ttl = a.ttl};
  const std::string key = key_for(a, index);
  const auto on_lost = [&s](const LossInfo&) { s.leases_lost.fetch_add(1); };
  ContendedState* contended = a.workload == Workload::contended ? &s.contended : nullptr;
  const auto loop = [&](auto& lock, auto&& cycle) {
    wait_for_start(s);
    for (std::uint32_t phase; (phase = s.phase.load()) != kStop;) cycle(lock, phase == kMeasure);
  };
  const auto exclusive = [&](auto& lock, bool measured) {
    run_cycle(lock, a.hold, contended, measured, record, r.handoff);
    ++r.acquisitions;
  };
  if (a.readers > 0) {
    SharedMutex lock = client.shared_mutex(key, options);
    lock.on_lost(on_lost);
    if (index < a.readers) {
      loop(lock, [&](SharedMutex& m, bool measured) { run_read_cycle(m, a.hold, s.contended, measured, record); });
    } else {
      loop(lock, exclusive);
    }
    return r;
  }
  std::vector<std::string> keys{key};
  if (a.keys > 1) {
    keys.clear();
    for (int k = 0; k < a.keys; ++k) keys.push_back(fmt::format("{}/{}", key, k));
  }
  if (a.keys > 1 && !a.one_by_one) {
    MultiMutex lock = client.multi_mutex(keys, options);
    lock.on_lost(on_lost);
    loop(lock, exclusive);
    return r;
  }
  InSequence lock;
  for (const auto& k : keys) {
    lock.mutexes.push_back(client.mutex(k, options));
    lock.mutexes.back().on_lost(on_lost);
  }
  loop(lock, exclusive);
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
class ProcessWorkers final : public Workers {
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
  ~ProcessWorkers() override { reap(); }

  // Waits up to `timeout`; false once a worker has failed. A worker writes to (or closes) its
  // pipe only when it is done, so a readable pipe before the stop phase means it failed or died.
  bool wait(std::chrono::milliseconds timeout) override {
    std::vector<pollfd> polled;
    for (const int fd : fds_) polled.push_back({fd, POLLIN, 0});
    const int ready = ::poll(polled.data(), polled.size(), static_cast<int>(timeout.count()));
    return ready <= 0 && s_.failed.load() == 0;
  }

  std::vector<WorkerResult> collect() override {
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

class ThreadWorkers final : public Workers {
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
  ~ThreadWorkers() override { s_.phase.store(kStop); }  // then threads_ joins

  bool wait(std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(timeout);
    return s_.failed.load() == 0;
  }

  std::vector<WorkerResult> collect() override {
    s_.phase.store(kStop);
    threads_.clear();
    return std::move(results_);
  }

 private:
  Shared& s_;
  std::vector<WorkerResult> results_;
  std::vector<std::jthread> threads_;  // last: joined before results_ goes away
};

}  // namespace

std::unique_ptr<Workers> start_process_workers(const GlobalOptions& global, const BenchArgs& a, Shared& s) {
  return std::make_unique<ProcessWorkers>(global, a, s);
}

std::unique_ptr<Workers> start_thread_workers(const Client& client, const BenchArgs& a, Shared& s) {
  return std::make_unique<ThreadWorkers>(client, a, s);
}

}  // namespace dlock::cli
