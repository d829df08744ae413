// The peers beside dlock's mysql:// figures: the simplest locks a MySQL user would write instead
// of dlock, run through the workloads of `dlock bench` (docs/bench.md) with the same loops,
// timings, defaults and JSON fields as src/cli/bench_command.cpp, in the same run, so that
// dlock's figures can be read as ratios to theirs. Each client is a process with one connection
// of its own (default autocommit, prepared statements, CLIENT_FOUND_ROWS off):
//   - bare-get-lock: `SELECT GET_LOCK(key, 60)`, which waits in the server, and
//     `SELECT RELEASE_LOCK(key)`. No table: the server's own primitive.
//   - seed001-upsert: the design of a requirements document (seed 001). A row per held key,
//     taken by an INSERT … ON DUPLICATE KEY UPDATE that overwrites it only once its 30 s TTL
//     has passed by the server's clock (affected rows 1: inserted, 2: an expired row taken
//     over, 0: held), released by deleting it. It has no wake-up: a waiter retries every
//     --poll-ms (default 1).
// Latencies go into the histogram of `dlock bench` (src/cli/bench_histogram.hpp), so the
// percentiles are taken exactly as dlock's are.
//
//   g++ -O2 -std=c++20 -Isrc bench/mysql_peers.cpp $(pkg-config --cflags --libs libmariadb) -o peers
//   ./peers HOST PORT USER PASSWORD DATABASE --impl bare-get-lock|seed001-upsert
//           --workload uncontended|distinct|contended [--clients N] [--duration S]
//           [--hold-ms MS] [--poll-ms MS] [--key-prefix P]
#include <mysql.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_cycle.hpp"
#include "cli/bench_histogram.hpp"

namespace {

using dlock::cli::ContendedState;
using dlock::cli::Histogram;
using dlock::cli::mono_ns;
using dlock::cli::run_cycle;
using namespace std::chrono_literals;

constexpr int kMaxClients = 256;
constexpr std::uint64_t kNsPerSecond = 1'000'000'000;

constexpr const char* kCreateTable =
    "CREATE TABLE IF NOT EXISTS `distributed_lock` ("
    " `lock_name` VARCHAR(255) NOT NULL,"
    " `lock_timestamp` BIGINT UNSIGNED NOT NULL,"
    " `lock_ttl` INT UNSIGNED NOT NULL,"
    " PRIMARY KEY (`lock_name`)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8";
constexpr const char* kUpsert =
    "INSERT INTO `distributed_lock` (`lock_name`, `lock_timestamp`, `lock_ttl`)"
    " VALUES (?, UNIX_TIMESTAMP(), 30)"
    " ON DUPLICATE KEY UPDATE"
    " `lock_timestamp` = IF(UNIX_TIMESTAMP() - `lock_timestamp` > `lock_ttl`, VALUES(`lock_timestamp`),"
    " `lock_timestamp`),"
    " `lock_ttl` = IF(UNIX_TIMESTAMP() - `lock_timestamp` > `lock_ttl`, VALUES(`lock_ttl`), `lock_ttl`)";
constexpr const char* kDelete = "DELETE FROM `distributed_lock` WHERE `lock_name` = ?";

enum class Workload { uncontended, distinct, contended };

struct Args {
  const char* host = nullptr;
  unsigned port = 0;
  const char* user = nullptr;
  const char* password = nullptr;
  const char* database = nullptr;
  std::string impl;
  std::string workload_name;
  Workload workload = Workload::uncontended;
  int clients = 0;  // 0: the workload's default
  int duration_s = 10;
  int hold_ms = -1;  // -1: the workload's default
  int poll_ms = 1;
  std::string key_prefix;
  bool bare() const { return impl == "bare-get-lock"; }
};

// "mysql_peers", or "mysql_peers: client 3" in a client: the start of every error message.
std::string who = "mysql_peers";

[[noreturn]] void die(const std::string& what, const char* error) {
  std::fprintf(stderr, "%s: %s: %s\n", who.c_str(), what.c_str(), error);
  std::exit(1);
}

enum Phase : std::uint32_t { kStarting, kWarmup, kMeasure, kStop };

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// Shared by the parent and the clients in an anonymous MAP_SHARED mapping, as in dlock bench.
struct Shared {
  alignas(64) std::atomic<std::uint32_t> phase{kStarting};
  std::atomic<std::uint32_t> ready{0};  // clients connected

  alignas(64) ContendedState contended;  // what the contended workload's lock protects

