// `dlock run KEY -- CMD`: runs a command while holding a lock, in the manner of flock(1).
//
// Processes: dlock, the command (leader of its own process group, so its whole tree can be
// signalled) and a sentinel. The command has PR_SET_PDEATHSIG=SIGKILL; the sentinel's parent-
// death signal makes it SIGKILL the command's group, so nothing the command started keeps
// running unprotected when dlock dies, even by SIGKILL. The lease renews on the client's
// renewal thread; a loss arrives through an eventfd, signals through a self-pipe, and one
// poll() loop on the main thread handles both.

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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

extern char** environ;

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

// ---- signals ----

// Never closed: a handler may still be running on another thread when `run` returns.
int g_signal_pipe[2] = {-1, -1};

extern "C" void relay_signal(int signo) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(signo);
  if (::write(g_signal_pipe[1], &byte, 1) < 0) {
    // The pipe is full of unread signals; the main loop wakes up anyway.
  }
  errno = saved_errno;
}

// Turns the signals `run` cares about into bytes on a pipe (handlers run on any thread, the
// client's renewal thread included) and remembers the dispositions dlock inherited, which the
// command gets back.
class SignalRelay {
 public:
  SignalRelay() {
    if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) fail("pipe2");
    struct sigaction relay {};
    relay.sa_handler = relay_signal;
    relay.sa_flags = SA_RESTART;  // the renewal thread's I/O must not see EINTR
    sigemptyset(&relay.sa_mask);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    for (std::size_t i = 0; i < kSignals.size(); ++i) {
      const int signo = kSignals[i];
      ::sigaction(signo, nullptr, &inherited_[i]);
      if (signo == SIGTTOU) {
        ::sigaction(signo, &ignore, nullptr);  // tcsetpgrp() from a background group
      } else if (signo == SIGCHLD || inherited_[i].sa_handler != SIG_IGN) {
        // A signal dlock was started with ignored (nohup, `cmd &` in a script) stays ignored.
        ::sigaction(signo, &relay, nullptr);
      }
    }
  }
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;
  ~SignalRelay() { restore(); }

  // Async-signal-safe, for the child before its exec.
  void restore() const noexcept {
    for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &inherited_[i], nullptr);
  }
  int fd() const noexcept { return g_signal_pipe[0]; }
  std::vector<int> take() const {
    std::vector<int> signals;
    unsigned char buffer[64];
    ssize_t n = 0;
    while ((n = ::read(g_signal_pipe[0], buffer, sizeof buffer)) > 0)
      signals.insert(signals.end(), buffer, buffer + n);
    return signals;
  }
  // Signals dlock passes on to the command's process group.
  static bool forwarded(int signo) { return signo != SIGCHLD && signo != SIGTTOU; }

 private:
  static constexpr std::array<int, 6> kSignals{SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTOU};
  std::array<struct sigaction, kSignals.size()> inherited_{};
};

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

// Finds the program as execvp(3) would, before the clone, so the child only calls execve.
// Returns an empty path and sets `error` (ENOENT or EACCES) when there is none.
std::string resolve_program(const std::string& name, int& error) {
  error = ENOENT;
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return name;
  const char* path_env = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe): nothing calls setenv
  const std::string_view path = path_env ? path_env : "/bin:/usr/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = std::min(path.find(':', start), path.size());
    const std::string_view dir = path.substr(start, end - start);
    std::string candidate = fmt::format("{}/{}", dir.empty() ? "." : dir, name);
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::faccessat(AT_FDCWD, candidate.c_str(), X_OK, AT_EACCESS) == 0) return candidate;
      error = EACCES;
    }
    if (end == path.size()) return {};
    start = end + 1;
  }
}

constexpr const char* kShell = "/bin/sh";

// Everything the child needs, built before the clone: until its exec the child shares this
// multithreaded process's memory and may only make async-signal-safe calls; it must not
// allocate.
struct ExecPlan {
  std::string path;
  std::vector<char*> argv;
  std::vector<char*> shell_argv;  // for a script without #!, as execvp(3) does
  std::vector<std::string> env;
  std::vector<char*> envp;

