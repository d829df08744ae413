// `dlock run KEY -- CMD`: runs a command while holding a lock, in the manner of flock(1).
//
// Processes: dlock, the command and a sentinel (run_process.hpp). The lease renews on the
// client's renewal thread; a loss arrives through an eventfd, signals through a self-pipe, and one
// poll() loop on the main thread handles both.

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
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
  std::vector<std::string> command;
  milliseconds ttl = kDefaultTtl;
  WaitOptions wait;
  int conflict_exit = kExitConflict;
  int lost_exit = kExitLost;
  milliseconds kill_after{10'000};
};

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
  if (options.command.empty()) {
    throw CLI::ValidationError("COMMAND", "a command to run is required: dlock run KEY -- COMMAND [ARGS...]");
  }
  int exec_error = 0;
  std::string program = resolve_program(options.command.front(), exec_error);
  if (program.empty()) {
    say(fmt::format(
        "{}: {}", options.command.front(),
        exec_error == ENOENT ? "command not found" : std::generic_category().message(exec_error)));
    return exec_error == ENOENT ? 127 : 126;
  }

  // `run` reports a loss itself, saying what it does about it.
  set_log_handler([](LogLevel level, std::string_view message) {
    if (level < LogLevel::warning) return;  // the loss itself is reported by its callback
    say(std::string(message));
  });
  const Client client = open_client(global);
  Attempt attempt =
      take_lock(client, options.key, options.wait, LockOptions{.ttl = options.ttl, .auto_renew = true});
  if (!attempt) {
    say(conflict_message(options.key, options.wait, attempt));
    return options.conflict_exit;
  }
  Lease& lease = attempt.lease();
  auto loss = std::make_shared<LossChannel>();
  lease.on_lost([loss](const LossInfo& info) { loss->post(info); });
  const auto report_loss = [&](const LossInfo& info, std::string_view action) {
    say(fmt::format("lost the lock '{}': {}; {}", info.key, info.message, action));
  };

  const ExecPlan plan(std::move(program), options.command, lease);
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
  bool lost = false;
  constexpr auto kNever = SteadyClock::time_point::max();
  auto kill_at = kNever;  // when the SIGKILL that follows a loss's SIGTERM is due
  while (!(status = reap(spawned.child, lost, job_control))) {
    int timeout_ms = -1;
    if (kill_at != kNever) {
      const auto left = std::chrono::ceil<milliseconds>(kill_at - SteadyClock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    pollfd fds[] = {{signals.fd(), POLLIN, 0}, {loss->fd(), POLLIN, 0}};
    if (::poll(fds, lost ? 1 : 2, timeout_ms) < 0 && errno != EINTR) fail("poll");
    for (const int signo : signals.take()) {
      if (SignalRelay::forwarded(signo)) ::kill(-group, signo);
    }
    if (!lost && fds[1].revents != 0) {
      if (auto info = loss->take()) {
        lost = true;
        report_loss(*info, fmt::format("stopping the command (SIGTERM, then SIGKILL after {})",
                                       format_duration(options.kill_after)));
        ::kill(-group, SIGTERM);
        ::kill(-group, SIGCONT);  // a stopped process acts on SIGTERM only once continued
        kill_at = SteadyClock::now() + options.kill_after;
      }
    }
    if (SteadyClock::now() >= kill_at) {
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
  if (lost) return options.lost_exit;
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
    say(fmt::format("could not release '{}': {}; it stays held until its TTL runs out", options.key,
                    e.what()));
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
  // As with flock(1), options go before KEY and everything after KEY belongs to the command.
  run->positionals_at_end();
  run->footer(
      "Exit status: the command's (128+N if it died by signal N); 1 (-E) if the lock was not "
      "obtained in time; 75 (--lost-exit-code) if the lock was lost while the command ran; 126/127 "
      "if the command cannot be run; 64 usage error; 69 backend or configuration error.\n"
      "The command gets DLOCK_KEY, DLOCK_OWNER and DLOCK_FENCING_TOKEN in its environment.");
  add_duration_option(*run, "--ttl", options->ttl,
                      "Lease length; renewed every third of it while the command runs. A dlock that "
                      "stops renewing (host down) holds the key this long at most")
      ->default_str("30s");
  add_wait_options(*run, options->wait);
  run->add_option("-E,--conflict-exit-code", options->conflict_exit,
                  "Exit code when the lock was not obtained in time")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  run->add_option("--lost-exit-code", options->lost_exit,
                  "Exit code when the lock was lost while the command ran")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  add_duration_option(*run, "--kill-after", options->kill_after,
                      "After a loss, how long the command has between SIGTERM and SIGKILL")
      ->default_str("10s");
  run->add_option("KEY", options->key, "The lock's key")->required();
  run->add_option("COMMAND", options->command, "The command and its arguments, after --")->required();
  run->callback([&global, &exit_code, options] { exit_code = run_command(global, *options); });
}

}  // namespace dlock::cli
