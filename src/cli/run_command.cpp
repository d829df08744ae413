// `dlock run KEY [KEY...] -- CMD`: runs a command while holding a lock, in the manner of
// flock(1); several keys are held as one multi-key lock (dlock/multi_lock.hpp).
//
// Processes: dlock, the command and a sentinel (run_process.hpp). The lease renews on the
// client's renewal thread; a loss arrives through an eventfd, signals through a self-pipe, and one
// poll() loop on the main thread handles both.

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli/commands.hpp"
#include "cli/run_process.hpp"
#include "cli/run_signals.hpp"

namespace dlock::cli {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

struct RunOptions {
  std::string key;
  std::vector<std::string> more_keys;  // --key: held with KEY, as one lock
  bool shared = false;                 // --shared: a reader
  std::uint32_t permits = 0;           // --permits: one of a semaphore's
  std::vector<std::string> command;
  std::optional<std::string> shell_command;  // -c
  std::string name;                          // --name; default: owner_name()
  milliseconds ttl = kDefaultTtl;
  WaitOptions wait;
  int conflict_exit = kExitConflict;
  bool quiet = false;
  int lost_exit = kExitLost;
  std::optional<milliseconds> kill_after;  // default: kill_grace(ttl)
};

// How long the command has between SIGTERM and SIGKILL when renewals fail or the lock is lost,
// by default: a quarter of the lease, at most 10 s, so that it fits inside the lease with room
// for several renewal attempts before it.
milliseconds default_kill_grace(milliseconds ttl) { return std::min(ttl / 4, milliseconds(10'000)); }

// The SIGKILL is sent this long before the lease ends, so the command is gone by then even if
// dlock's own wake-up is late.
milliseconds kill_margin(milliseconds ttl) {
  return std::min({std::max(ttl / 50, milliseconds(20)), ttl / 10, milliseconds(500)});
}

// The grace and the margin must leave the first half of the lease to renewals (the first is
// sent at a third of it). The margin is at most a tenth of the TTL, so 2.5 times the grace is
// always TTL enough.
milliseconds checked_kill_grace(const RunOptions& options) {
  if (!options.kill_after) return default_kill_grace(options.ttl);
  const milliseconds most = options.ttl / 2 - kill_margin(options.ttl);
  if (*options.kill_after > most) {
    throw InvalidArgument(fmt::format(
        "--kill-after {} does not fit inside the {} lease: the command must be stopped before the lease "
        "ends, with the first half of it left for renewals; give --kill-after {} or less, or a --ttl of at "
        "least {}",
        format_duration(*options.kill_after), format_duration(options.ttl),
        format_duration(std::max(most, milliseconds(0))), format_duration(*options.kill_after * 5 / 2)));
  }
  return *options.kill_after;
}

// -c STRING runs `$SHELL -c STRING`, or `/bin/sh -c STRING` without a $SHELL, as flock(1) does.
std::vector<std::string> shell_command_line(const std::string& text) {
  const char* shell = std::getenv("SHELL");  // NOLINT(concurrency-mt-unsafe): nothing calls setenv
  return {shell != nullptr && *shell != '\0' ? shell : "/bin/sh", "-c", text};
}

// NAME in the owner NAME@HOST:PID.THREAD/RANDOM: --name, else the command's name, else (-c) the
// first word of the string.
std::string owner_name(const RunOptions& options) {
  if (!options.name.empty()) return options.name;
  std::string_view word = options.command.front();
  if (options.shell_command) {
    const std::string_view text = *options.shell_command;
    const auto begin = text.find_first_not_of(" \t\n");
    if (begin != std::string_view::npos) word = text.substr(begin, text.find_first_of(" \t\n;&|<>()", begin) - begin);
  }
  return std::string(word.substr(word.rfind('/') + 1));
}

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

void say(const std::string& message) { std::fprintf(stderr, "dlock: %s\n", message.c_str()); }

// ---- lease loss ----

// Carries a loss report from the renewal thread to the main loop. The callback shares it, so
// the eventfd stays open for as long as the callback may run.
class LossChannel {
 public:
  LossChannel() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0) fail("eventfd");
  }
  LossChannel(const LossChannel&) = delete;
  LossChannel& operator=(const LossChannel&) = delete;
  ~LossChannel() { ::close(fd_); }

  int fd() const noexcept { return fd_; }
  void post(const LossInfo& info) {
    {
      std::lock_guard lock(mutex_);
      info_ = info;
    }
    const std::uint64_t one = 1;
    if (::write(fd_, &one, sizeof one) < 0) {
      // Only fails when the counter is saturated: it is readable either way.
    }
  }
  std::optional<LossInfo> take() {
    std::uint64_t count = 0;
    if (::read(fd_, &count, sizeof count) < 0) {
      // EAGAIN: nothing posted since the last read.
    }
    std::lock_guard lock(mutex_);
    return info_;
  }

 private:
  int fd_;
  std::mutex mutex_;
  std::optional<LossInfo> info_;
};

// ---- the command ----
int run_command(const GlobalOptions& global, RunOptions& options) {
  // Everything after KEY is the command's, "--" included; a leading "--" only separates.
  if (!options.command.empty() && options.command.front() == "--")
    options.command.erase(options.command.begin());
  if (options.shell_command) {
    if (!options.command.empty()) {
      throw CLI::ValidationError("COMMAND", "give the command either with -c or after the key, not both: dlock run -c '" +
                                                *options.shell_command + "' " + options.key + ", or dlock run " +
                                                options.key + " -- COMMAND [ARGS...]");
    }
    options.command = shell_command_line(*options.shell_command);
  }
  if (options.command.empty()) {
    throw CLI::ValidationError("COMMAND",
                               "a command to run is required: dlock run KEY -- COMMAND [ARGS...], or dlock run -c "
                               "'COMMAND ARGS...' KEY");
  }
  int exec_error = 0;
  std::string program = resolve_program(options.command.front(), exec_error);
  if (program.empty()) {
    say(fmt::format(
        "{}: {}", options.command.front(),
        exec_error == ENOENT ? "command not found" : std::generic_category().message(exec_error)));
    return exec_error == ENOENT ? 127 : 126;
  }

  milliseconds grace = checked_kill_grace(options);
  std::vector<int> inherited = open_descriptors();

  // `run` reports a loss itself, saying what it does about it.
  set_log_handler([](LogLevel level, std::string_view message) {
    if (level < LogLevel::warning) return;  // the loss itself is reported by its callback
    say(std::string(message));
  });
  const Client client = open_client(global, ClientOptions{.name = owner_name(options)});
  std::vector<std::string> keys = options.more_keys;
  keys.insert(keys.begin(), options.key);
  const LockOptions lock{.ttl = options.ttl,
                         .auto_renew = true,
                         .mode = options.shared || options.permits > 0 ? LockMode::shared : LockMode::exclusive,
                         .permits = options.permits};
  MultiAttempt attempt = options.wait.no_wait ? client.try_acquire_all(keys, lock)
                         : options.wait.wait  ? client.try_acquire_all_for(keys, *options.wait.wait, lock)
                                              : MultiAttempt(client.acquire_all(keys, lock));
  if (!attempt) {
    if (!options.quiet) say(conflict_message(attempt.busy_key(), options.wait, attempt.holders()));
    return options.conflict_exit;
  }
  MultiLease& lease = attempt.lease();
  // A store may grant a shorter lease than asked (a session store: its session timeout): the
  // command's stop is timed by what was granted.
  const milliseconds margin = kill_margin(lease.ttl());
  if (lease.ttl() < options.ttl) grace = std::min(grace, default_kill_grace(lease.ttl()));
  auto loss = std::make_shared<LossChannel>();
  lease.on_lost([loss](const LossInfo& info) { loss->post(info); });
  const auto report_loss = [&](const LossInfo& info, std::string_view action) {
    say(fmt::format("lost the lock '{}': {}; {}", info.key, info.message, action));
  };

  const ExecPlan plan(std::move(program), options.command, lease, std::move(inherited), password_given(global));
  const bool job_control = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  SignalRelay signals;
  if (auto info = loss->take()) {
    report_loss(*info, "the command was not started");
    return options.lost_exit;
  }
  const Spawned spawned = spawn(plan, signals, job_control);
  const SentinelGuard sentinel(spawned.sentinel);
  const pid_t group = spawned.child;

  std::optional<int> status;
  // Set once the command is being stopped: the lock was lost, or renewals kept failing until
  // only the kill grace was left of the lease.
  bool stopping = false;
  constexpr auto kNever = SteadyClock::time_point::max();
  auto kill_at = kNever;  // when the SIGKILL that follows the SIGTERM is due
  const auto stop_command = [&](SteadyClock::time_point kill_by) {
    stopping = true;
    ::kill(-group, SIGTERM);
    ::kill(-group, SIGCONT);  // a stopped process acts on SIGTERM only once continued
    kill_at = kill_by;
  };
  while (!(status = reap(spawned.child, stopping, job_control))) {
    // Without a successful renewal the lease ends at valid_until: the command must be gone
    // by then, so it gets its SIGTERM a grace before.
    const auto kill_by = lease.valid_until() - margin;
    const auto term_by = kill_by - grace;
    const auto wake_at = stopping ? kill_at : term_by;
    const auto left = std::chrono::ceil<milliseconds>(wake_at - SteadyClock::now()).count();
    const int timeout_ms = wake_at == kNever ? -1 : static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    pollfd fds[] = {{signals.fd(), POLLIN, 0}, {loss->fd(), POLLIN, 0}};
    if (::poll(fds, stopping ? 1 : 2, timeout_ms) < 0 && errno != EINTR) fail("poll");
    for (const int signo : signals.take()) {
      if (SignalRelay::forwarded(signo)) ::kill(-group, signo);
    }
    const auto now = SteadyClock::now();
    if (!stopping && fds[1].revents != 0) {
      if (auto info = loss->take()) {
        report_loss(*info, fmt::format("stopping the command (SIGTERM, then SIGKILL after {})", format_duration(grace)));
        stop_command(std::min(now + grace, kill_by));
      }
    }
    if (!stopping && now >= lease.valid_until() - margin - grace) {
      say(fmt::format("renewals of '{}' have failed until {} of its lease is left; stopping the command before "
                      "the lease can end (SIGTERM, then SIGKILL after {})",
                      fmt::join(lease.keys(), "', '"),
                      format_duration(std::chrono::floor<milliseconds>(lease.valid_until() - now)),
                      format_duration(grace)));
      stop_command(lease.valid_until() - margin);
    }
    if (now >= kill_at) {
      ::kill(-group, SIGKILL);
      kill_at = kNever;
    }
  }

  if (job_control) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  sentinel.stop();
  signals.restore();  // from here on a signal ends dlock as usual

  if (spawned.exec_error != 0) {
    say(fmt::format("cannot run {}: {}", plan.path, std::generic_category().message(spawned.exec_error)));
  }
  if (stopping) {
    // The command is gone: tell the store, which keeps a force-released key closed until then.
    try {
      lease.release();
    } catch (const Error&) {
      lease.detach();
    }
    return options.lost_exit;
  }
  if (auto info = loss->take()) {
    report_loss(*info, "the command had already finished");
    return options.lost_exit;
  }
  try {
    lease.release();
  } catch (const LockLostError& e) {
    say(e.what());
    return options.lost_exit;
  } catch (const Error& e) {
    lease.detach();  // do not try again on destruction
    say(fmt::format("could not release '{}': {}; it stays held until its TTL runs out",
                    fmt::join(lease.keys(), "', '"), e.what()));
  }
  // Nothing is held any more. Unwinding would join the client's threads and close its
  // connections only for the kernel to do the same, while the caller waits on our exit. Only
  // the activity counts (dlock serve's /metrics) are worth a round trip first.
  try {
    client.flush_activity();
  } catch (const Error&) {
  }
  std::fflush(nullptr);
  ::_exit(*status);
}

}  // namespace

void add_run_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  auto* run =
      app.add_subcommand("run", "Run a command while holding a lock, renewing it until the command exits");
  // As with flock(1), everything after KEY belongs to the command; arrange_run_arguments() has
  // already moved dlock's options that stood between KEY and a "--" before KEY.
  run->positionals_at_end();
  run->footer(
      "Exit status: the command's (128+N if it died by signal N); 1 (-E) if the lock was not "
      "obtained in time; 75 (--lost-exit-code) if the lock was lost while the command ran; 126/127 "
      "if the command cannot be run; 64 usage error; 69 backend or configuration error.\n"
      "The command gets DLOCK_KEY, DLOCK_OWNER and DLOCK_FENCING_TOKEN in its environment, and with "
      "several keys DLOCK_KEYS and DLOCK_FENCING_TOKENS, every key (sorted) and its token, a line each.");
  add_duration_option(*run, "--ttl", options->ttl,
                      "Lease length; renewed every third of it while the command runs. A dlock that "
                      "stops renewing (host down) holds the key this long at most")
      ->default_str("30s");
  add_wait_options(*run, options->wait);
  run->add_option("-E,--conflict-exit-code", options->conflict_exit,
                  "Exit code when the lock was not obtained in time")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  add_quiet_flag(*run, options->quiet);
  run->add_option("--lost-exit-code", options->lost_exit,
                  "Exit code when the lock was lost while the command ran")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  add_duration_option(*run, "--kill-after", options->kill_after,
                      "How long the command has between SIGTERM and SIGKILL when the lock is lost or its "
                      "renewals keep failing; the SIGKILL comes before the lease can end, so at most half "
                      "the TTL")
      ->default_str("TTL/4, at most 10s");
  run->add_option("-c,--command", options->shell_command,
                  "Run this string with $SHELL -c (else /bin/sh -c), as flock -c does, instead of a COMMAND "
                  "after the key")
      ->type_name("STRING");
  run->add_option("--name", options->name,
                  "Name the holder: its owner reads NAME@HOST:PID.THREAD/RANDOM in status, list and the admin "
                  "page (default: the command's name; with -c, the string's first word). Unlike acquire's "
                  "--owner, it never makes two runs one owner, which would let both in at once by re-entry")
      ->type_name("NAME");
  run->add_option("--key", options->more_keys,
                  "Another key to hold with KEY, as one lock: all are taken, in sorted order, or none "
                  "(dlock run A B -- CMD is dlock run --key B A -- CMD)")
      ->type_name("KEY");
  auto* shared = run->add_flag("--shared", options->shared,
                               "Hold the key shared, as a reader: with other readers, never with a writer "
                               "(a run without --shared); new readers wait while a writer waits");
  run->add_option("--permits", options->permits,
                  "Hold one of N permits of a semaphore: at most N runs hold the key at once (every run "
                  "of the key must give the same N)")
      ->type_name("N")
      ->check(CLI::Range(1u, 1'000'000u))
      ->excludes(shared);
  run->add_option("KEY", options->key, "The lock's key")->required();
  run->add_option("COMMAND", options->command,
                  "The command and its arguments: the first word after KEY starts it, as with flock; "
                  "options after KEY are dlock's only up to a '--'");
  run->callback([&global, &exit_code, options] { exit_code = run_command(global, *options); });
}

}  // namespace dlock::cli
