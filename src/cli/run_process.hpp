#pragma once

// `dlock run`'s command: finding the program, starting it with its sentinel, and reaping it.
//
// The command is the leader of its own process group, so its whole tree can be signalled. It
// has PR_SET_PDEATHSIG=SIGKILL; the sentinel's parent-death signal makes it SIGKILL the
// command's group, so nothing the command started keeps running unprotected when dlock dies,
// even by SIGKILL.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <optional>
#include <string>
#include <vector>

#include "cli/run_signals.hpp"
#include "dlock/client.hpp"

namespace dlock::cli {

// Finds the program as execvp(3) would, before the clone, so the child only calls execve.
// Returns an empty path and sets `error` (ENOENT or EACCES) when there is none.
std::string resolve_program(const std::string& name, int& error);

// The descriptors above 2 open now: call it before opening anything, so they are the ones
// dlock inherited.
std::vector<int> open_descriptors();

inline constexpr const char* kShell = "/bin/sh";

// Everything the child needs, built before the clone: until its exec the child shares this
// multithreaded process's memory and may only make async-signal-safe calls; it must not
// allocate.
struct ExecPlan {
  std::string path;
  std::vector<char*> argv;
  std::vector<char*> shell_argv;  // for a script without #!, as execvp(3) does
  std::vector<std::string> env;
  std::vector<char*> envp;

  // Descriptors the command keeps besides 0, 1 and 2: the ones dlock inherited, sorted. Every
  // other descriptor of dlock's (its store's sockets, its pipes) is closed in the child.
  std::vector<int> inherited_fds;

  // The command's environment is dlock's, with the locks' DLOCK_* variables (DLOCK_KEY,
  // DLOCK_OWNER and DLOCK_FENCING_TOKEN of the first key; DLOCK_KEYS and DLOCK_FENCING_TOKENS,
  // every key and token a line each) and without the store's secret: DLOCK_PASSWORD is dropped
  // and DLOCK_URL loses its password. With `password_given` (from a file or DLOCK_PASSWORD) a
  // lone userinfo in DLOCK_URL is a user name.
  ExecPlan(std::string program, std::vector<std::string>& command, const MultiLease& locks, std::vector<int> inherited,
           bool password_given);
  ExecPlan(const ExecPlan&) = delete;  // the pointers point into its own strings
  ExecPlan& operator=(const ExecPlan&) = delete;
};

struct Spawned {
  pid_t child = -1;  // also its process group id
  pid_t sentinel = -1;
  int exec_error = 0;
};

// Starts the command (leader of its own process group; with the terminal if `take_terminal`)
// and its sentinel. Throws std::system_error when either cannot start.
Spawned spawn(const ExecPlan& plan, const SignalRelay& signals, bool take_terminal);

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

// The command's exit status as a shell reports it (128+N for signal N), once it has exited.
// After a loss, the rest of its process group is killed first: until the command is reaped,
// its pid cannot name another group.
std::optional<int> reap(pid_t child, bool lost, bool job_control);

}  // namespace dlock::cli