  ExecPlan(std::string program, std::vector<std::string>& command, const Lease& lease)
      : path(std::move(program)) {
    for (auto& arg : command) argv.push_back(arg.data());
    argv.push_back(nullptr);
    shell_argv.push_back(const_cast<char*>(kShell));
    shell_argv.push_back(path.data());
    shell_argv.insert(shell_argv.end(), argv.begin() + 1, argv.end());
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view var = *entry;
      if (!var.starts_with("DLOCK_KEY=") && !var.starts_with("DLOCK_OWNER=") &&
          !var.starts_with("DLOCK_FENCING_TOKEN=")) {
        env.emplace_back(var);
      }
    }
    env.push_back("DLOCK_KEY=" + lease.key());
    env.push_back("DLOCK_OWNER=" + lease.owner());
    env.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(lease.token()));
    for (auto& var : env) envp.push_back(var.data());
    envp.push_back(nullptr);
  }
  ExecPlan(const ExecPlan&) = delete;  // the pointers point into its own strings
  ExecPlan& operator=(const ExecPlan&) = delete;
};

struct ChildSetup {
  const ExecPlan& plan;
  const SignalRelay& signals;
  sigset_t mask;  // dlock's own signal mask, which the command inherits
  pid_t parent;
  bool take_terminal;
  int error_fd;  // exec's errno goes here; close-on-exec, so EOF means the exec worked
};

// Async-signal-safe calls only (see ExecPlan).
[[noreturn]] void exec_child(const ChildSetup& setup) {
  ::setpgid(0, 0);
  if (setup.take_terminal) ::tcsetpgrp(STDIN_FILENO, ::getpid());  // SIGTTOU is still ignored
  // Dies with dlock. The check catches a dlock that died before the prctl.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != setup.parent) ::_exit(kExitError);
  setup.signals.restore();
  ::pthread_sigmask(SIG_SETMASK, &setup.mask, nullptr);
  ::execve(setup.plan.path.c_str(), setup.plan.argv.data(), setup.plan.envp.data());
  if (errno == ENOEXEC) ::execve(kShell, setup.plan.shell_argv.data(), setup.plan.envp.data());
  const int error = errno;
  if (::write(setup.error_fd, &error, sizeof error) < 0) {
    // dlock then sees EOF and reports the exit status below.
  }
  ::_exit(error == ENOENT ? 127 : 126);
}

// Kills the command's process group if dlock dies: PR_SET_PDEATHSIG on the command reaches
// the command alone, not what it started. Async-signal-safe calls only (see ExecPlan).
[[noreturn]] void sentinel_main(pid_t parent, pid_t group) {
  ::close_range(0, ~0U, 0);  // keep no one's pipe open
  ::prctl(PR_SET_PDEATHSIG, SIGUSR1);
  if (::getppid() == parent) {
    sigset_t usr1;
    ::sigemptyset(&usr1);
    ::sigaddset(&usr1, SIGUSR1);  // blocked, like every signal here: the clone happened with all blocked
    while (::sigwaitinfo(&usr1, nullptr) < 0) {
    }
  }
  ::kill(-group, SIGKILL);
  ::_exit(0);
}

struct Spawned {
  pid_t child = -1;  // also its process group id
  pid_t sentinel = -1;
  int exec_error = 0;
};

// The command and the sentinel share dlock's memory instead of copying it (clone(CLONE_VM)):
// copying the page tables of a multithreaded process, and the copy-on-write faults after it,
// cost more than the rest of starting the command. The command's clone also suspends dlock
// until the exec (CLONE_VFORK), so its stack is used by one of them at a time. The sentinel
// runs beside dlock on a stack of its own and touches nothing else; all signals are blocked
// in both, so no handler can run on shared memory.
struct SentinelArgs {
  pid_t parent;
  pid_t group;
};
alignas(64) char g_child_stack[64 * 1024];
alignas(64) char g_sentinel_stack[16 * 1024];
SentinelArgs g_sentinel_args{};