  // Written by each client as it exits, read by the parent after reaping it.
  struct Slot {
    std::uint64_t acquisitions;  // every phase, for lost_updates
    std::uint64_t latency[Histogram::kBytes / sizeof(std::uint64_t)];
    std::uint64_t handoff[Histogram::kBytes / sizeof(std::uint64_t)];
  };
  Slot slots[kMaxClients];
};

// A prepared statement whose one parameter, the key, is bound once.
class Statement {
 public:
  Statement(MYSQL* mysql, const char* sql, const std::string& key)
      : key_(key), statement_(mysql_stmt_init(mysql)) {
    if (!statement_ || mysql_stmt_prepare(statement_, sql, std::strlen(sql)) != 0)
      die(sql, mysql_error(mysql));
    length_ = key_.size();
    param_.buffer_type = MYSQL_TYPE_STRING;
    param_.buffer = key_.data();
    param_.buffer_length = key_.size();
    param_.length = &length_;
    result_.buffer_type = MYSQL_TYPE_LONGLONG;
    result_.buffer = &value_;
    result_.is_null = &is_null_;
    if (mysql_stmt_bind_param(statement_, &param_) != 0 ||
        (mysql_stmt_field_count(statement_) > 0 && mysql_stmt_bind_result(statement_, &result_) != 0)) {
      die(sql, mysql_stmt_error(statement_));
    }
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { mysql_stmt_close(statement_); }

  // The integer in the first column of the one row it returns (-1 for NULL), or, for a
  // statement without a result, the rows it affected.
  long long run(const char* what) {
    if (mysql_stmt_execute(statement_) != 0) die(what, mysql_stmt_error(statement_));
    if (mysql_stmt_field_count(statement_) == 0)
      return static_cast<long long>(mysql_stmt_affected_rows(statement_));
    if (mysql_stmt_store_result(statement_) != 0 || mysql_stmt_fetch(statement_) != 0) {
      die(what, mysql_stmt_error(statement_));
    }
    mysql_stmt_free_result(statement_);
    return is_null_ ? -1 : value_;
  }

 private:
  std::string key_;
  MYSQL_STMT* statement_;
  MYSQL_BIND param_{};
  MYSQL_BIND result_{};
  unsigned long length_ = 0;
  long long value_ = 0;
  my_bool is_null_ = 0;
};

// One key's lock in one of the two designs.
class Lock {
 public:
  Lock(MYSQL* mysql, const Args& a, const std::string& key)
      : bare_(a.bare()),
        poll_(a.poll_ms),
        acquire_(mysql, bare_ ? "SELECT GET_LOCK(?, 60)" : kUpsert, key),
        release_(mysql, bare_ ? "SELECT RELEASE_LOCK(?)" : kDelete, key) {}

  void lock() {
    if (bare_) {
      if (const long long r = acquire_.run("GET_LOCK"); r != 1)
        die("GET_LOCK", r == 0 ? "timed out after 60 s" : "NULL");
      return;
    }
    for (;;) {
      const long long affected = acquire_.run("INSERT … ON DUPLICATE KEY UPDATE");
      if (affected == 1 || affected == 2) return;
      if (affected != 0) die("INSERT … ON DUPLICATE KEY UPDATE", "affected rows not 0, 1 or 2");
      std::this_thread::sleep_for(poll_);
    }
  }

  // RELEASE_LOCK returns 1 and the DELETE affects 1 row when this client held the lock.
  void unlock() {
    if (release_.run(bare_ ? "RELEASE_LOCK" : "DELETE") != 1) {
      die(bare_ ? "RELEASE_LOCK" : "DELETE", "the lock was not held");
    }
  }

