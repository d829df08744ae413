#include "cli/run_process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <string_view>
#include <system_error>

#include "cli/cli_common.hpp"

extern char** environ;

namespace dlock::cli {
namespace {

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

// Closes every descriptor above 2 but `keep` (sorted) and `also`. Async-signal-safe.
void close_all_but(const std::vector<int>& keep, int also) {
  unsigned next = 3;
  const auto spare = [&](int fd) {
    const auto number = static_cast<unsigned>(fd);
    if (fd < 3 || number < next) return;
    if (number > next) ::close_range(next, number - 1, 0);
    next = number + 1;
  };
  auto it = keep.begin();
  for (; it != keep.end() && *it < also; ++it) spare(*it);
  spare(also);
  for (; it != keep.end(); ++it) spare(*it);
  ::close_range(next, ~0U, 0);
}

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
  close_all_but(setup.plan.inherited_fds, setup.error_fd);
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

// Job control: the command stopped (Ctrl-Z) while it owned the terminal. Take the terminal
// back and stop dlock too, so the shell sees its job stopped; when continued, continue it.
void suspend_with(pid_t group) {
  ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  ::kill(::getpid(), SIGTSTP);  // returns once the shell continues dlock
  if (::tcgetpgrp(STDIN_FILENO) == ::getpgrp()) ::tcsetpgrp(STDIN_FILENO, group);  // fg, not bg
  ::kill(-group, SIGCONT);
}

}  // namespace

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

std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) fail("opendir /proc/self/fd");
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    if (fd > 2 && fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

namespace {

// DLOCK_URL=... without its password, or unchanged when it has none (or does not parse). A
// lone userinfo is the password of redis:// and redlock:// unless a password comes from
// elsewhere (redis://SECRET@host), and a user name otherwise.
std::string without_password(std::string_view var, bool password_given) {
  constexpr std::string_view name = "DLOCK_URL=";
  const std::string_view url = var.substr(name.size());
  const auto found = find_userinfo(url);
  if (!found || found->at == std::string::npos) return std::string(var);
  const std::string_view userinfo = url.substr(found->begin, found->at - found->begin);
  const auto colon = userinfo.find(':');
  const std::string_view scheme = url.substr(0, found->begin - 3);
  const bool lone_is_password = !password_given && (scheme == "redis" || scheme == "redlock");
  if (colon == std::string_view::npos && !lone_is_password) return std::string(var);
  const std::string_view kept = colon == std::string_view::npos ? std::string_view() : userinfo.substr(0, colon);
  return fmt::format("{}{}{}{}{}", name, url.substr(0, found->begin), kept, kept.empty() ? "" : "@",
                     url.substr(found->at + 1));
}

}  // namespace

ExecPlan::ExecPlan(std::string program, std::vector<std::string>& command, const MultiLease& locks,
                   std::vector<int> inherited, bool password_given)
    : path(std::move(program)), inherited_fds(std::move(inherited)) {
  for (auto& arg : command) argv.push_back(arg.data());
  argv.push_back(nullptr);
  shell_argv.push_back(const_cast<char*>(kShell));
  shell_argv.push_back(path.data());
  shell_argv.insert(shell_argv.end(), argv.begin() + 1, argv.end());
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view var = *entry;
    if (var.starts_with("DLOCK_KEY=") || var.starts_with("DLOCK_OWNER=") || var.starts_with("DLOCK_FENCING_TOKEN=") ||
        var.starts_with("DLOCK_KEYS=") || var.starts_with("DLOCK_FENCING_TOKENS=") ||
        var.starts_with("DLOCK_PASSWORD=")) {
      continue;
    }
    env.push_back(var.starts_with("DLOCK_URL=") ? without_password(var, password_given) : std::string(var));
  }
  const Lease& first = locks.leases().front();
  env.push_back("DLOCK_KEY=" + first.key());
  env.push_back("DLOCK_OWNER=" + first.owner());
  env.push_back("DLOCK_FENCING_TOKEN=" + std::to_string(first.token()));
  // Every key and its token, one per line in the same order (keys hold no newline).
  std::string keys = "DLOCK_KEYS=", tokens = "DLOCK_FENCING_TOKENS=";
  for (const Lease& lease : locks.leases()) {
    const bool more = &lease != &locks.leases().back();
    keys += lease.key() + (more ? "\n" : "");
    tokens += std::to_string(lease.token()) + (more ? "\n" : "");
  }
  env.push_back(std::move(keys));
  env.push_back(std::move(tokens));
  for (auto& var : env) envp.push_back(var.data());
  envp.push_back(nullptr);
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

}  // namespace dlock::cli
