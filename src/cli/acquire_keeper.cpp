// `dlock acquire`'s output, and its keeper process (acquire_keeper.hpp).
//
// Why the keeper is forked with no Client open. A store's client library may run threads (the
// ZooKeeper client starts its I/O and completion threads when its session opens; the core
// starts its renewal threads on the first lock), and fork() copies only the calling thread: a
// child of a multithreaded process may find a mutex locked forever by a thread it does not
// have, or a library's state half-updated. So the keeper is forked from a single-threaded
// process and opens a Client of its own after the fork. `dlock acquire` learns that it needs a
// keeper from the store's capabilities, which only an open Client can tell (the URL does not
// say what a store can do), so a child process opens one and answers (store_probe.hpp): a
// closed Client may leave its library's state behind even when its threads are gone (gRPC's
// event engine, for etcd://: a keeper forked after it crashed in its poller). Should the child
// fail to answer, `dlock acquire` opens one, asks, and closes it before forking: closing a
// Client joins every thread it started, which is checked here, not assumed: the fork waits until
// /proc/self/task lists the calling thread alone, and `dlock acquire` fails (exit 69) rather
// than fork beside a thread that stays.
//
// The keeper's life: it dies with `dlock acquire` until it has reported (PR_SET_PDEATHSIG: a
// Ctrl-C while it waits for a busy key ends both, and the store frees whatever the keeper had
// taken with its connection or session); it then holds the lock detached (its own session,
// cwd /, stdin, stdout and stderr on /dev/null, no other descriptor, SIGHUP ignored) with
// renewals on, so its session stays trusted, and waits on the main thread for SIGTERM, for the
// lease's loss (on_lost sends SIGUSR1; the store is also asked every second) or for its TTL. A
// lock delay after a force-release is kept, as a detached hold keeps it: see hold().
//
// Re-entry. Another `dlock acquire` by the same owner starts a keeper of its own, whose
// acquire is a re-entry: the store counts one more hold, but the lock itself stays with the
// first keeper's connection or session. So a keeper whose TTL passes releases its one hold,
// and stays while holds of others remain (its exit would end them): it exits when the lease is
// gone, after the last hold is released (by `dlock release`, or by the last keeper whose TTL
// passes), as if re-entries extended the lease. A `dlock release` of one of several holds
// ends no keeper.

#include "cli/acquire_keeper.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