 private:
  bool bare_;
  std::chrono::milliseconds poll_;
  Statement acquire_;
  Statement release_;
};

MYSQL* connect(const Args& a) {
  MYSQL* mysql = mysql_init(nullptr);
  if (!mysql || !mysql_real_connect(mysql, a.host, a.user, a.password, a.database, a.port, nullptr, 0)) {
    die("connect", mysql ? mysql_error(mysql) : "out of memory");
  }
  return mysql;
}

std::string key_for(const Args& a, int index) {
  switch (a.workload) {
    case Workload::distinct:
      return a.key_prefix + "peer-distinct/" + std::to_string(index);
    case Workload::contended:
      return a.key_prefix + "peer-contended";
    default:
      return a.key_prefix + "peer-uncontended";
  }
}

// One client: run_worker of src/cli/bench_command.cpp over a Lock. An op is measured when the
// phase was "measure" as it began.
void run_client(MYSQL* mysql, const Args& a, Shared& s, int index) {
  s.ready.fetch_add(1);
  while (s.phase.load() == kStarting) std::this_thread::sleep_for(2ms);
  Lock mutex(mysql, a, key_for(a, index));  // prepared in the warm-up: the table exists by then
  prctl(PR_SET_TIMERSLACK, 1000UL);         // 1 µs, as dlock bench: a 1 ms sleep lasts 1 ms
  const std::chrono::milliseconds hold(a.hold_ms);
  Histogram latency;
  Histogram handoff;
  std::uint64_t acquisitions = 0;
  ContendedState* contended = a.workload == Workload::contended ? &s.contended : nullptr;
  const auto record = [&](std::uint64_t ns) { latency.add(ns); };
  for (std::uint32_t phase; (phase = s.phase.load()) != kStop;) {
    run_cycle(mutex, hold, contended, phase == kMeasure, record, handoff);
    ++acquisitions;
  }
  Shared::Slot& slot = s.slots[index];
  slot.acquisitions = acquisitions;
  std::memcpy(slot.latency, latency.data(), Histogram::kBytes);
  std::memcpy(slot.handoff, handoff.data(), Histogram::kBytes);
}

// Parent: makes the table if missing and removes rows an earlier run left under the prefix.
void clean_up(const Args& a) {
  if (a.bare()) return;
  MYSQL* mysql = connect(a);
  if (mysql_query(mysql, kCreateTable) != 0) die("CREATE TABLE", mysql_error(mysql));
  std::string pattern;  // '<prefix>peer-%', the prefix's LIKE wildcards escaped
  for (const char c : a.key_prefix + "peer-") {
    if (c == '%' || c == '_' || c == '\\') pattern += '\\';
    pattern += c;
  }
  {  // the statement is closed before its connection
    Statement remove(mysql, "DELETE FROM `distributed_lock` WHERE `lock_name` LIKE CONCAT(?, '%')", pattern);
    remove.run("DELETE … LIKE");
  }
  mysql_close(mysql);
}

std::vector<pid_t> pids;

[[noreturn]] void fail_run(int index, int status) {
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "mysql_peers: client %d was killed by signal %d\n", index, WTERMSIG(status));
  } else {
    std::fprintf(stderr, "mysql_peers: client %d failed (exit status %d)\n", index, WEXITSTATUS(status));
  }
  for (const pid_t pid : pids) kill(pid, SIGKILL);  // those not yet reaped: ours, still running
  for (const pid_t pid : pids) waitpid(pid, nullptr, 0);
  std::exit(1);
}

// Sleeps until `end_ns`; a client that exits before the stop phase fails the run.
void sleep_until(std::uint64_t end_ns) {
  for (std::uint64_t now; (now = mono_ns()) < end_ns;) {
    int status = 0;
    if (const pid_t pid = waitpid(-1, &status, WNOHANG); pid > 0) {
      const auto it = std::find(pids.begin(), pids.end(), pid);
      const int index = static_cast<int>(it - pids.begin());  // none was reaped before the stop
      pids.erase(it);
      fail_run(index, status);
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::uint64_t>(end_ns - now, 20'000'000)));
  }
}

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "mysql_peers: %s\n"
               "usage: mysql_peers HOST PORT USER PASSWORD DATABASE --impl bare-get-lock|seed001-upsert\n"
               "         --workload uncontended|distinct|contended [--clients N] [--duration S]\n"
               "         [--hold-ms MS] [--poll-ms MS] [--key-prefix P]\n",
               message);
  std::exit(64);
}

int to_int(const char* flag, const char* text, int min, int max) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value < min || value > max) {
    usage((std::string(flag) + " " + text + ": not an integer from " + std::to_string(min) + " to " +
           std::to_string(max))
              .c_str());
  }
  return static_cast<int>(value);
}