extern "C" int child_entry(void* setup) { exec_child(*static_cast<const ChildSetup*>(setup)); }
extern "C" int sentinel_entry(void* args) {
  const auto& sentinel = *static_cast<const SentinelArgs*>(args);
  sentinel_main(sentinel.parent, sentinel.group);
}

Spawned spawn(const ExecPlan& plan, const SignalRelay& signals, bool take_terminal) {
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) fail("pipe2");
  ChildSetup setup{plan, signals, {}, ::getpid(), take_terminal, error_pipe[1]};
  // No handler may run in a child before it resets the dispositions.
  sigset_t all;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &setup.mask);
  Spawned spawned;
  spawned.child = ::clone(child_entry, std::end(g_child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &setup);
  int fork_errno = errno;
  // Before the sentinel starts: a copy of the write end there would delay the EOF below.
  ::close(error_pipe[1]);
  if (spawned.child > 0) {
    ::setpgid(spawned.child, spawned.child);  // also here, so the group exists for the sentinel
    g_sentinel_args = SentinelArgs{setup.parent, spawned.child};
    spawned.sentinel = ::clone(sentinel_entry, std::end(g_sentinel_stack), CLONE_VM | SIGCHLD, &g_sentinel_args);
    fork_errno = errno;
  }
  ::pthread_sigmask(SIG_SETMASK, &setup.mask, nullptr);
  if (spawned.child > 0 && spawned.sentinel > 0) {
    while (::read(error_pipe[0], &spawned.exec_error, sizeof spawned.exec_error) < 0 && errno == EINTR) {
    }
  }
  ::close(error_pipe[0]);
  if (spawned.sentinel < 0) {
    if (spawned.child > 0) {
      ::kill(spawned.child, SIGKILL);
      ::waitpid(spawned.child, nullptr, 0);
    }
    errno = fork_errno;
    fail("clone");
  }
  return spawned;
}

// Stopped as soon as the command has exited and reaped when `run` returns, so its exit
// overlaps the release instead of delaying it.
class SentinelGuard {
 public:
  explicit SentinelGuard(pid_t pid) : pid_(pid) {}
  SentinelGuard(const SentinelGuard&) = delete;
  SentinelGuard& operator=(const SentinelGuard&) = delete;
  ~SentinelGuard() {
    stop();
    ::waitpid(pid_, nullptr, 0);
  }
  void stop() const { ::kill(pid_, SIGKILL); }  // still unreaped, so the pid is still ours

 private:
  pid_t pid_;
};

// Job control: the command stopped (Ctrl-Z) while it owned the terminal. Take the terminal
// back and stop dlock too, so the shell sees its job stopped; when continued, continue it.
void suspend_with(pid_t group) {
  ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  ::kill(::getpid(), SIGTSTP);  // returns once the shell continues dlock
  if (::tcgetpgrp(STDIN_FILENO) == ::getpgrp()) ::tcsetpgrp(STDIN_FILENO, group);  // fg, not bg
  ::kill(-group, SIGCONT);
}

// The command's exit status as a shell reports it (128+N for signal N), once it has exited.
// After a loss, the rest of its process group is killed first: until the command is reaped,
// its pid cannot name another group.
std::optional<int> reap(pid_t child, bool lost, bool job_control) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WSTOPPED | WNOHANG | WNOWAIT) != 0)
    fail("waitid");
  if (info.si_pid == 0) return std::nullopt;
  if (info.si_code == CLD_STOPPED || info.si_code == CLD_TRAPPED) {
    ::waitid(P_PID, static_cast<id_t>(child), &info, WSTOPPED | WNOHANG);  // consume the report
    if (job_control) suspend_with(child);
    return std::nullopt;
  }
  if (lost) ::kill(-child, SIGKILL);
  if (::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED) != 0) fail("waitid");
  return info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status;
}

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