namespace dlock::cli {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// How often a keeper asks the store whether its lock is still held, so that it is gone about a
// second after a `dlock release` of the last hold from another process. The core would learn
// of that only at its next renewal (a third of the lease later) where the store pushes nothing
// (mysql:// session mode), and zookeeper://'s push is a watch armed again at each renewal, which
// a re-entry or the release of one hold has used up.
constexpr milliseconds kStoreCheck{1'000};
// How long the fork waits for the closed Client's threads to be gone.
constexpr milliseconds kThreadsEnd{2'000};

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

// One line of JSON, as `--json` prints it (keys written by other tools may not be UTF-8).
std::string json_line(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string error_line(const std::string& message) { return "dlock: " + message + "\n"; }

// ---- the report, through the pipe ----

// The keeper's report: this header, then the report's stdout and stderr.
struct Header {
  std::int32_t exit_code = 0;
  std::int32_t keeping = 0;  // 1: the keeper holds the lock now; 0: it is exiting
  std::uint32_t out_size = 0;
  std::uint32_t err_size = 0;
};

bool send_report(int fd, const AcquireReport& report, bool keeping) {
  const Header header{report.exit_code, keeping ? 1 : 0, static_cast<std::uint32_t>(report.out.size()),
                      static_cast<std::uint32_t>(report.err.size())};
  std::string message(sizeof header, '\0');
  std::memcpy(message.data(), &header, sizeof header);
  message += report.out;
  message += report.err;
  std::size_t sent = 0;
  while (sent < message.size()) {
    const ssize_t n = ::write(fd, message.data() + sent, message.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;  // EPIPE: `dlock acquire` is gone (SIGPIPE is ignored)
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

struct Received {
  AcquireReport report;
  bool keeping = false;
};

// The keeper's report, or nothing when it ended (its end of the pipe closed) before a whole one.
std::optional<Received> receive_report(int fd) {
  std::string data;
  char buffer[4096];
  Header header;
  for (;;) {
    if (data.size() >= sizeof header) {
      std::memcpy(&header, data.data(), sizeof header);
      const std::size_t whole = sizeof header + std::size_t{header.out_size} + header.err_size;
      if (data.size() >= whole) {
        Received received;
        received.report.exit_code = header.exit_code;
        received.report.out = data.substr(sizeof header, header.out_size);
        received.report.err = data.substr(sizeof header + header.out_size, header.err_size);
        received.keeping = header.keeping != 0;
        return received;
      }
    }
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read from the keeper process");
    if (n == 0) return std::nullopt;
    data.append(buffer, static_cast<std::size_t>(n));
  }
}

// ---- the fork ----

std::size_t threads_running() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

// Returns once the calling thread is the process's only one (a joined thread may still be
// listed for a moment after the join); throws if another stays.
void wait_until_single_threaded() {
  const auto deadline = SteadyClock::now() + kThreadsEnd;
  for (;;) {
    const std::size_t threads = threads_running();
    if (threads <= 1) return;
    if (SteadyClock::now() >= deadline) {
      throw std::runtime_error(
          fmt::format("cannot start the process that keeps the lock: {} thread{} of the store's client "
                      "still run{} after it was closed, and a fork beside them is unsafe",
                      threads - 1, threads == 2 ? "" : "s", threads == 2 ? "s" : ""));
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

// `fd`, moved above 0, 1 and 2 (which the keeper points at /dev/null) if it is one of them.
int above_stdio(int fd) {
  if (fd > STDERR_FILENO) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  const int error = errno;
  ::close(fd);
  errno = error;
  if (moved < 0) fail("fcntl");
  return moved;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("it exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("it was killed by signal {}", WTERMSIG(status));
  return "it ended";
}

// ---- the keeper ----

// The signals the keeper waits for with sigtimedwait(), blocked in every thread (the library's
// threads block all).
sigset_t waited_signals() {
  sigset_t set;
  ::sigemptyset(&set);
  ::sigaddset(&set, SIGTERM);
  ::sigaddset(&set, SIGINT);
  ::sigaddset(&set, SIGUSR1);  // the lease was lost
  return set;
}

timespec to_timespec(SteadyClock::duration wait) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(wait, SteadyClock::duration::zero()));
  return timespec{static_cast<time_t>(ns.count() / 1'000'000'000),
                  static_cast<long>(ns.count() % 1'000'000'000)};
}

// What the store shows of this acquisition.
enum class Seen {
  held,
  evicted,  // force-released behind a lock delay: the key stays closed until this holder releases it
  gone,     // released (its last hold), force-released at once, its session ended, taken over
  unknown,  // the store cannot be asked now: the renewals judge that
};

Seen look(const Client& client, const Lease& lease) {
  try {
    const auto holders = client.inspect(lease.key());
    const auto ours = std::find_if(holders.begin(), holders.end(), [&](const LockInfo& holder) {
      return holder.owner == lease.owner() && holder.token == lease.token();
    });
    if (ours == holders.end()) return Seen::gone;
    return ours->evicted ? Seen::evicted : Seen::held;
  } catch (const std::exception&) {
    return Seen::unknown;
  }
}

// Releases this keeper's hold. For a lease lost or evicted the release acknowledges it: a key
// kept closed for this holder opens.
void release_quietly(Lease& lease) {
  try {
    lease.release();
  } catch (const std::exception&) {
    // Lost, or the store failed: this process's end ends the lock on this store anyway.
  }
}

// Holds the lock until its TTL passes (then releases this keeper's hold, and waits while holds
// of re-entries remain), it is gone, or SIGTERM/SIGINT comes (then releases its hold).
//
// Force-released with a lock delay (the default), the keeper neither acknowledges the eviction
// nor exits: the script that ran `dlock acquire` may still be inside its critical section, so
// the key stays closed, as on every store, until that script's `dlock release` acknowledges it
// or the TTL passes (the keeper acknowledges it then). The keeper's exit alone would open the
// key where the lock is a session's node (zookeeper://).
void hold(const Client& client, Lease& lease, SteadyClock::time_point deadline) {
  const sigset_t waited = waited_signals();
  bool own_hold = true;  // this keeper's hold is not released yet
  for (;;) {
    const Seen seen = look(client, lease);
    const bool evicted = seen == Seen::evicted;
    if (seen == Seen::gone || (lease.lost() && !evicted)) {
      release_quietly(lease);  // gone: nothing to release (a session-mode lock left behind is dropped)
      return;
    }
    const auto now = SteadyClock::now();
    if (own_hold && now >= deadline) {
      if (evicted) {
        release_quietly(lease);  // the lease has run out: the closed key opens
        return;
      }
      own_hold = false;
      std::uint32_t left = 0;
      try {
        // By owner and token, not through the Lease: the Lease stays tracked (renewed, its loss
        // reported) while holds of re-entries remain.
        left = client.release(lease.key(), lease.owner(), lease.token());
      } catch (const std::exception&) {
        // Lost meanwhile, or the store failed: either way nothing is left to keep.
      }
      if (left == 0) {
        lease.detach();
        return;
      }
      continue;
    }
    SteadyClock::duration wait = kStoreCheck;
    if (own_hold) wait = std::min(wait, deadline - now);
    const timespec timeout = to_timespec(wait);
    const int signo = ::sigtimedwait(&waited, nullptr, &timeout);
    if (signo == SIGTERM || signo == SIGINT) {
      if (own_hold || evicted) {
        release_quietly(lease);
      } else {
        lease.detach();  // its hold went at its TTL; its exit ends the lock
      }
      return;
    }
  }
}

// The keeper's work once detached: takes the lock, reports, holds it. Returns its exit status.
int keep(int report_fd, const GlobalOptions& global, const AcquireOptions& options) {
  std::optional<Client> client;
  std::optional<Attempt> attempt;  // destroyed before the client
  AcquireReport report;
  try {
    client.emplace(open_client(global));
    // Only now: a relative --password-file is read when the client opens. (A relative ssl-ca=
    // in a mysql:// URL is read again at each reconnection, which from here on fails.)
    if (::chdir("/") != 0) fail("chdir /");
    attempt.emplace(take_lock(*client, options.key, options.wait,
                              LockOptions{.ttl = options.ttl, .auto_renew = true, .owner = options.owner}));
    report = report_attempt(global, options, *attempt);
  } catch (const InvalidArgument& e) {
    attempt.reset();
    report = AcquireReport{kExitUsage, {}, error_line(e.what())};
  } catch (const std::exception& e) {
    attempt.reset();  // a lock taken all the same is released
    report = AcquireReport{kExitError, {}, error_line(e.what())};
  }
  if (!attempt || !*attempt) {
    send_report(report_fd, report, false);
    return report.exit_code;
  }
  Lease& lease = attempt->lease();
  const auto deadline = SteadyClock::now() + options.ttl;
  lease.on_lost([self = ::getpid()](const LossInfo&) { ::kill(self, SIGUSR1); });
  // What this client did reaches the store's totals (dlock serve's metrics), where it keeps
  // them, by the time `dlock acquire` exits, as from any other store.
  try {
    client->flush_activity();
  } catch (const std::exception&) {
    // Added later, with the next flush.
  }
  // From now on the keeper outlives `dlock acquire`. If that is gone before it has the token,
  // the write fails (EPIPE) and nobody has the lock: release it.
  ::prctl(PR_SET_PDEATHSIG, 0);
  if (!send_report(report_fd, report, true)) {
    release_quietly(lease);
    return kExitError;
  }
  ::close(report_fd);
  hold(*client, lease, deadline);
  return kExitOk;
}

[[noreturn]] void keeper_main(int report_fd, pid_t parent, const GlobalOptions& global,
                              const AcquireOptions& options) {
  // The check catches a `dlock acquire` that died before the prctl.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(kExitError);
  ::setsid();
  struct sigaction action {};
  ::sigemptyset(&action.sa_mask);
  action.sa_handler = SIG_IGN;
  ::sigaction(SIGHUP, &action, nullptr);
  ::sigaction(SIGPIPE, &action, nullptr);
  action.sa_handler = SIG_DFL;  // not ignored, as `dlock acquire` may have been started with
  const sigset_t waited = waited_signals();
  for (const int signo : {SIGTERM, SIGINT, SIGUSR1}) ::sigaction(signo, &action, nullptr);
  // Blocked before any thread starts: the threads inherit the mask.
  ::pthread_sigmask(SIG_BLOCK, &waited, nullptr);
  const int null = ::open("/dev/null", O_RDWR);
  if (null < 0) ::_exit(kExitError);
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) ::dup2(null, fd);
  if (null > STDERR_FILENO) ::close(null);
  // No descriptor of `dlock acquire`'s caller stays open (a test's or a $(...)'s pipe would
  // wait for the keeper), only the report's pipe.
  if (report_fd > STDERR_FILENO + 1) {
    ::close_range(STDERR_FILENO + 1, static_cast<unsigned>(report_fd) - 1, 0);
  }
  ::close_range(static_cast<unsigned>(report_fd) + 1, ~0U, 0);
  int status = kExitError;
  try {
    status = keep(report_fd, global, options);
  } catch (...) {
  }
  ::_exit(status);  // not exit(): the atexit handlers and static objects are `dlock acquire`'s
}

}  // namespace

AcquireReport report_attempt(const GlobalOptions& global, const AcquireOptions& options, Attempt& attempt) {
  AcquireReport report;
  if (!attempt) {
    report.exit_code = options.conflict_exit;
    if (global.json) {
      report.out = json_line(
          {{"acquired", false}, {"key", options.key}, {"holders", holders_json(attempt.holders())}});
    }
    if (!options.quiet) report.err = error_line(conflict_message(options.key, options.wait, attempt.holders()));
    return report;
  }
  const Lease& lease = attempt.lease();
  if (global.json) {
    report.out = json_line({{"acquired", true},
                            {"key", lease.key()},
                            {"owner", lease.owner()},
                            {"token", lease.token()},
                            {"hold_count", lease.hold_count()},
                            {"ttl_ms", options.ttl.count()}});
  } else {
    report.out = std::to_string(lease.token()) + "\n";
  }
  return report;
}

int print_report(const AcquireReport& report) {
  std::fwrite(report.out.data(), 1, report.out.size(), stdout);
  std::fwrite(report.err.data(), 1, report.err.size(), stderr);
  return report.exit_code;
}

int acquire_in_keeper(const GlobalOptions& global, const AcquireOptions& options) {
  wait_until_single_threaded();
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) fail("pipe2");
  ends[0] = above_stdio(ends[0]);
  ends[1] = above_stdio(ends[1]);
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t parent = ::getpid();
  const pid_t keeper = ::fork();
  if (keeper < 0) fail("fork");
  if (keeper == 0) {
    ::close(ends[0]);
    keeper_main(ends[1], parent, global, options);
  }
  ::close(ends[1]);
  const auto received = receive_report(ends[0]);
  ::close(ends[0]);
  if (received) {
    // A keeper that holds nothing is ending: reaped here, so none is left once this returns.
    if (!received->keeping) ::waitpid(keeper, nullptr, 0);
    return print_report(received->report);
  }
  int status = 0;
  const bool reaped = ::waitpid(keeper, &status, 0) == keeper;
  throw std::runtime_error(
      fmt::format("the process that was to keep the lock on '{}' ended before it said whether it got it: {}",
                  options.key, reaped ? describe_status(status) : std::string("it ended")));
}

}  // namespace dlock::cli