Args parse(int argc, char** argv) {
  if (argc < 6) usage("missing arguments");
  Args a;
  a.host = argv[1];
  a.port = static_cast<unsigned>(to_int("PORT", argv[2], 1, 65535));
  a.user = argv[3];
  a.password = argv[4];
  a.database = argv[5];
  a.key_prefix = "mysql-peers/" + std::to_string(getpid()) + "/";
  bool poll_given = false;
  for (int i = 6; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage((flag + " needs a value").c_str());
    const char* value = argv[i + 1];
    if (flag == "--impl") {
      a.impl = value;
    } else if (flag == "--workload") {
      a.workload_name = value;
    } else if (flag == "--clients") {
      a.clients = to_int("--clients", value, 1, kMaxClients);
    } else if (flag == "--duration") {
      a.duration_s = to_int("--duration", value, 1, 86400);
    } else if (flag == "--hold-ms") {
      a.hold_ms = to_int("--hold-ms", value, 0, 3'600'000);
    } else if (flag == "--poll-ms") {
      a.poll_ms = to_int("--poll-ms", value, 0, 60'000);
      poll_given = true;
    } else if (flag == "--key-prefix") {
      a.key_prefix = value;
    } else {
      usage(("unknown option " + flag).c_str());
    }
  }
  if (a.impl != "bare-get-lock" && a.impl != "seed001-upsert")
    usage("--impl: bare-get-lock or seed001-upsert");
  if (poll_given && a.bare()) usage("--poll-ms: bare-get-lock waits in the server, it does not poll");
  if (a.workload_name == "uncontended") {
    a.workload = Workload::uncontended;
  } else if (a.workload_name == "distinct") {
    a.workload = Workload::distinct;
  } else if (a.workload_name == "contended") {
    a.workload = Workload::contended;
  } else {
    usage("--workload: uncontended, distinct or contended");
  }
  const bool multi = a.workload != Workload::uncontended;
  if (a.clients == 0) a.clients = multi ? 8 : 1;
  if (!multi && a.clients != 1) usage("--clients: uncontended is one client by definition");
  if (a.hold_ms < 0) a.hold_ms = a.workload == Workload::contended ? 1 : 0;
  return a;
}

double us(std::uint64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) die("mmap", std::strerror(errno));
  Shared& s = *new (memory) Shared;

  // The clients first, before this process opens a connection; each opens its own.
  std::fflush(nullptr);
  const pid_t parent = getpid();
  for (int i = 0; i < a.clients; ++i) {
    const pid_t pid = fork();
    if (pid < 0) die("fork", std::strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the parent
      if (getppid() != parent) _exit(1);
      who = "mysql_peers: client " + std::to_string(i);
      MYSQL* mysql = connect(a);
      run_client(mysql, a, s, i);
      mysql_close(mysql);
      _exit(0);
    }
    pids.push_back(pid);
  }

  clean_up(a);
  while (s.ready.load() < static_cast<std::uint32_t>(a.clients)) sleep_until(mono_ns() + 5'000'000);
  s.phase.store(kWarmup);
  sleep_until(mono_ns() + kNsPerSecond);
  s.phase.store(kMeasure);
  const std::uint64_t start = mono_ns();
  sleep_until(start + static_cast<std::uint64_t>(a.duration_s) * kNsPerSecond);
  s.phase.store(kStop);
  const double measured_s = static_cast<double>(mono_ns() - start) / 1e9;

  // Each client finishes its op and exits; reaped in order, so a failure names its client.
  const std::vector<pid_t> clients = pids;
  for (int i = 0; i < a.clients; ++i) {
    int status = 0;
    waitpid(clients[i], &status, 0);
    pids.erase(std::find(pids.begin(), pids.end(), clients[i]));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_run(i, status);
  }

  Histogram latency;
  Histogram handoff;
  std::uint64_t acquisitions = 0;
  std::uint64_t fewest = UINT64_MAX;
  std::uint64_t most = 0;
  for (int i = 0; i < a.clients; ++i) {
    const Shared::Slot& slot = s.slots[i];
    Histogram client;
    std::memcpy(client.data(), slot.latency, Histogram::kBytes);
    latency.merge(client);
    fewest = std::min(fewest, client.count());
    most = std::max(most, client.count());
    std::memcpy(client.data(), slot.handoff, Histogram::kBytes);
    handoff.merge(client);
    acquisitions += slot.acquisitions;
  }
  const std::uint64_t ops = latency.count();

  std::string j = "{\"impl\":\"" + a.impl + "\",\"backend\":\"mysql\",\"workload\":\"" + a.workload_name +
                  "\",\"clients\":" + std::to_string(a.clients) +
                  ",\"mode\":\"processes\",\"hold_ms\":" + std::to_string(a.hold_ms);
  if (!a.bare()) j += ",\"poll_ms\":" + std::to_string(a.poll_ms);
  char number[64];
  const auto add = [&](const char* name, const char* format, double value) {
    std::snprintf(number, sizeof number, format, value);
    j += std::string(",\"") + name + "\":" + number;
  };
  j += ",\"duration_s\":" + std::to_string(a.duration_s) + ",\"ops\":" + std::to_string(ops);
  add("ops_per_s", "%.1f", static_cast<double>(ops) / measured_s);
  if (a.clients > 1)
    j += ",\"client_ops_min\":" + std::to_string(fewest) + ",\"client_ops_max\":" + std::to_string(most);
  if (ops > 0) {
    add("p50_us", "%.15g", us(*latency.percentile(50)));
    add("p99_us", "%.15g", us(*latency.percentile(99)));
  }
  if (handoff.count() > 0) {
    add("handoff_p50_us", "%.15g", us(*handoff.percentile(50)));
    add("handoff_p99_us", "%.15g", us(*handoff.percentile(99)));
  }
  if (a.workload == Workload::contended) {
    j += ",\"lost_updates\":" + std::to_string(static_cast<std::int64_t>(acquisitions - s.contended.counter.load())) +
         ",\"overlaps\":" + std::to_string(s.contended.overlaps.load());
  }
  std::printf("%s}\n", j.c_str());
  return 0;
}
